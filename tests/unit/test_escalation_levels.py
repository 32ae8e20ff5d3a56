"""Escalation levels 1-4 (``rebound.domain.escalation_levels``): derived from severity, dead letters
and acknowledgement age; recorded and audited on every work order, raised by the sweeper as time
passes, carried on the notifications, and filtered on by ``workorders list --level``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fakes import MemoryWorld, memory_deps
from test_engine_in_memory import RUN

from rebound.domain.basics import Severity
from rebound.domain.escalation_levels import ACK_TARGETS, INCIDENT_FACTOR, derive_level, level_of
from rebound.domain.restore import work_order_from_chain
from rebound.domain.work_order import WorkOrder, WorkOrderState
from rebound.engine.levels import ACTION
from rebound.engine.sweeper import Sweeper
from rebound.ops.workorders import WorkOrderOps, work_order_view
from support import START, fire, register, task

pytestmark = pytest.mark.unit


def order(severity: Severity, **fields: object) -> WorkOrder:
    return WorkOrder.model_validate(
        {"work_order_id": "wo-1", "subject": "run#r", "reason": "dead_lettered", "opened_at": START}
        | {"severity": severity}
        | fields
    )


@pytest.mark.parametrize(
    ("severity", "level"),
    [(Severity.LOW, 1), (Severity.MEDIUM, 2), (Severity.HIGH, 2), (Severity.CRITICAL, 3)],
)
def test_a_new_order_starts_at_the_level_of_its_severity(severity: Severity, level: int) -> None:
    assert derive_level(order(severity), START) == level


@pytest.mark.parametrize(
    ("severity", "just_past_target", "past_incident"),
    [(Severity.LOW, 2, 2), (Severity.MEDIUM, 3, 4), (Severity.HIGH, 3, 4), (Severity.CRITICAL, 4, 4)],
)
def test_an_unacknowledged_order_rises_past_its_target_and_to_an_incident_past_four_times_it(
    severity: Severity, just_past_target: int, past_incident: int
) -> None:
    target = ACK_TARGETS[severity]
    o = order(severity)
    assert derive_level(o, START + target) == derive_level(o, START), "at the target exactly: not yet"
    assert derive_level(o, START + target + timedelta(seconds=1)) == just_past_target
    assert derive_level(o, START + target * INCIDENT_FACTOR + timedelta(seconds=1)) == past_incident


def test_acknowledging_stops_the_rise_and_a_third_dead_letter_is_an_incident() -> None:
    acked = order(Severity.HIGH, state="acknowledged", acknowledged_at=START + timedelta(minutes=1))
    assert derive_level(acked, START + timedelta(days=2)) == 2
    flapping = order(Severity.HIGH, occurrences=["a"])
    assert derive_level(flapping, START) == 2
    assert derive_level(order(Severity.HIGH, occurrences=["a", "b"]), START) == 4
    assert derive_level(order(Severity.LOW, occurrences=["a", "b"]), START) == 1, "low stays low"


@pytest.fixture
def world() -> MemoryWorld:
    world = memory_deps()
    register(
        world.deps,
        task(
            "job", target={"type": "sim", "behavior": {"always_fail": True}}, retry_policy={"max_attempts": 1}
        ),
    )
    assert world.execute(fire("job")) == "failed"
    assert world.relay() == ["dead-lettered"]
    world.relay()
    return world


def the_order(world: MemoryWorld) -> WorkOrder:
    [found] = [o for o in world.store.work_orders() if o.run_id == RUN]
    return found


def test_a_work_order_records_its_level_when_it_opens_and_the_notification_carries_it(
    world: MemoryWorld,
) -> None:
    opened = the_order(world)
    assert opened.severity is Severity.HIGH and opened.level == 2
    trail = world.store.audit_trail(f"workorder#{opened.work_order_id}")
    assert trail[0].evidence["changes"]["level"] == 2
    assert work_order_from_chain(trail)["level"] == 2, "the chain says the level"
    [note] = world.channel.sent
    assert note.body()["level"] == 2 and " L2:" in note.subject


def test_the_sweeper_raises_an_unacknowledged_order_once_with_an_audit_record(world: MemoryWorld) -> None:
    opened = the_order(world)
    subject = f"workorder#{opened.work_order_id}"
    world.clock.advance(ACK_TARGETS[Severity.HIGH].total_seconds() + 60)
    assert Sweeper(world.deps).sweep(scan_dlq=False, ledger=False).levels_raised == [opened.work_order_id]
    assert the_order(world).level == 3
    raised = world.store.audit_trail(subject)[-1]
    assert raised.action == ACTION and raised.evidence["from"] == 2 and raised.evidence["to"] == 3
    assert raised.evidence["changes"]["level"] == 3
    assert Sweeper(world.deps).sweep(scan_dlq=False, ledger=False).levels_raised == [], "once"
    WorkOrderOps(world.deps, "oncall").ack(opened.work_order_id, "looking")
    world.clock.advance(timedelta(days=1).total_seconds())
    Sweeper(world.deps).sweep(scan_dlq=False, ledger=False)
    assert the_order(world).level == 3, "an acknowledged order stops rising"


def test_workorders_list_filters_by_level_and_an_order_without_one_reads_as_derived(
    world: MemoryWorld,
) -> None:
    opened = the_order(world)
    ops = WorkOrderOps(world.deps, "reader")
    assert [o.work_order_id for o in ops.find(level=2)] == [opened.work_order_id]
    assert ops.find(level=3) == []
    # an order written before levels were recorded: no level on the item
    del world.store._tables["workorders"][opened.work_order_id]["level"]
    legacy = the_order(world)
    assert legacy.level is None
    world.clock.advance(ACK_TARGETS[Severity.HIGH].total_seconds() + 60)
    now = world.clock.now()
    assert level_of(legacy, now) == 3
    assert [o.work_order_id for o in ops.find(level=3, state=WorkOrderState.OPEN)] == [opened.work_order_id]
    assert work_order_view(legacy, now)["level"] == 3
    assert ops.show(opened.work_order_id).as_dict()["level"] == 3
