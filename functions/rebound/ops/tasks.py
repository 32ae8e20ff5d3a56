"""Registering tasks: declarative, idempotent, audited.

``plan`` compares the desired definitions with what is stored and says, per task, whether it
will be created, updated or left alone (with a field-level diff). ``apply`` writes the task
record (version-guarded, with an audit record) and its schedules. A task's schedules are written
after its record, so a failure part-way leaves a record whose schedules the next apply repairs.

Bulk applies are paced: every EventBridge Scheduler request takes a token from a ``RateLimiter``
(the Scheduler quota is per account and region, and the engine's one-time retry schedules share
it), and a call that is still throttled after botocore's own retries is retried with exponential
backoff while the limiter slows down. A bulk apply reads no schedule it can show unchanged: it
lists the group and compares with what the last sync recorded (``rebound.ops.schedule_sync``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from rebound.config.loader import load_task_file, load_yaml, parse_task_document
from rebound.domain.errors import ConfigError, Conflict, PolicyNotFound, TaskNotFound, ValidationFailed
from rebound.domain.flags import TASK_SCHEDULER_V3
from rebound.domain.ids import manual_run_id, task_rule_name
from rebound.domain.item_size import HEADROOM, ITEM_LIMIT, fits, item_size
from rebound.domain.jsonutil import canonical_bytes, dumps
from rebound.domain.schedules import fire_payload, planned_schedules, schedule_notes
from rebound.domain.stored import StoredTask
from rebound.domain.target_safety import task_problems
from rebound.domain.task import Task, TaskState, TenantSettings
from rebound.domain.tenancy import short_id
from rebound.domain.timefmt import iso, parse_utc
from rebound.domain.workstreams import TaskDocument
from rebound.engine.deps import Deps
from rebound.engine.ledger import Ledger, LedgerReport
from rebound.engine.ports import RecurringSchedule
from rebound.ops.access import UNGUARDED, Guard, find_task
from rebound.ops.preview import PreviewFire, preview_fires
from rebound.ops.schedule_sync import SyncView
from rebound.ops.task_views import ScheduleStatus, TaskDetail
from rebound.ops.throttle import Backoff, RateLimiter

T = TypeVar("T")

SCHEDULER_RATE = 50.0
"""Scheduler requests per second a bulk apply makes by default: the lowest per-operation default
quota AWS documents (CreateSchedule, UpdateSchedule, GetSchedule; 50 TPS in some Regions, more in
others). Raise it with ``--rate`` where your account's quota is higher."""
SCAN_ABOVE = 25
"""Plans for more tasks than this read every stored task in one scan instead of one read each."""


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
    rules_written: int = 0
    throttled: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "schedules_written": self.schedules_written,
            "rules_written": self.rules_written,
            "throttled": self.throttled,
        }


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value


def change_view(change: TaskChange) -> dict[str, Any]:
    """A planned change as the CLI's JSON and the API show it."""
    return {
        "id": change.task.id,
        "change": change.change.value,
        "diff": {path: {"from": old, "to": new} for path, (old, new) in change.diff.items()},
    }


def write_sizes(task: Task) -> dict[str, int]:
    """The largest items registering or updating ``task`` writes, by what they are, as DynamoDB
    counts them: the task item, and the audit record of an update whose diff changes every field
    (the old and the new value of each, plus the whole definition)."""
    definition = task.model_dump(mode="json", exclude_none=True)
    leaves: dict[str, Any] = {}
    _flatten("", definition, leaves)
    hash_ = "0" * 64
    task_item = item_size(
        {"task_id": task.id, "tenant": task.tenant, "state": task.state.value, "version": 1},
        {"task": definition, "updated_at": "2000-01-01T00:00:00Z", "audit_head": hash_},
    )
    audit_item = item_size(
        {"subject": f"task#{task.id}", "seq": 1},
        {
            "at": "2000-01-01T00:00:00Z",
            "actor": "x" * 128,
            "action": "updated",
            "from_state": task.state.value,
            "to_state": task.state.value,
            "evidence": {
                "diff": {path: [value, value] for path, value in leaves.items()},
                "definition": task.model_dump(mode="json", exclude_defaults=True),
            },
            "prev_hash": hash_,
            "hash": hash_,
        },
    )
    return {"task item": task_item, "audit record of an update": audit_item}


def task_diff(old: Task | None, new: Task) -> dict[str, tuple[Any, Any]]:
    """Changed fields as ``path -> (old, new)``."""
    return definition_diff(
        old.model_dump(mode="json", exclude_none=True) if old is not None else None,
        new.model_dump(mode="json", exclude_none=True),
    )


def definition_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Changed fields of two definitions as JSON, as ``path -> (old, new)``."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    if old is not None:
        _flatten("", old, before)
    _flatten("", new, after)
    return {
        k: (before.get(k), after.get(k))
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    }


def _schedules_diff(previous: StoredTask, task: Task) -> dict[str, tuple[Any, Any]]:
    """For a definition that has not changed: the schedules, when this version of Rebound deploys it as
    other schedules than the stored task holds (a Unix cron translated anew), so the update stores their
    names and removes the ones it no longer has."""
    names = [p.name for p in planned_schedules(task)]
    if not previous.schedule_names or names == list(previous.schedule_names):
        return {}
    return {"schedules": (list(previous.schedule_names), names)}


class TaskOps:
    def __init__(
        self,
        deps: Deps,
        actor: str,
        *,
        limiter: RateLimiter | None = None,
        backoff: Backoff | None = None,
        guard: Guard = UNGUARDED,
    ) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor
        self.guard = guard
        """Asked before every read or change of a tenant's task (``rebound.api.auth.Gate``)."""
        self.limiter = limiter
        self.backoff = backoff or Backoff()
        self._valid_policies: set[bytes] = set()
        self.last_resume: LedgerReport | None = None

    # --------------------------------------------------------------------------- reading
    def load(self, path: Path | str) -> list[Task]:
        """Tasks from a task file, checked against the environment's retry policies."""
        return load_task_file(path, self.deps.policies.book)

    def load_document(self, path: Path | str) -> TaskDocument:
        """A task file's tasks, its tenants' settings, its workstreams and resources (whose steps
        may name the file's tasks or tasks registered already)."""
        data = load_yaml(path)
        known = (
            {s.task.id: s.task.tenant for s in self.store.list_tasks()}
            if isinstance(data, dict) and data.get("workstreams")
            else None
        )
        return parse_task_document(data, str(path), self.deps.policies.book, known_tasks=known)

    def apply_tenants(self, tenants: dict[str, TenantSettings]) -> list[str]:
        """Store tenant settings that differ from what is stored. Returns the tenants changed."""
        changed = []
        for name, settings in sorted(tenants.items()):
            self.guard.check("tasks:register", name)  # a quota is the tenant's own
            if self.store.get_tenant(name) != settings:
                self.store.put_tenant(name, settings, actor=self.actor, at=self.deps.clock.now())
                changed.append(name)
        return changed

    def get(self, task_id: str, action: str = "tasks:read") -> StoredTask:
        """The task ``task_id`` (its key, ``acme.nightly``; a short id is looked up among the tasks
        the caller may see, and must name one), once the caller may do ``action`` on its tenant."""
        stored = find_task(self.store, task_id, self.guard)
        if stored is None:
            raise TaskNotFound.of(task_id)
        self.guard.check(action, stored.task.tenant)
        return stored

    def find(self, *, tenant: str | None = None, state: TaskState | None = None) -> list[StoredTask]:
        """The tasks the caller may see (of ``tenant``, in ``state``)."""
        self.guard.check("tasks:read", tenant)  # a caller with no tenant may not even list
        return [
            s
            for s in self.store.list_tasks()
            if (tenant is None or s.task.tenant == tenant)
            and (state is None or s.task.state is state)
            and self.guard.sees(s.task.tenant)
        ]

    def show(self, task_id: str, *, runs: int = 10, fires: int = 5) -> TaskDetail:
        stored = self.get(task_id)
        task_id = stored.task.id
        schedules = [self._schedule_status(stored, plan) for plan in planned_schedules(stored.task)]
        recent = self.store.runs_for_task(task_id, limit=runs)
        upcoming = self.preview(task_id, fires) if stored.task.schedule is not None else []
        notes = schedule_notes(stored.task.schedule)
        return TaskDetail(stored, schedules, recent, [f for f in upcoming if f.fires], notes)

    def _schedule_status(self, stored: StoredTask, plan: Any) -> ScheduleStatus:
        live = self.deps.schedules.get(plan.name)
        if live is None:
            return ScheduleStatus(
                plan.name, plan.expression, plan.timezone, "missing", "schedule does not exist"
            )
        state = str(live.get("State", "?"))
        drift = None
        if live.get("ScheduleExpression") != plan.expression:
            drift = f"expression is {live.get('ScheduleExpression')}"
        elif live.get("ScheduleExpressionTimezone") != plan.timezone:
            drift = f"time zone is {live.get('ScheduleExpressionTimezone')}"
        elif (state == "ENABLED") != (stored.task.state is TaskState.ACTIVE):
            drift = f"schedule is {state} but the task is {stored.task.state.value}"
        return ScheduleStatus(plan.name, plan.expression, plan.timezone, state, drift)

    def preview(self, task_id: str, count: int, after: datetime | None = None) -> list[PreviewFire]:
        """The task's next ``count`` fires in its time zone, with DST changes marked."""
        task = self.get(task_id).task
        task_id = task.id
        if task.schedule is None:
            raise ValidationFailed(
                f"task {task_id} is triggered by events, not a schedule; it has no fire times",
                key_path="schedule",
            )
        start = None
        if task.schedule.rate is not None:
            live = self.deps.schedules.get(planned_schedules(task)[0].name) or {}
            first = live.get("StartDate") or live.get("CreationDate")
            start = parse_utc(first) if first else None
        return preview_fires(task.schedule, after or self.deps.clock.now(), count, rate_start=start)

    # --------------------------------------------------------------------------- writing
    def validate(self, task: Task) -> None:
        """Refuse what would fail at run time: unknown policies, bad overrides, untranslatable
        schedules, targets the environment does not allow, definitions too large to store."""
        settings = self.deps.settings
        rules, source, env = settings.target_rules, settings.event_source, settings.environment
        for where, problem in task_problems(task, rules, source, env):
            raise ValidationFailed(f"task {task.id}: {where}: {problem}", key_path=where)
        largest, what = max((size, what) for what, size in write_sizes(task).items())
        if not fits(largest):
            payload = len(dumps(task.payload).encode())
            raise ValidationFailed(
                f"task {task.id}: payload: the task is too large to store: its {what} would be "
                f"{largest} bytes, and DynamoDB items hold {ITEM_LIMIT} (with {HEADROOM} kept for "
                f"fields a task gains later); the payload takes {payload} of them as stored. "
                "Keep large data elsewhere (S3) and pass a reference in the payload",
                key_path="payload",
            )
        key = canonical_bytes(
            task.retry_policy if isinstance(task.retry_policy, str) else task.retry_policy.model_dump()
        )
        try:
            if key not in self._valid_policies:
                self.deps.policies.for_task(task)
                name = task.policy_name
                if self.deps.policies.missing_in_environment(name):
                    deployed = ", ".join(self.deps.policies.deployed or ())
                    raise ValidationFailed(
                        f"task {task.id}: retry policy {name!r} is not in environment "
                        f"{self.deps.settings.environment!r} (its functions were deployed with: {deployed}); "
                        f"deploy the config that defines it, or store it there first with "
                        f"`rebound policies set {name} KEY=VALUE`",
                        key_path="retry_policy",
                    )
                self._valid_policies.add(key)
        except PolicyNotFound as exc:
            raise ValidationFailed(f"task {task.id}: {exc.message}", key_path="retry_policy") from None
        except ConfigError as exc:
            raise ValidationFailed(
                f"task {task.id}: retry_policy: {exc.problem}", key_path="retry_policy"
            ) from None
        planned_schedules(task)

    def plan(self, tasks: Iterable[Task], *, allow_past: bool = False) -> list[TaskChange]:
        """What applying ``tasks`` would change. A one-time ``at`` already past is refused for a
        new task, or one whose ``at`` changes, unless ``allow_past`` (it fires at once)."""
        wanted = list(tasks)
        stored = {s.task.id: s for s in self.store.list_tasks()} if len(wanted) > SCAN_ABOVE else None
        changes: list[TaskChange] = []
        now = self.deps.clock.now()
        for task in wanted:
            self.guard.check("tasks:register", task.tenant)
            self.validate(task)
            previous = stored.get(task.id) if stored is not None else self.store.get_task(task.id)
            self._refuse_other_owner(task, previous, stored)
            at = task.schedule.at if task.schedule is not None else None
            was = previous.task.schedule.at if previous and previous.task.schedule else None
            if at is not None and at < now and at != was and not allow_past:
                raise ValidationFailed(
                    f"task {task.id}: schedule.at {iso(at)} is in the past (now {iso(now)}); a "
                    "one-time task would fire at once. Give a future time, or pass --allow-past "
                    "(API: allow_past: true) to run it now",
                    key_path="schedule.at",
                )
            if previous is None:
                changes.append(TaskChange(task, Change.CREATE, None, task_diff(None, task)))
                continue
            diff = task_diff(previous.task, task) or _schedules_diff(previous, task)
            changes.append(TaskChange(task, Change.UPDATE if diff else Change.UNCHANGED, previous, diff))
        return changes

    def _refuse_other_owner(
        self, task: Task, previous: StoredTask | None, stored: dict[str, StoredTask] | None
    ) -> None:
        """Applying a file never changes another tenant's task, and never registers a tenant's task
        a second time beside its copy stored under the id it had before tenancy."""
        if previous is not None and previous.task.tenant != task.tenant:
            raise Conflict(
                f"task {task.id} belongs to tenant {previous.task.tenant!r}; a task of tenant "
                f"{task.tenant!r} cannot change it (give the task another id)",
                task_id=task.id,
                tenant=previous.task.tenant,
            )
        bare = short_id(task.id)
        if previous is None and bare != task.id:
            legacy = stored.get(bare) if stored is not None else self.store.get_task(bare)
            if legacy is not None and legacy.task.tenant == task.tenant:
                raise Conflict(
                    f"task {bare} of tenant {task.tenant!r} is stored under its id from before "
                    f"tenancy; run `rebound migrate tenancy` to move it to {task.id}, then apply again",
                    task_id=task.id,
                )

    def apply(
        self,
        changes: Iterable[TaskChange],
        at: Callable[[], datetime] | None = None,
        progress: Callable[[TaskChange], None] | None = None,
    ) -> ApplyResult:
        now = at or self.deps.clock.now
        result = ApplyResult()
        throttles_before = self.backoff.throttles
        changes = list(changes)
        view = SyncView.read(
            self.store,
            (plan.name for change in changes for plan in planned_schedules(change.task)),
            lambda prefix: self.backoff.call(
                lambda: self.deps.schedules.listing(prefix, pace=self._pace), self.limiter
            ),
        )
        for change in changes:
            if change.change is Change.UNCHANGED:
                result.unchanged.append(change.task.id)
                result.schedules_written += self._write_schedules(change.task, change.previous, view)
                result.rules_written += self._write_rule(change.task, change.previous)
            else:
                stored = self.backoff.call(lambda change=change: self._save(change, now()))  # type: ignore[misc]
                result.schedules_written += self._write_schedules(stored.task, change.previous, view)
                result.rules_written += self._write_rule(stored.task, change.previous)
                (result.created if change.change is Change.CREATE else result.updated).append(change.task.id)
            if progress:
                progress(change)
        result.throttled = self.backoff.throttles - throttles_before
        return result

    def write_triggers(self, task: Task, previous: StoredTask | None) -> tuple[int, int]:
        """Make ``task``'s schedules (or its rule) what it wants, removing what ``previous`` had
        and it no longer has; returns (schedules written, rules written)."""
        return self._write_schedules(task, previous), self._write_rule(task, previous)

    def _save(self, change: TaskChange, at: datetime) -> StoredTask:
        return self.store.save_task(
            change.task,
            previous=change.previous,
            actor=self.actor,
            at=at,
            action="registered" if change.change is Change.CREATE else "updated",
            schedule_names=tuple(p.name for p in planned_schedules(change.task)),
            evidence={"diff": {k: list(v) for k, v in change.diff.items()}} if change.previous else None,
        )

    def _scheduler(self, call: Callable[[], T], requests: int) -> T:
        """One paced Scheduler operation of ``requests`` API requests, retried when throttled."""

        def paced() -> T:
            if self.limiter is not None:
                self.limiter.acquire(requests)
            return call()

        return self.backoff.call(paced, self.limiter)

    def _pace(self) -> None:
        """One Scheduler request's token (when the apply is paced)."""
        if self.limiter is not None:
            self.limiter.acquire(1)

    def _write_schedules(self, task: Task, previous: StoredTask | None, view: SyncView | None = None) -> int:
        """Bring the task's schedules to what it wants (``Schedules.sync_recurring``: no request for
        a schedule ``view`` shows is as wanted; a read, and a write only when it differs, for any
        other) and delete the ones it no longer has. Each request takes a token before it is made."""
        view = view or SyncView()
        planned = planned_schedules(task)
        window_minutes = self._window_minutes(task)
        written = 0
        for plan in planned:
            wanted = RecurringSchedule(
                plan.name,
                plan.expression,
                plan.timezone,
                fire_payload(task.id),
                enabled=task.state is TaskState.ACTIVE,
                window_minutes=window_minutes,
                description=f"Rebound task {task.id}",
                end=task.schedule.end if task.schedule else None,
            )
            synced = self.backoff.call(
                lambda wanted=wanted: self.deps.schedules.sync_recurring(  # type: ignore[misc]
                    wanted, known=view.known.get(wanted.name), listing=view.listing, pace=self._pace
                ),
                self.limiter,
            )
            view.remember(self.store, plan.name, synced.synced)
            written += synced.outcome != "unchanged"
        keep = {p.name for p in planned}
        for old in previous.schedule_names if previous else ():
            if old not in keep:
                self._scheduler(lambda old=old: self.deps.schedules.delete(old), 1)  # type: ignore[misc]
                SyncView.forget(self.store, old)
        return written

    def _window_minutes(self, task: Task) -> int | None:
        """Scheduler's flexible time window for the task's jitter: none with task-scheduler-v3 off,
        so its schedules fire at the exact instant."""
        jitter = task.schedule.jitter_window if task.schedule else None
        if not jitter or not self.deps.flags.enabled(TASK_SCHEDULER_V3):
            return None
        return int(jitter // 60)

    def _write_rule(self, task: Task, previous: StoredTask | None) -> int:
        """An event-triggered task's rule on the bus follows the task (pattern, paused or active)."""
        name = task_rule_name(task.id)
        if task.event is None:
            if previous is not None and previous.task.event is not None:
                self.backoff.call(lambda: self.deps.bus.delete_task_rule(name))
            return 0
        settings = self.deps.settings
        outcome = self.backoff.call(
            lambda: self.deps.bus.put_task_rule(
                name,
                task.id,
                json.dumps(task.event, sort_keys=True),
                settings.queue("execution").arn,
                settings.queue("control_dlq").arn,
                enabled=task.state is TaskState.ACTIVE,
                description=f"Rebound task {task.id}",
            )
        )
        return int(outcome != "unchanged")

    def run_now(self, task_id: str, token: str | None = None) -> str:
        """Ask for a run of a registered, active task now. Returns the run id.

        The same ``token`` names the same run, whenever it is sent again, so a retried request does
        not start a second one; without a token every request is a new run.
        """
        stored = self.get(task_id, "tasks:run")  # an unknown task is refused here, not at run time
        task_id = stored.task.id
        if stored.paused:
            raise ValidationFailed(
                f"task {task_id} is paused; resume it before asking for a run", key_path="state"
            )
        now = self.deps.clock.now()
        run_id = manual_run_id(task_id, now, token, unique=uuid.uuid4().hex)
        body = {
            "v": 1,
            "kind": "manual",
            "task_id": task_id,
            "run_id": run_id,
            "requested_at": iso(now),
            "actor": self.actor,
        }
        self.deps.queues.send("execution", body)
        return run_id

    def set_state(self, task_id: str, state: TaskState, reason: str = "") -> StoredTask:
        """Pause or resume: the record and every schedule of the task follow."""
        current = self.get(task_id, "tasks:pause" if state is TaskState.PAUSED else "tasks:resume")
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
        self._write_rule(task, current)
        if state is TaskState.ACTIVE:
            # What the pause held back: the catch-up policy for its fires, and the held retries.
            self.last_resume = Ledger(self.deps, self.actor).resume(current, self.deps.clock.now())
        return stored
