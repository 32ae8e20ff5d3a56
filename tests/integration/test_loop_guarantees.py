"""The loop's guarantees under contention and crashes, on the local cloud's DynamoDB and SQS:

1. a transaction conflict is contention, retried, never read as a lost outcome or a busy slot;
2. the run ledger calls a fire missed only on evidence, never one that was only late (its other
   rules: ``test_scheduling_guarantees``);
3. an operator's cancel or skip releases the run's slots;
4. a waiting run keeps exactly one message through polls and sweeps, and its wait is bounded;
5. one bad run or item never stops a sweep;
6. a crash between two AWS calls loses no run, fire, replay or DLQ message.

Each test failed on the code before the fix it pins (the review of issue 11)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rebound.adapters.dynamo.codec import from_item
from rebound.domain.run import RunState
from rebound.domain.stored import StoredTask
from rebound.domain.task import TaskState
from rebound.engine import crashpoints as cp
from rebound.engine.deps import Deps
from rebound.engine.dispatch import observe_queue
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.ledger import Ledger
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.engine.sweeper import Sweeper
from rebound.handlers import escalation, executor
from rebound.ops.runs import RunOps
from rebound_local.instrument import CrashPlan, RecordingTargets, SimulatedCrash
from support import (
    Context,
    ManualClock,
    bus_event,
    crashed_message_returns,
    delete_done,
    fire,
    outbox_events,
    queue_messages,
    receive_event,
    register,
    sqs_event,
    start_and_crash,
    task,
)

pytestmark = pytest.mark.integration
RUN = "job:20260307T090000Z"


def conflict_error(n_items: int, on: int = 0) -> ClientError:
    """What DynamoDB answers when another write touched one of the items at the same moment."""
    reasons = [{"Code": "None"}] * n_items
    reasons[on] = {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
            "CancellationReasons": reasons,
        },
        "TransactWriteItems",
    )


@contextmanager
def conflicts(deps: Deps, count: int, when: Callable[[list[dict[str, Any]]], bool]) -> Iterator[list[int]]:
    """The next ``count`` writes for which ``when(items)`` holds meet a TransactionConflict: a
    transaction, or a put written on its own (a run's change without a transaction)."""
    client = deps.store.client
    real, real_put = client.transact_write_items, client.put_item
    injected = [0]

    def transact(**kwargs: Any) -> Any:
        items = kwargs["TransactItems"]
        if injected[0] < count and when(items):
            injected[0] += 1
            raise conflict_error(len(items), on=len(items) - 1)
        return real(**kwargs)

    def put(**kwargs: Any) -> Any:
        if injected[0] < count and when([{"Put": kwargs}]):
            injected[0] += 1
            raise ClientError(
                {"Error": {"Code": "TransactionConflictException", "Message": "in a transaction"}},
                "PutItem",
            )
        return real_put(**kwargs)

    client.transact_write_items, client.put_item = transact, put
    try:
        yield injected
    finally:
        client.transact_write_items, client.put_item = real, real_put


def writes_run_state(state: str) -> Callable[[list[dict[str, Any]]], bool]:
    def check(items: list[dict[str, Any]]) -> bool:
        for item in items:
            put = item.get("Put", {})
            # a clean success keeps its state in the document (the sparse by_state index)
            if "run_id" in put.get("Item", {}) and from_item(put["Item"]).get("state") == state:
                return True
        return False

    return check


@contextmanager
def crashing_at(deps: Deps, point: str) -> Iterator[None]:
    saved = deps.faults
    deps.faults = CrashPlan(frozenset({point}), 1.0)
    try:
        with pytest.raises(SimulatedCrash):
            yield
    finally:
        deps.faults = saved


def run_of(deps: Deps, run_id: str = RUN) -> Any:
    run = deps.store.get_run(run_id)
    assert run is not None
    return run


def drain(deps: Deps, *, rounds: int = 1) -> None:
    """Deliver what is visible on the execution queue to the executor handler, as the mapping would."""
    for _ in range(rounds):
        event = receive_event(deps)
        if not event["Records"]:
            return
        delete_done(deps, event, executor.lambda_handler(event, Context()))


def messages_for(deps: Deps, run_id: str) -> list[dict[str, Any]]:
    return [
        m
        for m in queue_messages(deps, "execution")
        if isinstance(m["body"], dict) and m["body"].get("run_id") == run_id
    ]


# --------------------------------------------------------------------------- 1. transaction conflicts


def test_a_conflict_on_the_outcome_write_is_retried_and_the_outcome_kept(
    wired: Deps, calls: RecordingTargets
) -> None:
    register(wired, task("job"))
    with conflicts(wired, 3, writes_run_state("succeeded")) as injected:
        assert executor.lambda_handler(sqs_event(fire("job")), Context()) == {"batchItemFailures": []}
    assert injected[0] == 3
    run = run_of(wired)
    assert run.state is RunState.SUCCEEDED and run.lease_expires_at is None
    assert len(calls.calls) == 1
    wired.clock.sleep(600)  # no lease left to expire: the sweeper finds nothing to time out
    assert Sweeper(wired).sweep(scan_dlq=False, ledger=False).leases_expired == []


def test_a_conflict_on_the_task_slot_is_not_read_as_busy(wired: Deps, calls: RecordingTargets) -> None:
    register(wired, task("job", overlap="skip"))

    def claims_the_slot(items: list[dict[str, Any]]) -> bool:
        return any(
            i.get("Update", {}).get("Key", {}).get("pk", {}).get("S") == "slots#task#job" for i in items
        )

    with conflicts(wired, 1, claims_the_slot):
        executor.lambda_handler(sqs_event(fire("job")), Context())
    run = run_of(wired)
    assert run.state is RunState.SUCCEEDED, "overlap: skip skipped a run that nobody was running"
    assert len(calls.calls) == 1


def test_a_conditional_write_that_meets_a_transaction_is_tried_again(wired: Deps) -> None:
    client = wired.store.client
    real = client.put_item
    met = [0]

    def put_item(**kwargs: Any) -> Any:
        if met[0] == 0:
            met[0] += 1
            raise ClientError(
                {"Error": {"Code": "TransactionConflictException", "Message": "ongoing transaction"}},
                "PutItem",
            )
        return real(**kwargs)

    client.put_item = put_item
    try:
        assert wired.store.claim_key("k", wired.clock.now(), timedelta(minutes=1)) is True
    finally:
        client.put_item = real
    assert met[0] == 1 and wired.store.get_key("k") is not None


# --------------------------------------------------------------------------- 2. late is not missed


def test_a_fire_late_in_a_backed_up_queue_is_neither_missed_nor_skipped(
    wired: Deps, clock: ManualClock
) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(wired, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "skip"}))
    Ledger(wired).reconcile(observe_queue(wired))
    clock.set(datetime(2026, 3, 7, 9, 0, tzinfo=UTC))
    wired.queues.send("execution", fire("job"))  # Scheduler delivered it; the executor is behind
    clock.set(datetime(2026, 3, 7, 9, 4, tzinfo=UTC))  # two minutes past the ledger's grace
    report = Ledger(wired).reconcile(observe_queue(wired))
    assert report.missed == [] and report.late == [RUN]
    assert wired.store.get_run(RUN) is None
    drain(wired)  # the queue catches up
    assert run_of(wired).state is RunState.SUCCEEDED
    clock.sleep(60)
    assert RUN not in Ledger(wired).reconcile(observe_queue(wired)).missed
    assert run_of(wired).state is RunState.SUCCEEDED


def test_a_fire_that_never_reached_the_queue_is_missed_once_the_queue_was_seen_quiet(
    wired: Deps, clock: ManualClock
) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(wired, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "skip"}))
    Ledger(wired).reconcile(observe_queue(wired))
    wired.queues.send("execution", fire("other-job-not-registered", "2026-03-07T08:00:00Z"))  # keeps it busy
    clock.set(datetime(2026, 3, 7, 9, 4, tzinfo=UTC))
    assert Ledger(wired).reconcile(observe_queue(wired)).missed == []  # busy queue: no evidence yet
    drain(wired)
    clock.sleep(60)
    report = Ledger(wired).reconcile(observe_queue(wired))  # quiet now, and 09:00 never came
    assert report.missed == [RUN] and report.skipped == [RUN]


# --------------------------------------------------------------------------- 3. slots


def test_cancelling_a_running_run_releases_its_slots(wired: Deps) -> None:
    register(wired, task("a", mutex_group="g"), task("b", mutex_group="g"))
    start_and_crash(wired, "a")
    assert wired.store.get_key("slots#mutex#g")["holders"] == ["a:20260307T090000Z"]  # type: ignore[index]
    RunOps(wired, "ops").cancel("a:20260307T090000Z", "stuck, cancelling")
    assert wired.store.get_key("slots#mutex#g").get("holders", []) == []  # type: ignore[union-attr]
    assert executor.lambda_handler(sqs_event(fire("b")), Context()) == {"batchItemFailures": []}
    assert run_of(wired, "b:20260307T090000Z").state is RunState.SUCCEEDED


def test_skipping_a_buffered_run_releases_the_buffer(wired: Deps) -> None:
    register(wired, task("job", overlap="buffer_one"))
    start_and_crash(wired, "job")
    Executor(wired).process(QueueMessage("m2", json.dumps(fire("job", "2026-03-07T09:05:00Z"))), 300)
    buffered = "job:20260307T090500Z"
    assert wired.store.get_key("slots#buffer#job")["holders"] == [buffered]  # type: ignore[index]
    RunOps(wired, "ops").skip(buffered, "not needed today")
    assert wired.store.get_key("slots#buffer#job").get("holders", []) == []  # type: ignore[union-attr]
    assert run_of(wired, buffered).slots == []


def test_a_slot_holder_past_its_expiry_is_removed_by_the_next_claim(wired: Deps, clock: ManualClock) -> None:
    register(wired, task("a", mutex_group="g", timeout_s=30), task("b", mutex_group="g"))
    start_and_crash(wired, "a")
    # The holder's leaving was lost (as a bug or a hand edit could): its run is gone elsewhere.
    wired.store.client.delete_item(
        TableName=wired.settings.table("runs"), Key={"run_id": {"S": "a:20260307T090000Z"}}
    )
    clock.sleep(30 + 30 + 10 * 60 + 1)  # lease (timeout + grace) + the slot's grace
    assert executor.lambda_handler(sqs_event(fire("b", "2026-03-07T09:15:00Z")), Context()) == {
        "batchItemFailures": []
    }
    assert run_of(wired, "b:20260307T091500Z").state is RunState.SUCCEEDED
    [record] = wired.store.audit_trail("slot#mutex#g")
    assert record.action == "holder-expired" and record.evidence["run_id"] == "a:20260307T090000Z"


# --------------------------------------------------------------------------- 4. waiting


def test_a_waiting_run_keeps_exactly_one_message_through_polls_and_sweeps(
    wired: Deps, clock: ManualClock
) -> None:
    register(wired, task("a", mutex_group="g", timeout_s=270), task("job", mutex_group="g"))
    start_and_crash(wired, "a")  # holds the mutex for its lease: 300 s
    lease_ends = clock.now() + timedelta(seconds=300)
    executor.lambda_handler(sqs_event(fire("job")), Context())
    peak = len(messages_for(wired, RUN))
    for _ in range(16):  # eight minutes: a poll every 30 s, a sweep every minute
        clock.sleep(30)
        if lease_ends is not None and clock.now() > lease_ends:  # a's message comes back
            assert crashed_message_returns(wired, "a") == "lease-expired"
            lease_ends = None
        drain(wired)
        if clock.now().second == 0:
            Sweeper(wired).sweep(scan_dlq=False, ledger=False)
        peak = max(peak, len(messages_for(wired, RUN)))
    assert peak == 1
    run = run_of(wired)
    assert run.state is RunState.SUCCEEDED  # a's lease expired, the poll got the mutex
    trail = [r.action for r in wired.store.audit_trail(f"run#{RUN}")]
    assert trail.count("waiting") == 1  # one record per episode, not per poll
    [started] = [r for r in wired.store.audit_trail(f"run#{RUN}") if r.action == "attempt-started"]
    assert started.evidence["waited"]["polls"] >= 8


def test_waiting_is_bounded_and_ends_in_a_dead_letter_with_one_work_order(
    wired: Deps, clock: ManualClock
) -> None:
    register(
        wired,
        task("a", mutex_group="g", timeout_s=270),
        task("job", mutex_group="g", retry_policy={"extends": "default", "max_wait": "5m"}),
    )
    start_and_crash(wired, "a")  # no sweeper runs here: a keeps the mutex however long it takes
    executor.lambda_handler(sqs_event(fire("job")), Context())
    for _ in range(12):
        clock.sleep(30)
        drain(wired)
    run = run_of(wired)
    assert run.state is RunState.DEAD_LETTERED and run.last_error_code == "WAIT_EXHAUSTED"
    assert messages_for(wired, RUN) == []
    [dead] = [d for t, d in outbox_events(wired) if t == "task.dead_lettered" and d["run_id"] == RUN]
    escalation.lambda_handler(sqs_event(bus_event("task.dead_lettered", dead)), Context())
    escalation.lambda_handler(sqs_event(bus_event("task.dead_lettered", dead)), Context())
    assert len([o for o in wired.store.work_orders() if o.run_id == RUN]) == 1
    assert len([m for m in queue_messages(wired, "dlq") if m["attributes"].get("run_id") == RUN]) == 1


def test_a_redelivered_failed_event_never_sends_a_second_retry(wired: Deps) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    for _ in range(3):
        RetryScheduler(wired).on_failed(RUN, 1)
    assert len(messages_for(wired, RUN)) == 1


# --------------------------------------------------------------------------- 5. the sweeper


def test_a_run_with_a_policy_this_deployment_does_not_know_is_dead_lettered_and_the_sweep_goes_on(
    wired: Deps, clock: ManualClock
) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    register(wired, task("other", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "latest"}))
    Sweeper(wired).sweep(scan_dlq=False)
    clock.set(datetime(2026, 3, 7, 9, 0, tzinfo=UTC))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    # The task names a policy this deployment's bundle does not have (another config accepted it).
    stored = wired.store.get_task("job")
    assert stored is not None
    broken = stored.task.model_copy(update={"retry_policy": "only-in-another-bundle"})
    wired.store.save_task(broken, previous=stored, actor="test", at=clock.now(), action="updated")
    clock.set(datetime(2026, 3, 7, 9, 4, tzinfo=UTC))
    report = Sweeper(wired).sweep(scan_dlq=False)
    assert report.failures == []
    run = run_of(wired)
    assert run.state is RunState.DEAD_LETTERED and run.dead_letter_reason == "unknown_policy"
    assert "only-in-another-bundle" in (run.last_error_message or "")
    assert report.ledger.caught_up == ["other:20260307T090000Z"]  # the ledger still ran


def test_one_item_that_fails_is_counted_and_the_others_go_on(wired: Deps, clock: ManualClock) -> None:
    # A duration SLA keeps a running run in by_state, where the sweeper's lease check reads it.
    watched = {"max_duration": "10m"}
    register(wired, task("a", timeout_s=30, sla=watched), task("b", timeout_s=30, sla=watched))
    start_and_crash(wired, "a")
    start_and_crash(wired, "b")
    clock.sleep(120)
    sweeper = Sweeper(wired)
    real = sweeper.fail_expired

    def fail_expired(run: Any) -> bool:
        if run.task_id == "a":
            raise RuntimeError("a bug that only this run hits")
        return real(run)

    sweeper.fail_expired = fail_expired  # type: ignore[method-assign]
    report = sweeper.sweep(scan_dlq=False)
    assert report.leases_expired == ["b:20260307T090000Z"]
    assert report.failures == [
        {
            "step": "leases",
            "subject": "a:20260307T090000Z",
            "error": "RuntimeError: a bug that only this run hits",
        }
    ]
    assert wired.metrics.counts["task.sweeper.failure_total"] == 1


# --------------------------------------------------------------------------- 7. crash windows


def test_a_crash_after_a_wait_is_recorded_loses_nothing(wired: Deps, clock: ManualClock) -> None:
    register(wired, task("a", mutex_group="g", timeout_s=30), task("job", mutex_group="g"))
    start_and_crash(wired, "a")
    with crashing_at(wired, cp.AFTER_WAIT):
        Executor(wired).process(QueueMessage("m1", json.dumps(fire("job"))), 300)
    assert run_of(wired).waiting and messages_for(wired, RUN) == []  # recorded, never sent
    for minute in range(8):
        clock.sleep(60)
        if minute == 1:  # a's lease has ended: its message comes back
            assert crashed_message_returns(wired, "a") == "lease-expired"
        Sweeper(wired).sweep(scan_dlq=False, ledger=False)
        drain(wired, rounds=3)
    assert run_of(wired).state is RunState.SUCCEEDED


def test_a_lost_carrier_is_sent_again_while_another_message_is_in_flight(
    wired: Deps, clock: ManualClock
) -> None:
    """A crashed invocation keeps its messages in flight for 30 minutes; the queue is not quiet,
    but it is drained, and that is enough to tell a lost carrier (a new token makes any copy stale)."""
    register(wired, task("a", mutex_group="g", timeout_s=30), task("job", mutex_group="g"))
    start_and_crash(wired, "a")
    with crashing_at(wired, cp.AFTER_WAIT):
        Executor(wired).process(QueueMessage("m1", json.dumps(fire("job"))), 300)
    wired.queues.send("execution", fire("a", "2026-03-07T08:00:00Z"))
    receive_event(wired)  # received by an invocation that then dies: in flight for 30 minutes
    clock.sleep(4 * 60)
    report = Sweeper(wired).sweep(scan_dlq=False, ledger=False)
    assert RUN in report.plans_redispatched
    assert [m["body"]["dispatch"] for m in messages_for(wired, RUN)] == [2]


def test_a_crash_after_the_ledger_records_a_catch_up_loses_nothing(wired: Deps, clock: ManualClock) -> None:
    clock.set(datetime(2026, 3, 7, 8, 59, tzinfo=UTC))
    register(wired, task("job", schedule={"cron": "*/5 * * * *"}, catch_up={"policy": "latest"}))
    Sweeper(wired).sweep(scan_dlq=False)
    clock.set(datetime(2026, 3, 7, 9, 4, tzinfo=UTC))
    with crashing_at(wired, cp.AFTER_LEDGER_COMMIT):
        Ledger(wired).reconcile(observe_queue(wired))
    assert run_of(wired).state is RunState.PENDING and messages_for(wired, RUN) == []
    for _ in range(4):
        clock.sleep(60)
        Sweeper(wired).sweep(scan_dlq=False)
        drain(wired)
    run = run_of(wired)
    assert run.state is RunState.SUCCEEDED and run.catch_up


def test_a_crash_after_a_dead_letter_is_recorded_still_puts_it_in_the_dlq_once(wired: Deps) -> None:
    register(
        wired,
        task(
            "job",
            target={"type": "sim", "behavior": {"always_fail": True}},
            retry_policy={"extends": "default", "max_attempts": 1},
        ),
    )
    executor.lambda_handler(sqs_event(fire("job")), Context())
    with crashing_at(wired, cp.AFTER_DEAD_LETTER_COMMIT):
        RetryScheduler(wired).on_failed(RUN, 1)
    assert run_of(wired).state is RunState.DEAD_LETTERED and queue_messages(wired, "dlq") == []
    [dead] = [d for t, d in outbox_events(wired) if t == "task.dead_lettered"]
    escalation.lambda_handler(sqs_event(bus_event("task.dead_lettered", dead)), Context())
    escalation.lambda_handler(sqs_event(bus_event("task.dead_lettered", dead)), Context())
    [message] = queue_messages(wired, "dlq")
    assert run_of(wired).dlq_message_id == message["id"]
    assert len(wired.store.work_orders()) == 1


def test_a_second_dlq_copy_left_by_a_crash_is_removed_by_the_sweeper(wired: Deps, clock: ManualClock) -> None:
    register(
        wired,
        task(
            "job",
            target={"type": "sim", "behavior": {"always_fail": True}},
            retry_policy={"extends": "default", "max_attempts": 1},
        ),
    )
    executor.lambda_handler(sqs_event(fire("job")), Context())
    with crashing_at(wired, cp.AFTER_DLQ_SEND):
        RetryScheduler(wired).on_failed(RUN, 1)  # sent, but its id never recorded
    clock.sleep(6 * 60)  # the send claim has expired when the escalation event comes
    [dead] = [d for t, d in outbox_events(wired) if t == "task.dead_lettered"]
    escalation.lambda_handler(sqs_event(bus_event("task.dead_lettered", dead)), Context())
    assert len(queue_messages(wired, "dlq")) == 2
    [first, second] = [m["id"] for m in queue_messages(wired, "dlq")]
    Sweeper(wired).sweep(ledger=False)
    [kept] = queue_messages(wired, "dlq")
    assert run_of(wired).dlq_message_id == kept["id"]
    # The DLQ's record lists the copy kept, and says the other was deleted.
    records = wired.store.get_dlq_entries([first, second])
    assert {m: e.status.value for m, e in records.items()} == {
        m: "in_dlq" if m == kept["id"] else "deleted" for m in (first, second)
    }


def test_a_crash_after_a_replay_is_recorded_still_starts_it_once(
    wired: Deps, calls: RecordingTargets, clock: ManualClock
) -> None:
    register(
        wired,
        task(
            "job",
            target={"type": "sim", "behavior": {"fail_first": 1}},
            retry_policy={"extends": "default", "max_attempts": 1},
        ),
    )
    executor.lambda_handler(sqs_event(fire("job")), Context())
    RetryScheduler(wired).on_failed(RUN, 1)
    [dlq] = queue_messages(wired, "dlq")
    replay = json.dumps(dlq["body"])
    with crashing_at(wired, cp.AFTER_REPLAY_COMMIT):
        Executor(wired).process(QueueMessage("redriven", replay), 300)
    assert run_of(wired).state is RunState.REPLAYED
    # The moved-back copy (no token) comes back stale: the replay took a token of its own.
    assert Executor(wired).process(QueueMessage("redriven", replay), 300) == "duplicate"
    clock.sleep(4 * 60)
    assert RUN in Sweeper(wired).sweep(scan_dlq=False, ledger=False).plans_redispatched
    drain(wired)
    assert run_of(wired).state is RunState.SUCCEEDED
    assert [(c.run_id, c.attempt) for c in calls.calls] == [(RUN, 1), (RUN, 2)]


def test_a_held_run_that_a_resume_missed_is_sent_by_the_sweeper(wired: Deps, clock: ManualClock) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    RetryScheduler(wired).on_failed(RUN, 1)
    from rebound.ops.tasks import TaskOps

    ops = TaskOps(wired, "test")
    ops.set_state("job", TaskState.PAUSED)
    clock.sleep(125)
    drain(wired)
    assert run_of(wired).held_at is not None
    # Resume, as if its index read did not see the held run yet.
    stored = wired.store.get_task("job")
    assert isinstance(stored, StoredTask)
    wired.store.save_task(
        stored.task.model_copy(update={"state": TaskState.ACTIVE}),
        previous=stored,
        actor="t",
        at=clock.now(),
        action="resumed",
    )
    clock.sleep(180)
    Sweeper(wired).sweep(scan_dlq=False, ledger=False)
    drain(wired)
    assert run_of(wired).state is RunState.SUCCEEDED


def test_tasks_apply_refuses_a_policy_the_environment_does_not_have(deps: Deps) -> None:
    """The CLI's config knows ``quick``; the environment's functions were deployed without it."""
    from rebound.domain.errors import ValidationFailed
    from rebound.ops.tasks import TaskOps

    deps.policies.deployed = ("default", "patient")
    ops = TaskOps(deps, "test")
    with pytest.raises(ValidationFailed) as refused:
        ops.plan([task("job", retry_policy="quick")])
    assert refused.value.details["key_path"] == "retry_policy"
    assert "'quick' is not in environment 'test'" in refused.value.message
    assert "rebound policies set quick" in refused.value.message
    ops.plan([task("job", retry_policy={"extends": "patient", "max_attempts": 4})])  # deployed: fine
    # Stored at run time, the environment knows it.
    deps.policies.set("quick", {"max_attempts": 5}, actor="ops", at=deps.clock.now())
    assert [c.task.id for c in TaskOps(deps, "test").plan([task("job", retry_policy="quick")])] == ["job"]
