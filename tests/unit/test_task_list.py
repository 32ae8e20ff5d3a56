"""``rebound.engine.task_list.listed_tasks``: the sweeper's task list (the run ledger every minute,
the retry-health report's ``disabled_schedules`` every five) is scanned once, then again only
after a task write has moved the tasks epoch; what a write changed is seen at the next look."""

from __future__ import annotations

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain.task import TaskState
from rebound.engine.task_list import listed_tasks
from rebound.ops.tasks import TaskOps
from support import count_task_scans, register, task

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> MemoryWorld:
    return memory_deps()


@pytest.fixture
def scans(world: MemoryWorld, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many tasks each scan of the tasks table returned."""
    return count_task_scans(world.store, monkeypatch)


def test_the_list_is_scanned_once_while_no_task_is_written(world: MemoryWorld, scans: list[int]) -> None:
    register(world.deps, task("a"), task("b"))
    first = listed_tasks(world.deps)
    assert [s.task.id.rsplit(".", 1)[-1] for s in first] == ["a", "b"]
    for _ in range(3):
        assert listed_tasks(world.deps) is first
    assert scans == [2]


def test_a_task_write_is_seen_at_the_next_look(world: MemoryWorld, scans: list[int]) -> None:
    register(world.deps, task("a"))
    assert len(listed_tasks(world.deps)) == 1
    register(world.deps, task("a"), task("b"))  # a new task: the epoch moves
    assert len(listed_tasks(world.deps)) == 2
    [paused_id] = [s.task.id for s in listed_tasks(world.deps) if s.task.id.endswith("b")]
    TaskOps(world.deps, actor="test").set_state(paused_id, TaskState.PAUSED, "maintenance")
    assert [s.paused for s in listed_tasks(world.deps) if s.task.id == paused_id] == [True]
    assert scans == [1, 2, 2]
