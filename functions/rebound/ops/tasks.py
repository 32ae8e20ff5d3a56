"""Registering tasks: declarative, idempotent, audited.

``plan`` compares the desired definitions with what is stored and says, per task, whether it
will be created, updated or left alone (with a field-level diff). ``apply`` writes the task
record (version-guarded, with an audit record) and its schedules. A task's schedules are written
after its record, so a failure part-way leaves a record whose schedules the next apply repairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from rebound.adapters.dynamo import StoredTask
from rebound.domain.errors import ConfigError, PolicyNotFound, TaskNotFound, ValidationFailed
from rebound.domain.models import Task, TaskState
from rebound.engine.deps import Deps
from rebound.ops.schedules import fire_payload, planned_schedules


class Change(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class TaskChange:
    task: Task
    change: Change
    previous: StoredTask | None = None
    diff: dict[str, tuple[Any, Any]] = field(default_factory=dict)


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    schedules_written: int = 0


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value


def task_diff(old: Task | None, new: Task) -> dict[str, tuple[Any, Any]]:
    """Changed fields as ``path -> (old, new)``."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    if old is not None:
        _flatten("", old.model_dump(mode="json", exclude_none=True), before)
    _flatten("", new.model_dump(mode="json", exclude_none=True), after)
    return {
        k: (before.get(k), after.get(k))
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    }


class TaskOps:
    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor

    def validate(self, task: Task) -> None:
        """Refuse what would fail at run time: unknown policies, bad overrides, untranslatable schedules."""
        try:
            self.deps.policies.for_task(task)
        except PolicyNotFound as exc:
            raise ValidationFailed(f"task {task.id}: {exc.message}", key_path="retry_policy") from None
        except ConfigError as exc:
            raise ValidationFailed(
                f"task {task.id}: retry_policy: {exc.problem}", key_path="retry_policy"
            ) from None
        planned_schedules(task)

    def plan(self, tasks: Iterable[Task]) -> list[TaskChange]:
        changes: list[TaskChange] = []
        for task in tasks:
            self.validate(task)
            previous = self.store.get_task(task.id)
            if previous is None:
                changes.append(TaskChange(task, Change.CREATE, None, task_diff(None, task)))
                continue
            diff = task_diff(previous.task, task)
            changes.append(TaskChange(task, Change.UPDATE if diff else Change.UNCHANGED, previous, diff))
        return changes

    def apply(
        self,
        changes: Iterable[TaskChange],
        at: Callable[[], datetime] | None = None,
        progress: Callable[[TaskChange], None] | None = None,
    ) -> ApplyResult:
        now = at or self.deps.clock.now
        result = ApplyResult()
        for change in changes:
            if change.change is Change.UNCHANGED:
                result.unchanged.append(change.task.id)
                result.schedules_written += self._write_schedules(change.task, change.previous)
            else:
                stored = self.store.save_task(
                    change.task,
                    previous=change.previous,
                    actor=self.actor,
                    at=now(),
                    action="registered" if change.change is Change.CREATE else "updated",
                    schedule_names=tuple(p.name for p in planned_schedules(change.task)),
                    evidence={"diff": {k: list(v) for k, v in change.diff.items()}}
                    if change.previous
                    else None,
                )
                result.schedules_written += self._write_schedules(stored.task, change.previous)
                (result.created if change.change is Change.CREATE else result.updated).append(change.task.id)
            if progress:
                progress(change)
        return result

    def _write_schedules(self, task: Task, previous: StoredTask | None) -> int:
        planned = planned_schedules(task)
        written = 0
        for plan in planned:
            outcome = self.deps.schedules.put_recurring(
                plan.name,
                plan.expression,
                plan.timezone,
                fire_payload(task.id),
                enabled=task.state is TaskState.ACTIVE,
                description=f"Rebound task {task.id}",
            )
            written += outcome != "unchanged"
        keep = {p.name for p in planned}
        for old in previous.schedule_names if previous else ():
            if old not in keep:
                self.deps.schedules.delete(old)
        return written

    def set_state(self, task_id: str, state: TaskState, reason: str = "") -> StoredTask:
        """Pause or resume: the record and every schedule of the task follow."""
        current = self.store.get_task(task_id)
        if current is None:
            raise TaskNotFound(f"no task {task_id!r}", task_id=task_id)
        if current.task.state is state:
            return current
        task = current.task.model_copy(update={"state": state})
        stored = self.store.save_task(
            task,
            previous=current,
            actor=self.actor,
            at=self.deps.clock.now(),
            action="paused" if state is TaskState.PAUSED else "resumed",
            schedule_names=current.schedule_names,
            evidence={"reason": reason} if reason else None,
        )
        self._write_schedules(task, current)
        return stored
