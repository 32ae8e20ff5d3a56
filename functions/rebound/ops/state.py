"""``rebound state check|repair`` and ``rebound runs restore``: items checked against, and rebuilt
from, their audit chains (the transitions log).

Every task, workstream run, work order and run is compared with what its keyed audit chain says
(``rebound.domain.restore``): each field that differs is one ``Difference`` (the item, the field,
its value, the chain's). A repair writes the item as the chain says, in one transaction with one
audit record on the item's own chain (action ``state-repaired``, the operator as actor, each field
with what it was and what it is now), appended after the chain's real head: a stale head on the item
never makes the repair overwrite or skip a record, and the record's put is conditional like every
audit write, so a repair that races another writer fails whole instead of rewriting anything. The
write is guarded by the item as read (its revision or version), so a repair never overwrites a
change it did not see.

A chain that does not verify rebuilds nothing: that item is reported as not repairable, and the way
back is a restore from a backup (``docs/runbooks/restore.md``).

The tables are read a page at a time (runs and work orders by a paged scan, tasks and the
workstreams' recent runs by their lists), so memory stays bounded by a page and the differences
found. A pass given ``stop`` ends at a page boundary and answers where to resume (``next``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rebound.domain.audit import verify_chain
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import Conflict, NotFound, ValidationFailed
from rebound.domain.ids import fire_time, run_subject, task_subject, work_order_subject
from rebound.domain.restore import (
    CHAIN,
    Difference,
    chain_problem,
    restored_run,
    restored_work_order,
    restored_workstream,
    run_differences,
    task_differences,
    task_from_chain,
    work_order_differences,
    workstream_differences,
)
from rebound.domain.retention import DAY, expired, records_may_have_expired
from rebound.domain.run import Run
from rebound.domain.stored import StoredTask
from rebound.domain.work_order import WorkOrder
from rebound.domain.workstream_runs import WorkstreamRun
from rebound.engine.deps import Deps
from rebound.engine.workstreams import Workstreams, definition_key, run_key, workstream_subject

ACTION = "state-repaired"
"""The audit action of a repair, on the repaired item's own chain."""
PHASES = ("tasks", "workstreams", "workorders", "runs")
"""The order a pass goes through the items in (the largest table last)."""
PAGE = 100


@dataclass
class StateReport:
    """What a pass found and (for a repair) did."""

    dry_run: bool
    repair: bool
    differences: list[Difference] = field(default_factory=list)
    examined: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    repaired: list[str] = field(default_factory=list)
    """``<kind> <item>`` of each item written back as its chain says."""
    failed: list[dict[str, str]] = field(default_factory=list)
    """Items whose repair did not commit (changed meanwhile, or its chain is broken), with why."""
    next: str | None = None
    """Where to resume (``after``) when the pass stopped early; ``None`` once it went through."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "repair": self.repair,
            "differences": [d.as_dict() for d in self.differences],
            "examined": self.examined,
            "repaired": self.repaired,
            "failed": self.failed,
            "next": self.next,
        }


@dataclass(frozen=True)
class _Item:
    kind: str
    item: str
    differences: list[Difference]
    repair: Callable[[list[Difference], str], None]
    """Write the item back as its chain says, with its audit record (raises ``Conflict``)."""
    recheck: Callable[[], _Item | None]
    """The item judged again from a fresh read (``None``: it is gone)."""


def _start(after: str | None) -> tuple[int, str | None]:
    """The phase and page cursor ``after`` (a report's ``next``) resumes from."""
    if after is None:
        return 0, None
    phase, _, cursor = after.partition(":")
    if phase not in PHASES:
        raise ValidationFailed(
            f"after: {after!r} is not where a state pass stopped (it starts with one of {', '.join(PHASES)})",
            key_path="after",
        )
    return PHASES.index(phase), cursor or None


def restore_missing(run_id: str) -> NotFound:
    """The one answer for a run ``runs restore`` cannot find, or that the caller may not see."""
    return NotFound(f"no run {run_id!r} and no audit trail for it", run_id=run_id)


class StateOps:
    def __init__(self, deps: Deps, actor: str = "operator") -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor

    # ------------------------------------------------------------------------------ the passes
    def check(
        self,
        *,
        after: str | None = None,
        stop: Callable[[], bool] | None = None,
        progress: Callable[[str, int], None] | None = None,
    ) -> StateReport:
        """Every item against its chain; writes nothing."""
        return self._pass(StateReport(dry_run=True, repair=False), after, stop, progress, None)

    def repair(
        self,
        *,
        dry_run: bool = False,
        reason: str | None = None,
        after: str | None = None,
        stop: Callable[[], bool] | None = None,
        progress: Callable[[str, int], None] | None = None,
    ) -> StateReport:
        """Every item that differs from its chain written back as the chain says (with ``dry_run``,
        what would be: nothing is written)."""
        report = StateReport(dry_run=dry_run, repair=True)
        return self._pass(report, after, stop, progress, None if dry_run else (reason or ""))

    def restore_run(self, run_id: str, *, dry_run: bool = False, reason: str | None = None) -> StateReport:
        """One run written back as its chain says (``rebound runs restore``); a run whose item is
        gone is recreated from its chain."""
        report = StateReport(dry_run=dry_run, repair=True)
        item = self._run_item(run_id, self.store.get_run(run_id))
        if item is None:
            raise restore_missing(run_id)
        report.examined["runs"] = 1
        self._judge(report, item, None if dry_run else (reason or ""))
        return report

    def _pass(
        self,
        report: StateReport,
        after: str | None,
        stop: Callable[[], bool] | None,
        progress: Callable[[str, int], None] | None,
        reason: str | None,
    ) -> StateReport:
        first, cursor = _start(after)
        for index in range(first, len(PHASES)):
            phase = PHASES[index]
            pages = self._pages(phase, cursor if index == first else None)
            for items, next_cursor in pages:
                for item in items:
                    report.examined[phase] += 1
                    self._judge(report, item, reason)
                if progress:
                    progress(phase, len(items))
                resume = (
                    f"{phase}:{next_cursor}"
                    if next_cursor
                    else (PHASES[index + 1] if index + 1 < len(PHASES) else None)
                )
                if resume is not None and stop is not None and stop():
                    report.next = resume
                    return report
        return report

    def _judge(self, report: StateReport, item: _Item, reason: str | None) -> None:
        """Report ``item``'s differences; with a ``reason`` (a repair that writes), repair them."""
        if item.differences:
            # A trail and its item are read at different moments (an item that changed in
            # between looks different): judge a differing item again from a fresh read, before
            # reporting it and before writing anything.
            fresh = item.recheck()
            if fresh is None:
                return
            item = fresh
        report.differences.extend(item.differences)
        if not item.differences:
            return
        label = f"{item.kind} {item.item}"
        if any(not d.repairable for d in item.differences):
            if report.repair:
                why = next(str(d.chain) for d in item.differences if not d.repairable)
                report.failed.append({"item": label, "why": why})
            return
        if reason is None:
            return
        try:
            item.repair(item.differences, reason)
        except Conflict as exc:
            report.failed.append(
                {"item": label, "why": f"it changed while being repaired ({exc}); check again"}
            )
            return
        report.repaired.append(label)

    # ------------------------------------------------------------------------------ the pages
    def _pages(self, phase: str, cursor: str | None) -> Iterator[tuple[list[_Item], str | None]]:
        if phase == "tasks":
            yield [self._task_item(stored) for stored in self.store.list_tasks()], None
        elif phase == "workstreams":
            yield [i for i in map(self._workstream_item, self._workstream_run_ids()) if i is not None], None
        elif phase == "workorders":
            while True:
                orders, cursor = self.store.scan_work_orders_page(limit=PAGE, after=cursor)
                yield [self._work_order_item(o) for o in orders], cursor
                if cursor is None:
                    return
        else:
            while True:
                runs, cursor = self.store.scan_runs_page(limit=PAGE, after=cursor)
                yield [i for i in (self._run_item(r.run_id, r) for r in runs) if i is not None], cursor
                if cursor is None:
                    return

    def _trail(self, kind: str, item: str, subject: str) -> tuple[list[Any], list[Difference]]:
        records = self.store.audit_trail(subject)
        return records, chain_problem(kind, item, verify_chain(subject, records, self.store.audit_keys.check))

    def _expired_in_part(self, run_id: str, stored: Run | None, records: list[AuditRecord]) -> bool:
        """Where runs expire (``Settings.retention``): a finished run whose item TTL deleted, a
        run whose first records it deleted while what is left of its chain verifies, or a run
        kept (dead-lettered, waiting) for longer than all its records. None is a difference, and
        none can be rebuilt from the table alone: the archive has the rest (``rebound audit
        verify --archive``, ``rebound runs show``)."""
        retention = self.deps.settings.retention
        if retention is None:
            return False
        now = self.deps.clock.now()
        if not records:  # a run left waiting or dead-lettered longer than its records are kept
            return stored is not None and now >= stored.updated_at + retention.audit_days * DAY
        first = records[0].seq
        since = stored.scheduled_for if stored is not None else fire_time(run_id)
        if first > 1 and not records_may_have_expired(retention, since, now):
            return False  # lost to someone, not to TTL: the chain is broken
        if first == 1 and not (
            stored is None and expired(retention, records[-1].to_state, records[-1].at, now)
        ):
            return False
        chain = verify_chain(run_subject(run_id), records, self.store.audit_keys.check, from_seq=first)
        return chain.ok

    def _evidence(self, differences: list[Difference], reason: str) -> dict[str, Any]:
        return {
            "repaired": [{"field": d.field, "was": d.stored, "now": d.chain} for d in differences],
            "reason": reason or "rebuilt from the audit chain",
        }

    # ------------------------------------------------------------------------------ runs
    def _run_item(self, run_id: str, stored: Run | None) -> _Item | None:
        records, broken = self._trail("run", run_id, run_subject(run_id))
        if stored is None and not records:
            return None
        if self._expired_in_part(run_id, stored, records):
            return None
        differences = broken or run_differences(run_id, stored, records)

        def repair(found: list[Difference], reason: str) -> None:
            now = self.deps.clock.now()
            uow = self.store.unit_of_work(self.actor, now)
            uow.save_run(
                stored,
                restored_run(run_id, stored, found, records),
                action=ACTION,
                evidence=self._evidence(found, reason),
                head=(records[-1].seq, records[-1].hash),
            )
            uow.commit()

        return _Item(
            "run", run_id, differences, repair, lambda: self._run_item(run_id, self.store.get_run(run_id))
        )

    # ------------------------------------------------------------------------------ work orders
    def _work_order_item(self, order: WorkOrder) -> _Item:
        work_order_id = order.work_order_id
        records, broken = self._trail("workorder", work_order_id, work_order_subject(work_order_id))
        differences = broken or work_order_differences(work_order_id, order, records)

        def repair(found: list[Difference], reason: str) -> None:
            uow = self.store.unit_of_work(self.actor, self.deps.clock.now())
            uow.save_work_order(
                order,
                restored_work_order(order, found),
                action=ACTION,
                evidence=self._evidence(found, reason),
                head=(records[-1].seq, records[-1].hash),
            )
            uow.commit()

        def recheck() -> _Item | None:
            fresh = self.store.get_work_order(work_order_id)
            return self._work_order_item(fresh) if fresh is not None else None

        return _Item("workorder", work_order_id, differences, repair, recheck)

    # ------------------------------------------------------------------------------ tasks
    def _task_item(self, stored: StoredTask) -> _Item:
        task_id = stored.task.id
        records, broken = self._trail("task", task_id, task_subject(task_id))
        differences = broken or task_differences(stored, records)

        def repair(found: list[Difference], reason: str) -> None:
            task = task_from_chain(records)
            assert task is not None  # a chain without a definition is not repairable
            self.store.save_task(
                task,
                previous=stored,
                actor=self.actor,
                at=self.deps.clock.now(),
                action=ACTION,
                schedule_names=stored.schedule_names,
                evidence=self._evidence(found, reason),
                head=(records[-1].seq, records[-1].hash),
            )

        def recheck() -> _Item | None:
            fresh = self.store.get_task(task_id)
            return self._task_item(fresh) if fresh is not None else None

        return _Item("task", task_id, differences, repair, recheck)

    # ------------------------------------------------------------------------------ workstream runs
    def _workstream_run_ids(self) -> list[str]:
        """The recent runs of every workstream (each definition keeps its latest ones)."""
        ids: list[str] = []
        for workstream_id in Workstreams(self.deps, self.actor).ids():
            item = self.store.get_key(definition_key(workstream_id))
            if item:
                ids.extend(str(r) for r in json.loads(item["body"]).get("runs", []))
        return ids

    def _workstream_item(self, run_id: str) -> _Item | None:
        item = self.store.get_key(run_key(run_id))
        if not item:
            return None
        version = int(item["version"])
        run = WorkstreamRun.model_validate(json.loads(item["body"]))
        subject = workstream_subject(run_id)
        records, broken = self._trail("workstream", run_id, subject)
        differences = broken or workstream_differences(run, records)

        def repair(found: list[Difference], reason: str) -> None:
            restored = restored_workstream(run, found)
            uow = self.store.unit_of_work(self.actor, self.deps.clock.now())
            record = uow.append_audit(
                subject,
                action=ACTION,
                evidence={
                    **self._evidence(found, reason),
                    "steps": {s.step: s.state.value for s in restored.steps},
                },
                head=(records[-1].seq, records[-1].hash),
                from_state=run.state.value,
                to_state=restored.state.value,
            )
            restored.audit_seq, restored.audit_head = record.seq, record.hash
            uow.stage_versioned(
                run_key(run_id), restored.model_dump(mode="json"), version, f"workstream run {run_id}"
            )
            uow.commit()

        return _Item("workstream", run_id, differences, repair, lambda: self._workstream_item(run_id))


__all__ = ["ACTION", "CHAIN", "PHASES", "StateOps", "StateReport"]
