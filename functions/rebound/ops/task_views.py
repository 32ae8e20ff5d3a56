"""How the CLI and the ops API show a task: its line in a list, and its detail (schedules as
Scheduler holds them, next fires, recent runs, what its schedule notes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.run import Run
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task
from rebound.ops.preview import PreviewFire
from rebound.ops.runs import run_view

T = TypeVar("T")

SCHEDULER_RATE = 50.0
"""Scheduler requests per second a bulk apply makes by default: the lowest per-operation default
quota AWS documents (CreateSchedule, UpdateSchedule, GetSchedule; 50 TPS in some Regions, more in
others). Raise it with ``--rate`` where your account's quota is higher."""
SCAN_ABOVE = 25
"""Plans for more tasks than this read every stored task in one scan instead of one read each."""


@dataclass(frozen=True)
class ScheduleStatus:
    """A task's schedule as EventBridge Scheduler holds it, compared with what the task wants."""

    name: str
    expression: str
    timezone: str
    state: str
    drift: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "expression": self.expression,
            "timezone": self.timezone,
            "state": self.state,
            "drift": self.drift,
        }


@dataclass(frozen=True)
class TaskDetail:
    stored: StoredTask
    schedules: list[ScheduleStatus]
    recent_runs: list[Run]
    next_fires: list[PreviewFire]
    schedule_notes: list[str] = field(default_factory=list)


def trigger_text(task: Task) -> str:
    """One line saying what fires a task."""
    spec = task.schedule
    if spec is None:
        return f"event {_short_json(task.event)}" if task.event else "manual only"
    value = {"cron": spec.cron, "rate": spec.rate, "aws": spec.aws}.get(spec.kind) or (
        spec.at.isoformat() if spec.at else ""
    )
    return f"{spec.kind} {value} ({spec.timezone})"


def _short_json(value: Any) -> str:
    text = canonical_bytes(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."


def task_view(stored: StoredTask) -> dict[str, Any]:
    """A stored task as the CLI and the ops API show it."""
    task = stored.task
    return {
        "id": task.id,
        "tenant": task.tenant,
        "state": task.state.value,
        "description": task.description,
        "trigger": trigger_text(task),
        "target": task.target.type,
        "retry_policy": task.policy_name,
        "timeout_s": task.timeout_s,
        "version": stored.version,
        "updated_at": stored.updated_at,
        "schedule_names": list(stored.schedule_names),
    }


def detail_view(detail: TaskDetail) -> dict[str, Any]:
    """A task with its schedules, next fires and recent runs, as ``tasks show`` and the API show it."""
    return {
        "task": task_view(detail.stored),
        "definition": detail.stored.task.model_dump(mode="json", exclude_none=True),
        "schedules": [s.as_dict() for s in detail.schedules],
        "schedule_notes": detail.schedule_notes,
        "next_fires": [f.as_dict() for f in detail.next_fires],
        "recent_runs": [run_view(r) for r in detail.recent_runs],
    }
