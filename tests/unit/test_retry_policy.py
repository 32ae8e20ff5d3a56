"""Retry policy behaviour: delays, budgets, terminal errors, age."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from rebound.domain.backoff import JitterMode
from rebound.domain.retry import Reason, capped_delay, decide_retry, delay_for_attempt, jitter_rng
from rebound.domain.retry_policy import RetryPolicy
from rebound.domain.run import Attempt, AttemptOutcome, Run, Trigger

pytestmark = pytest.mark.unit
T0 = datetime(2026, 3, 7, 9, tzinfo=UTC)


def policy(**kw: object) -> RetryPolicy:
    base: dict[str, object] = {"max_attempts": 3, "base_delay": 120, "multiplier": 2, "max_delay": 3600}
    return RetryPolicy.model_validate({**base, **kw})


def run(attempts: int, budget_start: int = 0, created: datetime = T0) -> Run:
    tries = [
        Attempt(
            n=i,
            started_at=T0 + timedelta(minutes=i),
            ended_at=T0 + timedelta(minutes=i),
            outcome=AttemptOutcome.FAILED,
        )
        for i in range(1, attempts + 1)
    ]
    return Run(
        run_id="t:1",
        task_id="t",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=T0,
        created_at=created,
        updated_at=created,
        attempt=attempts,
        budget_start=budget_start,
        attempts=tries,
        budget_started_at=created,
    )


def test_delays_grow_from_base_by_the_multiplier() -> None:
    p = policy()
    assert [p.delay_for_attempt(n) for n in (1, 2, 3, 4)] == [120, 240, 480, 960]


def test_delays_are_capped_at_max_delay() -> None:
    p = policy(max_delay=300)
    assert p.delay_for_attempt(3) == 300
    assert p.delay_for_attempt(10_000) == 300  # no overflow


def test_should_schedule_retry_until_max_attempts() -> None:
    p = policy(max_attempts=3)
    assert [p.should_schedule_retry(n) for n in (1, 2, 3, 4)] == [True, True, False, False]


def test_policy_refuses_a_cap_below_base() -> None:
    with pytest.raises(ValueError, match="max_delay"):
        policy(base_delay=600, max_delay=60)


def test_durations_accept_units() -> None:
    p = policy(base_delay="2m", max_delay="1h", max_age="1d")
    assert (p.base_delay, p.max_delay, p.max_age) == (120, 3600, 86400)


def test_failed_attempt_within_budget_is_retried_after_the_policy_delay() -> None:
    d = decide_retry(run(1), policy(), error_code="BOOM", retryable=True, now=T0)
    assert d.retry and d.delay_s == 120 and d.next_retry_at == T0 + timedelta(seconds=120)


def test_exhausted_budget_dead_letters() -> None:
    d = decide_retry(run(3), policy(), error_code="BOOM", retryable=True, now=T0)
    assert not d.retry and d.reason == Reason.EXHAUSTED


def test_a_fresh_budget_counts_from_the_redrive() -> None:
    d = decide_retry(run(4, budget_start=3), policy(), error_code="BOOM", retryable=True, now=T0)
    assert d.retry and d.delay_s == 120


def test_terminal_errors_are_never_retried() -> None:
    assert decide_retry(run(1), policy(), error_code="X", retryable=False, now=T0).reason == Reason.TERMINAL
    listed = policy(terminal_errors=["BAD_INPUT"])
    assert (
        decide_retry(run(1), listed, error_code="BAD_INPUT", retryable=True, now=T0).reason == Reason.TERMINAL
    )


def test_only_listed_errors_are_retried_when_a_list_is_given() -> None:
    p = policy(retryable_errors=["TIMEOUT"])
    assert decide_retry(run(1), p, error_code="TIMEOUT", retryable=True, now=T0).retry
    assert decide_retry(run(1), p, error_code="OTHER", retryable=True, now=T0).reason == Reason.NOT_RETRYABLE


def test_max_age_gives_up_on_old_runs() -> None:
    p = policy(max_age=600)
    late = T0 + timedelta(seconds=500)
    d = decide_retry(run(1), p, error_code="BOOM", retryable=True, now=late)
    assert not d.retry and d.reason == Reason.MAX_AGE


def test_jitter_is_reproducible_with_a_seed_and_varies_without() -> None:
    p = policy(jitter=JitterMode.FULL)
    a = [delay_for_attempt(p, 2, jitter_rng(7, "r", 2)) for _ in range(3)]
    assert len(set(a)) == 1
    b = {delay_for_attempt(p, 2, random.Random()) for _ in range(20)}
    assert len(b) > 1


@pytest.mark.parametrize(
    ("mode", "low", "high"),
    [(JitterMode.NONE, 240, 240), (JitterMode.FULL, 0, 240), (JitterMode.EQUAL, 120, 240)],
)
def test_jitter_modes_stay_in_their_documented_bounds(mode: JitterMode, low: float, high: float) -> None:
    p = policy(jitter=mode)
    rng = random.Random(1)
    values = [delay_for_attempt(p, 2, rng) for _ in range(500)]
    assert min(values) >= low and max(values) <= high
    assert capped_delay(p, 2) == 240
