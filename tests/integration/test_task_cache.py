"""The executor reads a new run's task once per container while no task is written
(``rebound.engine.executor.task_cache``): one strongly consistent read of the tasks epoch an
invocation, and the task itself only when the epoch has moved since this container read it."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from rebound.adapters.staging import TASKS_EPOCH
from rebound.domain.run import RunState
from rebound.domain.task import TaskState
from rebound.engine.deps import Deps
from rebound.engine.executor import task_cache
from rebound.handlers import executor
from rebound.ops.tasks import TaskOps
from support import START, Context, delete_done, fire, receive_event, register, task

pytestmark = pytest.mark.integration


def invoke(deps: Deps, *fires: tuple[str, str]) -> Counter[str]:
    """One invocation with ``fires`` in its batch: the tables it read items of, and how often."""
    for task_id, when in fires:
        deps.queues.send("execution", fire(task_id, when))
    event = receive_event(deps)
    assert len(event["Records"]) == len(fires)
    reads: Counter[str] = Counter()
    client = deps.store.client  # type: ignore[attr-defined]
    tables = {name: logical for logical, name in deps.settings.tables.items()}

    def seen(params: dict[str, Any], **_: Any) -> None:
        table = tables.get(params.get("TableName", ""), "?")
        # of the control table, the epoch alone: a slot or a budget read is not the task's
        if table != "control" or params["Key"]["pk"]["S"] == TASKS_EPOCH:
            reads[table] += 1
        if table == "control" and params["Key"]["pk"]["S"] == TASKS_EPOCH:
            time.sleep(
                0.05
            )  # as slow as a read over the network: threads starting together would each read it

    client.meta.events.register("provide-client-params.dynamodb.GetItem", seen)
    try:
        delete_done(deps, event, executor.lambda_handler(event, Context()))
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.GetItem", seen)
    return reads


def test_a_task_is_read_once_while_the_epoch_stands_and_again_after_a_pause(wired: Deps) -> None:
    """The batch's messages run in parallel threads: they share the one read of the epoch the
    handler makes before starting them."""
    register(wired, task("a"), task("b"))
    first = invoke(wired, ("a", "2026-03-07T09:00:00Z"), ("b", "2026-03-07T09:00:00Z"))
    assert (first["control"], first["tasks"]) == (1, 2)  # the epoch, then each task
    wired.clock.set(START + timedelta(minutes=5))
    again = invoke(wired, ("a", "2026-03-07T09:05:00Z"), ("b", "2026-03-07T09:05:00Z"))
    assert (again["control"], again["tasks"]) == (1, 0)  # the epoch alone: no task was written
    wired.clock.set(START + timedelta(minutes=7))
    TaskOps(wired, actor="test").set_state("a", TaskState.PAUSED)
    wired.clock.set(START + timedelta(minutes=10))
    after = invoke(wired, ("a", "2026-03-07T09:10:00Z"))
    assert (after["control"], after["tasks"]) == (1, 1)  # the epoch moved: the task is read anew
    skipped = wired.store.get_run("a:20260307T091000Z")
    assert skipped is not None and skipped.state is RunState.SKIPPED and skipped.attempt == 0
    ran = [wired.store.get_run(f"{t}:20260307T09{m}00Z") for t in "ab" for m in ("00", "05")]
    assert all(run is not None and run.state is RunState.SUCCEEDED for run in ran)


def test_a_container_keeps_at_most_its_bound_of_tasks_the_oldest_read_going_first(
    wired: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_cache, "MAX_CACHED", 2)
    register(wired, task("a"), task("b"), task("c"))
    tasks = task_cache.InvocationTasks(wired)
    for task_id in ("a", "b", "c"):
        assert tasks.get(task_id) is not None
    assert list(tasks._cached()) == ["b", "c"]
    assert tasks.get("missing") is None and "missing" not in tasks._cached()
