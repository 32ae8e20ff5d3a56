"""The events Rebound emits are the events its published schemas describe: a run dead-lettered,
its work order opened, the run replayed and recovered, the order resolved, with every event
written to the outbox (``every_event``), each validated against ``events/schemas/<type>.json``."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from test_work_order_resolution import escalate, last, replay_and_run

from rebound.domain.events import EventType
from rebound.engine.deps import Deps
from rebound.handlers import executor, retry_scheduler
from support import Context, bus_event, outbox_events, queue_messages, register, sqs_event, task

pytestmark = pytest.mark.integration

SCHEMAS = Path(__file__).resolve().parents[2] / "events" / "schemas"


def schema_of(detail_type: str) -> dict[str, object]:
    path = SCHEMAS / f"{detail_type}.json"
    assert path.is_file(), f"{detail_type} was emitted but has no published schema"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_every_event_of_a_dead_letter_and_its_recovery_matches_its_published_schema(
    wired: Deps, every_event: None
) -> None:
    register(
        wired,
        task("job", target={"type": "sim", "behavior": {"fail_first": 2}}, retry_policy={"max_attempts": 2}),
    )
    executor.lambda_handler(
        sqs_event({"v": 1, "kind": "fire", "task_id": "job", "scheduled_time": "2026-03-07T09:00:00Z"}),
        Context(),
    )
    retry_scheduler.lambda_handler(
        sqs_event(bus_event("task.execution.failed", last(wired, "task.execution.failed"))), Context()
    )
    [retry] = [m["body"] for m in queue_messages(wired, "execution") if m["delayed_until_ms"]]
    wired.clock.sleep(600)  # type: ignore[attr-defined]
    executor.lambda_handler(sqs_event(retry), Context())  # the second attempt fails too
    retry_scheduler.lambda_handler(
        sqs_event(bus_event("task.execution.failed", last(wired, "task.execution.failed"))), Context()
    )
    escalate("task.dead_lettered", last(wired, "task.dead_lettered"))
    replay_and_run(wired)  # succeeds: the run recovers
    escalate("task.recovered", last(wired, "task.recovered"))

    emitted = outbox_events(wired)
    for detail_type, detail in emitted:
        jsonschema.Draft202012Validator(schema_of(detail_type)).validate(detail)
        assert detail["schema_version"] == 1 and detail["event_id"]
    kinds = {t for t, _ in emitted}
    assert {
        EventType.EXECUTION_UPDATED,
        EventType.EXECUTION_FAILED,
        EventType.RETRY_SCHEDULED,
        EventType.DEAD_LETTERED,
        EventType.WORKORDER_CREATED,
        EventType.RUN_RECOVERED,
        EventType.WORKORDER_RESOLVED,
    } <= kinds, kinds
