"""The task a new run starts from, read once per container while no task is written.

Every task write adds one to the tasks epoch in the same transaction (``Store.tasks_epoch``). An
invocation reads the epoch once, strongly consistent: before the handler starts a batch's parallel
threads when two or more of its messages start new runs (``prime``), else at its first new run. A
task this container read after an epoch that is still the epoch is the task as stored now, so it
is not read again. A batch of five new runs then costs one read unit, not five.

Why reading the epoch once per invocation keeps a pause's meaning: every message of the batch was
received before the invocation began, and a fire is received no earlier than it is due. A pause
the epoch did not see was committed after the read, so after every fire of the batch was due; and
a fire due before a pause still runs (docs/architecture/scheduling.md, *Pause and resume*). The
same holds for an edit: the fire runs as it would have had it been handled as it arrived. A
retry, or any run that exists, still reads its task at the moment it needs it.
"""

from __future__ import annotations

import threading

from rebound.domain.stored import StoredTask
from rebound.engine.deps import Deps

CACHE_KEY = "tasks#by_id"
MAX_CACHED = 2_000
"""Tasks a container keeps at most (about 2 KB each parsed): the oldest read goes first."""
_LOCK = threading.Lock()


class InvocationTasks:
    """The tasks of one invocation's new runs (``get``), through the container's cache."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.epoch: int | None = None

    def get(self, task_id: str) -> StoredTask | None:
        """The task as stored when this invocation first asked (``None``: no such task)."""
        epoch = self._epoch()
        with _LOCK:
            cached = self._cached().get(task_id)
        if cached is not None and cached[0] == epoch:
            return cached[1]
        stored = self.deps.store.get_task(task_id)  # read after the epoch: at least as new
        if stored is not None:
            with _LOCK:
                tasks = self._cached()
                tasks.pop(task_id, None)
                tasks[task_id] = (epoch, stored)
                while len(tasks) > MAX_CACHED:
                    del tasks[next(iter(tasks))]
        return stored

    def prime(self) -> None:
        """Read the epoch now (``Executor.prime``, before a batch's threads start), so that the
        threads share one read; ``get`` reads it at its first call otherwise."""
        self._epoch()

    def _epoch(self) -> int:
        if self.epoch is None:
            self.epoch = self.deps.store.tasks_epoch()
        return self.epoch

    def _cached(self) -> dict[str, tuple[int, StoredTask]]:
        entry = self.deps.cache.get(CACHE_KEY)
        if entry is None:
            entry = (0.0, {})
            self.deps.cache[CACHE_KEY] = entry
        tasks: dict[str, tuple[int, StoredTask]] = entry[1]  # type: ignore[assignment]
        return tasks
