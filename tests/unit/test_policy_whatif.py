"""Policy what-if: known recorded failures replayed under the current and a proposed policy give
known figures (``rebound.domain.prediction.whatif``, through ``PolicyOps.whatif``)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain.errors import ValidationFailed
from rebound.domain.prediction.whatif import DEAD_LETTER_COST_USD, RETRY_COST_USD
from rebound.domain.run import Attempt, AttemptOutcome, Run, RunState, Trigger
from rebound.ops.policies import PolicyOps
from support import START, register, task

pytestmark = pytest.mark.unit


def at(minutes: int) -> datetime:
    return START + timedelta(minutes=minutes)


def attempt(n: int, minute: int, ok: bool) -> Attempt:
    return Attempt(
        n=n,
        started_at=at(minute),
        ended_at=at(minute),
        outcome=AttemptOutcome.SUCCEEDED if ok else AttemptOutcome.FAILED,
        error_code=None if ok else "HTTP_503",
        retryable=None if ok else True,
        duration_ms=0,
    )


def record(world: MemoryWorld, minute: int, state: RunState, *tries: tuple[int, bool]) -> None:
    run = Run(
        run_id=f"feed:{minute}",
        task_id="feed",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=at(minute),
        created_at=at(minute),
        updated_at=at(tries[-1][0]),
        state=state,
        attempt=len(tries),
        attempts=[attempt(n, m, ok) for n, (m, ok) in enumerate(tries, start=1)],
    )
    uow = world.store.unit_of_work("test", at(minute))
    uow.save_run(None, run, action="created")
    uow.commit()


@pytest.fixture
def world() -> MemoryWorld:
    """The target was down from 09:00 to 09:10. Under the default policy (3 attempts, 120 s then
    240 s), the 09:00 run failed at 09:00, 09:02, 09:06 and was dead-lettered; the 09:05 run
    failed at 09:05 and 09:07 and succeeded at 09:11; the 09:15 run succeeded at once."""
    world = memory_deps()
    register(world.deps, task("feed", retry_policy="default"), task("other", retry_policy="quick"))
    record(world, 0, RunState.DEAD_LETTERED, (0, False), (2, False), (6, False))
    record(world, 5, RunState.SUCCEEDED, (5, False), (7, False), (11, True))
    record(world, 15, RunState.SUCCEEDED, (15, True))
    world.clock.set(at(60))
    return world


def test_more_attempts_would_have_recovered_the_dead_letter_at_the_cost_of_one_retry(
    world: MemoryWorld,
) -> None:
    report = PolicyOps(world.deps, "test").whatif("default", {"max_attempts": 5}, since=timedelta(hours=2))

    now, then = report.current, report.proposed
    assert (now.runs, now.recovered, now.dead_lettered, now.retries) == (2, 1, 1, 4)
    assert (now.recovery_p50_s, now.recovery_p99_s) == (360.0, 360.0)
    # With five attempts the 09:00 run's third retry (480 s after 09:06) meets the target up at 09:14.
    assert (then.runs, then.recovered, then.dead_lettered, then.retries) == (2, 2, 0, 5)
    assert (then.recovery_p50_s, then.recovery_p99_s) == (360.0, 840.0)
    assert (now.peak_retries_per_hour, then.peak_retries_per_hour) == (4, 5)
    assert now.retries_per_hour == pytest.approx(4 / 2) and then.retries_per_hour == pytest.approx(5 / 2)
    assert report.added_cost_usd == pytest.approx(RETRY_COST_USD - DEAD_LETTER_COST_USD, abs=1e-9)
    assert report.changes == {"max_attempts": 5}


def test_a_longer_first_wait_skips_the_outage_and_needs_fewer_retries(world: MemoryWorld) -> None:
    report = PolicyOps(world.deps, "test").whatif("default", {"base_delay": "15m", "max_delay": "1h"})
    then = report.proposed
    assert (then.recovered, then.dead_lettered, then.retries) == (2, 0, 2)
    assert then.recovery_p50_s == 900.0 and then.recovery_p99_s == 900.0
    assert report.added_cost_usd < 0


def test_a_policy_no_task_uses_replays_nothing_and_says_so(world: MemoryWorld) -> None:
    report = PolicyOps(world.deps, "test").whatif("critical", {"max_attempts": 5})
    assert report.current.runs == 0 and report.proposed.runs == 0
    assert any("nothing to replay" in note for note in report.notes)


def test_a_bad_proposed_value_is_refused_naming_the_key(world: MemoryWorld) -> None:
    with pytest.raises(Exception, match="max_attempts"):
        PolicyOps(world.deps, "test").whatif("default", {"max_attempts": 0})
    with pytest.raises(ValidationFailed, match="since"):
        PolicyOps(world.deps, "test").whatif("default", {"max_attempts": 5}, since=timedelta(days=90))


def test_a_key_of_the_target_budget_is_set_alone_and_the_others_are_kept(world: MemoryWorld) -> None:
    from rebound.ops.policies import parse_assignments

    ops = PolicyOps(world.deps, "test")
    ops.set(ops.plan("default", parse_assignments(["target_budget.threshold=20"])))
    ops.set(ops.plan("default", parse_assignments(["target_budget.enabled=false"])))
    budget = world.deps.policies.effective("default").target_budget
    assert (budget.threshold, budget.enabled, budget.min_runs) == (20, False, 3)
    with pytest.raises(ValidationFailed, match=r"valid keys: target_budget\.enabled"):
        parse_assignments(["target_budget.tresh=5"])
