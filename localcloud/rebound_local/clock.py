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
from typing import TypeVar

T = TypeVar("T")


class VirtualClock:
    def __init__(self, start: datetime) -> None:
        self._now = start.astimezone(UTC)
        self._cond = threading.Condition()
        self._busy = 0
        self._sleepers: list[tuple[datetime, int, threading.Event]] = []
        self._seq = itertools.count()

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
            self._cond.notify_all()

    @contextmanager
    def busy(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()

    def sleep(self, seconds: float) -> None:
        """Block this worker until virtual time has moved ``seconds`` on; others run meanwhile."""
        if seconds <= 0:
            return
        wake = threading.Event()
        with self._cond:
            until = self._now + timedelta(seconds=seconds)
            heapq.heappush(self._sleepers, (until, next(self._seq), wake))
            self._busy -= 1
            self._cond.notify_all()
        wake.wait()
        # advance_to counted us busy again before waking us.

    # --- the coordinator ----------------------------------------------------------------------
    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout=timeout)

    def next_wakeup(self) -> datetime | None:
        with self._cond:
            return self._sleepers[0][0] if self._sleepers else None

    def advance_to(self, when: datetime) -> None:
        """Move time forward (never back) and wake every sleeper that is due."""
        with self._cond:
            if when > self._now:
                self._now = when
            while self._sleepers and self._sleepers[0][0] <= self._now:
                _, _, wake = heapq.heappop(self._sleepers)
                self._busy += 1
                wake.set()

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

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.scale)

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


def run_counted(clock: VirtualClock | ScaledClock, fn: Callable[[], T]) -> T:
    try:
        return fn()
    finally:
        clock.end()
