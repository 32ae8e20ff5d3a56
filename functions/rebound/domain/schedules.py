"""How a task's trigger becomes EventBridge Scheduler schedules.

The Scheduler expressions of a task's schedule, the schedules planned for a task (name, expression,
time zone) and the input each schedule sends to the execution queue. Pure: no AWS calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from rebound.domain import cron
from rebound.domain.durations import parse_rate
from rebound.domain.errors import ValidationFailed
from rebound.domain.ids import task_schedule_name, workstream_schedule_name
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.domain.task import Task
from rebound.domain.workstreams import Workstream

FIRE_TEMPLATE_TIME = "<aws.scheduler.scheduled-time>"


@dataclass(frozen=True)
class PlannedSchedule:
    name: str
    expression: str
    timezone: str


def scheduler_expressions(spec: ScheduleSpec) -> list[str]:
    """The Scheduler expressions that fire exactly when the task's schedule says."""
    if spec.cron is not None:
        try:
            return [f"cron({e})" if not e.startswith("cron(") else e for e in cron.unix_to_aws(spec.cron)]
        except cron.CronError as exc:
            raise ValidationFailed(str(exc), key_path="schedule.cron") from None
    if spec.rate is not None:
        seconds = parse_rate(spec.rate)
        return [f"rate({spec.rate.strip()})"] if seconds else []
    if spec.at is not None:
        return [f"at({spec.at.astimezone(_zone(spec.timezone)).strftime('%Y-%m-%dT%H:%M:%S')})"]
    assert spec.aws is not None
    return [spec.aws]


def schedule_notes(spec: ScheduleSpec | None) -> list[str]:
    """Why a Unix cron schedule is deployed as several Scheduler schedules, or without a part that never
    fires; empty when it is one schedule meaning what it says."""
    if spec is None or spec.cron is None:
        return []
    return cron.translate(spec.cron).notes


def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def planned_schedules(task: Task) -> list[PlannedSchedule]:
    return _planned(task.schedule, lambda i: task_schedule_name(task.id, i))


def planned_workstream_schedules(workstream: Workstream) -> list[PlannedSchedule]:
    """The schedules that start a workstream: named ``ws-<id>``, fired as a task's would be."""
    return _planned(workstream.schedule, lambda i: workstream_schedule_name(workstream.id, i))


def _planned(spec: ScheduleSpec | None, name: Callable[[int], str]) -> list[PlannedSchedule]:
    if spec is None:
        return []
    return [
        PlannedSchedule(name(i), expression, spec.timezone)
        for i, expression in enumerate(scheduler_expressions(spec))
    ]


def fire_payload(task_id: str) -> dict[str, object]:
    return {"v": 1, "kind": "fire", "task_id": task_id, "scheduled_time": FIRE_TEMPLATE_TIME}


WORKSTREAM_START = "workstream.start"
"""The detail-type of the message that starts a workstream run: sent to the escalation queue (whose
consumer advances workstreams) by a workstream's schedule, or by its rule from a matching event."""


def workstream_start_payload(workstream_id: str) -> dict[str, object]:
    """What a workstream's schedule sends: its run id derives from the workstream and the fire's
    logical time, so every delivery of one fire names one run."""
    return {
        "detail-type": WORKSTREAM_START,
        "detail": {"v": 1, "workstream_id": workstream_id, "scheduled_time": FIRE_TEMPLATE_TIME},
    }
