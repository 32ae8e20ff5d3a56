"""Retry policies as written and stored: ``RetryPolicy``, ``PolicyOverride`` and a target's retry
budget (``TargetBudget``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from rebound.domain import backoff
from rebound.domain.backoff import JitterMode
from rebound.domain.basics import ErrorCode, Severity, Strict
from rebound.domain.durations import Seconds


class TargetBudget(Strict):
    """A retry budget per target (``target_budget:`` in a policy): when the failures of one target
    (an http host, a lambda function, a sim target's ``name``) within ``window`` reach
    ``threshold``, from at least ``min_runs`` runs, Rebound stops spending attempts on it. Failed
    runs are held (``waiting``, reason ``target-unhealthy``, the failed attempt not counted), one
    work order is opened for the target, one held run is let through as a probe every
    ``probe_every``, and once a probe succeeds the held runs are released at most
    ``release_per_minute`` a minute. A run held longer than ``max_hold`` is dead-lettered
    (``TARGET_UNHEALTHY``). See ``rebound.domain.target_budget``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    window: Annotated[Seconds, Field(gt=0, le=86400)] = 300.0
    threshold: int = Field(default=10, ge=1, le=1000)
    min_runs: int = Field(default=3, ge=1, le=1000)
    probe_every: Annotated[Seconds, Field(gt=0, le=86400)] = 120.0
    release_per_minute: int = Field(default=10, ge=1, le=1000)
    max_hold: Annotated[Seconds, Field(gt=0, le=7 * 86400)] = 86400.0

    @model_validator(mode="after")
    def _runs_within_threshold(self) -> TargetBudget:
        if self.min_runs > self.threshold:
            raise ValueError(
                f"min_runs ({self.min_runs}) must not exceed threshold ({self.threshold}): the "
                "failures of fewer runs than that could never trip the budget"
            )
        return self


class RetryPolicy(Strict):
    """A complete, resolved retry policy. Its delays live in ``rebound.domain.backoff``, the retry decision in
    ``rebound.domain.retry``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "default"
    version: int = Field(default=0, ge=0)
    max_attempts: int = Field(ge=1, le=100)
    base_delay: Annotated[Seconds, Field(gt=0)]
    multiplier: float = Field(ge=1.0, le=10.0)
    max_delay: Annotated[Seconds, Field(gt=0)]
    max_age: Annotated[Seconds, Field(gt=0)] | None = None
    jitter: JitterMode = JitterMode.NONE
    retryable_errors: tuple[ErrorCode, ...] = ()
    terminal_errors: tuple[ErrorCode, ...] = ()
    severity: Severity = Severity.HIGH
    runbook_url: str | None = None
    max_wait: Annotated[Seconds, Field(gt=0, le=7 * 86400)] = Field(
        default=3600.0,
        description="longest a run may wait for a busy mutex, quota or overlap slot before it is "
        "dead-lettered with WAIT_EXHAUSTED",
    )
    target_budget: TargetBudget = Field(
        default_factory=TargetBudget, description="the retry budget per target (rebound.domain.target_budget)"
    )

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> RetryPolicy:
        if self.max_delay < self.base_delay:
            raise ValueError(
                f"max_delay ({self.max_delay:g}s) must not be below base_delay ({self.base_delay:g}s)"
            )
        overlap = set(self.retryable_errors) & set(self.terminal_errors)
        if overlap:
            raise ValueError(f"error codes listed as both retryable and terminal: {sorted(overlap)}")
        return self

    def should_schedule_retry(self, attempt: int) -> bool:
        return backoff.should_schedule_retry(self, attempt)

    def delay_for_attempt(self, attempt: int) -> float:
        return backoff.delay_for_attempt(self, attempt)


POLICY_FIELDS = frozenset(RetryPolicy.model_fields) - {"name", "version"}


class PolicyOverride(Strict):
    """A task's inline ``retry_policy`` mapping: a named policy to start from plus the keys it changes."""

    extends: str = "default"
    max_attempts: int | None = None
    base_delay: Seconds | None = None
    multiplier: float | None = None
    max_delay: Seconds | None = None
    max_age: Seconds | None = None
    jitter: JitterMode | None = None
    retryable_errors: tuple[ErrorCode, ...] | None = None
    terminal_errors: tuple[ErrorCode, ...] | None = None
    severity: Severity | None = None
    runbook_url: str | None = None
    max_wait: Seconds | None = None
    target_budget: TargetBudget | None = None

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude={"extends"}, exclude_none=True, mode="json")
