"""``rebound migrate tenancy``: tasks stored before tenancy move to ``<tenant>.<id>``, audited,
idempotent, and never twice on the schedule (``rebound.ops.tenancy``)."""

from __future__ import annotations

import pytest
from fakes import memory_deps

from rebound.api.auth import Caller, Gate
from rebound.domain.errors import Forbidden, OperationalError
from rebound.domain.ids import task_rule_name, task_schedule_name
from rebound.ops.access import TenantAccess, Tenants
from rebound.ops.tenancy import TenancyMigration
from support import register, start_and_crash, task


def legacy_world():  # type: ignore[no-untyped-def]
    world = memory_deps()
    register(
        world.deps,
        task("nightly", mutex_group="db"),
        task("hook", tenant="globex", schedule=None, event={"source": ["billing"]}),
    )
    return world


def test_a_migration_moves_each_task_to_its_tenant_key_with_its_schedules_and_audit() -> None:
    world = legacy_world()
    report = TenancyMigration(world.deps, "root").run()
    assert [(m.old, m.new, m.state) for m in report.moves] == [
        ("hook", "globex.hook", "moved"),
        ("nightly", "acme.nightly", "moved"),
    ]
    store = world.store
    assert store.get_task("nightly") is None and store.get_task("hook") is None
    moved = store.get_task("acme.nightly")
    assert moved is not None and moved.task.mutex_group == "acme.db"
    assert world.schedules.get(task_schedule_name("acme.nightly")) is not None
    assert world.schedules.get(task_schedule_name("nightly")) is None
    bus = world.deps.bus
    assert bus.rules.get(task_rule_name("globex.hook")) is not None  # type: ignore[attr-defined]
    assert bus.rules.get(task_rule_name("hook")) is None  # type: ignore[attr-defined]
    assert store.audit_trail("task#nightly")[-1].action == "migrated"
    assert store.audit_trail("task#nightly")[-1].evidence == {"to": "acme.nightly"}
    [first] = store.audit_trail("task#acme.nightly")
    assert first.action == "migrated" and first.evidence["from"] == "nightly"


def test_a_migration_is_idempotent_and_a_crash_half_way_is_finished_by_the_next_pass() -> None:
    world = legacy_world()
    store = world.store
    real_remove = store.remove_task

    def crash(*args: object, **kwargs: object) -> None:
        raise OperationalError("the process died before the old task was removed")

    store.remove_task = crash  # type: ignore[method-assign]
    with pytest.raises(OperationalError):
        TenancyMigration(world.deps, "root").run()
    store.remove_task = real_remove  # type: ignore[method-assign]
    assert store.get_task("hook") is not None and store.get_task("globex.hook") is not None
    report = TenancyMigration(world.deps, "root").run()
    assert [m.state for m in report.moves] == ["moved", "moved"]
    assert len(store.audit_trail("task#globex.hook")) == 1  # registered once, not twice
    again = TenancyMigration(world.deps, "root").run()
    assert again.moves == [] and again.left == 0
    assert sorted(s.task.id for s in store.list_tasks()) == ["acme.nightly", "globex.hook"]


def test_a_dry_run_changes_nothing() -> None:
    world = legacy_world()
    report = TenancyMigration(world.deps, "root").run(dry_run=True)
    assert [m.state for m in report.moves] == ["would-move", "would-move"]
    assert sorted(s.task.id for s in world.store.list_tasks()) == ["hook", "nightly"]


def test_a_task_whose_runs_are_still_owed_work_waits_for_a_later_pass() -> None:
    world = legacy_world()
    start_and_crash(world.deps, "nightly")  # a run left running under the old key
    report = TenancyMigration(world.deps, "root").run()
    waiting = {m.old: (m.state, m.unfinished) for m in report.moves}
    assert waiting["nightly"] == ("waiting", 1) and report.left == 1
    assert world.store.get_task("nightly") is not None and world.store.get_task("acme.nightly") is None


def test_only_an_administrator_may_migrate_and_a_refusal_is_audited() -> None:
    world = legacy_world()
    gate = Gate(
        Caller("arn:aws:iam::123456789012:user/alice", Tenants(frozenset({"acme"}))), TenantAccess(world.deps)
    )
    with pytest.raises(Forbidden):
        TenancyMigration(world.deps, "alice", guard=gate).run()
    assert world.store.get_task("nightly") is not None
    assert [r.action for r in world.store.audit_trail("tenant#*")] == ["access-refused"]
