"""One unit of work in memory: changes staged with their guards, applied by ``MemoryStore.apply``.

Each staged change names one item (table and key), the guard judged on that item as stored, and
how it writes the item, as a DynamoDB transaction item does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rebound.adapters.staging import TASKS_EPOCH, StagingUnitOfWork
from rebound.domain.audit import AuditFields
from rebound.domain.audit_record import AuditRecord
from rebound.domain.ids import slot_expiry_attribute
from rebound.domain.jsonutil import dumps
from rebound.domain.run import Run
from rebound.domain.stored import StoredTask
from rebound.domain.work_order import WorkOrder

if TYPE_CHECKING:
    from rebound.adapters.memory.store import MemoryStore

Item = dict[str, Any]
Guard = Callable[[Item | None], bool]
"""A staged change's condition, on the item as it is stored (``None``: no such item)."""
Change = Callable[[Item], None]
"""What an update does to the item (a fresh copy; a new item holds only its key)."""

TABLES = ("tasks", "runs", "audit", "outbox", "workorders", "control", "policies", "tenants", "dlq_messages")


def stored_item(data: Mapping[str, Any]) -> Item:
    """``data`` as stored: a JSON copy, without ``None`` attributes."""
    return {key: value for key, value in json.loads(dumps(data)).items() if value is not None}


def copy_item(item: Item) -> Item:
    return dict(json.loads(dumps(item)))


@dataclass(frozen=True)
class Staged:
    label: str
    table: str
    key: Hashable
    write: Callable[[Item | None], Item | None]
    """The item after the change; ``None`` removes it."""
    guard: Guard | None = None


@dataclass
class MemoryUnitOfWork(StagingUnitOfWork):
    """Collects changes; ``commit`` applies them all, or none if a guard fails."""

    store: MemoryStore
    staged: list[Staged] = field(default_factory=list)

    # --- control records: slots, counters ----------------------------------------------------
    def enter_slot(self, key: str, cap: int, run_id: str, until: datetime, label: str) -> None:
        """Enter a slot of ``cap`` holders until ``until``; the commit fails (``label`` among the
        failed) if the slot is full of others. Entering twice changes nothing."""

        def room(item: Item | None) -> bool:
            held = (item or {}).get("holders")
            return held is None or len(held) < cap or run_id in held

        def enter(item: Item) -> None:
            item["holders"] = sorted({*item.get("holders", ()), run_id})
            item["cap"] = cap
            item[slot_expiry_attribute(run_id)] = int(until.timestamp())

        self._update(key, label, enter, room)

    def leave_slot(self, key: str, run_id: str) -> None:
        """Leave a slot (leaving a slot not held changes nothing)."""
        self._update(key, f"leave {key}", _without(run_id))

    def enter_slot_many(
        self, key: str, cap: int, run_ids: Sequence[str], until: datetime, label: str
    ) -> None:
        """Enter several holders in one write; the commit fails unless the slot has room for all
        of them beside those inside now."""

        def room(item: Item | None) -> bool:
            held = (item or {}).get("holders")
            return held is None or len(held) <= cap - len(run_ids)

        def enter(item: Item) -> None:
            item["holders"] = sorted({*item.get("holders", ()), *run_ids})
            item["cap"] = cap
            for run_id in run_ids:
                item[slot_expiry_attribute(run_id)] = int(until.timestamp())

        self._update(key, label, enter, room)

    def leave_slot_many(self, key: str, run_ids: Sequence[str]) -> None:
        """Several holders leave in one write (leaving a slot not held changes nothing)."""

        def leave(item: Item) -> None:
            for run_id in run_ids:
                _without(run_id)(item)

        self._update(key, f"leave {key}", leave)

    def reap_slot_holder(self, key: str, run_id: str, now: datetime) -> None:
        """Remove a holder whose expiry has passed; the commit fails if it has not (or it is gone)."""

        def expired(item: Item | None) -> bool:
            expiry = (item or {}).get(slot_expiry_attribute(run_id))
            held = run_id in (item or {}).get("holders", ())
            return held and isinstance(expiry, int | float) and expiry < int(now.timestamp())

        self._update(key, f"reap {key}", _without(run_id), expired)

    def count_streak(self, key: str, run_id: str, label: str) -> None:
        """One more in a streak counter (``consecutive``), naming the run that extended it."""

        def count(item: Item) -> None:
            item["consecutive"] = item.get("consecutive", 0) + 1
            item["last_run"] = run_id

        self._update(key, label, count)

    def end_streak(self, key: str, label: str) -> None:
        """A streak counter back to zero; ``streak`` counts the streaks ended."""

        def end(item: Item) -> None:
            item["consecutive"] = 0
            item["streak"] = item.get("streak", 0) + 1

        self._update(key, label, end)

    def set_streak(self, key: str, consecutive: int, last_run: str | None, label: str) -> None:
        """Rewrite ``consecutive`` (and ``last_run``) of a streak counter; ``streak`` stays."""

        def rewrite(item: Item) -> None:
            item["consecutive"] = consecutive
            if last_run is None:
                item.pop("last_run", None)
            else:
                item["last_run"] = last_run

        self._update(key, label, rewrite)

    def add_policy_version(self, name: str, version: int, data: Mapping[str, Any]) -> None:
        """A new version of a named policy; the commit fails if that version exists already."""
        item = {**data, "name": name, "version": version}
        self.put("policies", (name, version), item, f"policy {name} v{version}", _absent)

    def put(
        self, table: str, key: Hashable, data: Mapping[str, Any], label: str, guard: Guard | None = None
    ) -> None:
        """Stage a put of a whole item, guarded by ``guard`` where given."""
        stored = stored_item(data)
        self.staged.append(Staged(label, table, key, lambda _: copy_item(stored), guard))

    def commit(self, attempts: int = 1) -> None:
        """Apply every staged change, or none: ``Conflict`` (``details["failed"]``: the labels of
        the failed guards) if a guard fails. Nothing in memory is ever contended: no tries."""
        if not self.staged:
            return
        self._check_size(len(self.staged))
        self.store.apply(self.staged)

    # --- what the staging asks of a store ------------------------------------------------------
    def _stage_audit(self, record: AuditRecord, fields: AuditFields, label: str) -> None:
        # A copy, as a DynamoDB item would be: ``fields`` holds the caller's evidence dict.
        self.put("audit", (record.subject, record.seq), record.model_dump(mode="json"), label, _absent)

    def _stage_event(self, item: dict[str, Any], label: str) -> None:
        self.put("outbox", item["event_id"], item, label, _absent)

    def _stage_put(self, table: str, key: str, item: dict[str, Any], label: str) -> None:
        self.put(table, key, item, label)

    def _stage_versioned(self, key: str, item: dict[str, Any], expect: int | None, label: str) -> None:
        guard: Guard = _absent if expect is None else lambda stored: (stored or {}).get("version") == expect
        self.put("control", key, item, label, guard)

    def _stage_task(self, stored: StoredTask, previous: StoredTask | None) -> None:
        version = previous.version if previous is not None else None
        guard: Guard = _absent if version is None else lambda item: (item or {}).get("version") == version
        self.put("tasks", stored.task.id, stored.to_record(), f"task {stored.task.id}", guard)
        self._update(TASKS_EPOCH, "tasks epoch", _bump("epoch"))

    def _stage_task_delete(self, stored: StoredTask) -> None:
        version = stored.version
        label = f"task {stored.task.id}"
        self.staged.append(
            Staged(
                label,
                "tasks",
                stored.task.id,
                lambda _: None,
                lambda item: (item or {}).get("version") == version,
            )
        )
        self._update(TASKS_EPOCH, "tasks epoch", _bump("epoch"))

    def _stage_owned(
        self, table: str, key_attr: str, key: str, data: dict[str, Any], before: Run | WorkOrder | None
    ) -> None:
        stored = stored_item(data)
        at = self._owned.get((table, key))
        if at is not None:  # saved again: the new item, under the first guard
            self.staged[at] = replace(self.staged[at], write=lambda _: copy_item(stored))
            return
        self._owned[(table, key)] = len(self.staged)
        self.put(table, key, stored, f"{table} {key}", _owned_guard(before))

    def _update(self, key: str, label: str, change: Change, guard: Guard | None = None) -> None:
        """Stage an update of a control record (created with only its key if it does not exist)."""

        def write(item: Item | None) -> Item:
            new = copy_item(item) if item is not None else {"pk": key}
            change(new)
            return new

        self.staged.append(Staged(label, "control", key, write, guard))


def _absent(item: Item | None) -> bool:
    return item is None


def _owned_guard(before: Run | WorkOrder | None) -> Guard:
    """The optimistic lock of a run or work order: what ``before`` read is still what is stored."""
    if before is None:
        return _absent
    seq = before.audit_seq
    rev = before.rev if isinstance(before, Run) else None

    def unchanged(item: Item | None) -> bool:
        if item is None or item.get("audit_seq") != seq:
            return False
        # Items written before ``rev`` existed are guarded by their audit sequence number alone.
        return rev is None or item.get("rev") in (None, rev)

    return unchanged


def _without(run_id: str) -> Change:
    def leave(item: Item) -> None:
        holders = [h for h in item.pop("holders", ()) if h != run_id]
        item.pop(slot_expiry_attribute(run_id), None)
        if holders:  # DynamoDB keeps no empty set
            item["holders"] = holders

    return leave


def _bump(counter: str) -> Change:
    def bump(item: Item) -> None:
        item[counter] = item.get(counter, 0) + 1

    return bump
