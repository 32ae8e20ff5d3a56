"""Submitting a run again (the same fire delivered once more) reuses the run that exists: no second
target call, no second execution message or schedule, no attempt spent."""

from __future__ import annotations

from typing import Any

import pytest

from rebound.domain.run import Run, RunState
from rebound.engine.deps import Deps
from rebound.handlers import executor, retry_scheduler
from rebound_local.instrument import RecordingTargets
from support import (
    Context,
    bus_event,
    crashed_message_returns,
    fire,
    outbox_events,
    queue_messages,
    register,
    sqs_event,
    start_and_crash,
    task,
)

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"


def resubmit(task_id: str = "job", when: str = "2026-03-07T09:00:00Z") -> dict[str, Any]:
    """The same fire, as a new SQS message (a new message id), through the executor handler."""
    return executor.lambda_handler(sqs_event(fire(task_id, when)), Context())


def schedule_names(deps: Deps) -> list[str]:
    listed = deps.schedules.client.list_schedules(GroupName=deps.settings.schedule_group)["Schedules"]
    return sorted(s["Name"] for s in listed)


def snapshot(deps: Deps) -> tuple[list[dict[str, Any]], list[str], int]:
    """(execution queue messages, schedules, audit records of the run)."""
    messages = [
        {"body": m["body"], "delayed_until_ms": m["delayed_until_ms"]}
        for m in queue_messages(deps, "execution")
    ]
    return messages, schedule_names(deps), len(deps.store.audit_trail(f"run#{RUN_ID}"))


def get(deps: Deps, run_id: str = RUN_ID) -> Run:
    run = deps.store.get_run(run_id)
    assert run is not None
    return run


def all_runs(deps: Deps) -> list[str]:
    return sorted(r.run_id for r in deps.store.scan_runs())


def assert_unchanged(
    deps: Deps, before: Run, state: RunState, seen: tuple[Any, ...], runs: list[str]
) -> None:
    after = get(deps, before.run_id)
    assert after.state is state
    assert after.attempt == before.attempt
    assert after.attempts == before.attempts
    assert after.waits == before.waits
    assert snapshot(deps) == seen  # no new message, schedule or audit record
    assert all_runs(deps) == runs  # the existing run was reused, no other created


@pytest.mark.parametrize("path", ["delay_queue", "scheduler"])
def test_resubmitting_a_retry_scheduled_run_reuses_it(
    wired: Deps, calls: RecordingTargets, path: str
) -> None:
    policy = {"extends": "default", "base_delay": "2m" if path == "delay_queue" else "20m", "max_delay": "1h"}
    register(
        wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}, retry_policy=policy)
    )
    executor.lambda_handler(sqs_event(fire("job")), Context())
    [failed] = [d for t, d in outbox_events(wired) if t == "task.execution.failed"]
    retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", failed)), Context())
    before = get(wired)
    assert before.state is RunState.RETRY_SCHEDULED and before.attempt == 1
    seen, runs = snapshot(wired), all_runs(wired)
    assert len(seen[0]) == (1 if path == "delay_queue" else 0)  # the planned attempt, and only it
    assert len([n for n in seen[1] if n.startswith("retry-")]) == (0 if path == "delay_queue" else 1)
    assert [(c.run_id, c.attempt) for c in calls.calls] == [(RUN_ID, 1)]

    for _ in range(2):
        assert resubmit() == {"batchItemFailures": []}  # consumed, not redelivered forever
        wired.clock.sleep(5)  # still well before the planned retry

    assert [(c.run_id, c.attempt) for c in calls.calls] == [(RUN_ID, 1)]
    assert_unchanged(wired, before, RunState.RETRY_SCHEDULED, seen, runs)
    assert get(wired).next_retry_at == before.next_retry_at
    assert get(wired).dispatch_reference == before.dispatch_reference


def test_resubmitting_a_running_run_reuses_it(wired: Deps, calls: RecordingTargets) -> None:
    register(wired, task("job", timeout_s=30))
    start_and_crash(wired, "job")
    before = get(wired)
    assert before.state is RunState.RUNNING and before.attempt == 1
    seen, runs = snapshot(wired), all_runs(wired)

    for _ in range(2):
        # Held back until the lease ends, when it finds the attempt over or fails it (TIMEOUT).
        [held] = resubmit()["batchItemFailures"]
        assert held["itemIdentifier"]
        wired.clock.sleep(5)  # the lease is still valid

    assert calls.calls == []  # the crashed attempt never reached the target, and nothing else did
    assert_unchanged(wired, before, RunState.RUNNING, seen, runs)
    assert get(wired).lease_expires_at == before.lease_expires_at
    assert get(wired).lease_owner == before.lease_owner


def test_resubmitting_a_waiting_run_neither_queues_a_second_waiter_nor_runs_it_twice(
    wired: Deps, calls: RecordingTargets, every_event: None
) -> None:
    """A run waiting for its mutex group is ``pending`` with its attempt message queued. The same
    fire delivered again, while the mutex is busy or after it frees up, adds nothing: no second
    waiting record, event or attempt message. The queued attempt message runs it, once."""
    register(wired, task("a", mutex_group="ledger-db", timeout_s=30), task("job", mutex_group="ledger-db"))
    start_and_crash(wired, "a")  # holds the mutex
    assert resubmit("job") == {"batchItemFailures": []}
    before = get(wired)
    assert before.state is RunState.PENDING and before.attempt == 0 and before.waits == 1
    runs = all_runs(wired)
    [queued] = [m for m in queue_messages(wired, "execution") if m["body"].get("run_id") == RUN_ID]
    assert queued["body"] == {"v": 1, "kind": "attempt", "run_id": RUN_ID, "attempt": 1, "dispatch": 1}

    for _ in range(2):  # duplicates while the mutex is busy
        assert resubmit("job") == {"batchItemFailures": []}
    waiting = [t for t, d in outbox_events(wired) if t == "task.execution.waiting" and d["run_id"] == RUN_ID]
    assert len(waiting) == 1 and get(wired).waits == 1

    wired.clock.sleep(30 + 30 + 1)  # a's lease expires; its message comes back and frees the mutex
    assert crashed_message_returns(wired, "a") == "lease-expired"
    assert resubmit("job") == {"batchItemFailures": []}  # and a duplicate after it is free
    assert calls.calls == [] and get(wired).state is RunState.PENDING
    mine = [m for m in queue_messages(wired, "execution") if m["body"].get("run_id") == RUN_ID]
    assert [m["id"] for m in mine] == [queued["id"]]  # still only the one attempt message
    assert all_runs(wired) == runs

    assert executor.lambda_handler(sqs_event(queued["raw"]), Context()) == {"batchItemFailures": []}
    after = get(wired)
    assert after.state is RunState.SUCCEEDED and after.attempt == 1 and len(after.attempts) == 1
    assert after.created_at == before.created_at  # the same run, reused
    assert [(c.run_id, c.attempt) for c in calls.calls] == [(RUN_ID, 1)]
