"""The store contract, records and queries: tasks and their epoch, runs by id, task and state
(order, ranges, limits), audit trails and subjects, work orders, tenants, policy versions."""

from __future__ import annotations

import pytest
from contract_support import at, create, new_run, new_work_order

from rebound.domain.audit import GENESIS, verify_chain, verify_fields
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import Conflict
from rebound.domain.run import Run, RunState
from rebound.domain.stored import StoredTask
from rebound.domain.task import TaskState, TenantSettings
from rebound.domain.work_order import WorkOrderState
from rebound.engine.ports import Store
from support import START, task

pytestmark = pytest.mark.contract


# ------------------------------------------------------------------------------ tasks
def save(store: Store, stored: StoredTask | None, state: TaskState, when: float) -> StoredTask:
    job = task("job", state=state.value)
    action = "registered" if stored is None else state.value
    return store.save_task(
        job, previous=stored, actor="ops", at=at(when), action=action, schedule_names=("task-job",)
    )


def test_a_task_is_versioned_and_every_save_moves_the_epoch(store: Store) -> None:
    assert store.tasks_epoch() == 0 and store.get_task("job") is None
    first = save(store, None, TaskState.ACTIVE, 0)
    assert (first.version, first.audit_seq, first.active_since, first.paused_at) == (1, 1, START, None)
    assert first.schedule_names == ("task-job",) and first.updated_at == "2026-03-07T09:00:00.000Z"
    assert store.get_task("job") == first and store.tasks_epoch() == 1

    second = save(store, first, TaskState.ACTIVE, 10)
    assert (second.version, second.audit_seq, second.active_since) == (2, 2, START)
    assert store.tasks_epoch() == 2

    with pytest.raises(Conflict) as caught:
        save(store, first, TaskState.ACTIVE, 20)  # an update from a stale read
    assert caught.value.details["failed"] == ["audit task#job #2", "task job"]
    assert store.get_task("job") == second and store.tasks_epoch() == 2
    with pytest.raises(Conflict):
        save(store, None, TaskState.ACTIVE, 20)  # registered twice
    trail = store.audit_trail("task#job")
    assert [r.action for r in trail] == ["registered", "active"]
    assert trail[0].evidence["definition"]["id"] == "job" and verify_chain("task#job", trail).ok


def test_a_pause_and_a_resume_are_dated(store: Store) -> None:
    active = save(store, None, TaskState.ACTIVE, 0)
    paused = save(store, active, TaskState.PAUSED, 60)
    assert (paused.paused_at, paused.active_since) == (at(60), START)
    still = save(store, paused, TaskState.PAUSED, 90)  # saved again while paused: the pause began at 60
    assert still.paused_at == at(60)
    resumed = save(store, still, TaskState.ACTIVE, 120)
    assert (resumed.paused_at, resumed.active_since) == (None, at(120))
    assert store.get_task("job") == resumed


def test_tasks_are_listed_by_id(store: Store) -> None:
    for task_id in ("b", "c", "a"):
        store.save_task(task(task_id), previous=None, actor="ops", at=START, action="registered")
    assert [s.task.id for s in store.list_tasks()] == ["a", "b", "c"]
    assert store.tasks_epoch() == 3


# ------------------------------------------------------------------------------ runs
def test_runs_are_read_by_id_alone_or_in_a_batch(store: Store) -> None:
    for run_id in ("r1", "r2", "r3"):
        create(store, new_run(run_id))
    assert set(store.get_runs(["r1", "nope", "r3", "r1"])) == {"r1", "r3"}
    assert store.get_runs([]) == {}
    assert store.existing_runs(["r1", "nope", "r3", "r1"]) == {"r1", "r3"}
    assert store.existing_runs([f"r{n}" for n in range(250)]) == {"r1", "r2", "r3"}  # past 100 keys
    assert store.existing_runs([]) == set()
    assert store.existing_runs(["r1", "nope", "r2"], consistent=False) == {"r1", "r2"}
    assert store.get_run("nope") is None
    assert sorted(r.run_id for r in store.scan_runs()) == ["r1", "r2", "r3"]


def test_runs_of_a_task_by_fire_time_with_ranges_order_and_limit(store: Store) -> None:
    for n in (2, 0, 4, 1, 3):
        create(store, new_run(f"t{n}", scheduled_for=at(60 * n)))
    create(store, new_run("u0", task_id="u", scheduled_for=at(60)))

    def ids(**kwargs: object) -> list[str]:
        return [r.run_id for r in store.runs_for_task("t", **kwargs)]  # type: ignore[arg-type]

    assert ids() == ["t4", "t3", "t2", "t1", "t0"]
    assert ids(newest_first=False) == ["t0", "t1", "t2", "t3", "t4"]
    assert ids(since=at(60), until=at(180)) == ["t3", "t2", "t1"]  # both ends included
    assert ids(since=at(120)) == ["t4", "t3", "t2"]
    assert ids(until=at(60), newest_first=False) == ["t0", "t1"]
    assert ids(limit=2) == ["t4", "t3"]
    assert ids(limit=2, newest_first=False, since=at(61)) == ["t2", "t3"]
    assert store.runs_for_task("nobody") == []


def test_runs_in_a_state_oldest_update_first_before_a_strict_bound(store: Store) -> None:
    for n in (3, 1, 2):
        create(store, new_run(f"p{n}"), when=at(n))
    done = create(store, new_run("s1"), when=at(0))
    uow = store.unit_of_work("executor", at(5))
    uow.save_run(done, done.model_copy(update={"state": RunState.SKIPPED}), action="skipped")
    uow.commit()

    def ids(state: RunState = RunState.PENDING, **kwargs: object) -> list[str]:
        return [r.run_id for r in store.runs_in_state(state, **kwargs)]  # type: ignore[arg-type]

    assert ids() == ["p1", "p2", "p3"]
    assert ids(updated_before=at(3)) == ["p1", "p2"]  # updated at 3: not before 3
    assert ids(limit=1) == ["p1"]
    assert ids(RunState.SKIPPED) == ["s1"]
    assert ids(RunState.RUNNING) == []


# ------------------------------------------------------------------------------ audit
def test_audit_subjects_and_heads(store: Store) -> None:
    assert store.audit_head("run#r1") == (0, GENESIS) and store.audit_trail("run#r1") == []
    create(store, new_run())
    uow = store.unit_of_work("executor", START)
    uow.append_audit("msg#m1", action="refused")
    uow.commit()
    store.save_task(task("job"), previous=None, actor="ops", at=START, action="registered")
    assert store.audit_subjects() == ["msg#m1", "run#r1", "task#job"]
    [record] = store.audit_trail("msg#m1")
    assert store.audit_head("msg#m1") == (1, record.hash)


@pytest.mark.parametrize("page_size", [None, 2])
def test_audit_segments_hold_every_subject_once_whole_and_in_order(
    store: Store, page_size: int | None
) -> None:
    """Whether a segment comes in one part or in pages of two items (so a trail of two or more
    records spans pages), each subject is in exactly one part of one segment, whole."""
    for n in range(12):
        run = create(store, new_run(f"r{n}"))
        uow = store.unit_of_work("executor", at(n))
        uow.append_audit(f"run#{run.run_id}", action="noted")
        uow.commit()
    store.save_task(task("job"), previous=None, actor="ops", at=START, action="registered")
    parts = [part for n in range(4) for part in store.audit_segment_parts(n, 4, page_size)]
    subjects = [subject for part in parts for subject in part]
    assert sorted(subjects) == store.audit_subjects()  # each subject in exactly one part
    for part in parts:
        for subject, trail in part.items():
            # whole, in sequence order, as stored: each the record's JSON form
            assert [AuditRecord.model_validate(d) for d in trail] == store.audit_trail(subject)
            assert verify_fields(subject, trail, store.audit_keys.check).ok


@pytest.mark.parametrize("page_size", [None, 2])
def test_runs_segments_hold_every_run_once_as_stored(store: Store, page_size: int | None) -> None:
    for n in range(9):
        create(store, new_run(f"r{n}"))
    parts = [part for n in range(3) for part in store.runs_segment_parts(n, 3, page_size)]
    ids = [run_id for part in parts for run_id in part]
    assert sorted(ids) == [f"r{n}" for n in range(9)]  # each run in exactly one part
    runs = store.get_runs(ids)
    for part in parts:
        for run_id, stored in part.items():
            assert Run.model_validate(stored) == runs[run_id]


# ------------------------------------------------------------------------------ work orders
def test_work_orders_by_opening_time_and_state(store: Store) -> None:
    orders = {}
    for n, order_id in ((3, "wo-c"), (1, "wo-a"), (2, "wo-b")):
        uow = store.unit_of_work("escalation", at(n))
        orders[order_id] = uow.save_work_order(None, new_work_order(order_id, at(n)), action="opened")
        uow.commit()
    uow = store.unit_of_work("ops", at(10))
    resolved = orders["wo-b"].model_copy(update={"state": WorkOrderState.RESOLVED})
    uow.save_work_order(orders["wo-b"], resolved, action="resolved")
    uow.commit()
    assert [w.work_order_id for w in store.work_orders()] == ["wo-a", "wo-b", "wo-c"]
    assert [w.work_order_id for w in store.work_orders(WorkOrderState.OPEN)] == ["wo-a", "wo-c"]
    assert [w.work_order_id for w in store.work_orders(WorkOrderState.RESOLVED)] == ["wo-b"]
    assert store.work_orders(WorkOrderState.ACKNOWLEDGED) == []
    assert store.get_work_order("wo-a") == orders["wo-a"] and store.get_work_order("wo-z") is None


# ------------------------------------------------------------------------------ tenants
def test_tenant_settings_are_replaced_and_audited(store: Store) -> None:
    assert store.get_tenant("acme") is None
    store.put_tenant("acme", TenantSettings(max_concurrent_runs=2), actor="ops", at=START)
    store.put_tenant("acme", TenantSettings(max_concurrent_runs=5), actor="ops", at=at(1))
    assert store.get_tenant("acme") == TenantSettings(max_concurrent_runs=5)
    trail = store.audit_trail("tenant#acme")
    assert [r.evidence for r in trail] == [{"max_concurrent_runs": 2}, {"max_concurrent_runs": 5}]


# ------------------------------------------------------------------------------ policies
def add(store: Store, name: str, version: int, max_attempts: int) -> None:
    uow = store.unit_of_work("ops", START)
    uow.add_policy_version(name, version, {"spec": {"max_attempts": max_attempts}, "updated_by": "ops"})
    uow.commit()


def test_policy_versions_are_added_once_and_read_latest_first(store: Store) -> None:
    assert store.latest_policy("quick") is None and store.policy_versions("quick") == []
    add(store, "quick", 1, 4)
    add(store, "quick", 2, 6)
    add(store, "another", 1, 2)
    with pytest.raises(Conflict) as caught:
        add(store, "quick", 2, 9)
    assert caught.value.details["failed"] == ["policy quick v2"]
    v2 = {"name": "quick", "version": 2, "spec": {"max_attempts": 6}, "updated_by": "ops"}
    assert store.latest_policy("quick") == v2
    assert [p["version"] for p in store.policy_versions("quick")] == [1, 2]
    assert store.policy_versions("quick")[-1] == v2
    assert store.stored_policy_names() == ["another", "quick"]


def test_runs_in_a_state_page_back_from_the_latest_change_and_count(store: Store) -> None:
    for n in range(5):
        create(store, new_run(f"p{n}"), when=at(60 * n))
    create(store, new_run("other"), when=at(30))

    pages: list[list[str]] = []
    after = None
    while True:
        page = store.runs_in_state_page(RunState.PENDING, limit=2, after=after)
        pages.append([r.run_id for r in page.runs])
        if page.cursor is None:
            break
        after = page.cursor
    assert pages == [["p4", "p3"], ["p2", "p1"], ["other", "p0"]]
    since = store.runs_in_state_page(RunState.PENDING, since=at(120))
    assert [r.run_id for r in since.runs] == ["p4", "p3", "p2"] and since.cursor is None  # bound included
    assert store.count_runs_in_state(RunState.PENDING) == 6
    assert store.count_runs_in_state(RunState.PENDING, since=at(120)) == 3
    assert store.count_runs_in_state(RunState.RUNNING) == 0
    assert store.runs_in_state_page(RunState.RUNNING).runs == []
