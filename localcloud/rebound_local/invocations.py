"""The invocation each runtime thread works for, and how an invocation is abandoned.

On Lambda, an invocation that crashes or runs past its timeout stops where it stands: none of its
threads makes another AWS call, and the event source mapping deletes none of its messages. Locally,
every thread that works for an invocation (the runtime's worker, the threads a ``LocalFanout``
starts for it) carries a ``Lane`` in its context: the ``Invocation`` and a random generator of its
own, seeded from the scenario's seed, the function and the invocation's number.

- ``Invocation.abandon(reason)`` marks the invocation dead and wakes each of its threads that
  sleeps on the clock. From then on ``check()`` raises ``SimulatedCrash`` in every one of them: at
  its next AWS call (``CallGate``), when it sleeps on the clock, or as it wakes from a sleep.
- A ``SimulatedCrash`` from the crash plan abandons the invocation before it is raised, so one
  crashing thread takes the whole invocation with it.
- ``CallGate`` runs in the calling thread before every AWS call a handler makes (the direct
  transport calls it; for botocore clients it is a ``before-call`` hook): the abandonment check,
  the latency model's time for the call and, when interleaving, a small seeded virtual sleep. All
  workers then sleep between their calls, and the coordinator wakes one at a time, in an order the
  seed decides: concurrent invocations interleave their AWS calls, reproducibly.

Threads that work for no invocation (the coordinator, the CLI, tests) are never checked or slowed.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from rebound.domain.timefmt import iso


class SimulatedCrash(BaseException):
    """The invocation dies here, as a Lambda does on a crash or timeout: no cleanup, no response.

    A ``BaseException`` so that no handler's ``except Exception`` can swallow it.
    """


class Invocation:
    """One Lambda invocation under way: what it is doing, and whether it was abandoned."""

    def __init__(
        self,
        function: str,
        started_at: datetime,
        messages: Sequence[str] = (),
        number: int = 0,
        deadline: datetime | None = None,
    ) -> None:
        self.function = function
        self.started_at = started_at
        self.messages = tuple(messages)
        self.number = number
        self.deadline = deadline
        self.reason: str | None = None
        """Why it was abandoned (``timeout``, ``crash``, ``closed``); ``None`` while alive."""
        self._lock = threading.Lock()
        self._wakers: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()

    @property
    def dead(self) -> bool:
        return self.reason is not None

    def abandon(self, reason: str) -> bool:
        """Stop the invocation where it stands. False if it was already abandoned."""
        with self._lock:
            if self.reason is not None:
                return False
            self.reason = reason
            wakers = list(self._wakers.values())
            self._wakers.clear()
        for wake in wakers:
            wake()
        return True

    def check(self) -> None:
        """Raise ``SimulatedCrash`` if the invocation was abandoned."""
        if self.reason is not None:
            raise SimulatedCrash(f"{self.function} invocation #{self.number} abandoned ({self.reason})")

    def on_abandon(self, wake: Callable[[], None]) -> int | None:
        """Call ``wake`` when the invocation is abandoned (at once if it already was)."""
        with self._lock:
            if self.reason is None:
                token = next(self._tokens)
                self._wakers[token] = wake
                return token
        wake()
        return None

    def forget(self, token: int | None) -> None:
        if token is not None:
            with self._lock:
                self._wakers.pop(token, None)

    def describe(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "invocation": self.number,
            "since": iso(self.started_at),
            "deadline": iso(self.deadline) if self.deadline else None,
            "messages": list(self.messages),
            "abandoned": self.reason,
        }


@dataclass
class Lane:
    """One thread's share of an invocation: the invocation, and its own seeded randomness.

    ``rng`` is ``None`` where nothing draws from it: the runtime seeds one only when it interleaves
    workers (its gate's jitter), since seeding costs more than many a handler's AWS call locally."""

    invocation: Invocation
    rng: random.Random | None = None

    def child(self) -> Lane:
        """The lane of a thread this one starts for the same invocation (seeded from this one)."""
        rng = random.Random(self.rng.getrandbits(64)) if self.rng is not None else None
        return Lane(self.invocation, rng)

    def uniform(self, low: float, high: float) -> float:
        """A seeded draw in [low, high] (``low`` where the lane has no randomness)."""
        return self.rng.uniform(low, high) if self.rng is not None else low


_lane: ContextVar[Lane | None] = ContextVar("rebound_local_lane", default=None)


def current_lane() -> Lane | None:
    return _lane.get()


def current() -> Invocation | None:
    lane = _lane.get()
    return lane.invocation if lane is not None else None


@contextmanager
def working_for(lane: Lane | None) -> Iterator[None]:
    """Run the block as a thread of ``lane``'s invocation."""
    token = _lane.set(lane)
    try:
        yield
    finally:
        _lane.reset(token)


def abandon_current(reason: str) -> None:
    invocation = current()
    if invocation is not None:
        invocation.abandon(reason)


_worker = threading.local()


def in_worker() -> bool:
    """Whether this thread is running a Lambda invocation for the runtime (and may spend time)."""
    return bool(getattr(_worker, "active", False))


def mark_worker(active: bool) -> None:
    _worker.active = active


class Sleeper(Protocol):
    def sleep(self, seconds: float) -> None: ...


class CallGate:
    """What happens in the calling thread before each AWS call a handler makes.

    - every thread of an invocation: ``SimulatedCrash`` if the invocation was abandoned;
    - a runtime worker: ``aws_call_ms`` of clock time (the latency model), plus, when
      ``jitter_ms`` is set, a seeded uniform draw in ``[0, jitter_ms]``. On a ``VirtualClock``
      every call is then a point where the coordinator picks which worker runs next.
    """

    def __init__(self, clock: Sleeper, aws_call_ms: float = 0.0, jitter_ms: float = 0.0) -> None:
        self.clock = clock
        self.aws_call_ms = aws_call_ms
        self.jitter_ms = jitter_ms

    def attach(self, session: Any) -> None:
        """For botocore clients: run the gate in the calling thread before each call."""
        session.events.register("before-call", self._before_call)

    def _before_call(self, **_: Any) -> None:
        self.before_call()

    def before_call(self) -> None:
        lane = _lane.get()
        if lane is not None:
            lane.invocation.check()
        if not in_worker():
            return
        delay = self.aws_call_ms
        if self.jitter_ms > 0 and lane is not None:
            delay += lane.uniform(0.0, self.jitter_ms)
        if delay > 0:
            self.clock.sleep(delay / 1000.0)

    def start(self) -> None:
        """A worker's first step when interleaving: yield, so that workers start one at a time."""
        lane = _lane.get()
        if lane is not None and self.jitter_ms > 0 and in_worker():
            self.clock.sleep(lane.uniform(0.0, self.jitter_ms) / 1000.0)
