"""A run running a clean attempt is not in ``by_state`` (two index writes fewer a clean run):
its own message, kept invisible until the lease ends, finds it if its worker dies, and a run
still running after 10 s is put in the index then, so listings show every run running longer."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from rebound.adapters.dynamo.store import DynamoStore
from rebound.domain.errors import Throttled
from rebound.domain.run import AttemptOutcome, RunState, in_state_index, unlisted_running
from rebound.engine.deps import Deps
from rebound.engine.executor import HOLD_PAST_INVOCATION_S
from rebound.engine.sweeper import Sweeper
from rebound.handlers import executor
from rebound.ops import recovery_view
from rebound.ops.layout import relist_running
from rebound.ops.runs import RunOps
from rebound_local.instrument import CrashPlan, SimulatedCrash
from support import (
    Context,
    delete_done,
    fire,
    outbox_events,
    queue_messages,
    receive_event,
    register,
    task,
    visible_at_ms,
)

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"
TIMEOUT_S = 30
LEASE_S = TIMEOUT_S + 30  # the task's timeout and the lease's grace


def claim_and_die(deps: Deps, left_s: int = 300) -> str:
    """Deliver the fire as the event source mapping does, to an invocation with ``left_s`` to
    run; the worker dies after its claim."""
    deps.queues.send("execution", fire("job"))
    event = receive_event(deps)
    deps.faults = CrashPlan(frozenset({"after_claim"}), 1.0)
    try:
        with pytest.raises(SimulatedCrash):
            executor.lambda_handler(event, Context(remaining_ms=left_s * 1000))
    finally:
        deps.faults = CrashPlan(frozenset(), 0.0)
    return str(event["Records"][0]["messageId"])


def deliver(deps: Deps) -> dict[str, object]:
    event = receive_event(deps)
    assert event["Records"], "nothing was visible on the execution queue"
    response = executor.lambda_handler(event, Context())
    delete_done(deps, event, response)
    return response


@pytest.mark.parametrize("left_s", [300, 100])
def test_a_dead_workers_clean_attempt_is_failed_by_its_own_message_after_its_invocation(
    wired: Deps, left_s: int
) -> None:
    register(wired, task("job", timeout_s=TIMEOUT_S))
    t0 = wired.clock.now()
    message_id = claim_and_die(wired, left_s)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RUNNING and unlisted_running(run)
    assert wired.store.runs_in_state(RunState.RUNNING) == []  # no index entry came and went
    # The batch's messages were kept invisible, with one request, until 21 s after the invocation
    # could end (not the queue's 30 minutes): by then the lease its claim set has run out.
    back_in_s = visible_at_ms(wired, "execution", message_id) / 1000 - t0.timestamp()
    assert back_in_s == pytest.approx(left_s + HOLD_PAST_INVOCATION_S, abs=1)
    assert back_in_s > LEASE_S

    wired.clock.sleep(back_in_s - 5)
    assert receive_event(wired)["Records"] == []  # nothing comes back while the invocation may live
    wired.clock.sleep(7)
    assert deliver(wired) == {"batchItemFailures": []}
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED
    assert run.attempts[-1].outcome is AttemptOutcome.TIMEOUT and run.last_error_code == "TIMEOUT"
    assert in_state_index(run.model_dump(mode="json"))  # failed: listed, so the sweeper sees it
    failed = [d for t, d in outbox_events(wired) if t == "task.execution.failed"]
    assert failed[-1]["retryable"] is True and failed[-1]["outcome"] == "timeout"
    [record] = [r for r in wired.store.audit_trail(f"run#{RUN_ID}") if r.action == "lease-expired"]
    assert record.actor == "executor"
    assert [m for m in queue_messages(wired, "execution") if m["id"] == message_id] == []  # deleted


def test_if_sqs_refuses_to_hold_the_batch_the_claim_keeps_its_own_message_until_the_lease_ends(
    wired: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(wired, task("job", timeout_s=TIMEOUT_S))
    batches = wired.queues.batches()

    def refuse(*_: object, **__: object) -> None:
        raise Throttled("the batch request was throttled")

    monkeypatch.setattr(batches, "set_visibility", refuse)
    monkeypatch.setattr(wired.queues, "batches", lambda: batches)
    t0 = wired.clock.now()
    message_id = claim_and_die(wired)
    back_in_s = visible_at_ms(wired, "execution", message_id) / 1000 - t0.timestamp()
    assert back_in_s == pytest.approx(LEASE_S + 1, abs=1)  # its claim's own request, not 30 minutes
    wired.clock.sleep(LEASE_S + 2)
    assert deliver(wired) == {"batchItemFailures": []}
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.last_error_code == "TIMEOUT"


def test_a_new_runs_clean_claim_commits_its_record_alone_and_whoever_reads_the_run_writes_its_item(
    wired: Deps,
) -> None:
    register(wired, task("job", timeout_s=TIMEOUT_S))
    claim_and_die(wired)
    store = wired.store
    assert isinstance(store, DynamoStore)
    assert store.stored_run(RUN_ID) is None  # no item: the claim wrote its audit record alone
    [record] = store.audit_trail(f"run#{RUN_ID}")
    assert (record.action, record.to_state, record.evidence["created"]) == (
        "attempt-started",
        "running",
        True,
    )
    assert store.existing_runs([RUN_ID]) == {RUN_ID}  # the ledger sees it: no missed fire
    run = store.get_run(RUN_ID)  # rolled forward from the record, its item written now
    assert run is not None and run.state is RunState.RUNNING and (run.rev, run.audit_seq) == (1, 1)
    assert run.attempts[0].started_at == record.at and run.lease_expires_at is not None
    assert store.stored_run(RUN_ID) == run


def test_a_clean_run_writes_its_item_once_at_its_outcome(wired: Deps) -> None:
    register(wired, task("job", timeout_s=TIMEOUT_S))
    wired.queues.send("execution", fire("job"))
    store = wired.store
    assert isinstance(store, DynamoStore)
    writes: list[tuple[str, str]] = []

    def seen(params: dict[str, Any], model: Any, **_: Any) -> None:
        writes.append((model.name, params.get("TableName", "")))

    store.client.meta.events.register("provide-client-params.dynamodb.*", seen)
    try:
        assert deliver(wired) == {"batchItemFailures": []}
    finally:
        store.client.meta.events.unregister("provide-client-params.dynamodb.*", seen)
    runs_table = wired.settings.tables["runs"]
    assert [op for op, table in writes if table == runs_table and op != "GetItem"] == ["PutItem"]
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED
    assert (run.rev, run.audit_seq) == (2, 2)  # two records; the item's first write is its outcome
    assert [r.action for r in wired.store.audit_trail(f"run#{RUN_ID}")] == [
        "attempt-started",
        "attempt-succeeded",
    ]


def test_a_copy_of_the_message_while_the_attempt_runs_comes_back_at_the_lease_end(wired: Deps) -> None:
    register(wired, task("job", timeout_s=TIMEOUT_S))
    claim_and_die(wired)
    t1 = wired.clock.now()
    wired.queues.send("execution", fire("job"))  # a second copy (SQS delivers at least once)
    response = deliver(wired)
    [failed] = response["batchItemFailures"]  # type: ignore[index]
    copy = str(failed["itemIdentifier"])  # type: ignore[index]
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RUNNING and run.attempt == 1  # no second attempt
    back_in_s = visible_at_ms(wired, "execution", copy) / 1000 - t1.timestamp()
    assert LEASE_S - 1 <= back_in_s <= LEASE_S + 2


def run_long(deps: Deps, seconds: float, seen: list[list[str]]) -> None:
    """Deliver the fire; the target takes ``seconds``, and what ``by_state`` lists as running is
    read each second while it runs."""

    ticks = int(seconds)
    for n in range(1, ticks):
        deps.clock.call_at(  # type: ignore[attr-defined]
            deps.clock.now() + timedelta(seconds=n, milliseconds=500),
            lambda: seen.append([r.run_id for r in deps.store.runs_in_state(RunState.RUNNING)]),
        )
    deps.queues.send("execution", fire("job"))
    assert deliver(deps) == {"batchItemFailures": []}


def test_a_clean_attempt_running_longer_than_ten_seconds_is_listed_until_its_outcome(wired: Deps) -> None:
    register(
        wired,
        task("job", timeout_s=TIMEOUT_S, target={"type": "sim", "behavior": {"ok": True, "duration_s": 25}}),
    )
    seen: list[list[str]] = []
    run_long(wired, 25, seen)
    # Unlisted for its first 10 s, listed from then on (its target took 25 s).
    assert seen[:9] == [[]] * 9
    assert seen[10:] == [[RUN_ID]] * 14
    counted = recovery_view.recovery(wired.store, wired.clock.now())["windows"]
    assert counted["hour"]["running"] == 0  # succeeded: out of the index again
    run = wired.store.get_run(RUN_ID)
    assert (
        run is not None
        and run.state is RunState.SUCCEEDED
        and not in_state_index(run.model_dump(mode="json"))
    )
    assert wired.store.runs_in_state(RunState.RUNNING) == []
    assert RunOps(wired, actor="test").find(state=RunState.RUNNING) == []


def test_a_clean_attempt_that_answers_within_ten_seconds_never_enters_the_index(wired: Deps) -> None:
    register(
        wired,
        task("job", timeout_s=TIMEOUT_S, target={"type": "sim", "behavior": {"ok": True, "duration_s": 8}}),
    )
    seen: list[list[str]] = []
    run_long(wired, 8, seen)
    wired.clock.sleep(30)  # the listing's timer was cancelled with the target's answer
    assert seen == [[]] * 7 and wired.store.runs_in_state(RunState.RUNNING) == []
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED


def test_a_run_the_sweeper_must_watch_while_it_runs_stays_listed(wired: Deps) -> None:
    """A duration SLA (judged by the sweeper while the run runs) and a claim long after the fire
    keep a running run in ``by_state``: the sweeper's lease check finds it, as before."""
    register(wired, task("job", timeout_s=TIMEOUT_S, sla={"max_duration": "20s"}))
    claim_and_die(wired)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.watched and not unlisted_running(run)
    assert [r.run_id for r in wired.store.runs_in_state(RunState.RUNNING)] == [RUN_ID]
    wired.clock.sleep(LEASE_S + 1)
    assert Sweeper(wired).sweep(scan_dlq=False).leases_expired == [RUN_ID]


def test_a_clean_attempt_claimed_long_after_its_fire_stays_listed(wired: Deps) -> None:
    register(wired, task("job", timeout_s=TIMEOUT_S))
    wired.clock.sleep(20 * 60)  # the fire arrives 20 minutes late (a backed-up queue)
    claim_and_die(wired)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RUNNING and not unlisted_running(run)
    assert [r.run_id for r in wired.store.runs_in_state(RunState.RUNNING)] == [RUN_ID]


def test_a_clean_attempts_message_that_reached_the_dlq_fails_it_once_the_lease_ends(wired: Deps) -> None:
    """SQS moved the claim's message to the DLQ (it had used up its receives): the DLQ check is
    then what finds the run, as no index lists it; not before its lease ends."""
    register(wired, task("job", timeout_s=TIMEOUT_S))
    claim_and_die(wired)
    poison = json.dumps(fire("job"))
    wired.queues.client.send_message(QueueUrl=wired.settings.queue("dlq").url, MessageBody=poison)
    wired.clock.sleep(1)
    first = Sweeper(wired).sweep(ledger=False)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RUNNING and first.dlq_escalated == []
    wired.clock.sleep(11 * 60)  # past the lease; the next full check reads the DLQ again
    Sweeper(wired).sweep(ledger=False)
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.last_error_code == "TIMEOUT"
    assert run.attempts[0].outcome is AttemptOutcome.TIMEOUT and run.state is not RunState.RUNNING


def test_relisting_before_a_rollback_lets_an_earlier_sweeper_find_a_dead_workers_run(wired: Deps) -> None:
    """``rebound migrate relist-running``: an earlier version finds running runs through
    ``by_state`` alone; relisted, the sweeper's lease check fails the dead worker's run."""
    register(wired, task("job", timeout_s=TIMEOUT_S))
    claim_and_die(wired)
    assert relist_running(wired, dry_run=True).as_dict() == {
        "examined": 1,
        "running_unlisted": 1,
        "relisted": 1,
        "skipped": 0,
        "dry_run": True,
    }
    assert wired.store.runs_in_state(RunState.RUNNING) == []  # a dry run changes nothing
    assert relist_running(wired).changed == 1
    [listed] = wired.store.runs_in_state(RunState.RUNNING)
    assert listed == wired.store.get_run(RUN_ID)  # nothing of the run changed
    again = relist_running(wired)
    assert (again.changed, again.skipped) == (0, 1)  # idempotent
    wired.clock.sleep(LEASE_S + 1)
    assert Sweeper(wired).sweep(scan_dlq=False, ledger=False).leases_expired == [RUN_ID]
