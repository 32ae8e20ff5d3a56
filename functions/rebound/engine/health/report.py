"""The retry health report's types: what a caller asks (``RetryHealthQuery``), the thresholds it
turns into (``Thresholds``), and the report both the CLI and the ops API return
(``RetryHealthReport``, a pydantic model a route can return as it is).

The caller chooses two limits; each decides when a group of checks **fails**. Below them, fixed
levels make the same checks **warn** (for a human to look at, not to page):

- ``expected_interval_minutes`` (default 30): how often the retry loop is expected to act on work
  waiting for it. ``retry_worker`` fails when work waits and the retry worker's last heartbeat is
  older than this (warns from 5 minutes), and when a ``failed`` run has waited longer than this for
  its retry decision (warns from 5 minutes).
- ``stale_metadata_minutes`` (default 120): how old a retry's bookkeeping may get before it is
  stale. ``stale_retry_plans`` fails when a ``retry_scheduled`` run's ``next_retry_at`` is overdue by
  more than this (warns from 2 minutes, when the sweeper should have sent it), and
  ``stuck_replays`` fails when a replayed run has not started for longer than this (warns from
  10 minutes).
- ``generated_by``: who or what asked; echoed in the report with ``generated_at``.

A warn level above the caller's limit is lowered to it: the check then fails without warning first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rebound.domain.basics import Severity
from rebound.domain.escalation_levels import ACK_TARGETS
from rebound.domain.timefmt import UtcDatetime
from rebound.engine.dispatch import OVERDUE_AFTER

DEFAULT_EXPECTED_INTERVAL_MINUTES = 30
DEFAULT_STALE_METADATA_MINUTES = 120
MAX_MINUTES = 7 * 24 * 60


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


RANK = {Status.OK: 0, Status.WARN: 1, Status.FAIL: 2}


def worst(statuses: list[Status]) -> Status:
    return max(statuses, key=RANK.__getitem__, default=Status.OK)


class RetryHealthQuery(BaseModel):
    """What a caller asks of the retry health report (the route's query, the CLI's options)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expected_interval_minutes: int = Field(
        default=DEFAULT_EXPECTED_INTERVAL_MINUTES,
        ge=1,
        le=MAX_MINUTES,
        description="how often the retry loop is expected to act: retry_worker fails when work has "
        "waited longer than this for it (its heartbeat, or a failed run's retry decision)",
    )
    stale_metadata_minutes: int = Field(
        default=DEFAULT_STALE_METADATA_MINUTES,
        ge=1,
        le=MAX_MINUTES,
        description="how old a retry's bookkeeping may get: stale_retry_plans fails for a retry "
        "overdue by more than this, stuck_replays for a replay not started within it",
    )
    generated_by: str | None = Field(
        default=None, max_length=256, description="who or what asked; echoed in the report"
    )


@dataclass(frozen=True)
class Thresholds:
    """When each check warns and fails. ``expected_interval`` and ``stale_metadata`` are the caller's;
    the ``*_warn`` levels are fixed (see the module's docstring)."""

    expected_interval: timedelta = timedelta(minutes=DEFAULT_EXPECTED_INTERVAL_MINUTES)
    stale_metadata: timedelta = timedelta(minutes=DEFAULT_STALE_METADATA_MINUTES)
    failed_run_warn: timedelta = timedelta(minutes=5)
    retry_worker_warn: timedelta = timedelta(minutes=5)
    retry_worker_grace: timedelta = timedelta(minutes=1)
    retry_backlog_warn: int = 100
    plan_overdue_warn: timedelta = OVERDUE_AFTER
    replay_unstarted_warn: timedelta = timedelta(minutes=10)
    ack_sla: dict[Severity, timedelta] = field(default_factory=lambda: dict(ACK_TARGETS))
    """The escalation levels' acknowledgement targets (``rebound.domain.escalation_levels``)."""
    dlq_age_fail: timedelta = timedelta(days=10)

    @classmethod
    def from_query(cls, query: RetryHealthQuery) -> Thresholds:
        return cls(
            expected_interval=timedelta(minutes=query.expected_interval_minutes),
            stale_metadata=timedelta(minutes=query.stale_metadata_minutes),
        )

    def with_ack_sla(self, sla: timedelta) -> Thresholds:
        return Thresholds(**{**self.__dict__, "ack_sla": dict.fromkeys(Severity, sla)})

    @staticmethod
    def warn_level(warn: timedelta, fail: timedelta) -> timedelta:
        return min(warn, fail)

    @property
    def expected_interval_minutes(self) -> int | float:
        return _minutes(self.expected_interval)

    @property
    def stale_metadata_minutes(self) -> int | float:
        return _minutes(self.stale_metadata)


def _minutes(delta: timedelta) -> int | float:
    minutes = delta.total_seconds() / 60
    return int(minutes) if minutes.is_integer() else round(minutes, 3)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)
    value: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "summary": self.summary,
            "details": self.details,
            "value": self.value,
        }


class CheckResult(BaseModel):
    """One check of the report, as JSON."""

    name: str
    status: Status
    summary: str
    details: list[str] = Field(default_factory=list)
    value: float | None = None


class RetryHealthReport(BaseModel):
    """The retry health report: each check ``ok``, ``warn`` or ``fail``; healthy when none fails."""

    environment: str
    generated_at: UtcDatetime
    generated_by: str | None = None
    expected_interval_minutes: int | float
    stale_metadata_minutes: int | float
    status: Status
    healthy: bool
    checks: list[CheckResult]

    @classmethod
    def of(
        cls,
        environment: str,
        at: datetime,
        checks: list[Check],
        thresholds: Thresholds,
        generated_by: str | None = None,
    ) -> RetryHealthReport:
        status = worst([c.status for c in checks])
        return cls(
            environment=environment,
            generated_at=at,
            generated_by=generated_by,
            expected_interval_minutes=thresholds.expected_interval_minutes,
            stale_metadata_minutes=thresholds.stale_metadata_minutes,
            status=status,
            healthy=status is not Status.FAIL,
            checks=[CheckResult(**c.as_dict()) for c in checks],
        )

    def check(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)

    def as_dict(self) -> dict[str, Any]:
        """The JSON both surfaces show (``model_dump(mode="json")``)."""
        return self.model_dump(mode="json")
