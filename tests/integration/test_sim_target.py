"""The built-in ``sim`` target: seeded failure rates, hangs and durations, on their own and through
the executor and the retry scheduler."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from rebound.adapters.targets.sim import SIM_FAILURE, SimInvoker
from rebound.domain.run import AttemptOutcome, RunState
from rebound.domain.target_specs import SimTarget
from rebound.engine.deps import Deps
from rebound.engine.ports.targets import TIMEOUT, Invocation, Outcome
from rebound.handlers import executor, retry_scheduler
from support import START, Context, ManualClock, bus_event, fire, outbox_events, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"
CALLS = 2000


def sim(**behavior: Any) -> SimTarget:
    return SimTarget.model_validate({"type": "sim", "behavior": behavior})


def call(clock: ManualClock, run_id: str = RUN_ID, attempt: int = 1, deadline_s: float = 30) -> Invocation:
    return Invocation(
        run_id=run_id,
        task_id="job",
        tenant="acme",
        attempt=attempt,
        scheduled_for=START,
        payload={},
        deadline=clock.now() + timedelta(seconds=deadline_s),
    )


def outcomes(target: SimTarget, n: int = CALLS) -> list[bool]:
    """The ok/failed sequence of ``n`` distinct (run, attempt) calls."""
    clock = ManualClock()
    invoker = SimInvoker(clock)
    return [invoker.invoke(target, call(clock, f"job:run{i // 3}", i % 3 + 1)).ok for i in range(n)]


# --------------------------------------------------------------------------- fail_rate and seed


def test_the_same_seed_gives_the_same_outcome_sequence() -> None:
    first = outcomes(sim(fail_rate=0.3, seed=7))
    again = outcomes(sim(fail_rate=0.3, seed=7))
    assert first == again
    assert True in first and False in first  # a real mix, not a constant


def test_the_same_call_gives_the_same_outcome_every_time() -> None:
    clock = ManualClock()
    invoker = SimInvoker(clock)
    target = sim(fail_rate=0.5, seed=3)
    results = {invoker.invoke(target, call(clock, f"job:r{i}")).ok for i in range(40) for _ in range(3)}
    per_call = [{invoker.invoke(target, call(clock, f"job:r{i}")).ok for _ in range(5)} for i in range(40)]
    assert results == {True, False}
    assert all(len(seen) == 1 for seen in per_call)


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.8])
def test_the_observed_failure_share_is_close_to_the_rate(rate: float) -> None:
    results = outcomes(sim(fail_rate=rate, seed=42))
    share = results.count(False) / len(results)
    # Binomial standard deviation at n=2000 is at most ~0.011; allow well over 4 of them.
    assert abs(share - rate) < 0.05, f"failure share {share:.3f} for fail_rate {rate}"


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_the_extreme_rates_never_or_always_fail(rate: float) -> None:
    results = outcomes(sim(fail_rate=rate, seed=1), n=300)
    assert results.count(False) == (300 if rate == 1.0 else 0)


def test_a_different_seed_gives_a_different_sequence() -> None:
    base = outcomes(sim(fail_rate=0.5, seed=1))
    for seed in (2, 3, 1000):
        other = outcomes(sim(fail_rate=0.5, seed=seed))
        differing = sum(a != b for a, b in zip(base, other, strict=True))
        # Independent sequences at rate 0.5 differ in about half the positions.
        assert differing > len(base) // 4, f"seed {seed} differs from seed 1 in only {differing} calls"


def test_a_seeded_failure_is_a_retryable_sim_failure() -> None:
    clock = ManualClock()
    invoker = SimInvoker(clock)
    target = sim(fail_rate=0.5, seed=9)
    failures = [o for i in range(50) if not (o := invoker.invoke(target, call(clock, f"job:r{i}"))).ok]
    assert failures
    assert {(o.error_code, o.retryable) for o in failures} == {(SIM_FAILURE, True)}
    assert clock.now() == START  # no duration given: no time passes


# --------------------------------------------------------------------------- hang


def test_a_hang_is_a_retryable_timeout_at_the_deadline() -> None:
    clock = ManualClock()
    outcome = SimInvoker(clock).invoke(sim(hang=True), call(clock, deadline_s=30))
    assert outcome.ok is False
    assert outcome.error_code == TIMEOUT
    assert outcome.retryable is True
    assert clock.now() == START + timedelta(seconds=30)  # it held the caller until the deadline


def test_a_hanging_target_goes_down_the_retry_path(wired: Deps, every_event: None) -> None:
    register(wired, task("job", timeout_s=30, target={"type": "sim", "behavior": {"hang": True}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED and run.attempt == 1
    attempt = run.attempts[-1]
    assert attempt.outcome is AttemptOutcome.TIMEOUT and attempt.error_code == TIMEOUT
    assert attempt.retryable is True and run.last_error_retryable is True
    assert attempt.duration_ms == 30_000
    [failed] = [d for t, d in outbox_events(wired) if t == "task.execution.failed"]
    assert failed["retryable"] is True and failed["outcome"] == "timeout"

    retry_scheduler.lambda_handler(sqs_event(bus_event("task.execution.failed", failed)), Context())
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.RETRY_SCHEDULED
    assert run.next_retry_at is not None and run.next_retry_at > wired.clock.now()
    [scheduled] = [d for t, d in outbox_events(wired) if t == "task.retry.scheduled"]
    assert scheduled["attempt"] == 2


# --------------------------------------------------------------------------- duration_s


@pytest.mark.parametrize("duration", [0.5, 12.0, 30.0])
def test_a_duration_within_the_deadline_takes_that_long_and_succeeds(duration: float) -> None:
    clock = ManualClock()
    outcome = SimInvoker(clock).invoke(sim(duration_s=duration), call(clock, deadline_s=30))
    assert outcome == Outcome.success({"sim": "ok", "attempt": 1})
    assert clock.now() == START + timedelta(seconds=duration)


def test_a_duration_past_the_deadline_times_out_at_the_deadline() -> None:
    clock = ManualClock()
    outcome = SimInvoker(clock).invoke(sim(duration_s=45), call(clock, deadline_s=30))
    assert outcome.ok is False and outcome.error_code == TIMEOUT and outcome.retryable is True
    assert clock.now() == START + timedelta(seconds=30)


def test_a_duration_joins_a_failure_behaviour() -> None:
    clock = ManualClock()
    outcome = SimInvoker(clock).invoke(sim(always_fail=True, duration_s=4), call(clock))
    assert outcome.error_code == SIM_FAILURE
    assert clock.now() == START + timedelta(seconds=4)


def test_through_the_executor_the_attempt_lasts_the_duration(wired: Deps) -> None:
    register(wired, task("job", timeout_s=30, target={"type": "sim", "behavior": {"duration_s": 12}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED
    attempt = run.attempts[-1]
    assert attempt.duration_ms == 12_000
    assert attempt.ended_at is not None and attempt.ended_at - attempt.started_at == timedelta(seconds=12)


def test_through_the_executor_a_duration_over_the_task_timeout_is_a_timeout(wired: Deps) -> None:
    register(wired, task("job", timeout_s=20, target={"type": "sim", "behavior": {"duration_s": 50}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED
    attempt = run.attempts[-1]
    assert attempt.outcome is AttemptOutcome.TIMEOUT and attempt.error_code == TIMEOUT
    assert attempt.duration_ms == 20_000  # cut at the task timeout, not the full 50 s
    assert run.last_error_retryable is True
