"""A clean scheduled success is listed with its task by its fire, not by a ``by_task_keys`` entry
(``rebound.domain.fire_segments``): one index write fewer a clean run, and every listing of the
task's runs still shows it, across schedule edits and pauses."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from rebound.domain.retention import Retention
from rebound.domain.run import RunState
from rebound.domain.task import TaskState
from rebound.engine.deps import Deps
from rebound.handlers import executor
from rebound.ops.layout import relist_by_fire
from rebound.ops.tasks import TaskOps
from rebound.resources import RUNS_BY_TASK
from support import START, Context, delete_done, fire, receive_event, register, task

pytestmark = pytest.mark.integration


def run_fire(deps: Deps, when: str) -> None:
    deps.queues.send("execution", fire("job", when))
    event = receive_event(deps)
    delete_done(deps, event, executor.lambda_handler(event, Context()))


def item(deps: Deps, run_id: str) -> dict[str, Any]:
    answer = deps.store.client.get_item(  # type: ignore[attr-defined]
        TableName=deps.settings.tables["runs"], Key={"run_id": {"S": run_id}}
    )
    return dict(answer["Item"])


def index_entries(deps: Deps) -> list[str]:
    answer = deps.store.client.query(  # type: ignore[attr-defined]
        TableName=deps.settings.tables["runs"],
        IndexName=RUNS_BY_TASK,
        KeyConditionExpression="task_id = :t",
        ExpressionAttributeValues={":t": {"S": "job"}},
    )
    return sorted(i["run_id"]["S"] for i in answer["Items"])


def listed(deps: Deps, **kwargs: Any) -> list[str]:
    return [run.run_id for run in deps.store.runs_for_task("job", **kwargs)]


def test_a_clean_scheduled_success_has_no_index_entry_and_is_listed_by_its_fire(wired: Deps) -> None:
    register(wired, task("job"))
    run_fire(wired, "2026-03-07T09:00:00Z")
    stored = item(wired, "job:20260307T090000Z")
    assert "task_id" not in stored and "scheduled_for" not in stored  # both travel in its doc
    assert index_entries(wired) == []
    [run] = wired.store.runs_for_task("job")
    assert run.run_id == "job:20260307T090000Z" and run.state is RunState.SUCCEEDED and run.by_fire
    assert run.task_id == "job"


def test_a_run_whose_fire_the_schedule_does_not_owe_and_a_failed_one_keep_their_entries(wired: Deps) -> None:
    register(wired, task("job"))
    run_fire(wired, "2026-03-07T09:01:00Z")  # */5 owes no fire at 09:01
    register(wired, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    run_fire(wired, "2026-03-07T09:05:00Z")  # owed, but it failed: listed while it is not clean
    assert "task_id" in item(wired, "job:20260307T090100Z")
    failed = wired.store.get_run("job:20260307T090500Z")
    assert failed is not None and failed.state is RunState.FAILED and failed.by_fire
    assert index_entries(wired) == ["job:20260307T090100Z", "job:20260307T090500Z"]
    assert listed(wired) == ["job:20260307T090500Z", "job:20260307T090100Z"]


def test_after_an_edit_and_a_pause_every_fire_is_listed_in_order_with_the_indexed_runs(wired: Deps) -> None:
    clock = wired.clock
    ops = TaskOps(wired, actor="test")
    register(wired, task("job"))
    run_fire(wired, "2026-03-07T09:00:00Z")
    clock.set(START + timedelta(minutes=7))
    register(wired, task("job", schedule={"cron": "*/10 * * * *"}))
    clock.set(START + timedelta(minutes=10))
    run_fire(wired, "2026-03-07T09:10:00Z")
    run_fire(wired, "2026-03-07T09:11:00Z")  # no segment owes it: the index lists it
    clock.set(START + timedelta(minutes=12))
    ops.set_state("job", TaskState.PAUSED)
    clock.set(START + timedelta(minutes=13))
    ops.set_state("job", TaskState.ACTIVE)
    clock.set(START + timedelta(minutes=20))
    run_fire(wired, "2026-03-07T09:20:00Z")

    stored = wired.store.get_task("job")
    assert stored is not None
    assert [(s.since.minute, s.until.minute if s.until else None) for s in stored.fire_segments] == [
        (0, 7),
        (7, 12),
        (13, None),
    ]
    assert index_entries(wired) == ["job:20260307T091100Z"]
    every = ["job:20260307T092000Z", "job:20260307T091100Z", "job:20260307T091000Z", "job:20260307T090000Z"]
    assert listed(wired) == every
    assert listed(wired, newest_first=False) == every[::-1]
    assert listed(wired, limit=2) == every[:2]
    window = {"since": START + timedelta(minutes=5), "until": START + timedelta(minutes=11)}
    assert listed(wired, **window) == ["job:20260307T091100Z", "job:20260307T091000Z"]
    assert listed(wired, until=START) == ["job:20260307T090000Z"]  # both bounds are included


def test_relisting_before_a_rollback_puts_each_clean_success_back_in_the_index_once(wired: Deps) -> None:
    """``rebound migrate relist-by-fire``: an earlier version lists a task's runs from the index alone."""
    register(wired, task("job"))
    run_fire(wired, "2026-03-07T09:00:00Z")
    run_fire(wired, "2026-03-07T09:01:00Z")  # listed by the index already
    assert relist_by_fire(wired, dry_run=True).as_dict() == {
        "examined": 2,
        "found_by_fire": 1,
        "relisted": 1,
        "skipped": 0,
        "dry_run": True,
    }
    assert index_entries(wired) == ["job:20260307T090100Z"]
    assert relist_by_fire(wired).changed == 1
    assert index_entries(wired) == ["job:20260307T090000Z", "job:20260307T090100Z"]
    assert relist_by_fire(wired).as_dict()["skipped"] == 1  # listed already
    assert listed(wired) == ["job:20260307T090100Z", "job:20260307T090000Z"]
    run = wired.store.get_run("job:20260307T090000Z")
    assert run is not None and run.rev == 2 and run.by_fire  # nothing of the run changed


def test_a_listing_reads_no_fire_older_than_the_runs_retention_lets_a_clean_success_live(
    wired: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(wired, task("job"))
    run_fire(wired, "2026-03-07T09:00:00Z")
    wired.store.retention = Retention(runs_days=1, audit_days=1)
    asked: list[int] = []
    get_runs = wired.store.get_runs

    def counted(run_ids: list[str]) -> Any:
        asked.append(len(run_ids))
        return get_runs(run_ids)

    monkeypatch.setattr(wired.store, "get_runs", counted)
    wired.clock.set(START + timedelta(days=3, hours=12))
    assert listed(wired) == ["job:20260307T090000Z"]  # 09:00 is within 1 + 3 days
    fires_a_day = 24 * 12
    assert fires_a_day * 3 < sum(asked) <= fires_a_day * 4 + 3
    asked.clear()
    wired.clock.set(START + timedelta(days=10))
    assert listed(wired) == []  # expired by then (TTL deletes it): its fire is not read
    assert sum(asked) <= fires_a_day * 4 + 3
