"""Pacing for bulk operations: a token bucket that respects a service quota, and backoff on throttling.

Both work in wall-clock time (``time.monotonic`` and ``time.sleep`` unless told otherwise): API
quotas are counted in real seconds whatever clock the domain runs on.

The limiter is additive-increase / multiplicative-decrease: every throttle that escapes botocore's
own retries halves the rate (never below ``floor``), and each run of successes wins a little of it
back, up to the rate asked for. So a bulk apply settles just under whatever the account's quota
really is, instead of hammering it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from rebound.domain.errors import Throttled

T = TypeVar("T")

Sleep = Callable[[float], None]
Monotonic = Callable[[], float]


class RateLimiter:
    """At most ``rate`` tokens per second on average, in bursts of at most ``burst`` tokens.

    A generic cell rate algorithm: the limiter keeps the theoretical time at which the next token
    is due, and a request waits until it conforms. It trusts its own sleeps (it does not re-read
    the clock after sleeping), so it paces correctly with any ``sleep``. ``rate=None``: no limit.
    """

    def __init__(
        self,
        rate: float | None,
        *,
        burst: float | None = None,
        floor: float = 1.0,
        recover_after: int = 20,
        monotonic: Monotonic = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> None:
        if rate is not None and rate <= 0:
            raise ValueError("a rate must be positive")
        self.target = rate
        self.rate = rate
        self.burst = burst if burst is not None else max(rate or 1.0, 1.0)
        self.floor = min(floor, rate) if rate else floor
        self.recover_after = recover_after
        self._monotonic = monotonic
        self._sleep = sleep
        self._due = monotonic()
        self._awake = self._due
        """When our last sleep ended, as far as we know: a sleep that returned early still counts."""
        self._successes = 0
        self.waited_s = 0.0

    def acquire(self, tokens: float = 1.0) -> float:
        """Take ``tokens``; returns the seconds slept for them."""
        if self.rate is None:
            return 0.0
        interval = 1.0 / self.rate
        now = max(self._monotonic(), self._awake)
        due = max(self._due, now)
        wait = due - now - (self.burst - 1) * interval
        if wait > 0:
            self._sleep(wait)
            self.waited_s += wait
            self._awake = now + wait
        self._due = due + tokens * interval
        return max(wait, 0.0)

    def slow_down(self) -> None:
        if self.rate is None:
            return
        self.rate = max(self.floor, self.rate / 2)
        self._successes = 0

    def succeeded(self) -> None:
        if self.rate is None or self.target is None or self.rate >= self.target:
            return
        self._successes += 1
        if self._successes >= self.recover_after:
            self._successes = 0
            self.rate = min(self.target, self.rate + max(self.target / 10, 1.0))


@dataclass
class Backoff:
    """Retry a call that raised ``Throttled``, waiting exponentially longer (full jitter) each time.

    botocore's standard retry mode has already retried the request a few times before a
    ``Throttled`` reaches us, so a throttle here means the quota is really exhausted: slow the
    limiter down too.
    """

    attempts: int = 8
    base_s: float = 0.5
    cap_s: float = 20.0
    sleep: Sleep = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    throttles: int = 0

    def call(self, fn: Callable[[], T], limiter: RateLimiter | None = None) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                result = fn()
            except Throttled:
                self.throttles += 1
                if attempt == self.attempts:
                    raise
                if limiter is not None:
                    limiter.slow_down()
                self.sleep(self.rng.uniform(0, min(self.cap_s, self.base_s * 2 ** (attempt - 1))))
                continue
            if limiter is not None:
                limiter.succeeded()
            return result
        raise AssertionError("unreachable")  # pragma: no cover
