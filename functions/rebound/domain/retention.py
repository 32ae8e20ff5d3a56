"""How long runs and audit records stay in DynamoDB, and the expiry each item is written with.

DynamoDB's TTL deletes an item some time after its ``expires_at`` (epoch seconds) has passed, at
no write cost. Only what the archive keeps expires (docs/archive.md):

- a run's audit records expire ``audit_days`` after each was written; the archiver has copied
  them to S3 from the audit table's stream by then, and ``rebound audit verify --archive``
  verifies the chain there;
- a run's item expires ``runs_days`` after it finished (succeeded, skipped, cancelled,
  superseded): its audit chain holds every change of it, so ``rebound runs show`` rebuilds it
  from the archive. A run that is dead-lettered, waiting or running never expires;
- the chains of tasks, policies, work orders, workstreams and tenants do not expire: they grow
  with what operators do, not with runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rebound.domain.ids import RUN_PREFIX
from rebound.domain.states import TERMINAL

DAY = timedelta(days=1)
FINISHED: frozenset[str] = frozenset(state.value for state in TERMINAL)
"""The states a run item expires in (values, as stored)."""


class Retention(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    runs_days: int = Field(default=90, ge=1, le=36500, description="days a finished run stays in DynamoDB")
    audit_days: int = Field(
        default=400,
        ge=1,
        le=36500,
        description="days a run's audit record stays in DynamoDB (the archive keeps it after)",
    )

    @model_validator(mode="after")
    def _audit_outlives_runs(self) -> Retention:
        if self.audit_days < self.runs_days:
            raise ValueError(
                f"audit_days ({self.audit_days}) must be at least runs_days ({self.runs_days}): a run "
                "in DynamoDB is checked against its audit records there"
            )
        return self


def run_expiry(retention: Retention | None, finished: bool, at: datetime) -> int | None:
    """The ``ttl`` of a run item written at ``at``: None while it is not finished."""
    if retention is None or not finished:
        return None
    return finished_run_expiry(retention, at)


def finished_run_expiry(retention: Retention, at: datetime) -> int:
    """The ``ttl`` of a run that finished at ``at``."""
    return int((at + retention.runs_days * DAY).timestamp())


def forgotten_runs_before(retention: Retention | None, at: datetime) -> datetime | None:
    """Before when a clean run found by its fire has expired by ``at`` (it finished within
    minutes of its fire; TTL deletes within two days): a task forgets the fire segments that
    ended earlier (``rebound.domain.fire_segments``). None: nothing expires."""
    if retention is None:
        return None
    return at - (retention.runs_days + 3) * DAY


def audit_expiry(retention: Retention | None, subject: str, at: datetime) -> int | None:
    """The ``ttl`` of the audit record of ``subject`` written at ``at``: only a run's expire."""
    if retention is None or not subject.startswith(RUN_PREFIX):
        return None
    return int((at + retention.audit_days * DAY).timestamp())


def expired(retention: Retention | None, last_state: str | None, last_at: datetime, now: datetime) -> bool:
    """Whether a run whose chain ends in ``last_state`` at ``last_at`` is one TTL may have deleted
    by ``now``: it finished, and ``runs_days`` have passed since. A run missing before then was
    removed by someone, not expired."""
    return retention is not None and last_state in FINISHED and now >= last_at + retention.runs_days * DAY


def records_may_have_expired(retention: Retention | None, since: datetime | None, now: datetime) -> bool:
    """Whether TTL may have deleted a run's first records by ``now``: its records were written on
    or after ``since`` (its scheduled time; None: not known), and ``audit_days`` have passed since.
    A chain missing its first records before then lost them to someone, not to TTL."""
    return retention is not None and (since is None or now >= since + retention.audit_days * DAY)
