"""Clocks for the local cloud.

``VirtualClock`` is a discrete-event clock: time stands still while any worker is busy and jumps
to the next thing due (a schedule, a message becoming visible, a sleeping target waking) once all
are idle. Work that overlaps in time still overlaps: a target that "runs" for 30 s sleeps on the
clock, and others run meanwhile. ``ScaledClock`` follows the wall clock, optionally faster.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from rebound_local.invocations import current, current_lane, in_worker

T = TypeVar("T")


class _Sleeper:
    __slots__ = ("done", "wake")

    def __init__(self) -> None:
        self.wake = threading.Event()
        self.done = False  # woken (by time or by abandonment); a stale heap entry is skipped


class Timer:
    """A callback the clock runs once virtual (or scaled) time reaches ``when``; ``cancel`` to drop it."""

    __slots__ = ("cancelled", "fn", "thread")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.cancelled = False
        self.thread: threading.Timer | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.thread is not None:
            self.thread.cancel()


class VirtualClock:
    """Discrete-event time for the local runtime's workers.

    ``interleave`` (set by the runtime for ``model.concurrency``): the coordinator wakes one
    sleeper per ``advance_to``, the earliest, ties broken by a draw from the sleeper's own seeded
    random generator, so that concurrent workers take turns in an order the seed decides.
    """

    def __init__(self, start: datetime) -> None:
        self._now = start.astimezone(UTC)
        self._cond = threading.Condition()
        self._busy = 0
        self._sleepers: list[tuple[datetime, float, int, _Sleeper]] = []
        self._timers: list[tuple[datetime, int, Timer]] = []
        self._seq = itertools.count()
        self.interleave = False

    def now(self) -> datetime:
        return self._now

    # --- workers --------------------------------------------------------------------------
    def begin(self) -> None:
        """Count one more busy worker; call before handing work to a thread."""
        with self._cond:
            self._busy += 1

    def end(self) -> None:
        with self._cond:
            self._busy -= 1
            if self._busy == 0:  # the one thing anyone waits for (``wait_idle``)
                self._cond.notify_all()

    @contextmanager
    def busy(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()

    def sleep(self, seconds: float) -> None:
        """Block this worker until virtual time has moved ``seconds`` on; others run meanwhile.

        A thread of an abandoned invocation raises ``SimulatedCrash`` instead of sleeping, and a
        sleeping one is woken to raise it (``invocations``).
        """
        lane = current_lane()
        if lane is not None:
            lane.invocation.check()
        if seconds <= 0:
            return
        if lane is None and not in_worker():
            # The coordinator (or a caller outside any invocation, such as the simulator
            # registering tasks) drives this clock: it must never wait on it. A store retry's
            # backoff there costs no virtual time.
            return
        sleeper = _Sleeper()
        tie = lane.uniform(0.0, 1.0) if lane is not None and self.interleave else 0.0
        with self._cond:
            until = self._now + timedelta(seconds=seconds)
            heapq.heappush(self._sleepers, (until, tie, next(self._seq), sleeper))
            self._busy -= 1
            if self._busy == 0:
                self._cond.notify_all()
        token = lane.invocation.on_abandon(lambda: self._interrupt(sleeper)) if lane is not None else None
        sleeper.wake.wait()
        # Whoever woke us counted us busy again.
        if lane is not None:
            lane.invocation.forget(token)
            lane.invocation.check()

    def _interrupt(self, sleeper: _Sleeper) -> None:
        """Wake a sleeper before its time (its invocation was abandoned)."""
        with self._cond:
            if sleeper.done:
                return
            sleeper.done = True
            self._busy += 1
            sleeper.wake.set()

    def call_at(self, when: datetime, fn: Callable[[], object]) -> Timer:
        """Run ``fn`` in the coordinator when time reaches ``when`` (before waking sleepers due then)."""
        timer = Timer(fn)
        with self._cond:
            heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    # --- the coordinator ----------------------------------------------------------------------
    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout=timeout)

    def _prune(self) -> None:
        while self._sleepers and self._sleepers[0][3].done:
            heapq.heappop(self._sleepers)
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)

    def next_wakeup(self) -> datetime | None:
        with self._cond:
            self._prune()
            due = [heap[0][0] for heap in (self._sleepers, self._timers) if heap]
            return min(due) if due else None

    @property
    def sleeping(self) -> int:
        with self._cond:
            return sum(1 for entry in self._sleepers if not entry[3].done)

    def advance_to(self, when: datetime) -> None:
        """Move time forward (never back), run the timers due, and wake the sleepers due
        (only the first of them when interleaving)."""
        with self._cond:
            if when > self._now:
                self._now = when
            while self._timers and self._timers[0][0] <= self._now:
                _, _, timer = heapq.heappop(self._timers)
                if not timer.cancelled:
                    timer.cancelled = True
                    timer.fn()
            while self._sleepers and self._sleepers[0][0] <= self._now:
                _, _, _, sleeper = heapq.heappop(self._sleepers)
                if sleeper.done:
                    continue
                sleeper.done = True
                self._busy += 1
                sleeper.wake.set()
                if self.interleave:
                    break

    @property
    def busy_workers(self) -> int:
        return self._busy


class ScaledClock:
    """Wall-clock time from ``start``, running ``scale`` times faster than real time."""

    def __init__(self, start: datetime | None = None, scale: float = 1.0) -> None:
        if scale <= 0:
            raise ValueError("time scale must be positive")
        self.scale = scale
        self._origin_wall = time.monotonic()
        self._origin = (start or datetime.now(UTC)).astimezone(UTC)

    def now(self) -> datetime:
        elapsed = (time.monotonic() - self._origin_wall) * self.scale
        return self._origin + timedelta(seconds=elapsed)

    def anchor(self) -> dict[str, Any]:
        """This clock for another process (``rebound_cli.context.CloudClock``): its time at one
        instant, the wall time at that same instant (epoch seconds), and its scale. The two are
        read together (the closest of a few tries), since a thread switch between them would put
        the other process's clock behind this one by the gap times the scale."""
        _, mono, wall = min(_paired() for _ in range(5))
        at = self._origin + timedelta(seconds=(mono - self._origin_wall) * self.scale)
        anchor: dict[str, Any] = {"origin": at.isoformat(), "origin_epoch": wall, "scale": self.scale}
        boot = boot_id()
        if boot is not None:  # a process on this machine's boot reads the same monotonic clock
            anchor.update(origin_monotonic=mono, boot_id=boot)
        return anchor

    def sleep(self, seconds: float) -> None:
        """Wall time; a thread of an abandoned invocation is woken and raises ``SimulatedCrash``."""
        invocation = current()
        if invocation is not None:
            invocation.check()
        if seconds <= 0:
            return
        if invocation is None:
            time.sleep(seconds / self.scale)
            return
        woken = threading.Event()
        token = invocation.on_abandon(woken.set)
        woken.wait(seconds / self.scale)
        invocation.forget(token)
        invocation.check()

    def call_at(self, when: datetime, fn: Callable[[], object]) -> Timer:
        """Run ``fn`` on a timer thread once scaled time reaches ``when``."""
        timer = Timer(fn)
        delay = max((when - self.now()).total_seconds() / self.scale, 0.0)
        thread = threading.Timer(delay, lambda: None if timer.cancelled else fn())
        thread.daemon = True
        timer.thread = thread
        thread.start()
        return timer

    def begin(self) -> None:
        return None

    def end(self) -> None:
        return None

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True

    def next_wakeup(self) -> datetime | None:
        return None

    def advance_to(self, when: datetime) -> None:
        return None


def _paired() -> tuple[float, float, float]:
    """The monotonic and wall clocks read at one instant: (how far apart the reads were, the
    monotonic time between them, the wall time)."""
    before = time.monotonic()
    wall = time.time()
    after = time.monotonic()
    return after - before, (before + after) / 2, wall


def boot_id() -> str | None:
    """This machine's boot (Linux), which every process of it shares with its monotonic clock;
    ``None`` where it cannot be read."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None
