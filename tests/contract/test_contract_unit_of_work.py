"""The store contract, units of work: all or nothing, the labels of failed guards, optimistic locks
on runs and work orders, audit chains that only grow, outbox events with unique ids."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from contract_support import Event, at, create, new_run, new_work_order, running

from rebound.domain.audit import GENESIS, rebuild_run, verify_chain
from rebound.domain.errors import Conflict, OperationalError
from rebound.domain.events import execution_updated
from rebound.domain.run import RunState
from rebound.domain.work_order import WorkOrderState
from rebound.engine.ports import Store
from support import START

pytestmark = pytest.mark.contract

Outbox = Callable[[], list[Event]]


# ------------------------------------------------------------------------------ runs
def test_a_new_run_is_stored_with_its_first_record_and_event(store: Store, outbox: Outbox) -> None:
    saved = create(store, new_run(), when=at(5))
    [record] = store.audit_trail("run#r1")
    assert (saved.audit_seq, saved.audit_head, saved.rev) == (1, record.hash, 1)
    assert saved.updated_at == at(5)
    assert (record.actor, record.action, record.from_state, record.to_state) == (
        "test",
        "created",
        None,
        "pending",
    )
    assert record.prev_hash == GENESIS
    assert store.get_run("r1") == saved
    [event] = outbox()
    assert (event.detail_type, event.subject) == ("task.execution.updated", "run#r1")


def test_a_run_is_created_once(store: Store) -> None:
    create(store, new_run())
    uow = store.unit_of_work("second", START)
    uow.save_run(None, new_run(), action="created")
    with pytest.raises(Conflict) as caught:
        uow.commit()
    assert "runs r1" in caught.value.details["failed"]
    assert [r.actor for r in store.audit_trail("run#r1")] == ["test"]


def test_of_two_writers_from_the_same_run_the_second_loses_and_leaves_no_trace(
    store: Store, outbox: Outbox
) -> None:
    run = create(store, new_run())
    winner = store.unit_of_work("a", at(1))
    winner.save_run(run, running(run), action="claim")
    winner.commit()
    loser = store.unit_of_work("b", at(2))
    loser.save_run(run, run.model_copy(update={"state": RunState.CANCELLED}), action="cancel")
    loser.emit(execution_updated(run, RunState.PENDING, at(2)), "run#r1")
    with pytest.raises(Conflict) as caught:
        loser.commit()
    assert caught.value.details["failed"] == ["audit run#r1 #2", "runs r1"]
    assert [r.actor for r in store.audit_trail("run#r1")] == ["test", "a"]
    assert len(outbox()) == 1
    stored = store.get_run("r1")
    assert stored is not None and stored.state is RunState.RUNNING and stored.rev == 2


def test_a_bookkeeping_write_adds_no_record_but_still_locks_the_run(store: Store) -> None:
    run = create(store, new_run().model_copy(update={"waiting_since": at(0), "wait_reason": "mutex_busy"}))
    uow = store.unit_of_work("poll", at(30))
    touched = uow.touch_run(run, run.model_copy(update={"wait_polls": 1, "dispatch": 1}))
    uow.commit()
    assert (touched.audit_seq, touched.audit_head, touched.rev) == (1, run.audit_head, 2)
    assert touched.updated_at == at(30)
    assert store.get_run("r1") == touched
    assert len(store.audit_trail("run#r1")) == 1

    stale = store.unit_of_work("stale", at(31))  # read before the poll: same audit_seq, older rev
    stale.save_run(run, running(run), action="claim")
    with pytest.raises(Conflict) as caught:
        stale.commit()
    assert caught.value.details["failed"] == ["runs r1"]
    assert len(store.audit_trail("run#r1")) == 1

    with pytest.raises(ValueError, match="cannot change the state"):
        store.unit_of_work("poll", at(32)).touch_run(touched, running(touched))
    idle = create(store, new_run("r2"))  # neither waiting nor reporting: every write of it adds a record
    with pytest.raises(ValueError, match="only a waiting run or a reporting attempt"):
        store.unit_of_work("poll", at(33)).touch_run(idle, idle.model_copy(update={"wait_polls": 1}))


def test_a_run_saved_twice_in_one_unit_keeps_the_first_guard_and_chains_both_records(store: Store) -> None:
    run = create(store, new_run())
    uow = store.unit_of_work("executor", at(1))
    first = uow.save_run(run, run.model_copy(update={"dispatch": 1}), action="released")
    second = uow.save_run(first, running(first), action="claim")
    uow.commit()  # guarded by ``run`` (what is stored), not by ``first`` (never stored)
    trail = store.audit_trail("run#r1")
    assert [(r.seq, r.action) for r in trail] == [(1, "created"), (2, "released"), (3, "claim")]
    assert trail[2].prev_hash == trail[1].hash
    assert (second.audit_seq, second.audit_head) == (3, trail[2].hash)
    assert store.get_run("r1") == second

    stale = store.unit_of_work("executor", at(2))
    created = stale.save_run(None, new_run("r2"), action="created")
    stale.save_run(created, running(created), action="claim")
    stale.save_run(run, run.model_copy(update={"state": RunState.CANCELLED}), action="cancel")
    with pytest.raises(Conflict) as caught:
        stale.commit()
    assert "runs r1" in caught.value.details["failed"]
    assert store.get_run("r2") is None


def test_the_audit_chain_grows_verifies_and_rebuilds_the_run(store: Store) -> None:
    run = create(store, new_run())
    for n, action in enumerate(("claim", "failed"), start=1):
        uow = store.unit_of_work("executor", at(n))
        after = (
            running(run, at(n)) if action == "claim" else run.model_copy(update={"state": RunState.FAILED})
        )
        run = uow.save_run(run, after, action=action, evidence={"n": n})
        uow.commit()
    trail = store.audit_trail("run#r1")
    assert [r.seq for r in trail] == [1, 2, 3]
    assert verify_chain("run#r1", trail).ok
    assert store.audit_head("run#r1") == (3, trail[-1].hash)
    assert rebuild_run("r1", trail) == run.model_copy(update={"rev": 0})
    assert trail[-1].evidence["n"] == 2 and trail[-1].from_state == "running"


def test_one_run_is_claimed_once_by_many_threads(store: Store) -> None:
    run = create(store, new_run())
    won: list[str] = []
    lost: list[str] = []

    def claim(name: str) -> None:
        uow = store.unit_of_work(name, at(1))
        uow.save_run(run, running(run), action="claim")
        try:
            uow.commit()
            won.append(name)
        except Conflict:
            lost.append(name)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(lost) == 5
    assert [r.actor for r in store.audit_trail("run#r1")] == ["test", won[0]]


# ------------------------------------------------------------------------------ work orders
def test_work_orders_are_created_once_and_locked_by_their_audit_sequence(store: Store) -> None:
    uow = store.unit_of_work("escalation", START)
    opened = uow.save_work_order(None, new_work_order(), action="opened")
    uow.commit()
    assert opened.audit_seq == 1 and store.get_work_order("wo-1") == opened

    again = store.unit_of_work("escalation", at(1))
    again.save_work_order(None, new_work_order(), action="opened")
    with pytest.raises(Conflict) as caught:
        again.commit()
    assert "workorders wo-1" in caught.value.details["failed"]

    ack = store.unit_of_work("ops", at(2))
    acked = ack.save_work_order(
        opened, opened.model_copy(update={"state": WorkOrderState.ACKNOWLEDGED}), action="acknowledged"
    )
    ack.commit()
    late = store.unit_of_work("ops", at(3))
    late.save_work_order(
        opened, opened.model_copy(update={"state": WorkOrderState.RESOLVED}), action="resolved"
    )
    with pytest.raises(Conflict) as caught:
        late.commit()
    assert caught.value.details["failed"] == ["audit workorder#wo-1 #2", "workorders wo-1"]
    assert store.get_work_order("wo-1") == acked
    trail = store.audit_trail("workorder#wo-1")
    assert [(r.from_state, r.to_state) for r in trail] == [(None, "open"), ("open", "acknowledged")]
    assert verify_chain("workorder#wo-1", trail).ok


# ------------------------------------------------------------------------------ unowned chains
def test_appending_to_an_unowned_chain_reads_its_head_and_the_chain_guards_itself(store: Store) -> None:
    uow = store.unit_of_work("executor", START)
    first = uow.append_audit("msg#m1", action="refused", evidence={"reason": "invalid"})
    second = uow.append_audit("msg#m1", action="dead-lettered", from_state=None, to_state="dead_lettered")
    uow.commit()
    assert (first.seq, second.seq, second.prev_hash) == (1, 2, first.hash)
    assert store.audit_head("msg#m1") == (2, second.hash)

    third = store.unit_of_work("x", at(1)).append_audit("msg#m1", action="noted")
    assert (third.seq, third.prev_hash) == (3, second.hash)  # read from the store

    racing = store.unit_of_work("y", at(1))
    racing.append_audit("msg#m1", action="noted", head=(1, first.hash))  # an old head: seq 2 exists
    with pytest.raises(Conflict) as caught:
        racing.commit()
    assert caught.value.details["failed"] == ["audit msg#m1 #2"]
    assert verify_chain("msg#m1", store.audit_trail("msg#m1")).ok


# ------------------------------------------------------------------------------ events
def test_each_event_has_a_unique_id_named_in_its_detail(store: Store, outbox: Outbox) -> None:
    uow = store.unit_of_work("test", START)
    saved = uow.save_run(None, new_run(), action="created")
    uow.emit(execution_updated(saved, None, START), "run#r1")
    uow.emit(execution_updated(saved, None, START), "run#r1")
    uow.commit()
    bare = store.unit_of_work("test", at(1))
    bare.emit(execution_updated(saved, None, at(1)), "run#r1")  # no audit record staged: seq 0
    bare.commit()
    events = outbox()
    assert [e.event_id for e in events] == ["run#r1#1#0", "run#r1#1#1", "run#r1#0#0"]
    assert all(e.detail["event_id"] == e.event_id for e in events)
    assert events[0].detail["run_id"] == "r1" and events[0].created_at == "2026-03-07T09:00:00.000Z"

    twice = store.unit_of_work("test", at(2))  # the same id again: the outbox keeps the first
    twice.emit(execution_updated(saved, None, at(2)), "run#r1")
    with pytest.raises(Conflict) as caught:
        twice.commit()
    assert caught.value.details["failed"] == ["event task.execution.updated"]


# ------------------------------------------------------------------------------ all or nothing
def test_a_failed_guard_writes_nothing_at_all(store: Store, outbox: Outbox) -> None:
    run = create(store, new_run())
    setup = store.unit_of_work("ops", START)
    setup.add_policy_version("p", 1, {"spec": {"max_attempts": 2}})
    setup.commit()
    before = outbox()

    uow = store.unit_of_work("executor", at(1))
    claimed = uow.save_run(run, running(run), action="claim")
    uow.emit(execution_updated(claimed, RunState.PENDING, at(1)), "run#r1")
    uow.append_audit("msg#m1", action="refused")
    uow.save_work_order(None, new_work_order(), action="opened")
    uow.enter_slot("slots#mutex#m", 1, "r1", at(60), "slot mutex#m")
    uow.count_streak("sla#t", "r1", "sla streak t")
    uow.add_policy_version("p", 1, {"spec": {"max_attempts": 9}})  # exists: the one failing guard
    with pytest.raises(Conflict) as caught:
        uow.commit()
    assert caught.value.details["failed"] == ["policy p v1"]

    assert store.get_run("r1") == run
    assert len(store.audit_trail("run#r1")) == 1
    assert store.audit_trail("msg#m1") == []
    assert store.get_work_order("wo-1") is None
    assert store.get_key("slots#mutex#m") is None
    assert store.get_key("sla#t") is None
    assert outbox() == before
    assert store.latest_policy("p") == {"name": "p", "version": 1, "spec": {"max_attempts": 2}}


def test_every_failed_guard_is_named_in_staging_order(store: Store) -> None:
    run = create(store, new_run())
    holder = store.unit_of_work("executor", START)
    holder.enter_slot("slots#mutex#m", 1, "other", at(60), "slot mutex#m")
    holder.save_run(run, running(run), action="claim")
    holder.commit()

    uow = store.unit_of_work("executor", at(1))
    uow.save_run(run, running(run), action="claim")  # stale: r1 moved on
    uow.enter_slot("slots#task#t", 1, "r1", at(60), "slot task#t")  # free
    uow.enter_slot("slots#mutex#m", 1, "r1", at(60), "slot mutex#m")  # full
    with pytest.raises(Conflict) as caught:
        uow.commit()
    assert caught.value.details["failed"] == ["audit run#r1 #2", "runs r1", "slot mutex#m"]
    assert store.get_key("slots#task#t") is None


def test_an_empty_unit_of_work_commits_nothing(store: Store, outbox: Outbox) -> None:
    store.unit_of_work("nobody", START).commit()
    assert outbox() == [] and store.audit_subjects() == []


def test_a_unit_of_work_past_the_transaction_limit_is_refused_whole(store: Store) -> None:
    uow = store.unit_of_work("bulk", START)
    for n in range(101):
        uow.append_audit(f"msg#m{n}", action="noted", head=(0, GENESIS))
    with pytest.raises(OperationalError, match="transaction limit"):
        uow.commit()
    assert store.audit_subjects() == []


def test_one_unit_of_work_cannot_change_one_item_twice(store: Store) -> None:
    uow = store.unit_of_work("executor", START)
    uow.enter_slot("slots#task#t", 1, "r1", at(60), "slot task#t")
    uow.leave_slot("slots#task#t", "r1")
    uow.append_audit("msg#m1", action="noted")
    with pytest.raises(OperationalError):
        uow.commit()
    assert store.get_key("slots#task#t") is None and store.audit_trail("msg#m1") == []
