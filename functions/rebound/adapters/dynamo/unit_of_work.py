"""One transaction of changes: a run or work order with its audit record and outbox events,
slot entries and exits, counters. ``commit`` writes it as one ``TransactWriteItems``.

The item itself is guarded by its audit sequence number and revision (an optimistic lock), the
next record of its audit chain is a conditional put (the chain can only grow), and the outbox
events announce the change: state, audit record and events commit together or not at all.
What is staged, and under which label, is ``rebound.adapters.staging``; how, is here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rebound.adapters.dynamo.codec import CONTROL, to_item
from rebound.adapters.dynamo.write_ahead import write_ahead_plan
from rebound.adapters.staging import TASKS_EPOCH, StagingUnitOfWork
from rebound.domain.audit import AuditFields, bookkept
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import Conflict, OperationalError
from rebound.domain.ids import slot_expiry_attribute
from rebound.domain.retention import FINISHED, audit_expiry, run_expiry
from rebound.domain.run import Run, item_may_wait
from rebound.domain.stored import StoredTask
from rebound.domain.work_order import WorkOrder
from rebound.resources import RECORD_TTL

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from rebound.adapters.dynamo.store import DynamoStore

WRITE_ATTEMPTS = 8
"""Tries of one write that meets transient contention or throttling (~2.5 s of backoff in all)."""


def _conditioned(
    op: dict[str, Any],
    condition: str | None,
    values: Mapping[str, Any] | None,
    names: Mapping[str, str] | None,
) -> None:
    """Add a transaction item's condition and expression attributes, where given."""
    if condition:
        op["ConditionExpression"] = condition
    if values:
        op["ExpressionAttributeValues"] = to_item(values)
    if names:
        op["ExpressionAttributeNames"] = dict(names)


@dataclass
class UnitOfWork(StagingUnitOfWork):
    """Collects changes and commits them as one transaction."""

    store: DynamoStore
    items: list[TransactWriteItemTypeDef] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    _touchable: set[str] = field(default_factory=set)
    """Runs staged over a version that bookkeeping may write meanwhile (``bookkept``)."""

    def put_unique(self, table: str, data: Mapping[str, Any], key_attr: str) -> None:
        """Stage a put that fails the transaction if the key exists already."""
        self._stage(
            {
                "Put": {
                    "TableName": self.store.tables[table],
                    "Item": to_item(data, table),
                    "ConditionExpression": f"attribute_not_exists({key_attr})",
                }
            },
            f"{table} {data.get(key_attr)}",
        )

    def put(
        self,
        table: str,
        data: Mapping[str, Any],
        label: str,
        condition: str | None = None,
        values: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> None:
        op: dict[str, Any] = {"TableName": self.store.tables[table], "Item": to_item(data, table)}
        _conditioned(op, condition, values, names)
        self._stage({"Put": op}, label)  # type: ignore[typeddict-item]

    def update(
        self,
        table: str,
        key: Mapping[str, Any],
        expression: str,
        label: str,
        condition: str | None = None,
        values: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> None:
        op: dict[str, Any] = {
            "TableName": self.store.tables[table],
            "Key": to_item(key),
            "UpdateExpression": expression,
        }
        _conditioned(op, condition, values, names)
        self._stage({"Update": op}, label)  # type: ignore[typeddict-item]

    # --- control records: slots, counters ----------------------------------------------------
    def enter_slot(self, key: str, cap: int, run_id: str, until: datetime, label: str) -> None:
        """Enter a slot of ``cap`` holders until ``until``; the transaction fails (its label among
        the failed) if the slot is full of others. Entering twice changes nothing."""
        self.update(
            CONTROL,
            {"pk": key},
            "ADD holders :run SET cap = :cap, #exp = :until",
            label,
            condition="attribute_not_exists(holders) OR size(holders) < :cap OR contains(holders, :id)",
            values={":run": {run_id}, ":cap": cap, ":id": run_id, ":until": int(until.timestamp())},
            names={"#exp": slot_expiry_attribute(run_id)},
        )

    def leave_slot(self, key: str, run_id: str) -> None:
        """Leave a slot (leaving a slot not held changes nothing)."""
        self.update(
            CONTROL,
            {"pk": key},
            "DELETE holders :run REMOVE #exp",
            f"leave {key}",
            values={":run": {run_id}},
            names={"#exp": slot_expiry_attribute(run_id)},
        )

    def enter_slot_many(
        self, key: str, cap: int, run_ids: Sequence[str], until: datetime, label: str
    ) -> None:
        """Enter several holders in one update; the transaction fails (its label among the failed)
        unless the slot has room for all of them beside those inside now."""
        names = {f"#exp{i}": slot_expiry_attribute(run_id) for i, run_id in enumerate(run_ids)}
        expiries = ", ".join(f"{name} = :until" for name in names)
        self.update(
            CONTROL,
            {"pk": key},
            f"ADD holders :runs SET cap = :cap, {expiries}",
            label,
            condition="attribute_not_exists(holders) OR size(holders) <= :room",
            values={
                ":runs": set(run_ids),
                ":cap": cap,
                ":room": cap - len(run_ids),
                ":until": int(until.timestamp()),
            },
            names=names,
        )

    def leave_slot_many(self, key: str, run_ids: Sequence[str]) -> None:
        """Several holders leave in one update (leaving a slot not held changes nothing)."""
        names = {f"#exp{i}": slot_expiry_attribute(run_id) for i, run_id in enumerate(run_ids)}
        self.update(
            CONTROL,
            {"pk": key},
            f"DELETE holders :runs REMOVE {', '.join(names)}",
            f"leave {key}",
            values={":runs": set(run_ids)},
            names=names,
        )

    def reap_slot_holder(self, key: str, run_id: str, now: datetime) -> None:
        """Remove a holder whose expiry has passed; the transaction fails if it has not (or it is gone)."""
        self.update(
            CONTROL,
            {"pk": key},
            "DELETE holders :run REMOVE #exp",
            f"reap {key}",
            condition="contains(holders, :id) AND #exp < :now",
            values={":run": {run_id}, ":id": run_id, ":now": int(now.timestamp())},
            names={"#exp": slot_expiry_attribute(run_id)},
        )

    def count_streak(self, key: str, run_id: str, label: str) -> None:
        """One more in a streak counter (``consecutive``), naming the run that extended it."""
        self.update(
            CONTROL,
            {"pk": key},
            "ADD consecutive :one SET last_run = :run",
            label,
            values={":one": 1, ":run": run_id},
        )

    def end_streak(self, key: str, label: str) -> None:
        """A streak counter back to zero; ``streak`` counts the streaks ended."""
        self.update(
            CONTROL,
            {"pk": key},
            "SET consecutive = :zero ADD streak :one",
            label,
            values={":zero": 0, ":one": 1},
        )

    def set_streak(self, key: str, consecutive: int, last_run: str | None, label: str) -> None:
        """Rewrite ``consecutive`` (and ``last_run``) of a streak counter; ``streak`` stays."""
        if last_run is None:
            self.update(
                CONTROL,
                {"pk": key},
                "SET consecutive = :n REMOVE last_run",
                label,
                values={":n": consecutive},
            )
        else:
            self.update(
                CONTROL,
                {"pk": key},
                "SET consecutive = :n, last_run = :run",
                label,
                values={":n": consecutive, ":run": last_run},
            )

    def add_policy_version(self, name: str, version: int, data: Mapping[str, Any]) -> None:
        """A new version of a named policy; the transaction fails if that version exists already."""
        self.put(
            "policies",
            {**data, "name": name, "version": version},
            f"policy {name} v{version}",
            "attribute_not_exists(#n)",
            names={"#n": "name"},
        )

    def commit(self, attempts: int = WRITE_ATTEMPTS) -> None:
        """Write everything in one transaction (one run's change alone: its audit record, then its
        item, ``rebound.adapters.dynamo.write_ahead``). ``Conflict``: a condition failed (someone
        changed the record first); nothing of this unit was written. A write that met a
        concurrent write or a throttle is sent again, up to ``attempts`` times, before its error
        is raised."""
        if not self.items:
            return
        self._check_size(len(self.items))
        plan = write_ahead_plan(self.items, self.labels, self._touchable)
        if plan is not None and plan.run_id in self.deferred_items and plan.creates:
            plan = replace(plan, run=None)  # the record alone: the item waits (``save_run``)
        if plan is not None:
            try:
                self.store.write_ahead(plan, attempts)
            except Conflict:
                raise
            except OperationalError:
                if self.store.on_failed_commit is not None:
                    self.store.on_failed_commit()
                raise
        else:
            self.store.transact(self.items, self.labels, attempts=attempts)

    # --- internals ----------------------------------------------------------------------------
    def _stage_audit(self, record: AuditRecord, fields: AuditFields, label: str) -> None:
        expiry = audit_expiry(self.store.retention, record.subject, self.at)
        data = fields if expiry is None else {**fields, RECORD_TTL: expiry}
        self.put("audit", data, label, "attribute_not_exists(subject)")

    def _stage_event(self, item: dict[str, Any], label: str) -> None:
        self.put("outbox", item, label, "attribute_not_exists(event_id)")

    def _stage_put(self, table: str, key: str, item: dict[str, Any], label: str) -> None:
        self.put(table, item, label)

    def _stage_versioned(self, key: str, item: dict[str, Any], expect: int | None, label: str) -> None:
        if expect is None:
            self.put(CONTROL, item, label, "attribute_not_exists(pk)")
        else:
            self.put(CONTROL, item, label, "version = :v", {":v": expect})

    def _stage_task_delete(self, stored: StoredTask) -> None:
        op: dict[str, Any] = {
            "TableName": self.store.tables["tasks"],
            "Key": to_item({"task_id": stored.task.id}),
            "ConditionExpression": "version = :v",
            "ExpressionAttributeValues": {":v": {"N": str(stored.version)}},
        }
        self._stage({"Delete": op}, f"task {stored.task.id}")  # type: ignore[typeddict-item]
        self.update(CONTROL, {"pk": TASKS_EPOCH}, "ADD epoch :one", "tasks epoch", values={":one": 1})

    def _stage_task(self, stored: StoredTask, previous: StoredTask | None) -> None:
        label = f"task {stored.task.id}"
        if previous is None:
            self.put("tasks", stored.to_record(), label, "attribute_not_exists(task_id)")
        else:
            self.put("tasks", stored.to_record(), label, "version = :v", {":v": previous.version})
        self.update(CONTROL, {"pk": TASKS_EPOCH}, "ADD epoch :one", "tasks epoch", values={":one": 1})

    def _stage_owned(
        self, table: str, key_attr: str, key: str, data: dict[str, Any], before: Run | WorkOrder | None
    ) -> None:
        if table == "runs":
            data = {**data, RECORD_TTL: run_expiry(self.store.retention, data["state"] in FINISHED, self.at)}
        slot = (table, key)
        if slot in self._owned:
            put = self.items[self._owned[slot]]["Put"]
            put["Item"] = to_item(data, table)
            return
        op: dict[str, Any] = {"TableName": self.store.tables[table], "Item": to_item(data, table)}
        if isinstance(before, Run) and bookkept(before):
            self._touchable.add(key)
        if before is None:
            op["ConditionExpression"] = f"attribute_not_exists({key_attr})"
        elif isinstance(before, Run):
            # ``rev`` changes on every write, bookkeeping included; items written before it
            # existed are guarded by their audit sequence number alone.
            guard = "audit_seq = :seq AND (attribute_not_exists(rev) OR rev = :rev)"
            if item_may_wait(before):  # its claim may have committed its record alone
                guard = f"attribute_not_exists(run_id) OR ({guard})"
            op["ConditionExpression"] = guard
            op["ExpressionAttributeValues"] = {
                ":seq": {"N": str(before.audit_seq)},
                ":rev": {"N": str(before.rev)},
            }
        else:
            op["ConditionExpression"] = "audit_seq = :seq"
            op["ExpressionAttributeValues"] = {":seq": {"N": str(before.audit_seq)}}
        self._owned[slot] = len(self.items)
        self._stage({"Put": op}, f"{table} {key}")  # type: ignore[typeddict-item]

    def _stage(self, op: TransactWriteItemTypeDef, label: str) -> None:
        self.items.append(op)
        self.labels.append(label)
