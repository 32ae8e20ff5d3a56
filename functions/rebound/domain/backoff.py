"""Backoff: how long to wait after a failed attempt, and whether the budget allows another one.

This module owns the jitter modes and the delay arithmetic of a retry policy. It reads a policy through
:class:`BackoffPolicy` (``rebound.domain.retry_policy.RetryPolicy`` is one) and imports nothing of
Rebound, so the models can use it and ``rebound.domain.retry`` (the retry decision) can build on it.

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
from enum import StrEnum
from typing import Protocol


class JitterMode(StrEnum):
    NONE = "none"
    FULL = "full"
    EQUAL = "equal"
    DECORRELATED = "decorrelated"


class BackoffPolicy(Protocol):
    """The fields of a retry policy that the backoff arithmetic reads."""

    @property
    def max_attempts(self) -> int: ...
    @property
    def base_delay(self) -> float: ...
    @property
    def multiplier(self) -> float: ...
    @property
    def max_delay(self) -> float: ...
    @property
    def jitter(self) -> JitterMode: ...


def should_schedule_retry(policy: BackoffPolicy, attempt: int) -> bool:
    """True while the budget allows another attempt after ``attempt`` failed."""
    return 1 <= attempt < policy.max_attempts


def capped_delay(policy: BackoffPolicy, attempt: int) -> float:
    """The exponential delay after ``attempt`` failed, before jitter, capped at ``max_delay``."""
    exponent = max(attempt - 1, 0)
    # Compare in log space so that a large attempt number cannot overflow a float.
    if policy.multiplier > 1.0 and exponent * math.log(policy.multiplier) > math.log(
        policy.max_delay / policy.base_delay
    ):
        return policy.max_delay
    return min(policy.base_delay * policy.multiplier**exponent, policy.max_delay)


def delay_for_attempt(
    policy: BackoffPolicy,
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
