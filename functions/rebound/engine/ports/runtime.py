"""The runtime ports that are not AWS: time, metrics, crash points, fan-out; with the plain
implementations a Lambda container uses (the local cloud and the tests bring their own)."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def call_at(self, when: datetime, fn: Callable[[], object]) -> threading.Timer:
        """Run ``fn`` on a timer thread at ``when`` (``cancel()`` the timer to drop it)."""
        timer = threading.Timer(max((when - self.now()).total_seconds(), 0.0), fn)
        timer.daemon = True
        timer.start()
        return timer


def call_after(clock: Clock, seconds: float, fn: Callable[[], object]) -> Callable[[], None]:
    """Run ``fn`` once ``seconds`` of ``clock``'s time have passed, unless the returned callable is
    called first to cancel it. The clock runs it (``call_at``: a timer thread on AWS, the local
    runtime's own time locally); a clock without timers never runs it."""
    call_at = getattr(clock, "call_at", None)
    if call_at is None:
        return lambda: None
    timer = call_at(clock.now() + timedelta(seconds=seconds), fn)
    cancel: Callable[[], None] = timer.cancel
    return cancel


class Metrics(Protocol):
    def count(self, name: str, value: float = 1.0) -> None: ...

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None: ...


class CrashPoints(Protocol):
    """Named places where fault injection may stop an invocation. A no-op on AWS."""

    def reached(self, point: str) -> None: ...


AFTER_AUDIT_RECORD: Final = "after_audit_record"
"""The crash point a store reaches between a run's audit record and its item
(``rebound.engine.crashpoints`` lists it with the others)."""


class Flags(Protocol):
    """The environment's feature flags (``rebound.domain.flags``), read where the engine decides."""

    def enabled(self, name: str) -> bool: ...


class DefaultFlags:
    """Every flag at its default (on): where no flags are configured, and in the unit tests."""

    def __init__(self, values: dict[str, bool] | None = None) -> None:
        self.values = dict(values or {})

    def enabled(self, name: str) -> bool:
        from rebound.domain.flags import DEFAULTS

        return self.values.get(name, DEFAULTS[name])


class NoCrashes:
    def reached(self, point: str) -> None:
        return None


class Fanout(Protocol):
    """Runs one function over several items at once (the executor's batch), results in order.

    ``fn`` should not raise. If a call does, ``map`` still waits for every other call, then
    raises the first exception (a ``BaseException`` such as a simulated crash included).
    """

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...


class ThreadFanout:
    """One thread per item (a batch is at most 10 items), each with a copy of the caller's context."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="batch") as pool:
            futures = [pool.submit(contextvars.copy_context().run, fn, item) for item in items]
        results: list[R] = []
        first: BaseException | None = None
        for future in futures:
            error = future.exception()
            if error is not None:
                first = first or error
                continue
            results.append(future.result())
        if first is not None:
            raise first
        return results


class SequentialFanout:
    """One item after the other (deterministic tests)."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return [fn(item) for item in items]
