"""Every task, listed again only when a task was written since the last listing.

The sweeper needs the whole task list every minute (the run ledger) and every five minutes (the
retry-health report's ``disabled_schedules``). Listing it is a scan of the tasks table: at
100,000 tasks of about 1 KB each, some 12,500 read units and tens of megabytes to parse, each
time. Every task write adds one to the tasks epoch in the same transaction
(``Store.tasks_epoch``), so an unchanged epoch, read strongly consistent (one read unit), means an
unchanged list: the container keeps the list it read, keyed by its epoch, and reads it again only
after a task write (``tests/unit/test_task_list.py``).
"""

from __future__ import annotations

from rebound.domain.stored import StoredTask
from rebound.engine.deps import Deps

CACHE_KEY = "tasks#listed"


def listed_tasks(deps: Deps) -> list[StoredTask]:
    """Every task, as ``Store.list_tasks`` lists it (sorted by id), from this container's copy when
    no task was written since it was read. The list is shared: callers must not change it."""
    epoch = deps.store.tasks_epoch()
    cached = deps.cache.get(CACHE_KEY)
    if cached is not None and cached[0] == epoch:
        tasks: list[StoredTask] = cached[1]  # type: ignore[assignment]
        return tasks
    tasks = deps.store.list_tasks()
    deps.cache[CACHE_KEY] = (float(epoch), tasks)
    return tasks
