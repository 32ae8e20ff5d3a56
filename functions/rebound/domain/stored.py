"""A task as stored: its definition plus what the store keeps beside it (version, chain head,
pause and activation instants, the Scheduler schedules it owns)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rebound.domain.audit import GENESIS
from rebound.domain.models import Task, TaskState


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

    @property
    def paused(self) -> bool:
        return self.task.state is TaskState.PAUSED

    def paused_for(self, scheduled_for: datetime) -> bool:
        """Whether a fire for ``scheduled_for`` falls in the pause (a fire due earlier still runs)."""
        return self.paused and (self.paused_at is None or scheduled_for > self.paused_at)
