"""A task's schedule as written: the trigger (cron, rate, at, an AWS expression), its time zone,
DST handling, overlap and catch-up policies, and its SLA."""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from rebound.domain import cron
from rebound.domain.basics import Strict
from rebound.domain.durations import Seconds, parse_rate
from rebound.domain.timefmt import UtcDatetime


class DstSpec(Strict):
    """What a Unix-cron task does at DST changes. The defaults are EventBridge Scheduler's own."""

    repeated: Literal["once", "twice"] = Field(default="once", description="the repeated hour at fall-back")
    missing: Literal["skip", "shift"] = Field(
        default="skip",
        description="the hour that does not exist at spring-forward; shift = first valid instant",
    )

    @property
    def is_scheduler_default(self) -> bool:
        return self.repeated == "once" and self.missing == "skip"


class ScheduleSpec(Strict):
    """When a task fires: exactly one of ``cron`` (Unix 5-field), ``rate``, ``at`` or ``aws``.

    ``aws`` takes an EventBridge Scheduler expression as is: ``cron(0 9 ? * MON-FRI *)``,
    ``rate(5 minutes)`` or ``at(2026-03-07T10:00:00)``. ``timezone`` is an IANA zone.
    """

    cron: str | None = None
    rate: str | None = None
    at: UtcDatetime | None = None
    aws: str | None = None
    timezone: str = "UTC"
    dst: DstSpec = Field(default_factory=DstSpec)
    jitter_window: Annotated[Seconds, Field(ge=0, le=86400)] | None = Field(
        default=None, description="Scheduler's flexible time window: deliver at a random moment within it"
    )
    end: UtcDatetime | None = Field(
        default=None,
        description="no fire after this instant (Scheduler's EndDate); the run ledger expects none either",
    )
    stagger: Annotated[Seconds, Field(ge=0, le=900)] | None = Field(
        default=None, description="delay each fire by a fixed offset in [0, stagger) derived from the task id"
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r}") from exc
        return value

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        return None if value is None else cron.validate_unix_cron(value)

    @field_validator("aws")
    @classmethod
    def _valid_aws(cls, value: str | None) -> str | None:
        if value is not None:
            cron.parse_schedule_expression(value.strip())
            return value.strip()
        return None

    @field_validator("rate")
    @classmethod
    def _valid_rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> ScheduleSpec:
        given = [key for key in ("cron", "rate", "at", "aws") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of cron, rate, at or aws (got {', '.join(given) or 'none'})")
        if self.cron is None and not self.dst.is_scheduler_default:
            raise ValueError(
                "dst applies to Unix cron schedules only (AWS expressions keep Scheduler's rules)"
            )
        if self.jitter_window is not None and self.jitter_window % 60:
            raise ValueError("jitter_window is whole minutes (Scheduler's flexible window), e.g. 5m")
        if self.end is not None and self.at is not None:
            raise ValueError("end applies to recurring schedules; an at() schedule fires once")
        return self

    def fires_at(self, when: datetime) -> bool:
        """Whether a fire at ``when`` is inside the schedule's life (not after its ``end``)."""
        return self.end is None or when <= self.end

    def stagger_offset(self, task_id: str) -> float:
        """The task's fixed delay in [0, stagger): the same every fire, spread across tasks."""
        if not self.stagger:
            return 0.0
        digest = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")
        return float(digest % int(self.stagger * 1000)) / 1000.0

    @property
    def kind(self) -> str:
        return next(key for key in ("cron", "rate", "at", "aws") if getattr(self, key) is not None)


class OverlapPolicy(StrEnum):
    """What to do when a run is due while another run of the same task is still running."""

    ALLOW_ALL = "allow_all"  # run concurrently
    SKIP = "skip"  # the new run is skipped
    BUFFER_ONE = "buffer_one"  # the new run waits for the running one; a third is skipped
    CANCEL_OTHER = "cancel_other"  # the running run is cancelled and the new one starts


class CatchUpPolicy(Strict):
    """What happens to fires that were missed (an outage, a pause)."""

    policy: Literal["skip", "latest", "all"] = "latest"
    max_runs: int = Field(default=10, ge=1, le=1000, description="with 'all': at most this many")
    window: Annotated[Seconds, Field(gt=0)] = Field(default=86400.0, description="only fires this recent")


class SlaSpec(Strict):
    max_start_delay: Annotated[Seconds, Field(gt=0)] | None = None
    max_duration: Annotated[Seconds, Field(gt=0)] | None = None
