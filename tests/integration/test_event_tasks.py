"""Event-triggered tasks: a rule on the bus per task, whose matched events become runs."""

from __future__ import annotations

import json

import pytest

from rebound.domain.errors import ConfigError
from rebound.domain.ids import task_rule_name
from rebound.domain.run import RunState
from rebound.domain.task import TaskState
from rebound.engine.deps import Deps
from rebound.engine.executor import Executor, QueueMessage
from rebound.ops.tasks import TaskOps
from rebound_local.instrument import RecordingTargets
from support import queue_messages, register, task

pytestmark = pytest.mark.integration

PATTERN = {
    "source": ["billing"],
    "detail-type": ["invoice.created"],
    "detail": {"amount": [{"numeric": [">", 0]}]},
}


def invoice_task(**overrides: object) -> object:
    return task("on-invoice", schedule=None, event=PATTERN, payload={"step": "charge"}, **overrides)


def put(deps: Deps, detail: dict[str, object], detail_type: str = "invoice.created") -> None:
    resp = deps.bus.client.put_events(
        Entries=[
            {
                "Source": "billing",
                "DetailType": detail_type,
                "Detail": json.dumps(detail),
                "EventBusName": deps.settings.bus_name,
            }
        ]
    )
    assert resp["FailedEntryCount"] == 0


def event_messages(deps: Deps) -> list[dict[str, object]]:
    return [m for m in queue_messages(deps, "execution") if m["body"].get("kind") == "event"]


def test_registering_an_event_task_creates_its_rule_with_the_pattern(deps: Deps) -> None:
    register(deps, invoice_task())
    rule = deps.bus.get_rule(task_rule_name("on-invoice"))
    assert rule is not None and rule["State"] == "ENABLED"
    assert json.loads(rule["EventPattern"]) == PATTERN
    [target] = deps.bus.client.list_targets_by_rule(Rule=rule["Name"], EventBusName=deps.settings.bus_name)[
        "Targets"
    ]
    assert target["Arn"] == deps.settings.queue("execution").arn
    assert target["DeadLetterConfig"]["Arn"] == deps.settings.queue("control_dlq").arn


def test_a_matching_event_becomes_one_run_with_the_event_detail(deps: Deps) -> None:
    register(deps, invoice_task())
    put(deps, {"invoice": "inv-1", "amount": 12})
    put(deps, {"invoice": "inv-2", "amount": 0})  # the numeric filter does not match
    put(deps, {"invoice": "inv-3", "amount": 5}, detail_type="invoice.paid")  # nor the detail type
    [message] = event_messages(deps)
    body = message["body"]
    assert body["task_id"] == "on-invoice" and body["detail"] == {"invoice": "inv-1", "amount": 12}

    assert Executor(deps).process(QueueMessage("m1", message["raw"]), 120) == "succeeded"
    assert Executor(deps).process(QueueMessage("m1-again", message["raw"]), 120) == "duplicate"
    [run] = deps.store.runs_for_task("on-invoice")
    assert run.state is RunState.SUCCEEDED and run.trigger.value == "event"
    assert run.event_detail == {"invoice": "inv-1", "amount": 12}
    assert run.run_id.startswith("on-invoice:")


def test_pausing_disables_the_rule_and_resuming_enables_it(deps: Deps) -> None:
    register(deps, invoice_task())
    ops = TaskOps(deps, "test")
    ops.set_state("on-invoice", TaskState.PAUSED)
    assert deps.bus.get_rule(task_rule_name("on-invoice"))["State"] == "DISABLED"  # type: ignore[index]
    put(deps, {"invoice": "inv-1", "amount": 12})
    assert event_messages(deps) == []
    ops.set_state("on-invoice", TaskState.ACTIVE)
    assert deps.bus.get_rule(task_rule_name("on-invoice"))["State"] == "ENABLED"  # type: ignore[index]


def test_an_unchanged_task_leaves_its_rule_alone_and_a_changed_pattern_rewrites_it(deps: Deps) -> None:
    ops = TaskOps(deps, "test")
    first = ops.apply(ops.plan([invoice_task()]))
    again = ops.apply(ops.plan([invoice_task()]))
    assert (first.rules_written, again.rules_written, first.schedules_written) == (1, 0, 0)
    changed = task("on-invoice", schedule=None, event={"source": ["billing"]}, payload={"step": "charge"})
    assert ops.apply(ops.plan([changed])).rules_written == 1
    assert json.loads(deps.bus.get_rule(task_rule_name("on-invoice"))["EventPattern"]) == {
        "source": ["billing"]
    }  # type: ignore[index]


def test_a_task_that_moves_from_events_to_a_schedule_loses_its_rule(deps: Deps) -> None:
    register(deps, invoice_task())
    register(deps, task("on-invoice", schedule={"cron": "0 * * * *"}))
    assert deps.bus.get_rule(task_rule_name("on-invoice")) is None
    assert deps.store.get_task("on-invoice").schedule_names == ("task-on-invoice",)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        (
            {"source": "billing"},
            'event.source: EventBridge matches against an array of values: write ["billing"]',
        ),
        ({"detail": {"amount": []}}, "event.detail.amount: an empty array matches nothing"),
        ({"detail": {}}, "event.detail: an empty object matches nothing"),
        ({}, "an event pattern needs at least one key"),
    ],
)
def test_a_malformed_pattern_is_refused_at_registration_with_its_key(
    deps: Deps, tmp_path: object, pattern: dict[str, object], problem: str
) -> None:
    from pathlib import Path

    file = Path(str(tmp_path)) / "tasks.yaml"
    file.write_text(
        json.dumps({"tasks": [{"id": "bad", "tenant": "acme", "event": pattern, "target": {"type": "sim"}}]})
    )
    with pytest.raises(ConfigError) as refused:
        TaskOps(deps, "test").load(file)
    assert problem in str(refused.value)
    assert str(file) in str(refused.value)
    assert deps.bus.get_rule(task_rule_name("bad")) is None


def test_an_event_whose_detail_makes_the_payload_too_large_fails_terminally_without_a_call(
    deps: Deps,
) -> None:
    from rebound.engine.retry_scheduler import RetryScheduler

    register(deps, task("on-invoice", schedule=None, event=PATTERN, payload={"blob": "x" * 120_000}))
    body = {
        "v": 1,
        "kind": "event",
        "task_id": "on-invoice",
        "event_id": "ev-big",
        "time": "2026-03-07T09:00:00Z",
        "detail": {"blob": "y" * 150_000},
    }
    deps.targets = calls = RecordingTargets(deps.targets, deps.clock)
    Executor(deps).process(QueueMessage("big", json.dumps(body)), 120)
    assert calls.calls == []
    [run] = deps.store.runs_for_task("on-invoice")
    assert run.last_error_code == "PAYLOAD_TOO_LARGE" and "256 KiB" in str(run.last_error_message)
    RetryScheduler(deps).on_failed(run.run_id, 1)
    after = deps.store.get_run(run.run_id)
    assert after is not None and after.state is RunState.DEAD_LETTERED  # terminal: not retried
