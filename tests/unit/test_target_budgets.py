"""Retry budgets per target, on the engine's real paths with in-memory ports.

Five tasks share one simulated dependency (``name: db``) that is down for the first 30 minutes.
With a budget, the failures past the threshold are held (no attempt counted), one work order is
opened for the target, a probe goes out every ``probe_every``, and once one succeeds the held runs
are released at most ``release_per_minute`` a minute; the work order then resolves itself."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain import target_budget as tb
from rebound.domain.ids import run_subject
from rebound.domain.retry_policy import TargetBudget
from rebound.domain.run import RunState
from rebound.domain.work_order import WorkOrderState
from rebound.engine.sweeper import Sweeper
from rebound.engine.target_budgets import INDEX_KEY, TargetBudgets, held_by_target
from support import START, crashed_message_returns, fire, register, start_and_crash, task

pytestmark = pytest.mark.unit

BUDGET = {"threshold": 3, "min_runs": 2, "window": "5m", "probe_every": "2m", "release_per_minute": 2}
IDS = ["a", "b", "c", "d", "e"]


def run_id(task_id: str) -> str:
    return f"{task_id}:20260307T090000Z"


def shared_outage(world: MemoryWorld, budget: dict[str, Any] | None = None, **policy: Any) -> None:
    register(
        world.deps,
        *(
            task(
                i,
                target={"type": "sim", "name": "db", "behavior": {"outage": {"after": 0, "for": "30m"}}},
                retry_policy={"target_budget": budget or BUDGET, **policy},
            )
            for i in IDS
        ),
    )


def all_held(world: MemoryWorld) -> None:
    """Every task's first run fails inside the outage; the first two, retried before the target
    tripped, fail again: all five are held."""
    shared_outage(world)
    for i in IDS:
        world.execute(fire(i), message_id=f"m-{i}")
    world.relay()
    world.clock.advance(121)
    world.deliver()
    world.relay()
    assert all(held_by_target(run) for run in runs(world).values())


def sweep(world: MemoryWorld) -> Any:
    return Sweeper(world.deps).sweep(scan_dlq=False, ledger=False)


def runs(world: MemoryWorld) -> dict[str, Any]:
    return {i: world.store.get_run(run_id(i)) for i in IDS}


def due_now(world: MemoryWorld) -> None:
    """Move the clock to when the next message on the execution queue becomes visible."""
    world.clock.set(max(world.clock.now(), min(m.visible_at for m in world.queues.messages["execution"])))


@pytest.fixture
def world() -> MemoryWorld:
    """Every event reaches the outbox: these tests watch ``task.execution.waiting``, which no rule
    of the stack consumes."""
    return memory_deps(publish_events=("*",))


def test_failures_past_the_threshold_hold_the_runs_and_open_exactly_one_work_order(
    world: MemoryWorld,
) -> None:
    shared_outage(world)
    for i in IDS:
        assert world.execute(fire(i), message_id=f"m-{i}") == "failed"
    # The first two failures are retried as usual; the third trips the target; then all are held.
    assert world.relay() == ["retry-scheduled", "retry-scheduled", "held", "held", "held"]

    [order] = world.store.work_orders(WorkOrderState.OPEN)
    assert order.subject == "target#sim:db#1" and order.reason == "target_unhealthy"
    assert order.runbook_url is not None and order.runbook_url.endswith("target-unhealthy.md")
    assert order.deliveries == []  # the sweeper notifies it, within a minute
    state, _ = TargetBudgets(world.deps, "test").read("sim:db")
    assert state.health is tb.Health.UNHEALTHY and state.work_order_id == order.work_order_id

    held = runs(world)["c"]
    assert held.state is RunState.RETRY_SCHEDULED and held_by_target(held)
    assert held.wait_reason == "target-unhealthy" and held.next_retry_at is None
    assert held.attempt == 1 and held.attempts_in_budget == 0  # the failed attempt is not counted
    assert [r.action for r in world.store.audit_trail(run_subject(held.run_id))][-1] == "held"
    assert "task.execution.waiting" in world.detail_types(run_subject(held.run_id))

    # The two runs retried before the trip fail again and are held too: still one work order.
    world.clock.advance(121)
    assert world.deliver() == ["failed", "failed"]
    assert world.relay() == ["held", "held"]
    assert len(world.store.work_orders()) == 1
    sweep(world)
    sweep(world)  # a second sweep does not notify again
    [order] = world.store.work_orders(WorkOrderState.OPEN)
    assert [d.channel for d in order.deliveries] == ["inbox"] and len(world.channel.sent) == 1
    assert world.metrics.counts["task.target.tripped_total"] == 1
    assert world.metrics.counts["task.target.held_total"] == 5


def test_probes_go_out_until_one_succeeds_then_held_runs_are_released_at_the_rate_and_the_order_resolves(
    world: MemoryWorld,
) -> None:
    all_held(world)

    # Inside the outage: every probe fails and is held again; nothing else is let through.
    probes = 0
    while world.clock.now() < START + timedelta(minutes=30):
        world.clock.advance(1 * 60)
        report = sweep(world)
        assert report.targets.released == []
        probes += len(report.targets.probes)
        assert len(world.deliver()) == len(report.targets.probes)
        world.relay()
    assert 5 <= probes <= 15
    assert all(r.state is RunState.RETRY_SCHEDULED for r in runs(world).values())

    # After it: the next probe succeeds, the target recovers, the rest are released two a minute.
    released: list[list[str]] = []
    for _ in range(10):
        world.clock.advance(1 * 60)
        report = sweep(world)
        released.append(report.targets.released)
        while world.queues.messages["execution"]:
            due_now(world)
            world.deliver()
        world.relay()
    assert all(len(batch) <= 2 for batch in released)
    assert sum(len(batch) for batch in released) == 4
    assert all(r.state is RunState.SUCCEEDED for r in runs(world).values())
    assert world.queues.messages["dlq"] == []

    [order] = world.store.work_orders()
    assert order.state is WorkOrderState.RESOLVED and order.resolved_by == "sweeper"
    assert order.resolve_reason is not None and "sim:db recovered" in order.resolve_reason
    state, _ = TargetBudgets(world.deps, "test").read("sim:db")
    assert state.health is tb.Health.HEALTHY
    assert (world.store.get_key(INDEX_KEY) or {}).get("body") == '{"targets":[]}'
    # No run spent more than its budget: forgiven attempts are not counted.
    assert all(r.attempts_in_budget <= 3 for r in runs(world).values())


def test_released_runs_are_spread_over_the_minute(world: MemoryWorld) -> None:
    shared_outage(world, {**BUDGET, "release_per_minute": 4})
    for i in IDS:
        world.execute(fire(i), message_id=f"m-{i}")
    world.relay()
    world.clock.advance(121)
    assert world.deliver() == ["failed", "failed"]
    assert world.relay() == ["held", "held"]
    world.clock.set(START + timedelta(minutes=31))
    assert len(sweep(world).targets.probes) == 1
    assert world.deliver() == ["succeeded"]
    world.clock.advance(60)
    report = sweep(world)
    assert report.targets.recovered == ["sim:db"] and len(report.targets.released) == 4
    due = sorted(m.visible_at for m in world.queues.messages["execution"])
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(due)] == [15.0, 15.0, 15.0]


def test_without_a_budget_every_run_dead_letters(world: MemoryWorld) -> None:
    shared_outage(world, {**BUDGET, "enabled": False}, max_attempts=2)
    for i in IDS:
        world.execute(fire(i), message_id=f"m-{i}")
    assert world.relay() == ["retry-scheduled"] * 5
    world.clock.advance(121)
    world.deliver()
    assert world.relay() == ["dead-lettered"] * 5
    assert world.store.get_key(INDEX_KEY) is None


def test_a_run_held_longer_than_max_hold_is_dead_lettered_with_target_unhealthy(world: MemoryWorld) -> None:
    shared_outage(world, {**BUDGET, "max_hold": "10m", "probe_every": "1h"})
    for i in IDS:
        world.execute(fire(i), message_id=f"m-{i}")
    world.relay()
    world.clock.advance(11 * 60)
    report = sweep(world)
    assert sorted(report.targets.dead_lettered) == [run_id("c"), run_id("d"), run_id("e")]
    dead = runs(world)["c"]
    assert dead.state is RunState.DEAD_LETTERED and dead.last_error_code == "TARGET_UNHEALTHY"
    assert dead.dead_letter_reason == "target_unhealthy_too_long"


def test_a_terminal_error_is_not_counted_against_the_target(world: MemoryWorld) -> None:
    register(
        world.deps,
        *(
            task(
                i,
                target={"type": "sim", "name": "db", "behavior": {"terminal_error": "BAD_INPUT"}},
                retry_policy={"target_budget": BUDGET},
            )
            for i in IDS
        ),
    )
    for i in IDS:
        world.execute(fire(i), message_id=f"m-{i}")
    assert world.relay() == ["dead-lettered"] * 5
    assert world.store.get_key("target#sim:db") is None


def died(world: MemoryWorld, task_id: str) -> None:
    """``task_id``'s run: claimed, its worker dead before the target was called, its lease over
    and its message back: the attempt failed with ``TIMEOUT``."""
    start_and_crash(world.deps, task_id)
    world.clock.advance(30 + 30 + 1)  # the lease: the timeout and its grace
    assert crashed_message_returns(world.deps, task_id) == "lease-expired"


def test_workers_that_died_do_not_trip_a_healthy_target(world: MemoryWorld) -> None:
    """Five runs whose workers died (a crash says nothing of the target): each is retried as its
    policy says, and the target counts none of them (no record is even written)."""
    register(
        world.deps,
        *(
            task(
                i, timeout_s=30, target={"type": "sim", "name": "db"}, retry_policy={"target_budget": BUDGET}
            )
            for i in IDS
        ),
    )
    for i in IDS:
        died(world, i)
    assert world.relay() == ["retry-scheduled"] * 5
    assert world.store.get_key("target#sim:db") is None
    assert world.store.work_orders() == []


def test_a_run_whose_worker_died_is_held_while_its_target_is_unhealthy(world: MemoryWorld) -> None:
    all_held(world)
    register(
        world.deps,
        task("f", timeout_s=30, target={"type": "sim", "name": "db"}, retry_policy={"target_budget": BUDGET}),
    )
    died(world, "f")
    assert world.relay() == ["held"]
    assert held_by_target(world.store.get_run(run_id("f")))
    assert len(world.store.work_orders()) == 1


def test_held_runs_an_operator_cancels_leave_nothing_held_and_the_target_closes(world: MemoryWorld) -> None:
    """A probe and every held run cancelled by hand: the target has nothing to probe or release,
    so it is taken for recovered and closed, its work order resolved, not left open forever."""
    from rebound.domain.states import closed

    all_held(world)
    world.clock.advance(60)
    [probe] = sweep(world).targets.probes
    for run in runs(world).values():
        uow = world.store.unit_of_work("operator", world.clock.now())
        uow.save_run(run, closed(run, RunState.CANCELLED, world.clock.now()), action="cancelled")
        uow.commit()
    world.queues.messages["execution"].clear()
    closed = [t for _ in range(10) for t in (world.clock.advance(60), sweep(world).targets.closed)[1]]
    assert closed == ["sim:db"]
    [order] = world.store.work_orders()
    assert order.state is WorkOrderState.RESOLVED
    assert world.store.get_run(probe).state is RunState.CANCELLED


# ------------------------------------------------------------------------------- the rules alone
RULES = TargetBudget(threshold=3, min_runs=2, window=300, probe_every=120, release_per_minute=2)


def failures(*at_run: tuple[int, str]) -> tuple[tb.TargetState, list[tb.Verdict]]:
    state, verdicts = tb.TargetState(target="sim:db"), []
    for seconds, run in at_run:
        state, verdict = tb.record_failure(state, run, START + timedelta(seconds=seconds), RULES)
        verdicts.append(verdict)
    return state, verdicts


def test_failures_older_than_the_window_do_not_count() -> None:
    _, verdicts = failures((0, "r1"), (100, "r2"), (400, "r3"))
    assert verdicts == [tb.Verdict.RETRY] * 3  # the first fell out of the 5-minute window


def test_the_failures_of_one_run_alone_never_trip_the_target() -> None:
    _, verdicts = failures((0, "r1"), (10, "r1"), (20, "r1"), (30, "r1"))
    assert verdicts == [tb.Verdict.RETRY] * 4
    state, verdicts = failures((0, "r1"), (10, "r1"), (20, "r2"))
    assert verdicts[-1] is tb.Verdict.TRIP and state.episode == 1 and len(state.failures) == 3


def test_a_probe_that_fails_clears_the_probe_and_a_recovering_target_trips_into_the_same_episode() -> None:
    state, _ = failures((0, "r1"), (10, "r2"), (20, "r3"))
    probing = tb.take_probe(state, "r2", START + timedelta(minutes=3), RULES)
    after, verdict = tb.record_failure(probing, "r2", START + timedelta(minutes=4), RULES)
    assert verdict is tb.Verdict.HOLD and after.probe_run is None and after.probes == 1
    recovering = tb.recovered(after, START + timedelta(minutes=5))
    for n, run in enumerate(["r4", "r5", "r6"]):
        recovering, verdict = tb.record_failure(
            recovering, run, START + timedelta(minutes=6, seconds=n), RULES
        )
    assert verdict is tb.Verdict.TRIP and recovering.episode == 1


def test_releases_are_counted_per_minute() -> None:
    state = tb.TargetState(target="sim:db", health=tb.Health.RECOVERING)
    now = START + timedelta(seconds=10)
    assert tb.releases_left(state, now, RULES) == 2
    state = tb.take_releases(state, 2, now)
    assert tb.releases_left(state, now + timedelta(seconds=30), RULES) == 0
    assert tb.releases_left(state, now + timedelta(seconds=60), RULES) == 2


def test_a_target_is_named_by_host_function_or_sim_name() -> None:
    assert tb.target_identity(task("a", target={"type": "http", "url": "https://Api.Example.com/x"})) == (
        "http:api.example.com"
    )
    fn = "arn:aws:lambda:eu-west-1:123456789012:function:billing:live"
    assert tb.target_identity(task("a", target={"type": "lambda", "function": fn})) == "lambda:billing"
    assert tb.target_identity(task("a", target={"type": "sim", "name": "db"})) == "sim:db"
    assert tb.target_identity(task("a")) == "sim:a"


def test_min_runs_above_the_threshold_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match=r"min_runs \(5\) must not exceed threshold \(3\)"):
        TargetBudget(threshold=3, min_runs=5)
