"""Properties of retry policies that must hold for every policy and every attempt."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.domain.backoff import JitterMode
from rebound.domain.retry import capped_delay, decide_retry, delay_for_attempt
from rebound.domain.retry_policy import RetryPolicy
from rebound.domain.run import Attempt, AttemptOutcome, Run, Trigger

pytestmark = pytest.mark.property_based
T0 = datetime(2026, 3, 7, tzinfo=UTC)


@st.composite
def policies(draw: st.DrawFn) -> RetryPolicy:
    base = draw(st.floats(min_value=0.1, max_value=3600))
    cap = draw(st.floats(min_value=base, max_value=7 * 86400))
    return RetryPolicy(
        max_attempts=draw(st.integers(min_value=1, max_value=100)),
        base_delay=base,
        multiplier=draw(st.floats(min_value=1.0, max_value=10.0)),
        max_delay=cap,
        jitter=draw(st.sampled_from(list(JitterMode))),
    )


@settings(max_examples=300, deadline=None)
@given(
    p=policies(),
    attempt=st.integers(min_value=1, max_value=10_000),
    seed=st.integers(),
    prev=st.floats(0, 1e7),
)
def test_a_delay_never_exceeds_the_cap(p: RetryPolicy, attempt: int, seed: int, prev: float) -> None:
    delay = delay_for_attempt(p, attempt, random.Random(seed), prev)
    assert 0.0 <= delay <= p.max_delay


@settings(max_examples=300, deadline=None)
@given(
    p=policies(),
    attempt=st.integers(min_value=1, max_value=10_000),
    seed=st.integers(),
    prev=st.floats(0, 1e7),
)
def test_each_jitter_mode_stays_inside_its_documented_bounds(
    p: RetryPolicy, attempt: int, seed: int, prev: float
) -> None:
    d = capped_delay(p, attempt)
    delay = delay_for_attempt(p, attempt, random.Random(seed), prev)
    if p.jitter is JitterMode.NONE:
        assert delay == d
    elif p.jitter is JitterMode.FULL:
        assert 0.0 <= delay <= d
    elif p.jitter is JitterMode.EQUAL:
        assert d / 2 <= delay <= d
    else:
        previous = prev if prev > 0 else p.base_delay
        assert p.base_delay <= delay <= min(p.max_delay, max(p.base_delay, 3 * previous))


@settings(max_examples=200, deadline=None)
@given(p=policies(), seed=st.integers())
def test_attempts_never_exceed_max_attempts(p: RetryPolicy, seed: int) -> None:
    """Fail every attempt, follow every decision: the run is given up at exactly max_attempts."""
    run = Run(
        run_id="r",
        task_id="t",
        tenant="x",
        trigger=Trigger.SCHEDULE,
        scheduled_for=T0,
        created_at=T0,
        updated_at=T0,
        budget_started_at=T0,
    )
    now = T0
    rng = random.Random(seed)
    while True:
        n = run.attempt + 1
        assert n <= p.max_attempts
        attempt = Attempt(n=n, started_at=now, ended_at=now, outcome=AttemptOutcome.FAILED)
        run = run.model_copy(update={"attempt": n, "attempts": [*run.attempts, attempt]})
        decision = decide_retry(run, p, error_code="BOOM", retryable=True, now=now, rng=rng)
        if not decision.retry:
            assert run.attempt == p.max_attempts
            break
        assert decision.delay_s <= p.max_delay
        now = now + timedelta(seconds=decision.delay_s)


@settings(max_examples=200, deadline=None)
@given(p=policies())
def test_exponential_delays_never_shrink(p: RetryPolicy) -> None:
    delays = [capped_delay(p, n) for n in range(1, 60)]
    assert delays == sorted(delays)
