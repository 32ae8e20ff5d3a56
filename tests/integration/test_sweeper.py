"""The sweeper repairs what the event-driven path could not: expired leases, lost decisions,
stale plans, and DLQ arrivals that SQS moved itself."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from rebound.domain.run import AttemptOutcome, RunState
from rebound.engine.deps import Deps
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.ports import DlqStatus
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.engine.sweeper import Sweeper
from rebound.handlers import executor
from rebound_local.instrument import CrashPlan, SimulatedCrash
from support import (
    Context,
    crashed_message_returns,
    fire,
    outbox_events,
    queue_messages,
    register,
    sqs_event,
    task,
)

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"


def test_an_attempt_whose_invocation_died_is_failed_with_timeout_when_its_lease_expires(wired: Deps) -> None:
    """A run ``by_state`` lists while it runs (here: its task's duration SLA is watched); a clean
    attempt's own message finds it instead (``test_unlisted_running.py``)."""
    register(wired, task("job", timeout_s=30, sla={"max_duration": "10m"}))
    wired.faults = CrashPlan(frozenset({"after_claim"}), 1.0)
    with pytest.raises(SimulatedCrash):
        Executor(wired).process(QueueMessage("m1", json.dumps(fire("job"))), 120)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RUNNING

    assert Sweeper(wired).sweep(scan_dlq=False).leases_expired == []  # lease still valid
    wired.clock.sleep(30 + 30 + 1)  # timeout + grace
    report = Sweeper(wired).sweep(scan_dlq=False)
    assert report.leases_expired == [RUN_ID]
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED
    assert run.attempts[-1].outcome is AttemptOutcome.TIMEOUT and run.last_error_code == "TIMEOUT"
    failed = [d for t, d in outbox_events(wired) if t == "task.execution.failed"]
    assert failed[-1]["retryable"] is True and failed[-1]["outcome"] == "timeout"


def test_a_late_outcome_after_the_lease_expired_is_discarded(wired: Deps) -> None:
    register(wired, task("job", timeout_s=30, target={"type": "sim", "behavior": {"duration_s": 5}}))
    executor_ = Executor(wired)
    wired.faults = CrashPlan(frozenset({"before_outcome"}), 1.0)
    with pytest.raises(SimulatedCrash):
        executor_.process(QueueMessage("m1", json.dumps(fire("job"))), 120)
    wired.clock.sleep(120)
    assert crashed_message_returns(wired, "job") == "lease-expired"
    run = wired.store.get_run(RUN_ID)
    assert (
        run is not None
        and run.state is RunState.FAILED
        and run.attempts[-1].outcome is AttemptOutcome.TIMEOUT
    )


def test_a_failed_run_nobody_decided_on_is_decided_by_the_sweeper(wired: Deps) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())  # the failed event is "lost"
    wired.clock.sleep(150)
    report = Sweeper(wired).sweep(scan_dlq=False)
    assert report.failures_redecided == [RUN_ID]
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RETRY_SCHEDULED


def test_a_stale_retry_plan_is_dispatched_again(wired: Deps) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    RetryScheduler(wired).on_failed(RUN_ID, 1)
    wired.queues.client.purge_queue(QueueUrl=wired.settings.queue("execution").url)  # the dispatch was lost
    wired.clock.sleep(120 + 6 * 60)
    report = Sweeper(wired).sweep(scan_dlq=False)
    assert report.plans_redispatched == [RUN_ID]
    [msg] = queue_messages(wired, "execution")
    assert msg["body"]["attempt"] == 2


def test_a_message_sqs_moved_to_the_dlq_is_escalated_and_stays_there(wired: Deps) -> None:
    """The crash path: a fire that killed the executor maxReceiveCount times."""
    register(wired, task("job"))
    poison = json.dumps(fire("job"))
    sqs = wired.queues.client
    dlq_url = wired.settings.queue("dlq").url
    sqs.send_message(QueueUrl=dlq_url, MessageBody=poison)  # what the redrive policy leaves behind
    wired.clock.sleep(1)
    report = Sweeper(wired).sweep()
    assert len(report.dlq_escalated) == 1
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED
    assert run.dead_letter_reason == "max_receive_count_exceeded"
    assert run.last_error_code == "RECEIVE_COUNT_EXCEEDED"
    [dead] = [d for t, d in outbox_events(wired) if t == "task.dead_lettered"]
    assert dead["reason"] == "max_receive_count_exceeded" and dead["run_id"] == RUN_ID
    assert [m["raw"] for m in queue_messages(wired, "dlq")] == [poison]  # still there for redrive
    [message_id] = report.dlq_escalated
    entry = wired.store.get_dlq_entry(message_id)  # recorded with its dead letter: dlq list shows it
    assert entry is not None and entry.status is DlqStatus.IN_DLQ and entry.body == poison
    assert (entry.run_id, entry.task_id, entry.tenant) == (RUN_ID, "job", run.tenant)
    assert (entry.error_code, entry.reason) == ("RECEIVE_COUNT_EXCEEDED", "max_receive_count_exceeded")
    assert report.dlq_recorded == []  # the dead letter recorded it; the check had nothing to add

    wired.clock.sleep(60)
    assert Sweeper(wired).sweep().dlq_escalated == []  # escalated once


def test_a_message_in_the_dlq_without_a_record_is_recorded_once(wired: Deps) -> None:
    """One the sweeper does not escalate (put there by hand; its run never existed as a fire)."""
    sqs = wired.queues.client
    stray = json.dumps({"v": 1, "kind": "attempt", "run_id": "nobody:20260307T090000Z", "attempt": 2})
    sqs.send_message(
        QueueUrl=wired.settings.queue("dlq").url,
        MessageBody=stray,
        MessageAttributes={"reason": {"DataType": "String", "StringValue": "by hand"}},
    )
    wired.clock.sleep(1)
    first = Sweeper(wired).sweep(ledger=False)
    wired.clock.sleep(11 * 60)  # the next full check reads it again
    again = Sweeper(wired).sweep(ledger=False)

    [message_id] = first.dlq_recorded
    assert again.dlq_scanned == 1 and again.dlq_recorded == []
    entry = wired.store.get_dlq_entry(message_id)
    assert entry is not None and (entry.run_id, entry.reason, entry.recorded_by) == (
        "nobody:20260307T090000Z",
        "by hand",
        "sweeper",
    )


def test_messages_rebound_dead_lettered_itself_are_not_escalated_twice(wired: Deps) -> None:
    executor.lambda_handler(sqs_event("{garbage"), Context())  # explicit path, escalated already
    wired.clock.sleep(1)
    assert Sweeper(wired).sweep().dlq_escalated == []


def test_sweep_finds_nothing_to_do_on_a_healthy_system(wired: Deps) -> None:
    register(wired, task("job"))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    wired.clock.sleep(timedelta(hours=1).total_seconds())
    assert Sweeper(wired).sweep().total() == 0


def test_a_replay_whose_message_was_lost_is_sent_again(wired: Deps) -> None:
    from rebound.domain.run import RunState as S

    register(wired, task("job", target={"type": "sim", "behavior": {"terminal_error": "BAD"}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    RetryScheduler(wired).on_failed(RUN_ID, 1)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is S.DEAD_LETTERED
    uow = wired.store.unit_of_work("operator", wired.clock.now())
    uow.save_run(
        run, run.model_copy(update={"state": S.REPLAYED, "budget_start": run.attempt}), action="replayed"
    )
    uow.commit()  # ...and the replay message never made it to the queue
    wired.clock.sleep(6 * 60)
    assert Sweeper(wired).sweep(scan_dlq=False, ledger=False).plans_redispatched == [RUN_ID]
    [msg] = [m for m in queue_messages(wired, "execution") if m["body"].get("kind") == "replay"]
    assert msg["body"]["run_id"] == RUN_ID
