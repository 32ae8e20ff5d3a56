"""``rebound migrate tenancy``: move tasks stored before tenancy to their ``<tenant>.<id>`` keys.

For each task whose key has no tenant part (``nightly`` of tenant ``acme``):

1. register ``acme.nightly`` (the same definition, its mutex group qualified too; audited
   ``migrated`` on its chain with where it came from), unless a pass before did;
2. write its schedules (or its rule) under the new names;
3. delete the old key's schedules and rule;
4. remove the old item, guarded by its version, the old chain ending with ``migrated`` and where
   it went.

A crash between any two steps leaves the old item in place, so the next pass does the steps again;
each is idempotent, so passes can be repeated until nothing is left
(``tests/unit/test_tenancy_migration.py``).
A task whose old key still has runs Rebound owes work (pending, running, failed, waiting for a
retry) is left for a later pass: its retries look their task up by the old key. Runs keep their
ids, and the old key's audit chain stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rebound.domain.ids import task_rule_name
from rebound.domain.schedules import planned_schedules
from rebound.domain.states import ACTIVE
from rebound.domain.stored import StoredTask
from rebound.domain.tenancy import tenant_of
from rebound.engine.deps import Deps
from rebound.ops.access import UNGUARDED, Guard
from rebound.ops.tasks import TaskOps

UNFINISHED_LOOKBACK = 200
"""How many of an old key's latest runs are looked at for work still owed."""


@dataclass(frozen=True)
class Move:
    old: str
    new: str
    state: str
    """``moved``, ``would-move`` (a dry run), or ``waiting`` (runs still owed work)."""
    unfinished: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "state": self.state, "unfinished": self.unfinished}


@dataclass
class MigrationReport:
    dry_run: bool
    moves: list[Move] = field(default_factory=list)

    @property
    def left(self) -> int:
        return sum(m.state != "moved" for m in self.moves)

    def as_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "moves": [m.as_dict() for m in self.moves], "left": self.left}


class TenancyMigration:
    def __init__(self, deps: Deps, actor: str, *, guard: Guard = UNGUARDED) -> None:
        self.deps = deps
        self.actor = actor
        self.guard = guard
        self.tasks = TaskOps(deps, actor)

    def pending(self) -> list[StoredTask]:
        """The stored tasks whose keys carry no tenant, by key."""
        return sorted(
            (s for s in self.deps.store.list_tasks() if tenant_of(s.task.id) is None),
            key=lambda s: s.task.id,
        )

    def run(
        self, *, dry_run: bool = False, progress: Callable[[Move], None] | None = None
    ) -> MigrationReport:
        self.guard.check("tenants:migrate")
        report = MigrationReport(dry_run)
        for stored in self.pending():
            move = self._move(stored, dry_run)
            report.moves.append(move)
            if progress is not None:
                progress(move)
        return report

    def _move(self, old: StoredTask, dry_run: bool) -> Move:
        task = old.task.qualified()
        unfinished = sum(
            run.state in ACTIVE
            for run in self.deps.store.runs_for_task(old.task.id, limit=UNFINISHED_LOOKBACK)
        )
        if unfinished:
            return Move(old.task.id, task.id, "waiting", unfinished)
        if dry_run:
            return Move(old.task.id, task.id, "would-move")
        store, now = self.deps.store, self.deps.clock.now
        new = store.get_task(task.id)
        if new is None:
            new = store.save_task(
                task,
                previous=None,
                actor=self.actor,
                at=now(),
                action="migrated",
                schedule_names=tuple(p.name for p in planned_schedules(task)),
                evidence={"from": old.task.id},
            )
        self.tasks.write_triggers(new.task, None)
        keep = set(new.schedule_names)
        for name in old.schedule_names:
            if name not in keep:
                self.deps.schedules.delete(name)
        if old.task.event is not None and task_rule_name(old.task.id) != task_rule_name(task.id):
            self.deps.bus.delete_task_rule(task_rule_name(old.task.id))
        store.remove_task(old, actor=self.actor, at=now(), action="migrated", evidence={"to": task.id})
        return Move(old.task.id, task.id, "moved")
