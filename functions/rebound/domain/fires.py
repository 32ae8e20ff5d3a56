"""The fires a schedule owes: every instant in a span at which a task's schedule fires, its time
zone and DST policy included, and how late a fire may arrive by design. The run ledger
(``rebound.engine.ledger``) checks them against the runs; the pre-flight
(``rebound.domain.prediction``) predicts with them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rebound.domain import cron
from rebound.domain.ids import scheduled_run_id
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.domain.schedules import scheduler_expressions

MAX_LOOKBACK = timedelta(days=1)
"""The furthest back the ledger (and a catch-up) looks for fires."""


@dataclass(frozen=True)
class ExpectedFire:
    task_id: str
    at: datetime
    note: str | None
    by_scheduler: bool

    @property
    def run_id(self) -> str:
        return scheduled_run_id(self.task_id, self.at)


def expected_fires(
    task_id: str, spec: ScheduleSpec, after: datetime, until: datetime, *, origin: datetime | None = None
) -> list[ExpectedFire]:
    """Fire times in ``(after, until]`` of a schedule, with the task's DST policy for Unix cron."""
    if spec.end is not None:
        until = min(until, spec.end)
    if until <= after:
        return []
    if spec.cron is not None:
        policy = cron.DstPolicy(repeated=spec.dst.repeated, missing=spec.dst.missing)
        return [
            ExpectedFire(task_id, f.at, f.note, cron.scheduler_delivers(f, spec.timezone))
            for f in cron.fire_times_between(spec.cron, spec.timezone, after, until, policy)
        ]
    fires: set[datetime] = set()
    for expression in scheduler_expressions(spec):
        at = after
        while True:
            nxt = cron.next_fire(expression, spec.timezone, at, start=origin or after)
            if nxt is None or nxt > until:
                break
            fires.add(nxt)
            at = nxt
    return [ExpectedFire(task_id, at, None, True) for at in sorted(fires)]


def delivery_lag(task_id: str, spec: ScheduleSpec) -> timedelta:
    """How long after its instant a fire may arrive by design: the jitter window (Scheduler
    delivers anywhere in it) plus the task's stagger offset (the executor holds it that long)."""
    return timedelta(seconds=(spec.jitter_window or 0) + spec.stagger_offset(task_id))
