"""One transaction of changes: a run or work order with its audit record and outbox events,
slot entries and exits, counters. ``commit`` writes it as one ``TransactWriteItems``.

The item itself is guarded by its audit sequence number and revision (an optimistic lock), the
next record of its audit chain is a conditional put (the chain can only grow), and the outbox
events announce the change: state, audit record and events commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rebound.adapters.dynamo.codec import CONTROL, to_item
from rebound.domain.audit import GENESIS, next_record, run_changes
from rebound.domain.errors import OperationalError
from rebound.domain.events import DomainEvent
from rebound.domain.ids import outbox_event_id, run_subject, slot_expiry_attribute, work_order_subject
from rebound.domain.jsonutil import dumps
from rebound.domain.models import AuditRecord, Run, RunState, WorkOrder
from rebound.domain.timefmt import iso

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from rebound.adapters.dynamo.store import DynamoStore

MAX_TRANSACTION_ITEMS = 100
WRITE_ATTEMPTS = 8
"""Tries of one write that meets transient contention or throttling (~2.5 s of backoff in all)."""
OUTBOX_TTL = timedelta(days=2)


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
class UnitOfWork:
    """Collects changes and commits them as one transaction."""

    store: DynamoStore
    actor: str
    at: datetime
    items: list[TransactWriteItemTypeDef] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    audit_records: list[AuditRecord] = field(default_factory=list)
    _events: int = 0
    _owned: dict[tuple[str, str], int] = field(default_factory=dict)

    # --- owned subjects: the item holds its chain head --------------------------------------
    def save_run(
        self,
        before: Run | None,
        after: Run,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
        from_state: RunState | None = None,
    ) -> Run:
        """Stage ``after`` and its audit record; returns ``after`` with its new chain head.

        ``from_state`` names the state left when ``before`` is ``None`` (a run created and moved
        on in one write).

        Saving the same run again in this unit of work (create, then claim) adds another audit
        record and replaces the staged item; the write stays guarded by the first ``before``.
        """
        staged = after.model_copy(update={"updated_at": self.at})
        record = self._audit(
            run_subject(after.run_id),
            before.audit_seq if before else 0,
            before.audit_head if before else GENESIS,
            action,
            before.state.value if before else (from_state.value if from_state else None),
            staged.state.value,
            {**(evidence or {}), "changes": run_changes(before, staged)},
        )
        saved = staged.model_copy(
            update={"audit_seq": record.seq, "audit_head": record.hash, "rev": self._rev(before)}
        )
        self._stage_owned("runs", "run_id", after.run_id, saved.model_dump(mode="json"), before)
        return saved

    def touch_run(self, before: Run, after: Run) -> Run:
        """Stage a bookkeeping write of a run that changes no state (a waiting run's next poll):
        guarded like any write, without an audit record, so the item still names its chain head."""
        if after.state is not before.state or after.attempt != before.attempt:
            raise ValueError(f"touch_run cannot change the state of {before.run_id}")
        saved = after.model_copy(
            update={
                "updated_at": self.at,
                "audit_seq": before.audit_seq,
                "audit_head": before.audit_head,
                "rev": self._rev(before),
            }
        )
        self._stage_owned("runs", "run_id", after.run_id, saved.model_dump(mode="json"), before)
        return saved

    def _rev(self, before: Run | None) -> int:
        """The revision a staged run write gets (one more than what it replaces, once per commit)."""
        return (before.rev if before is not None else 0) + 1

    def save_work_order(
        self,
        before: WorkOrder | None,
        after: WorkOrder,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
    ) -> WorkOrder:
        record = self._audit(
            work_order_subject(after.work_order_id),
            before.audit_seq if before else 0,
            before.audit_head if before else GENESIS,
            action,
            before.state.value if before else None,
            after.state.value,
            evidence or {},
        )
        saved = after.model_copy(update={"audit_seq": record.seq, "audit_head": record.hash})
        self._stage_owned(
            "workorders", "work_order_id", after.work_order_id, saved.model_dump(mode="json"), before
        )
        return saved

    # --- unowned subjects (a malformed message, a policy): the chain itself is the guard ------
    def append_audit(
        self,
        subject: str,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
        head: tuple[int, str] | None = None,
        from_state: str | None = None,
        to_state: str | None = None,
    ) -> AuditRecord:
        seq, prev = head if head is not None else self.store.audit_head(subject)
        return self._audit(subject, seq, prev, action, from_state, to_state, evidence or {})

    def emit(self, event: DomainEvent, subject: str) -> None:
        seq = self.audit_records[-1].seq if self.audit_records else 0
        event_id = outbox_event_id(subject, seq, self._events)
        self._events += 1
        item = {
            "event_id": event_id,
            "detail_type": event.detail_type.value,
            "source": self.store.event_source,
            "detail": dumps({**event.detail, "event_id": event_id}),
            "subject": subject,
            "created_at": iso(self.at),
            "expires_at": int((self.at + OUTBOX_TTL).timestamp()),
        }
        self._stage(
            {
                "Put": {
                    "TableName": self.store.tables["outbox"],
                    "Item": to_item(item, "outbox"),
                    "ConditionExpression": "attribute_not_exists(event_id)",
                }
            },
            f"event {event.detail_type.value}",
        )

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
        """Write everything in one transaction. ``Conflict``: a condition failed (someone changed
        the record first); nothing was written. A transaction that met a concurrent write or a
        throttle is sent again, up to ``attempts`` times, before its error is raised."""
        if not self.items:
            return
        if len(self.items) > MAX_TRANSACTION_ITEMS:
            raise OperationalError(f"a change of {len(self.items)} items exceeds the transaction limit")
        self.store.transact(self.items, self.labels, attempts=attempts)

    # --- internals ----------------------------------------------------------------------------
    def _audit(
        self,
        subject: str,
        prev_seq: int,
        prev_hash: str,
        action: str,
        from_state: str | None,
        to_state: str | None,
        evidence: dict[str, Any],
    ) -> AuditRecord:
        staged = [a for a in self.audit_records if a.subject == subject]
        if staged:
            prev_seq, prev_hash = staged[-1].seq, staged[-1].hash
        record = next_record(
            subject=subject,
            prev_seq=prev_seq,
            prev_hash=prev_hash,
            at=self.at,
            actor=self.actor,
            action=action,
            from_state=from_state,
            to_state=to_state,
            evidence=evidence,
        )
        self.audit_records.append(record)
        self._stage(
            {
                "Put": {
                    "TableName": self.store.tables["audit"],
                    "Item": to_item(record.model_dump(mode="json"), "audit"),
                    "ConditionExpression": "attribute_not_exists(subject)",
                }
            },
            f"audit {subject} #{record.seq}",
        )
        return record

    def _stage_owned(
        self, table: str, key_attr: str, key: str, data: dict[str, Any], before: Run | WorkOrder | None
    ) -> None:
        slot = (table, key)
        if slot in self._owned:
            put = self.items[self._owned[slot]]["Put"]
            put["Item"] = to_item(data, table)
            return
        op: dict[str, Any] = {"TableName": self.store.tables[table], "Item": to_item(data, table)}
        if before is None:
            op["ConditionExpression"] = f"attribute_not_exists({key_attr})"
        elif isinstance(before, Run):
            # ``rev`` changes on every write, bookkeeping included; items written before it
            # existed are guarded by their audit sequence number alone.
            op["ConditionExpression"] = "audit_seq = :seq AND (attribute_not_exists(rev) OR rev = :rev)"
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
