"""The threads the local runtime's invocations run on, and the invocations under way.

- ``WorkerPool``: one daemon thread per concurrent invocation, reused. Daemon threads, so an
  invocation that never returns (a bug, a deadlock) cannot keep the process from exiting; a
  handed-over job always gets a thread at once (a job waiting for a thread while the virtual clock
  counts it busy would stop the clock for good).
- ``Running``: the invocations under way, for abandoning them and for saying what was still
  running when the runtime cannot finish (``RuntimeHung``); ``Stillness`` notices virtual time
  that no longer moves.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rebound.domain.timefmt import iso
from rebound.engine.ports import Clock
from rebound_local.invocations import Invocation

log = logging.getLogger(__name__)

Job = tuple[Callable[..., object], tuple[Any, ...]]


class WorkerPool:
    def __init__(self, name: str = "lambda") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._free = 0
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        with self._lock:
            if self._free > 0:
                self._free -= 1
                self._jobs.put((fn, args))
                return
            thread = threading.Thread(
                target=self._work, args=((fn, args),), name=f"{self._name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
        thread.start()

    def _work(self, job: Job | None) -> None:
        while job is not None:
            fn, args = job
            try:
                fn(*args)
            except BaseException:  # a job reports its own errors; this keeps the thread alive
                log.exception("worker job failed")
            with self._lock:
                self._free += 1
            job = self._jobs.get()

    def shutdown(self, timeout: float | None = None) -> list[str]:
        """Stop the threads once their jobs are done; the names of those still busy after ``timeout``."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout)
        return [t.name for t in threads if t.is_alive()]


class Running:
    """The invocations under way, by identity."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[int, Invocation] = {}

    def add(self, invocation: Invocation) -> None:
        with self._lock:
            self._items[id(invocation)] = invocation

    def remove(self, invocation: Invocation) -> None:
        with self._lock:
            self._items.pop(id(invocation), None)

    def all(self) -> list[Invocation]:
        with self._lock:
            return sorted(self._items.values(), key=lambda inv: (inv.started_at, inv.number))

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def abandon_all(self, reason: str) -> int:
        return sum(1 for invocation in self.all() if invocation.abandon(reason))

    def describe(self) -> list[dict[str, Any]]:
        return [invocation.describe() for invocation in self.all()]


class RuntimeHung(RuntimeError):
    """The runtime could not finish: invocations still running past a bound, or time stood still."""

    def __init__(self, reason: str, now: datetime, running: list[dict[str, Any]]) -> None:
        self.reason = reason
        self.now = now
        self.running = running
        names = ", ".join(f"{r['function']} since {r['since']}" for r in running[:5]) or "nothing"
        super().__init__(f"{reason} at {iso(now)}; still running: {names}")

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "at": iso(self.now), "running": self.running}


def earliest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


class Stillness:
    """Notices when virtual time has not moved for ``wall_s`` of wall time."""

    def __init__(self, clock: Clock, wall_s: float) -> None:
        self._clock = clock
        self._wall_s = wall_s
        self._seen = clock.now()
        self._since = time.monotonic()

    def stuck(self) -> bool:
        now = self._clock.now()
        if now != self._seen:
            self._seen, self._since = now, time.monotonic()
            return False
        return time.monotonic() - self._since > self._wall_s
