"""The ``retry-scheduled`` audit record names what it planned: the attempt, when, after which
outcome, and the dispatch that carries it, on both dispatch paths."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from rebound.domain.audit_record import AuditRecord
from rebound.domain.ids import retry_dispatch_reference
from rebound.domain.run import RunState
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.engine.dispatch import MAX_QUEUE_DELAY_S
from rebound.handlers import executor, retry_scheduler
from support import Context, bus_event, fire, outbox_events, queue_messages, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"
FAILING = {"type": "sim", "behavior": {"always_fail": True}}


def failed_details(deps: Deps) -> list[dict[str, Any]]:
    return [d for t, d in outbox_events(deps) if t == "task.execution.failed"]


def run_attempt(deps: Deps, body: dict[str, Any] | str) -> None:
    executor.lambda_handler(sqs_event(body), Context())


def decide(deps: Deps) -> None:
    detail = failed_details(deps)[-1]
    retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", detail)), Context())


def retry_records(deps: Deps) -> list[AuditRecord]:
    return [r for r in deps.store.audit_trail(f"run#{RUN_ID}") if r.action == "retry-scheduled"]


def test_the_delay_queue_path_records_attempt_time_outcome_and_reference(wired: Deps) -> None:
    register(wired, task("job", target=FAILING))
    run_attempt(wired, fire("job"))
    failed_at = wired.clock.now()
    decide(wired)

    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RETRY_SCHEDULED and run.next_retry_at is not None
    [record] = retry_records(wired)
    evidence = record.evidence
    expected_ref = retry_dispatch_reference(RUN_ID, 2, 1)
    assert evidence["attempt"] == 2
    assert evidence["next_retry_at"] == iso(run.next_retry_at) == iso(failed_at + timedelta(seconds=120))
    assert evidence["outcome"] == "failed"
    assert evidence["dispatch_reference"] == expected_ref == run.dispatch_reference
    assert evidence["via"] == "delay_queue" and evidence["delay_s"] <= MAX_QUEUE_DELAY_S

    # The reference is the one the dispatch really carries.
    [msg] = queue_messages(wired, "execution")
    assert msg["attributes"]["dispatch_reference"] == expected_ref
    assert msg["body"] == {
        "v": 1,
        "kind": "attempt",
        "run_id": RUN_ID,
        "attempt": evidence["attempt"],
        "dispatch": run.dispatch,
    }
    assert msg["delayed_until_ms"] == (failed_at + timedelta(seconds=120)).timestamp() * 1000
    assert wired.schedules.get(expected_ref) is None


def test_the_one_time_schedule_path_records_attempt_time_outcome_and_reference(wired: Deps) -> None:
    register(
        wired,
        task(
            "job", target=FAILING, retry_policy={"extends": "default", "base_delay": "20m", "max_delay": "1h"}
        ),
    )
    run_attempt(wired, fire("job"))
    failed_at = wired.clock.now()
    decide(wired)

    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RETRY_SCHEDULED
    [record] = retry_records(wired)
    evidence = record.evidence
    expected_ref = retry_dispatch_reference(RUN_ID, 2, 1)
    assert evidence["attempt"] == 2
    assert evidence["next_retry_at"] == iso(failed_at + timedelta(minutes=20)) == "2026-03-07T09:20:00.000Z"
    assert evidence["outcome"] == "failed"
    assert evidence["dispatch_reference"] == expected_ref == run.dispatch_reference
    assert evidence["via"] == "scheduler" and evidence["delay_s"] > MAX_QUEUE_DELAY_S

    # The reference names the one-time schedule that carries the attempt; nothing went on the queue.
    assert queue_messages(wired, "execution") == []
    schedule = wired.schedules.get(expected_ref)
    assert schedule is not None and schedule["ScheduleExpression"] == "at(2026-03-07T09:20:00)"
    assert json.loads(schedule["Target"]["Input"])["attempt"] == evidence["attempt"]


def test_a_timeout_is_recorded_as_the_outcome(wired: Deps) -> None:
    register(wired, task("job", timeout_s=20, target={"type": "sim", "behavior": {"hang": True}}))
    run_attempt(wired, fire("job"))
    decide(wired)
    [record] = retry_records(wired)
    assert record.evidence["outcome"] == "timeout"
    assert record.evidence["attempt"] == 2


def test_the_second_retry_names_the_third_attempt_and_its_own_reference(wired: Deps) -> None:
    register(wired, task("job", target=FAILING))
    run_attempt(wired, fire("job"))
    decide(wired)
    wired.clock.sleep(120)
    [msg] = queue_messages(wired, "execution")
    wired.queues.client.purge_queue(QueueUrl=wired.settings.queue("execution").url)
    run_attempt(wired, msg["raw"])
    second_failed_at = wired.clock.now()
    decide(wired)

    first, second = retry_records(wired)
    assert (first.evidence["attempt"], second.evidence["attempt"]) == (2, 3)
    assert second.evidence["dispatch_reference"] == retry_dispatch_reference(RUN_ID, 3, 2)
    assert second.evidence["dispatch_reference"] != first.evidence["dispatch_reference"]
    # base 120 s, multiplier 2: the second wait is 240 s.
    assert second.evidence["next_retry_at"] == iso(second_failed_at + timedelta(seconds=240))
    assert second.evidence["outcome"] == "failed"
    [queued] = queue_messages(wired, "execution")
    assert queued["attributes"]["dispatch_reference"] == second.evidence["dispatch_reference"]
    assert queued["body"]["attempt"] == 3
