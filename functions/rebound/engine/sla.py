"""SLA: a run's start delay and its duration, measured against its task's limits.

A breach is recorded in the same transaction as the state change that revealed it: the run
gains ``sla_breaches``, ``task.sla.breached`` is emitted, and the task's breach counter (a control
record) counts consecutive breaching runs. A run that finishes without a breach
resets the counter and starts a new streak. Escalation notifies on every breach and opens one
work order for the streak that reaches three.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rebound.domain import events as ev
from rebound.domain.ids import run_subject
from rebound.domain.run import Run
from rebound.domain.task import Task
from rebound.engine import telemetry as m
from rebound.engine.ports import Metrics, UnitOfWork

WORK_ORDER_AFTER = 3


def counter_key(task_id: str) -> str:
    return f"sla#{task_id}"


@dataclass(frozen=True)
class Breach:
    kind: str  # start_delay | duration
    observed_s: float
    limit_s: float


def start_delay(task: Task | None, run: Run, started_at: datetime) -> float:
    """Seconds a run started after it was due: after its stagger offset (``due_at``) and after the
    end of its task's jitter window, within which Scheduler delivers at a moment of its choosing."""
    due = run.due_at or run.scheduled_for
    window = (task.schedule.jitter_window or 0) if task is not None and task.schedule is not None else 0
    return (started_at - due).total_seconds() - window


def start_delay_breach(task: Task | None, run: Run, started_at: datetime) -> Breach | None:
    if task is None or task.sla is None or task.sla.max_start_delay is None or run.attempt != 1:
        return None
    delay = start_delay(task, run, started_at)
    return (
        Breach("start_delay", delay, task.sla.max_start_delay) if delay > task.sla.max_start_delay else None
    )


def duration_limit(task: Task | None) -> float | None:
    """How long an attempt may run before it breaches the SLA: the task's ``sla.max_duration``;
    for an asynchronous task without one, its ``max_duration`` (where it also times out)."""
    if task is None:
        return None
    if task.sla is not None and task.sla.max_duration is not None:
        return task.sla.max_duration
    return task.max_duration if task.is_async else None


def duration_breach(task: Task | None, run: Run, duration_s: float) -> Breach | None:
    limit = duration_limit(task)
    if limit is None or "duration" in run.sla_breaches:
        return None
    return Breach("duration", duration_s, limit) if duration_s > limit else None


def with_breach(run: Run, breach: Breach) -> Run:
    return run.model_copy(update={"sla_breaches": [*run.sla_breaches, breach.kind]})


def stage_breach(uow: UnitOfWork, before: Run, after: Run, breach: Breach, metrics: Metrics) -> None:
    """Stage the event and the counter for a breach already added to ``after``."""
    uow.emit(
        ev.sla_breached(after, kind=breach.kind, observed_s=breach.observed_s, limit_s=breach.limit_s),
        run_subject(after.run_id),
    )
    if not before.sla_breaches:  # a run counts once towards the streak, however many limits it breaks
        uow.count_streak(counter_key(after.task_id), after.run_id, f"sla counter {after.task_id}")
    metrics.count(m.SLA_BREACH)


def stage_reset(uow: UnitOfWork, task_id: str) -> None:
    """A run of an SLA task finished within its limits: the streak of breaches ends."""
    uow.end_streak(counter_key(task_id), f"sla counter {task_id}")
