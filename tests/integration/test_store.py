"""DynamoDB store: a state change, its audit record and its events commit together or not at all."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rebound.domain.audit import rebuild_run, verify_chain
from rebound.domain.errors import Conflict
from rebound.domain.events import execution_updated
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.retry_scheduler import RetryScheduler
from support import fire, new_run, outbox_events, register, task

pytestmark = pytest.mark.integration


def test_a_losing_writer_leaves_no_audit_record_and_no_event(deps: Deps, every_event: None) -> None:
    run = new_run(deps)
    winner = deps.store.unit_of_work("a", deps.clock.now())
    winner.save_run(run, run.model_copy(update={"state": RunState.RUNNING}), action="claim")
    winner.commit()
    loser = deps.store.unit_of_work("b", deps.clock.now())
    loser.save_run(run, run.model_copy(update={"state": RunState.CANCELLED}), action="cancel")
    loser.emit(execution_updated(run, RunState.PENDING, deps.clock.now()), "run#r1")
    with pytest.raises(Conflict):
        loser.commit()
    assert [r.actor for r in deps.store.audit_trail("run#r1")] == ["test", "a"]
    assert len(outbox_events(deps)) == 1
    stored = deps.store.get_run("r1")
    assert stored is not None and stored.state is RunState.RUNNING


def test_nobody_can_overwrite_an_audit_record(deps: Deps) -> None:
    new_run(deps)
    [record] = deps.store.audit_trail("run#r1")
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        deps.store.client.put_item(
            TableName=deps.settings.table("audit"),
            Item={"subject": {"S": "run#r1"}, "seq": {"N": "1"}, "doc": {"S": "{}"}},
            ConditionExpression="attribute_not_exists(subject)",
        )
    assert deps.store.audit_trail("run#r1") == [record]


def test_a_run_rebuilt_from_its_trail_equals_the_stored_run(deps: Deps) -> None:
    register(deps, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    executor = Executor(deps)
    executor.process(QueueMessage("m1", json.dumps(fire("job"))), 120)
    RetryScheduler(deps).on_failed("job:20260307T090000Z", 1)
    deps.clock.sleep(120)
    executor.process(
        QueueMessage(
            "m2", json.dumps({"v": 1, "kind": "attempt", "run_id": "job:20260307T090000Z", "attempt": 2})
        ),
        120,
    )
    stored = deps.store.get_run("job:20260307T090000Z")
    assert stored is not None and stored.state is RunState.SUCCEEDED
    trail = deps.store.audit_trail("run#job:20260307T090000Z")
    assert verify_chain("run", trail).ok
    # Everything but the store's write counter, which no record carries.
    assert rebuild_run(stored.run_id, trail) == stored.model_copy(update={"rev": 0})


def test_the_chain_head_on_the_run_matches_its_last_record(deps: Deps) -> None:
    run = new_run(deps)
    trail = deps.store.audit_trail("run#r1")
    assert (run.audit_seq, run.audit_head) == (trail[-1].seq, trail[-1].hash)


def test_items_keep_only_key_index_and_condition_attributes_at_the_top(deps: Deps) -> None:
    new_run(deps)
    item = deps.store.client.get_item(TableName=deps.settings.table("runs"), Key={"run_id": {"S": "r1"}})[
        "Item"
    ]
    assert set(item) == {
        "run_id",
        "task_id",
        "scheduled_for",
        "state",
        "updated_at",
        "audit_seq",
        "rev",
        "doc",
    }


def test_a_commit_that_fails_for_another_reason_is_an_operational_error_and_a_metric(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rebound.domain.errors import OperationalError

    def refuse(**_: object) -> None:
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "boom"}}, "TransactWriteItems")

    monkeypatch.setattr(deps.store.client, "transact_write_items", refuse)
    monkeypatch.setattr(deps.store.client, "put_item", refuse)  # a run's change alone: no transaction
    with pytest.raises(OperationalError, match="InternalServerError"):
        new_run(deps)
    assert deps.metrics.counts["task.audit.failure_total"] == 1  # type: ignore[attr-defined]


def test_a_task_read_again_unchanged_is_not_parsed_again_and_a_changed_one_is(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rebound.domain.stored import StoredTask

    register(deps, task("job"))
    parsed: list[str] = []
    original = StoredTask.from_record.__func__  # type: ignore[attr-defined]

    def counting(cls: type[StoredTask], data: dict[str, object]) -> StoredTask:
        parsed.append(str(data["task_id"]))
        result: StoredTask = original(cls, data)
        return result

    monkeypatch.setattr(StoredTask, "from_record", classmethod(counting))
    first, again = deps.store.get_task("job"), deps.store.get_task("job")
    assert first is not None and again == first and parsed == ["job"]
    register(deps, task("job", timeout_s=45))  # a new version of the item
    changed = deps.store.get_task("job")
    assert changed is not None and changed.task.timeout_s == 45 and changed.version > first.version
    assert parsed == ["job", "job"]
    assert deps.store.get_task("nope") is None


def test_a_unit_of_work_of_one_write_is_that_write_alone_and_of_two_a_transaction(deps: Deps) -> None:
    # DynamoDB bills each item of a transaction twice: one item goes as its own conditional write,
    # with the same condition, the same Conflict naming it, and contention tried again.
    client = deps.store.client
    sent: list[str] = []
    contended = [1]
    real = {name: getattr(client, name) for name in ("update_item", "transact_write_items")}

    def recording(name: str) -> Any:
        def call(**kwargs: Any) -> Any:
            sent.append(name)
            if name == "update_item" and contended[0]:
                contended[0] -= 1
                raise ClientError(
                    {"Error": {"Code": "TransactionConflictException", "Message": "in flight"}}, "UpdateItem"
                )
            return real[name](**kwargs)

        return call

    for name in real:
        setattr(client, name, recording(name))
    try:
        one = deps.store.unit_of_work("executor", deps.clock.now())
        one.enter_slot("slots#task#t", 1, "r1", deps.clock.now(), "slot task#t")
        one.commit()
        assert sent == ["update_item", "update_item"], "contention on the single write is tried again"
        assert (deps.store.get_key("slots#task#t") or {})["holders"] == ["r1"]

        full = deps.store.unit_of_work("executor", deps.clock.now())
        full.enter_slot("slots#task#t", 1, "r2", deps.clock.now(), "slot task#t")
        with pytest.raises(Conflict) as caught:
            full.commit()
        assert caught.value.details["failed"] == ["slot task#t"]

        sent.clear()
        two = deps.store.unit_of_work("executor", deps.clock.now())
        two.enter_slot("slots#task#u", 1, "r3", deps.clock.now(), "slot task#u")
        two.enter_slot("slots#task#v", 1, "r3", deps.clock.now(), "slot task#v")
        two.commit()
        assert sent == ["transact_write_items"]
    finally:
        for name, call in real.items():
            setattr(client, name, call)
    assert (deps.store.get_key("slots#task#t") or {})["holders"] == ["r1"]
