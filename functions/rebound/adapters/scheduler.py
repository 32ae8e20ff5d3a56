"""EventBridge Scheduler: one-time retry schedules and task schedules, targeting the execution queue,
and the schedules that start workstreams, targeting the escalation queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import call_or_none, translate
from rebound.domain.jsonutil import dumps

if TYPE_CHECKING:
    from mypy_boto3_scheduler import EventBridgeSchedulerClient

SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


@dataclass(frozen=True)
class ScheduleTarget:
    queue_arn: str
    role_arn: str
    dead_letter_arn: str | None = None
    max_retry_attempts: int = 185
    max_event_age_s: int = 86400


def at_expression(when: datetime) -> str:
    """``at(yyyy-mm-ddThh:mm:ss)`` in UTC; Scheduler has one-second resolution, so round up."""
    when = when.astimezone(UTC)
    if when.microsecond:
        when = when.replace(microsecond=0) + timedelta(seconds=1)
    return f"at({when.strftime('%Y-%m-%dT%H:%M:%S')})"


class Schedules:
    def __init__(self, client: EventBridgeSchedulerClient, group: str, target: ScheduleTarget) -> None:
        self.client = client
        self.group = group
        self.target = target

    def _target(self, payload: dict[str, Any], queue_arn: str | None = None) -> dict[str, Any]:
        target: dict[str, Any] = {
            "Arn": queue_arn or self.target.queue_arn,
            "RoleArn": self.target.role_arn,
            "Input": dumps(payload),
            "RetryPolicy": {
                "MaximumRetryAttempts": self.target.max_retry_attempts,
                "MaximumEventAgeInSeconds": self.target.max_event_age_s,
            },
        }
        if self.target.dead_letter_arn:
            target["DeadLetterConfig"] = {"Arn": self.target.dead_letter_arn}
        return target

    def create_one_time(self, name: str, when: datetime, payload: dict[str, Any]) -> bool:
        """Create a one-time ``at()`` schedule that deletes itself. False if it exists already."""
        created = call_or_none(
            f"create schedule {name}",
            lambda: self.client.create_schedule(
                Name=name,
                GroupName=self.group,
                ScheduleExpression=at_expression(when),
                ScheduleExpressionTimezone="UTC",
                FlexibleTimeWindow={"Mode": "OFF"},
                Target=self._target(payload),  # type: ignore[arg-type]
                ActionAfterCompletion="DELETE",
                State="ENABLED",
                Description="Rebound retry",
            ),
            none_on="ConflictException",
        )
        return created is not None

    def put_recurring(
        self,
        name: str,
        expression: str,
        timezone: str,
        payload: dict[str, Any],
        *,
        enabled: bool = True,
        window_minutes: int | None = None,
        description: str = "",
        end: datetime | None = None,
        queue_arn: str | None = None,
    ) -> str:
        """Create or update a recurring schedule. Returns ``created``, ``updated`` or ``unchanged``.
        It targets the execution queue, or ``queue_arn`` (a workstream's targets the escalation queue)."""
        window: dict[str, Any] = (
            {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": window_minutes}
            if window_minutes
            else {"Mode": "OFF"}
        )
        args: dict[str, Any] = {
            "Name": name,
            "GroupName": self.group,
            "ScheduleExpression": expression,
            "ScheduleExpressionTimezone": timezone,
            "FlexibleTimeWindow": window,
            "Target": self._target(payload, queue_arn),
            "State": "ENABLED" if enabled else "DISABLED",
            "Description": description[:512],
        }
        if end is not None:
            args["EndDate"] = end
        current = self.get(name)
        try:
            if current is None:
                self.client.create_schedule(**args)
                return "created"
            same = (
                current.get("ScheduleExpression") == expression
                and current.get("ScheduleExpressionTimezone") == timezone
                and current.get("State") == args["State"]
                and current.get("Target", {}).get("Input") == args["Target"]["Input"]
                and current.get("Target", {}).get("Arn") == args["Target"]["Arn"]
                and current.get("FlexibleTimeWindow", {}).get("Mode") == window["Mode"]
                and current.get("FlexibleTimeWindow", {}).get("MaximumWindowInMinutes")
                == window.get("MaximumWindowInMinutes")
                and _same_instant(current.get("EndDate"), end)
            )
            if same:
                return "unchanged"
            self.client.update_schedule(**args)
            return "updated"
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"write schedule {name}") from exc

    def delete(self, name: str) -> bool:
        deleted = call_or_none(
            f"delete schedule {name}",
            lambda: self.client.delete_schedule(Name=name, GroupName=self.group),
            none_on="ResourceNotFoundException",
        )
        return deleted is not None

    def get(self, name: str) -> dict[str, Any] | None:
        found = call_or_none(
            f"read schedule {name}",
            lambda: self.client.get_schedule(Name=name, GroupName=self.group),
            none_on="ResourceNotFoundException",
        )
        return dict(found) if found is not None else None

    def states(self, prefix: str) -> dict[str, str]:
        """Every schedule of the group whose name starts with ``prefix``: name -> state."""
        out: dict[str, str] = {}
        try:
            pages = self.client.get_paginator("list_schedules").paginate(
                GroupName=self.group, NamePrefix=prefix
            )
            for page in pages:
                for item in page.get("Schedules", []):
                    out[str(item["Name"])] = str(item.get("State", "?"))
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "list schedules") from exc
        return out


def _same_instant(stored: Any, wanted: datetime | None) -> bool:
    """Scheduler answers dates as datetimes (or, from some clients, ISO text or epoch seconds)."""
    if stored in (None, "") or wanted is None:
        return stored in (None, "") and wanted is None
    if isinstance(stored, int | float):
        stored = datetime.fromtimestamp(float(stored), tz=UTC)
    elif isinstance(stored, str):
        stored = datetime.fromisoformat(stored.replace("Z", "+00:00"))
    if isinstance(stored, datetime) and stored.tzinfo is None:
        stored = stored.replace(tzinfo=UTC)
    return bool(abs((stored - wanted).total_seconds()) < 1)
