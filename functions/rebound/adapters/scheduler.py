"""EventBridge Scheduler: one-time retry schedules and task schedules, targeting the execution queue,
and the schedules that start workstreams, targeting the escalation queue."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import call_or_none, translate
from rebound.domain.jsonutil import canonical_bytes, dumps
from rebound.engine.ports import Listed, RecurringSchedule, Synced, SyncResult

if TYPE_CHECKING:
    from mypy_boto3_scheduler import EventBridgeSchedulerClient

SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
LIST_PAGE = 100
"""Schedules per ``ListSchedules`` page (the API's maximum)."""


def _no_pace() -> None:
    return None


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


class SchedulerSchedules:
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

    def _recurring_args(self, schedule: RecurringSchedule) -> dict[str, Any]:
        """The ``CreateSchedule`` / ``UpdateSchedule`` request that makes Scheduler hold ``schedule``."""
        window: dict[str, Any] = (
            {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": schedule.window_minutes}
            if schedule.window_minutes
            else {"Mode": "OFF"}
        )
        args: dict[str, Any] = {
            "Name": schedule.name,
            "GroupName": self.group,
            "ScheduleExpression": schedule.expression,
            "ScheduleExpressionTimezone": schedule.timezone,
            "FlexibleTimeWindow": window,
            "Target": self._target(dict(schedule.payload), schedule.queue_arn),
            "State": "ENABLED" if schedule.enabled else "DISABLED",
            "Description": schedule.description[:512],
        }
        if schedule.end is not None:
            args["EndDate"] = schedule.end
        return args

    def put_recurring(self, schedule: RecurringSchedule, pace: Callable[[], None] = _no_pace) -> str:
        """Create or update a recurring schedule. Returns ``created``, ``updated`` or ``unchanged``:
        the schedule is read, and written only when it differs. ``pace()`` runs before each request."""
        return self._put(self._recurring_args(schedule), pace)[0]

    def _put(
        self, args: dict[str, Any], pace: Callable[[], None], exists: bool | None = None
    ) -> tuple[str, dict[str, Any] | None]:
        """``put_recurring`` of the request ``args``: the outcome, and the schedule read when it
        was found unchanged. ``exists`` (when the caller knows) skips the read."""
        if exists is None:
            pace()
            current = self.get(str(args["Name"]))
            if current is not None and _same(current, args):
                return "unchanged", current
            exists = current is not None
        pace()
        return self._write(args, exists=exists), None

    def sync_recurring(
        self,
        schedule: RecurringSchedule,
        *,
        known: Synced | None = None,
        listing: Mapping[str, Listed] | None = None,
        pace: Callable[[], None] = _no_pace,
    ) -> SyncResult:
        """``put_recurring`` that reads only what it must, and says what Scheduler now holds.

        ``known`` is what an earlier sync verified (the request's fingerprint and the schedule's
        ``LastModificationDate`` then); ``listing`` what ``listing()`` said of the group (None: no
        listing was made). Any change to a schedule moves its ``LastModificationDate``, so a
        schedule listed with the date ``known`` holds, in the state and with the target asked for,
        and asked for with the same fingerprint, is unchanged without a request. One the listing
        lacks is created without a read; one ``known`` names at its listed date is written without a
        read (it holds what ``known`` verified, and that is not what is asked for); any other is
        read and written only when it differs (``put_recurring``). A written schedule is read back,
        and the result's ``synced`` is what the next sync may trust (None when the read-back differs
        from what was written: someone else wrote it in between). ``pace()`` runs before each request.
        """
        args = self._recurring_args(schedule)
        fingerprint = hashlib.sha256(canonical_bytes(args)).hexdigest()
        listed = listing.get(schedule.name) if listing is not None else None
        exists: bool | None = None  # unknown: read it
        if listed is not None and known is not None and known.modified == listed.modified:
            as_asked = listed.state == args["State"] and listed.target_arn == args["Target"]["Arn"]
            if as_asked and known.fingerprint == fingerprint:
                return SyncResult("unchanged", known)
            exists = True  # it holds what `known` verified, or was changed at that same instant
        elif listing is not None and listed is None:
            exists = False
        outcome, current = self._put(args, pace, exists)
        if current is not None:
            return SyncResult(outcome, Synced(fingerprint, _modified(current)))
        pace()
        back = self.get(schedule.name)
        verified = back is not None and _same(back, args)
        return SyncResult(outcome, Synced(fingerprint, _modified(back)) if back and verified else None)

    def _write(self, args: dict[str, Any], *, exists: bool) -> str:
        try:
            if exists:
                self.client.update_schedule(**args)
                return "updated"
            self.client.create_schedule(**args)
            return "created"
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"write schedule {args['Name']}") from exc

    def listing(self, prefix: str, pace: Callable[[], None] = _no_pace) -> dict[str, Listed]:
        """Every schedule of the group whose name starts with ``prefix``: name -> its
        ``LastModificationDate`` (ISO), state and target ARN, one ``ListSchedules`` request per 100
        (``pace()`` before each)."""
        out: dict[str, Listed] = {}
        token: str | None = None
        while True:
            pace()
            extra: dict[str, Any] = {"NextToken": token} if token else {}
            try:
                page = self.client.list_schedules(
                    GroupName=self.group, NamePrefix=prefix, MaxResults=LIST_PAGE, **extra
                )
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, "list schedules") from exc
            for item in page.get("Schedules", []):
                out[item["Name"]] = Listed(
                    _modified(dict(item)), item.get("State", "?"), item.get("Target", {}).get("Arn", "")
                )
            token = page.get("NextToken")
            if not token:
                return out

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
        return {name: listed.state for name, listed in self.listing(prefix).items()}


def _same(current: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
    """Whether the schedule Scheduler holds is the one ``args`` would write: expression, time
    zone, state, flexible window, end date and the whole target (queue, role, input, retry
    policy, dead-letter queue)."""
    held, wanted = current.get("Target", {}), args["Target"]
    window, wanted_window = current.get("FlexibleTimeWindow", {}), args["FlexibleTimeWindow"]
    return (
        current.get("ScheduleExpression") == args["ScheduleExpression"]
        and current.get("ScheduleExpressionTimezone") == args["ScheduleExpressionTimezone"]
        and current.get("State") == args["State"]
        and all(held.get(k) == v for k, v in wanted.items())
        and window.get("Mode") == wanted_window["Mode"]
        and window.get("MaximumWindowInMinutes") == wanted_window.get("MaximumWindowInMinutes")
        and _same_instant(current.get("EndDate"), args.get("EndDate"))
    )


def _modified(schedule: Mapping[str, Any]) -> str:
    """A schedule's ``LastModificationDate`` as ISO text (botocore answers a datetime)."""
    value = schedule.get("LastModificationDate")
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return str(value)


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
