"""``rebound targets`` / ``GET /targets``: what an operator sees of the retry budgets per target
during an outage, and after it. Five tasks share one simulated dependency (``sim:db``) that is
down for 30 minutes; the view is read while their runs are held and once the target recovered."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fakes import MemoryWorld, memory_deps
from test_target_budgets import IDS, all_held

from rebound.domain.errors import NotFound, ValidationFailed
from rebound.domain.work_order import WorkOrderState
from rebound.engine.sweeper import Sweeper
from rebound.ops.targets import TargetsOps
from support import START, register, task

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> MemoryWorld:
    world = memory_deps()
    all_held(world)  # five runs of sim:db held, two minutes after the first failures
    register(world.deps, task("other", target={"type": "sim", "name": "cache"}))
    return world


def test_the_listing_shows_the_unhealthy_target_with_its_held_runs_probe_and_work_order(
    world: MemoryWorld,
) -> None:
    [order] = world.store.work_orders(WorkOrderState.OPEN)
    [listed] = [t.as_dict() for t in TargetsOps(world.deps).listing()]
    assert listed["target"] == "sim:db" and listed["health"] == "unhealthy"
    assert listed["held"] == 5 and listed["work_order_id"] == order.work_order_id
    assert listed["unhealthy_for_s"] == 121.0  # tripped at the third failure, two minutes ago
    assert listed["next_probe_in_s"] == 0.0  # probe_every (2m) has passed: the next sweep sends one


def test_show_lists_the_held_runs_of_that_target_only_oldest_first_and_its_history(
    world: MemoryWorld,
) -> None:
    detail = TargetsOps(world.deps).show("sim:db").as_dict()
    held = detail["held_runs"]
    assert sorted(r["task_id"] for r in held) == IDS
    assert [r["held_at"] for r in held] == sorted(r["held_at"] for r in held)
    assert all(r["state"] == "retry_scheduled" for r in held) and not detail["held_truncated"]
    assert detail["history"][-1]["action"] == "target-unhealthy"  # newest first: the trip is the oldest

    two = TargetsOps(world.deps).show("sim:db", at_most=2).as_dict()
    assert len(two["held_runs"]) == 2 and two["held_truncated"]


def test_once_recovered_the_target_leaves_the_listing_and_show_says_healthy(world: MemoryWorld) -> None:
    world.clock.set(START + timedelta(minutes=31))
    for _ in range(12):
        world.clock.advance(60)
        Sweeper(world.deps).sweep(scan_dlq=False, ledger=False)
        while world.queues.messages["execution"]:
            world.clock.set(
                max(world.clock.now(), min(m.visible_at for m in world.queues.messages["execution"]))
            )
            world.deliver()
        world.relay()
    assert TargetsOps(world.deps).listing() == []
    detail = TargetsOps(world.deps).show("sim:db").as_dict()
    assert detail["health"] == "healthy" and detail["held_runs"] == []
    assert detail["history"][0]["action"] == "target-healthy"


def test_an_unknown_or_malformed_target_is_a_clear_error(world: MemoryWorld) -> None:
    with pytest.raises(NotFound, match="sim:cache"):
        TargetsOps(world.deps).show("sim:cache")  # healthy, never failed: no record
    with pytest.raises(ValidationFailed, match="http:<host>") as bad:
        TargetsOps(world.deps).show("db")
    assert bad.value.details["key_path"] == "target"
    with pytest.raises(ValidationFailed, match="at_most"):
        TargetsOps(world.deps).show("sim:db", at_most=0)
