"""Retry decisions: retry a failed run after a delay, or dead-letter it with a reason.

The delay arithmetic and the attempt budget live in ``rebound.domain.backoff`` (re-exported here:
``should_schedule_retry``, ``capped_delay``, ``delay_for_attempt``); this module adds what a decision needs
beyond the policy: the run's history, error classification, ``max_age`` and a reproducible jitter source.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from rebound.domain.backoff import capped_delay as capped_delay
from rebound.domain.backoff import delay_for_attempt as delay_for_attempt
from rebound.domain.backoff import should_schedule_retry as should_schedule_retry
from rebound.domain.retry_policy import RetryPolicy
from rebound.domain.run import Run


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
    TARGET_UNHEALTHY = "target_unhealthy_too_long"
    RETRIES_OFF = "retries_disabled_by_flag"
    """``task-retry-queue`` is off in the environment (``rebound.domain.flags``)."""


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
