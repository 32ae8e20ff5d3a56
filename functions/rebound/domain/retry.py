"""Retry policy behaviour: how long to wait, and whether to try again at all.

``attempt`` always counts attempts made in the run's current budget, the one that just failed
included. After attempt 1 fails the wait is ``base_delay``; after attempt 2, ``base_delay *
multiplier``; and so on, capped at ``max_delay``. Jitter then spreads the wait (bounds below), and
the cap always holds:

=============  ==============================================================
``none``       exactly the capped exponential delay ``d``
``full``       uniform in ``[0, d]``
``equal``      uniform in ``[d/2, d]``
``decorrelated`` uniform in ``[base_delay, 3 * previous]``, capped; ``previous``
               is the last wait (``base_delay`` before the first retry)
=============  ==============================================================
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from rebound.domain.models import JitterMode, RetryPolicy, Run


def should_schedule_retry(policy: RetryPolicy, attempt: int) -> bool:
    """True while the budget allows another attempt after ``attempt`` failed."""
    return 1 <= attempt < policy.max_attempts


def capped_delay(policy: RetryPolicy, attempt: int) -> float:
    """The exponential delay after ``attempt`` failed, before jitter, capped at ``max_delay``."""
    exponent = max(attempt - 1, 0)
    # Compare in log space so that a large attempt number cannot overflow a float.
    if policy.multiplier > 1.0 and exponent * math.log(policy.multiplier) > math.log(
        policy.max_delay / policy.base_delay
    ):
        return policy.max_delay
    return min(policy.base_delay * policy.multiplier**exponent, policy.max_delay)


def delay_for_attempt(
    policy: RetryPolicy,
    attempt: int,
    rng: random.Random | None = None,
    previous_delay: float | None = None,
) -> float:
    """Seconds to wait after ``attempt`` failed, jitter included. Never above ``max_delay``."""
    d = capped_delay(policy, attempt)
    if policy.jitter is JitterMode.NONE:
        return d
    rng = rng or random.Random()
    if policy.jitter is JitterMode.FULL:
        return rng.uniform(0.0, d)
    if policy.jitter is JitterMode.EQUAL:
        return d / 2 + rng.uniform(0.0, d / 2)
    previous = previous_delay if previous_delay and previous_delay > 0 else policy.base_delay
    upper = max(policy.base_delay, previous * 3)
    return min(policy.max_delay, rng.uniform(policy.base_delay, upper))


def jitter_rng(seed: int | None, run_id: str, attempt: int) -> random.Random:
    """A generator for one decision. Seeded runs are reproducible whatever order decisions run in."""
    if seed is None:
        return random.Random()
    return random.Random(f"{seed}:{run_id}:{attempt}")


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    reason: str
    attempt: int
    delay_s: float = 0.0
    next_retry_at: datetime | None = None


class Reason:
    RETRYABLE = "retryable_failure"
    TERMINAL = "terminal_error"
    NOT_RETRYABLE = "not_in_retryable_errors"
    EXHAUSTED = "attempts_exhausted"
    MAX_AGE = "max_age_exceeded"
    REDRIVE_EXHAUSTED = "max_receive_count_exceeded"
    INVALID_MESSAGE = "invalid_message"
    WAIT_EXHAUSTED = "wait_exhausted"
    NOT_ENOUGH_TIME = "not_enough_time"
    UNKNOWN_POLICY = "unknown_policy"


def is_terminal(policy: RetryPolicy, error_code: str | None, retryable: bool) -> str | None:
    """The dead-letter reason if this error must not be retried, else None."""
    if not retryable or (error_code and error_code in policy.terminal_errors):
        return Reason.TERMINAL
    if policy.retryable_errors and error_code not in policy.retryable_errors:
        return Reason.NOT_RETRYABLE
    return None


def decide_retry(
    run: Run,
    policy: RetryPolicy,
    *,
    error_code: str | None,
    retryable: bool,
    now: datetime,
    rng: random.Random | None = None,
) -> RetryDecision:
    """Retry or dead-letter a run whose latest attempt failed."""
    attempt = run.attempts_in_budget
    terminal = is_terminal(policy, error_code, retryable)
    if terminal:
        return RetryDecision(False, terminal, attempt)
    if not should_schedule_retry(policy, attempt):
        return RetryDecision(False, Reason.EXHAUSTED, attempt)
    previous = _previous_delay(run)
    delay = delay_for_attempt(policy, attempt, rng, previous)
    next_at = now + timedelta(seconds=delay)
    started = run.budget_started_at or run.created_at
    if policy.max_age is not None and (next_at - started).total_seconds() > policy.max_age:
        return RetryDecision(False, Reason.MAX_AGE, attempt)
    return RetryDecision(True, Reason.RETRYABLE, attempt, delay, next_at)


def _previous_delay(run: Run) -> float | None:
    """The wait before the current attempt, for decorrelated jitter."""
    tries = run.attempts[run.budget_start :]
    if len(tries) < 2 or tries[-2].ended_at is None:
        return None
    return max((tries[-1].started_at - tries[-2].ended_at).total_seconds(), 0.0)
