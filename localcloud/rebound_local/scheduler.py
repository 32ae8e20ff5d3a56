"""Fire EventBridge Scheduler schedules stored in moto, with Scheduler's semantics.

moto stores schedules but never fires them. This engine indexes every schedule in every group,
computes its next fire time with ``rebound.domain.cron.next_fire`` (cron in the schedule's time
zone, rate from its start, one-time ``at()``; Scheduler's DST rules), and when one is due it
delivers the target's ``Input`` to the target queue with the ``<aws.scheduler.*>`` context
attributes filled in. ``DISABLED`` schedules do not fire; ``ActionAfterCompletion=DELETE`` removes
a one-time schedule after it fired; a flexible time window delays delivery by a deterministic
offset inside the window. Locally a schedule fires at second 0 of its minute (Scheduler may fire
anywhere in the minute).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rebound.domain import cron
from rebound_local import motopatch

log = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass
class _Entry:
    key: Key
    fingerprint: tuple[Any, ...]
    due: datetime | None  # when to deliver (nominal time + flexible-window offset)
    nominal: datetime | None  # the scheduled time Scheduler reports


def _as_datetime(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _is_one_time(expression: str) -> bool:
    return expression.strip().startswith("at(")


def iso_seconds(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_uuid(rng: random.Random) -> uuid.UUID:
    """A version-4 UUID drawn from ``rng`` (an execution id, a request id)."""
    return uuid.UUID(int=rng.getrandbits(128), version=4)


class SchedulerEngine:
    def __init__(
        self,
        backend: Callable[[], Any],
        now: Callable[[], datetime],
        deliver: Callable[[str, str], None],
        invocations_per_s: int | None = None,
        *,
        ids: random.Random,
    ) -> None:
        self._backend = backend
        self._ids = ids
        """Where each fire's execution id is drawn from."""
        self._now = now
        self.deliver = deliver
        """Where a fire goes: ``deliver(target_arn, input)``. The simulator wraps it to watch fires."""
        self.recurring_frozen = False
        self._entries: dict[Key, _Entry] = {}
        self._heap: list[tuple[datetime, int, Key]] = []
        self._seq = itertools.count()
        self._last_fired: dict[Key, datetime] = {}
        self._seen_version = -1
        self.fired = 0
        self.failed = 0
        self.invocations_per_s = invocations_per_s
        """Scheduler's target-invocation quota; None for unlimited."""
        self._second: datetime | None = None
        self._fired_this_second = 0

    # --- index ---------------------------------------------------------------------------------
    def _schedules(self) -> list[Any]:
        backend = self._backend()
        with motopatch.LOCK:
            return [s for group in backend.schedule_groups.values() for s in group.schedules.values()]

    def refresh(self) -> None:
        """Re-read schedules if any was created, updated or deleted since the last look."""
        version = motopatch.versions["scheduler"]
        if version == self._seen_version:
            return
        self._seen_version = version
        now = self._now()
        live: set[Key] = set()
        for schedule in self._schedules():
            key = (schedule.group_name, schedule.name)
            live.add(key)
            fingerprint = (
                schedule.schedule_expression,
                schedule.schedule_expression_timezone,
                schedule.state,
                str(schedule.start_date),
                str(schedule.end_date),
                schedule.target.get("Input"),
                str(schedule.flexible_time_window),
                schedule.last_modified_date,
            )
            entry = self._entries.get(key)
            if entry is not None and entry.fingerprint == fingerprint:
                continue
            after = max(self._last_fired.get(key, now - timedelta(seconds=1)), now - timedelta(seconds=1))
            self._entries[key] = self._plan(key, schedule, fingerprint, after)
        for key in set(self._entries) - live:
            del self._entries[key]

    def freeze_recurring(self) -> None:
        """From now on only one-time ``at()`` schedules fire (the simulator's settle phase)."""
        self.recurring_frozen = True
        for entry in self._entries.values():
            if not _is_one_time(str(entry.fingerprint[0])):
                entry.due = entry.nominal = None

    def _plan(self, key: Key, schedule: Any, fingerprint: tuple[Any, ...], after: datetime) -> _Entry:
        if self.recurring_frozen and not _is_one_time(str(schedule.schedule_expression)):
            return _Entry(key, fingerprint, None, None)
        created = _as_datetime(schedule.creation_date) or self._now()
        start = _as_datetime(schedule.start_date) or created
        try:
            nominal = cron.next_fire(
                schedule.schedule_expression,
                schedule.schedule_expression_timezone or "UTC",
                after,
                start=start,
            )
        except (ValueError, cron.CronError) as exc:
            log.error("schedule %s/%s has an expression that cannot fire: %s", key[0], key[1], exc)
            nominal = None
        end = _as_datetime(schedule.end_date)
        if nominal is not None and end is not None and nominal > end:
            nominal = None
        due = None if nominal is None else nominal + self._flex_offset(key, schedule, nominal)
        entry = _Entry(key, fingerprint, due, nominal)
        if due is not None:
            heapq.heappush(self._heap, (due, next(self._seq), key))
        return entry

    @staticmethod
    def _flex_offset(key: Key, schedule: Any, nominal: datetime) -> timedelta:
        window = schedule.flexible_time_window or {}
        if window.get("Mode") != "FLEXIBLE":
            return timedelta(0)
        minutes = int(window.get("MaximumWindowInMinutes") or 0)
        digest = hashlib.sha256(f"{key}{nominal.isoformat()}".encode()).digest()
        return timedelta(seconds=int.from_bytes(digest[:4], "big") % max(minutes * 60, 1))

    # --- firing --------------------------------------------------------------------------------
    def _next_in_heap(self) -> datetime | None:
        self.refresh()
        while self._heap:
            due, _, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is None or entry.due != due:
                heapq.heappop(self._heap)  # stale heap slot
                continue
            return due
        return None

    def next_due(self) -> datetime | None:
        """When the next fire can happen: its due time, or the next second if the quota is spent."""
        due = self._next_in_heap()
        if due is not None and self._quota_spent(self._now()):
            assert self._second is not None
            return max(due, self._second + timedelta(seconds=1))
        return due

    def _quota_spent(self, now: datetime) -> bool:
        if self.invocations_per_s is None:
            return False
        second = now.replace(microsecond=0)
        if second != self._second:
            self._second, self._fired_this_second = second, 0
        return self._fired_this_second >= self.invocations_per_s

    def fire_due(self) -> int:
        """Deliver every schedule due now, within the quota. Returns how many fired."""
        fired = 0
        now = self._now()
        while True:
            due = self._next_in_heap()
            if due is None or due > now:
                return fired
            if self._quota_spent(now):
                return fired
            _, _, key = heapq.heappop(self._heap)
            entry = self._entries[key]
            assert entry.nominal is not None
            schedule = self._lookup(key)
            if schedule is None:
                del self._entries[key]
                continue
            if schedule.state == "ENABLED":
                self._fire(schedule, entry.nominal)
                fired += 1
                self._fired_this_second += 1
            self._last_fired[key] = entry.nominal
            parsed = cron.parse_schedule_expression(schedule.schedule_expression)
            if isinstance(parsed, cron.AtExpression):
                entry.due = entry.nominal = None
                if schedule.action_after_completion == "DELETE" and schedule.state == "ENABLED":
                    with motopatch.LOCK:
                        self._backend().delete_schedule(key[0], key[1])
                continue
            self._entries[key] = self._plan(key, schedule, entry.fingerprint, entry.nominal)

    def _lookup(self, key: Key) -> Any:
        backend = self._backend()
        with motopatch.LOCK:
            group = backend.schedule_groups.get(key[0])
            return None if group is None else group.schedules.get(key[1])

    def _fire(self, schedule: Any, nominal: datetime) -> None:
        target = schedule.target
        payload = str(target.get("Input") or "{}")
        payload = (
            payload.replace("<aws.scheduler.scheduled-time>", iso_seconds(nominal))
            .replace("<aws.scheduler.schedule-arn>", schedule.arn)
            .replace("<aws.scheduler.execution-id>", str(random_uuid(self._ids)))
            .replace("<aws.scheduler.attempt-number>", "1")
        )
        arn = str(target.get("Arn", ""))
        try:
            self.deliver(arn, payload)
            self.fired += 1
        except Exception as exc:  # Scheduler keeps going; the message would go to the schedule's DLQ
            self.failed += 1
            log.error("schedule %s could not deliver to %s: %s", schedule.name, arn, exc)
