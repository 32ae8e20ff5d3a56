"""A task as stored: its definition plus what the store keeps beside it (version, chain head,
pause and activation instants, the Scheduler schedules it owns)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rebound.domain.audit import GENESIS
from rebound.domain.fire_segments import FireSegment, advance, lists_by_fire
from rebound.domain.task import Task, TaskState
from rebound.domain.timefmt import iso, parse_utc


@dataclass(frozen=True)
class StoredTask:
    task: Task
    version: int
    updated_at: str
    schedule_names: tuple[str, ...] = ()
    audit_seq: int = 0
    audit_head: str = GENESIS
    paused_at: datetime | None = None
    active_since: datetime | None = None
    """When the task last became active (registered or resumed): the run ledger looks from here."""
    fire_segments: tuple[FireSegment, ...] = ()
    """The spans its schedule was in force in, from its first save under this layout: the runs of
    their fires are found by key (``rebound.domain.fire_segments``)."""

    @property
    def paused(self) -> bool:
        return self.task.state is TaskState.PAUSED

    def paused_for(self, scheduled_for: datetime) -> bool:
        """Whether a fire for ``scheduled_for`` falls in the pause (a fire due earlier still runs)."""
        return self.paused and (self.paused_at is None or scheduled_for > self.paused_at)

    def lists_by_fire(self, run_id: str, scheduled_for: datetime) -> bool:
        """Whether the run ``run_id`` of this task is found by its fire (``Run.by_fire``)."""
        return lists_by_fire(self.fire_segments, self.task.id, run_id, scheduled_for)

    @classmethod
    def saved(
        cls,
        task: Task,
        previous: StoredTask | None,
        *,
        at: datetime,
        schedule_names: tuple[str, ...],
        audit_seq: int,
        audit_head: str,
        forget_before: datetime | None = None,
    ) -> StoredTask:
        """The task as a save at ``at`` stores it over ``previous``: the next version; paused since
        the pause began (``at`` for a new pause); active since it was registered or last resumed;
        its fire segments advanced (closed ones that ended before ``forget_before`` dropped)."""
        paused_at: datetime | None = None
        if task.state is TaskState.PAUSED:
            paused_at = previous.paused_at if previous is not None and previous.paused else at
        if previous is None or (previous.paused and task.state is TaskState.ACTIVE):
            active_since = at
        else:
            active_since = previous.active_since or at
        segments = advance(
            previous.fire_segments if previous is not None else (),
            task.schedule,
            task.state is TaskState.ACTIVE,
            active_since,
            at,
            forget_before=forget_before,
        )
        return cls(
            task=task,
            version=(previous.version + 1) if previous else 1,
            updated_at=iso(at),
            schedule_names=schedule_names,
            audit_seq=audit_seq,
            audit_head=audit_head,
            paused_at=paused_at,
            active_since=active_since,
            fire_segments=segments,
        )

    def to_record(self) -> dict[str, Any]:
        """The stored record (JSON values): the definition and what the store keeps beside it."""
        return {
            "task_id": self.task.id,
            "tenant": self.task.tenant,
            "state": self.task.state.value,
            "definition": self.task.model_dump(mode="json"),
            "version": self.version,
            "updated_at": self.updated_at,
            "schedule_names": list(self.schedule_names),
            "audit_seq": self.audit_seq,
            "audit_head": self.audit_head,
            "paused_at": iso(self.paused_at) if self.paused_at else None,
            "active_since": iso(self.active_since) if self.active_since else None,
            "fire_segments": [s.to_record() for s in self.fire_segments] or None,
        }

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> StoredTask:
        return cls(
            task=Task.model_validate(data["definition"]),
            version=int(data["version"]),
            updated_at=str(data["updated_at"]),
            schedule_names=tuple(data.get("schedule_names") or ()),
            audit_seq=int(data.get("audit_seq", 0)),
            audit_head=str(data.get("audit_head", GENESIS)),
            paused_at=parse_utc(data["paused_at"]) if data.get("paused_at") else None,
            active_since=parse_utc(data["active_since"]) if data.get("active_since") else None,
            fire_segments=tuple(FireSegment.from_record(s) for s in data.get("fire_segments") or ()),
        )
