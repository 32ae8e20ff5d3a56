"""Workstreams that start on their own: a schedule (``ws-<id>``) or a rule on the bus (``ws-<id>``)
sends ``workstream.start`` to the escalation queue, whose consumer starts the run that fire or
event names, once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rebound.domain.errors import ValidationFailed
from rebound.domain.ids import scheduled_run_id, workstream_rule_name, workstream_schedule_name
from rebound.domain.schedules import WORKSTREAM_START
from rebound.domain.timefmt import parse_utc
from rebound.domain.workstreams import Workstream
from rebound.engine.control_messages import parse_control_event
from rebound.engine.deps import Deps
from rebound.engine.workstreams import Workstreams
from rebound.ops.workstreams import WorkstreamOps
from support import queue_messages, register, task

pytestmark = pytest.mark.integration

PATTERN = {"source": ["warehouse"], "detail-type": ["load.finished"]}


def chain(**trigger: Any) -> Workstream:
    return Workstream.model_validate(
        {
            "id": "nightly",
            "tenant": "acme",
            **trigger,
            "steps": [{"task": "extract"}, {"task": "load", "needs": ["extract"]}],
        }
    )


def apply(deps: Deps, workstream: Workstream) -> dict[str, Any]:
    register(deps, task("extract", schedule=None), task("load", schedule=None))
    return WorkstreamOps(deps, "test").register([workstream], [])


def start_messages(deps: Deps) -> list[dict[str, Any]]:
    return [m for m in queue_messages(deps, "escalation") if m["body"].get("detail-type") == WORKSTREAM_START]


def consume(deps: Deps, raw: str) -> str:
    """What the escalation handler does with the message."""
    kind, detail = parse_control_event(raw, (WORKSTREAM_START,))
    assert kind == WORKSTREAM_START
    return Workstreams(deps).on_start(detail.model_dump())


def test_a_scheduled_workstream_gets_a_schedule_that_sends_its_start_to_the_escalation_queue(
    deps: Deps,
) -> None:
    written = apply(deps, chain(schedule={"cron": "0 2 * * *", "timezone": "Europe/Berlin"}))
    assert written["schedules_written"] == 1
    schedule = deps.schedules.get(workstream_schedule_name("nightly"))
    assert schedule is not None
    assert (schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"]) == (
        "cron(0 2 * * ? *)",
        "Europe/Berlin",
    )
    assert schedule["Target"]["Arn"] == deps.settings.queue("escalation").arn
    sent = json.loads(schedule["Target"]["Input"])
    assert sent["detail-type"] == WORKSTREAM_START
    assert sent["detail"]["workstream_id"] == "nightly"

    again = WorkstreamOps(deps, "test").register(
        [chain(schedule={"cron": "0 2 * * *", "timezone": "Europe/Berlin"})], []
    )
    assert again["schedules_written"] == 0  # unchanged


def test_every_delivery_of_one_fire_starts_one_run_named_by_the_fire(deps: Deps) -> None:
    apply(deps, chain(schedule={"cron": "0 2 * * *"}))
    schedule = deps.schedules.get(workstream_schedule_name("nightly"))
    assert schedule is not None
    fired = schedule["Target"]["Input"].replace("<aws.scheduler.scheduled-time>", "2026-03-08T02:00:00Z")

    first = consume(deps, fired)
    assert first == scheduled_run_id("nightly", parse_utc("2026-03-08T02:00:00Z"))
    assert consume(deps, fired) == first  # Scheduler and SQS deliver at least once
    engine = Workstreams(deps)
    assert engine.definition("nightly")[1] == [first]
    run = engine.get_run(first)
    assert [s.step for s in run.steps if s.state.value == "running"] == ["extract"]


def test_an_event_workstream_gets_a_rule_whose_matched_events_start_one_run_each(deps: Deps) -> None:
    written = apply(deps, chain(event=PATTERN))
    assert written["rules_written"] == 1
    rule = deps.bus.get_rule(workstream_rule_name("nightly"))
    assert rule is not None and json.loads(rule["EventPattern"]) == PATTERN
    deps.bus.client.put_events(
        Entries=[
            {
                "Source": "warehouse",
                "DetailType": "load.finished",
                "Detail": "{}",
                "EventBusName": deps.settings.bus_name,
            }
        ]
    )
    [message] = start_messages(deps)
    assert message["body"]["detail"]["workstream_id"] == "nightly"
    run_id = consume(deps, message["raw"])
    assert run_id.startswith("nightly:evt-")
    assert consume(deps, message["raw"]) == run_id
    assert Workstreams(deps).definition("nightly")[1] == [run_id]


def test_moving_from_a_schedule_to_an_event_removes_the_schedule(deps: Deps) -> None:
    apply(deps, chain(schedule={"rate": "1 hour"}))
    assert deps.schedules.get(workstream_schedule_name("nightly")) is not None
    WorkstreamOps(deps, "test").register([chain(event=PATTERN)], [])
    assert deps.schedules.get(workstream_schedule_name("nightly")) is None
    assert deps.bus.get_rule(workstream_rule_name("nightly")) is not None
    WorkstreamOps(deps, "test").register([chain()], [])  # started by hand again
    assert deps.bus.get_rule(workstream_rule_name("nightly")) is None


def test_a_pattern_that_would_match_rebounds_own_events_is_refused(deps: Deps) -> None:
    register(deps, task("extract", schedule=None), task("load", schedule=None))
    with pytest.raises(ValidationFailed) as caught:
        WorkstreamOps(deps, "test").plan([chain(event={"detail-type": ["workstream.step.ended"]})], [])
    assert caught.value.details["key_path"] == "event.source"
    assert "workstream nightly" in caught.value.message


def test_a_start_naming_neither_a_fire_nor_an_event_is_refused_with_the_field() -> None:
    body = json.dumps({"detail-type": WORKSTREAM_START, "detail": {"workstream_id": "nightly"}})
    with pytest.raises(ValidationFailed) as caught:
        parse_control_event(body, (WORKSTREAM_START,))
    assert "scheduled_time" in caught.value.message and caught.value.details["reason"] == "schema_mismatch"


def test_the_escalation_handler_starts_the_sample_fire_once_though_it_arrives_twice_in_a_batch(
    wired: Deps,
) -> None:
    from pathlib import Path

    from rebound.handlers import escalation
    from support import Context

    apply(wired, chain(schedule={"cron": "0 1 * * *"}))
    sample = (
        Path(__file__).resolve().parents[2] / "events" / "escalation" / "sqs-workstream-start-schedule.json"
    )
    (record,) = json.loads(sample.read_text())["Records"]
    record = {**record, "body": record["body"].replace("nightly-ledger", "nightly")}
    answer = escalation.lambda_handler({"Records": [record, {**record, "messageId": "again"}]}, Context())
    assert answer == {"batchItemFailures": []}
    assert Workstreams(wired).definition("nightly")[1] == [
        scheduled_run_id("nightly", parse_utc("2026-03-07T01:00:00Z"))
    ]
    assert queue_messages(wired, "control_dlq") == []
