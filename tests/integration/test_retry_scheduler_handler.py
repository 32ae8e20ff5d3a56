"""The retry scheduler: a failed attempt is retried through the delay queue or a one-time schedule,
or dead-lettered with its evidence; handling the same event twice changes nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from rebound.domain.ids import retry_dispatch_reference
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.handlers import executor, retry_scheduler
from support import Context, bus_event, fire, outbox_events, queue_messages, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"


def fail_once(deps: Deps, **task_fields: object) -> dict:  # type: ignore[type-arg]
    """Register a failing task, run its first attempt, return the task.execution.failed detail."""
    register(deps, task("job", target={"type": "sim", "behavior": {"always_fail": True}}, **task_fields))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    return [d for t, d in outbox_events(deps) if t == "task.execution.failed"][-1]


def deliver_failed(detail: dict) -> dict:  # type: ignore[type-arg]
    return retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", detail)), Context())


def test_a_short_delay_goes_through_the_delay_queue(wired: Deps, every_event: None) -> None:
    detail = fail_once(wired)
    assert deliver_failed(detail) == {"batchItemFailures": []}
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RETRY_SCHEDULED
    assert run.next_retry_at == wired.clock.now() + timedelta(seconds=120)
    [msg] = queue_messages(wired, "execution")
    assert msg["body"] == {"v": 1, "kind": "attempt", "run_id": RUN_ID, "attempt": 2, "dispatch": 1}
    assert msg["delayed_until_ms"] == (wired.clock.now() + timedelta(seconds=120)).timestamp() * 1000
    [(_, scheduled)] = [(t, d) for t, d in outbox_events(wired) if t == "task.retry.scheduled"]
    assert scheduled["attempt"] == 2 and scheduled["delay_s"] == 120 and scheduled["via"] == "delay_queue"
    assert scheduled["next_retry_at"] == "2026-03-07T09:02:00.000Z"


def test_a_delay_over_fifteen_minutes_uses_a_one_time_schedule_that_deletes_itself(
    wired: Deps, every_event: None
) -> None:
    detail = fail_once(wired, retry_policy={"extends": "default", "base_delay": "20m", "max_delay": "1h"})
    deliver_failed(detail)
    assert queue_messages(wired, "execution") == []
    name = retry_dispatch_reference(RUN_ID, 2, 1)
    schedule = wired.schedules.get(name)
    assert schedule is not None
    assert schedule["ScheduleExpression"] == "at(2026-03-07T09:20:00)"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["GroupName"] == wired.settings.schedule_group
    assert schedule["Target"]["Arn"] == wired.settings.queue("execution").arn
    assert json.loads(schedule["Target"]["Input"]) == {
        "v": 1,
        "kind": "attempt",
        "run_id": RUN_ID,
        "attempt": 2,
        "dispatch": 1,
    }
    [scheduled] = [d for t, d in outbox_events(wired) if t == "task.retry.scheduled"]
    assert scheduled["via"] == "scheduler" and scheduled["dispatch_reference"] == name


def test_every_schedule_rebound_writes_retries_delivery_and_dead_letters_what_it_cannot_deliver(
    wired: Deps,
) -> None:
    """Scheduler's own retry policy (its maximum) and the Scheduler DLQ, on the one-time retry
    schedules and on the tasks' recurring schedules alike, as the stack's alarms expect."""
    detail = fail_once(wired, retry_policy={"extends": "default", "base_delay": "20m", "max_delay": "1h"})
    deliver_failed(detail)
    names = [retry_dispatch_reference(RUN_ID, 2, 1), *wired.store.get_task("job").schedule_names]  # type: ignore[union-attr]
    assert len(names) == 2
    for name in names:
        schedule = wired.schedules.get(name)
        assert schedule is not None, name
        assert schedule["Target"]["RetryPolicy"] == {
            "MaximumRetryAttempts": 185,
            "MaximumEventAgeInSeconds": 86400,
        }
        assert schedule["Target"]["DeadLetterConfig"] == {"Arn": wired.settings.queue("scheduler_dlq").arn}
        assert schedule["Target"]["RoleArn"] == wired.settings.scheduler_role_arn


def test_handling_the_same_failure_twice_reuses_the_plan(wired: Deps) -> None:
    detail = fail_once(wired, retry_policy={"extends": "default", "base_delay": "20m", "max_delay": "1h"})
    deliver_failed(detail)
    deliver_failed(detail)  # e.g. redelivered after a crash between recording and dispatching
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RETRY_SCHEDULED
    assert [r.action for r in wired.store.audit_trail(f"run#{RUN_ID}")].count("retry-scheduled") == 1
    groups = wired.schedules.client.list_schedules(GroupName=wired.settings.schedule_group)["Schedules"]
    assert [s["Name"] for s in groups if s["Name"].startswith("retry-")] == [
        retry_dispatch_reference(RUN_ID, 2, 1)
    ]


def test_an_exhausted_run_is_dead_lettered_with_its_evidence(wired: Deps) -> None:
    detail = fail_once(wired, retry_policy={"extends": "default", "max_attempts": 1})
    deliver_failed(detail)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED
    [msg] = queue_messages(wired, "dlq")
    assert msg["attributes"] == {
        "run_id": RUN_ID,
        "task_id": "job",
        "tenant": "acme",
        "attempts": "1",
        "error_code": "SIM_FAILURE",
        "reason": "attempts_exhausted",
        "dead_lettered_at": "2026-03-07T09:00:00.000Z",
    }
    assert msg["body"]["kind"] == "replay" and msg["body"]["run_id"] == RUN_ID
    [record] = [r for r in wired.store.audit_trail(f"run#{RUN_ID}") if r.action == "dead-lettered"]
    assert {"attempt", "outcome", "dead_lettered_at", "reason"} <= set(record.evidence)
    assert record.evidence["reason"] == "attempts_exhausted" and record.evidence["attempt"] == 1
    [dead] = [d for t, d in outbox_events(wired) if t == "task.dead_lettered"]
    assert dead["subject"] == f"run#{RUN_ID}" and dead["severity"] == "high"
    assert run.dlq_message_id == msg["id"]


def test_a_terminal_error_goes_straight_to_the_dlq(wired: Deps) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"terminal_error": "BAD_INPUT"}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    detail = [d for t, d in outbox_events(wired) if t == "task.execution.failed"][-1]
    deliver_failed(detail)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED
    assert run.dead_letter_reason == "terminal_error" and run.attempt == 1


def test_a_stale_failure_event_changes_nothing(wired: Deps) -> None:
    detail = fail_once(wired)
    deliver_failed({**detail, "attempt": 7})
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED


def test_a_policy_changed_at_run_time_applies_from_the_next_decision(wired: Deps) -> None:
    detail = fail_once(wired)
    changed = wired.policies.set(
        "default", {"base_delay": "7m"}, actor="arn:aws:iam::1:user/ops", at=wired.clock.now()
    )
    assert changed.version == 1
    deliver_failed(detail)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.policy_ref == "default@v1"
    assert run.next_retry_at == wired.clock.now() + timedelta(minutes=7)
    [change] = wired.store.audit_trail("policy#default")
    assert change.actor == "arn:aws:iam::1:user/ops" and change.evidence["to_version"] == 1
