"""What every store does the same way, whatever writes it.

``StagingUnitOfWork`` stages the store-independent half of a unit of work: a run or work order
with the next record of its audit chain, outbox events, a task's next version, a tenant's
settings. ``StagingStore`` holds the store operations made of units of work and control records
(saving a task, a tenant's settings, the tasks epoch, retrying transient errors).

A store's own unit of work (``rebound.adapters.dynamo``, ``rebound.adapters.memory``) says how
each staged change is guarded and written: the hooks at the end. The labels of the staged changes
are the same everywhere, since the engine reads them back from ``Conflict.details["failed"]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from rebound.adapters import dlq_items
from rebound.domain.audit import GENESIS, AuditFields, audit_record, bookkept, next_fields, run_changes
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import TRANSIENT, OperationalError
from rebound.domain.escalation_levels import with_level
from rebound.domain.events import DomainEvent, step_ended
from rebound.domain.ids import outbox_event_id, run_subject, task_subject, tenant_subject, work_order_subject
from rebound.domain.jsonutil import dumps
from rebound.domain.restore import work_order_changes
from rebound.domain.retention import Retention, forgotten_runs_before
from rebound.domain.run import Run, RunState
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task, TenantSettings
from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder
from rebound.engine.ports import AuditKeys, DlqEntry

T = TypeVar("T")

MAX_TRANSACTION_ITEMS = 100
"""The most changes one unit of work commits (DynamoDB's limit for one transaction)."""
OUTBOX_TTL = timedelta(days=2)
TASKS_EPOCH = "tasks#epoch"
"""Control record counting task writes (``epoch``): an unchanged epoch means an unchanged task list."""


def _head_of(item: Run | WorkOrder | StoredTask | None) -> tuple[int, str]:
    """The chain head ``item`` names (the chain's start for a new item)."""
    return (item.audit_seq, item.audit_head) if item is not None else (0, GENESIS)


@dataclass
class StagingUnitOfWork(ABC):
    """The store-independent half of a unit of work (``rebound.engine.ports.UnitOfWork``)."""

    store: StagingStore
    actor: str
    at: datetime
    audit_records: list[AuditRecord] = field(default_factory=list)
    """The audit records staged so far, in order."""
    _events: int = 0
    """Outbox events staged so far (the index of the next one's id)."""
    _owned: dict[tuple[str, str], int] = field(default_factory=dict)
    """Where each run or work order staged so far is, by (table, key)."""
    deferred_items: set[str] = field(default_factory=set)
    """New runs whose item may wait for their next write (``save_run``'s ``defer_item``)."""

    # --- owned subjects: the item holds its chain head --------------------------------------
    def save_run(
        self,
        before: Run | None,
        after: Run,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
        from_state: RunState | None = None,
        head: tuple[int, str] | None = None,
        defer_item: bool = False,
    ) -> Run:
        """Stage ``after`` and its audit record; returns ``after`` with its new chain head.

        ``defer_item`` (a new run only: ``before`` is ``None``): a store may commit the record
        alone, if it is all the unit writes, and leave the item to the run's next write, which
        creates it (its guard lets a running run at revision 1 be absent), or to whoever reads
        the run first (``roll_forward``). The record is the commit point either way.

        ``from_state`` names the state left when ``before`` is ``None`` (a run created and moved
        on in one write). ``head`` is the chain head to append to when it is not ``before``'s
        (a repair of an item whose head is stale, ``rebound.ops.state``); the write stays guarded
        by ``before`` as stored.

        Saving the same run again in this unit of work (create, then claim) adds another audit
        record and replaces the staged item; the write stays guarded by the first ``before``.
        """
        staged = after.model_copy(update={"updated_at": self.at})
        record = self._audit(
            run_subject(after.run_id),
            *(head or _head_of(before)),
            action,
            before.state.value if before else (from_state.value if from_state else None),
            staged.state.value,
            {**(evidence or {}), "changes": run_changes(before, staged)},
        )
        saved = staged.model_copy(
            update={"audit_seq": record.seq, "audit_head": record.hash, "rev": self._rev(before)}
        )
        self._stage_owned("runs", "run_id", after.run_id, saved.model_dump(mode="json"), before)
        if defer_item and before is None:
            self.deferred_items.add(after.run_id)
        if saved.workstream_run is not None and (before is None or before.state is not saved.state):
            ended = step_ended(saved, self.at)
            if ended is not None:  # a workstream's step ended: the workstream hears it from the outbox
                self.emit(ended, run_subject(saved.run_id))
        return saved

    def touch_run(self, before: Run, after: Run) -> Run:
        """Stage a bookkeeping write of a run that changes no state (a waiting run's next poll):
        guarded like any write, without an audit record, so the item still names its chain head."""
        if after.state is not before.state or after.attempt != before.attempt:
            raise ValueError(f"touch_run cannot change the state of {before.run_id}")
        if not bookkept(before):
            raise ValueError(f"touch_run writes only a waiting run or a reporting attempt: {before.run_id}")
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
        head: tuple[int, str] | None = None,
    ) -> WorkOrder:
        """Stage ``after`` and its audit record, which carries the fields that changed (so the
        order rebuilds from its chain, ``rebound.domain.restore``); ``head`` as in ``save_run``.

        Every write judges the order's escalation level again (``with_level``): whatever changed
        its severity, occurrences or acknowledgement, the level on the item and in the audit
        record's changes follows, in this one place for every writer."""
        after = with_level(after, self.at)
        record = self._audit(
            work_order_subject(after.work_order_id),
            *(head or _head_of(before)),
            action,
            before.state.value if before else None,
            after.state.value,
            {**(evidence or {}), "changes": work_order_changes(before, after)},
        )
        saved = after.model_copy(update={"audit_seq": record.seq, "audit_head": record.hash})
        self._stage_owned(
            "workorders", "work_order_id", after.work_order_id, saved.model_dump(mode="json"), before
        )
        return saved

    def stage_task(
        self,
        task: Task,
        previous: StoredTask | None,
        *,
        action: str,
        schedule_names: tuple[str, ...] = (),
        evidence: dict[str, Any] | None = None,
        head: tuple[int, str] | None = None,
    ) -> StoredTask:
        """Stage a task's next version (guarded by ``previous``'s) with its audit record (after
        ``head`` when given, as in ``save_run``)."""
        record = self.append_audit(
            task_subject(task.id),
            action=action,
            head=head or _head_of(previous),
            from_state=previous.task.state.value if previous else None,
            to_state=task.state.value,
            evidence={**(evidence or {}), "definition": task.model_dump(mode="json", exclude_defaults=True)},
        )
        stored = StoredTask.saved(
            task,
            previous,
            at=self.at,
            schedule_names=schedule_names,
            audit_seq=record.seq,
            audit_head=record.hash,
            forget_before=forgotten_runs_before(self.store.retention, self.at),
        )
        self._stage_task(stored, previous)
        return stored

    def stage_task_removal(
        self, stored: StoredTask, *, action: str, evidence: dict[str, Any] | None = None
    ) -> None:
        """Stage the removal of a task (guarded by its version) with the last record of its chain
        (``rebound migrate tenancy`` moves a task to its new key this way)."""
        self.append_audit(
            task_subject(stored.task.id),
            action=action,
            head=(stored.audit_seq, stored.audit_head),
            from_state=stored.task.state.value,
            to_state="removed",
            evidence=evidence,
        )
        self._stage_task_delete(stored)

    def stage_tenant(self, tenant: str, settings: TenantSettings) -> None:
        """Stage a tenant's settings (replacing what was there) with an audit record."""
        data = settings.model_dump(mode="json")
        if data.get("capacity_reserve") is None:  # said only where a tenant names a capacity service
            data.pop("capacity_reserve", None)
        self.append_audit(tenant_subject(tenant), action="tenant-settings", evidence=data)
        item = {"tenant": tenant, "settings": data, "updated_at": iso(self.at)}
        self._stage_put("tenants", tenant, item, f"tenant {tenant}")

    def stage_versioned(self, key: str, body: dict[str, Any], expect: int | None, label: str) -> int:
        """Stage a control record ``key`` holding ``body`` (JSON), guarded by its version: the
        commit fails (``label`` among the failed) unless the stored version is ``expect`` (with
        ``None``: unless there is none). Returns the version written."""
        version = (expect or 0) + 1
        self._stage_versioned(key, {"pk": key, "version": version, "body": dumps(body)}, expect, label)
        return version

    def stage_record(self, key: str, body: dict[str, Any], label: str) -> None:
        """Stage an unguarded control record ``key`` holding ``body`` (JSON), replacing any."""
        self._stage_put("control", key, {"pk": key, "body": dumps(body)}, label)

    def record_dlq_entry(self, entry: DlqEntry) -> None:
        """Stage the record of a message in the DLQ (replacing any record of it): it commits with
        the change that put the message there, or that names it (``rebound.engine.dlq_record``)."""
        self._stage_put(
            dlq_items.TABLE, entry.message_id, dlq_items.to_record(entry), f"dlq {entry.message_id}"
        )

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
        """Stage ``event`` in the outbox, unless no rule of the bus would deliver it anywhere
        (``StagingStore.published``): an event nobody consumes costs its outbox write and its
        ``PutEvents`` entry and changes nothing. Nor is an event only outside subscribers consume
        while ``StagingStore.streaming`` says no (the audit-streaming flag off). Its id is taken
        either way, so the ids of the events staged after it do not depend on what is published."""
        seq = self.audit_records[-1].seq if self.audit_records else 0
        event_id = outbox_event_id(subject, seq, self._events)
        self._events += 1
        detail_type = event.detail_type.value
        if (self.store.published is not None and detail_type not in self.store.published) or (
            self.store.streaming is not None and detail_type not in consumed() and not self.store.streaming()
        ):
            if self.store.check_unpublished:
                event.detail  # noqa: B018 (read to validate it: a wrong shape raises)
            return
        item = {
            "event_id": event_id,
            "detail_type": event.detail_type.value,
            "source": self.store.event_source,
            "detail": dumps({**event.detail, "event_id": event_id}),
            "subject": subject,
            "created_at": iso(self.at),
            "expires_at": int((self.at + OUTBOX_TTL).timestamp()),
        }
        self._stage_event(item, f"event {event.detail_type.value}")

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
        fields = next_fields(
            subject=subject,
            prev_seq=prev_seq,
            prev_hash=prev_hash,
            at=self.at,
            actor=self.actor,
            action=action,
            from_state=from_state,
            to_state=to_state,
            evidence=evidence,
            key_id=self.store.audit_keys.key_id,
            sign=self.store.audit_keys.sign,
        )
        record = audit_record(fields)
        self.audit_records.append(record)
        self._stage_audit(record, fields, f"audit {subject} #{record.seq}")
        return record

    @abstractmethod
    def commit(self, attempts: int = ...) -> None: ...

    @staticmethod
    def _check_size(changes: int) -> None:
        if changes > MAX_TRANSACTION_ITEMS:
            raise OperationalError(f"a change of {changes} items exceeds the transaction limit")

    # --- what a store says: how each change is guarded and written ------------------------------
    @abstractmethod
    def _stage_audit(self, record: AuditRecord, fields: AuditFields, label: str) -> None:
        """Stage ``record`` (``fields``: as it was hashed, the form to store); the commit fails if
        its (subject, seq) exists."""

    @abstractmethod
    def _stage_event(self, item: dict[str, Any], label: str) -> None:
        """Stage an outbox event; the commit fails if its ``event_id`` exists."""

    @abstractmethod
    def _stage_owned(
        self, table: str, key_attr: str, key: str, data: dict[str, Any], before: Run | WorkOrder | None
    ) -> None:
        """Stage a run or work order guarded by ``before`` (its audit sequence number, and a run's
        revision; with ``None``, by not existing). Staged again, it replaces the staged item and
        keeps the first guard. Its label is ``"<table> <key>"``."""

    @abstractmethod
    def _stage_task(self, stored: StoredTask, previous: StoredTask | None) -> None:
        """Stage ``stored`` guarded by ``previous``'s version (with ``None``, by not existing), and
        one more in ``TASKS_EPOCH``. Labels: ``"task <id>"``, ``"tasks epoch"``."""

    @abstractmethod
    def _stage_task_delete(self, stored: StoredTask) -> None:
        """Stage the delete of ``stored``'s item guarded by its version, and one more in
        ``TASKS_EPOCH``. Labels: ``"task <id>"``, ``"tasks epoch"``."""

    @abstractmethod
    def _stage_put(self, table: str, key: str, item: dict[str, Any], label: str) -> None:
        """Stage an unguarded put of a whole item."""

    @abstractmethod
    def _stage_versioned(self, key: str, item: dict[str, Any], expect: int | None, label: str) -> None:
        """Stage a put of control record ``item`` guarded by its stored ``version`` being ``expect``
        (with ``None``: by not existing)."""


def consumed() -> frozenset[str]:
    """The detail types Rebound's own loop consumes (``rebound.resources.consumed_detail_types``)."""
    if not _CONSUMED:
        from rebound import resources

        _CONSUMED.append(resources.consumed_detail_types())
    return _CONSUMED[0]


_CONSUMED: list[frozenset[str]] = []


class StagingStore(ABC):
    """What every store does the same way through its own units of work and control records."""

    event_source: str
    """The ``source`` of the events its outbox announces."""
    audit_keys: AuditKeys
    """Keys every audit record it writes (``rebound.domain.audit``)."""
    published: frozenset[str] | None = None
    """The detail types its outbox carries (``None``: every event); ``Settings.published_events``."""
    streaming: Callable[[], bool] | None = None
    """Whether events only outside subscribers consume are published (the ``audit-streaming``
    flag; ``None``: they are). Events a rule of Rebound's own stack consumes always are."""
    retention: Retention | None = None
    """How long finished runs and audit records stay (``rebound.domain.retention``; ``None``: for ever)."""
    check_unpublished: bool = False
    """Whether an event it does not publish is validated all the same (``DomainEvent.detail``).
    A deployed store skips the work, as the event is never written; the in-memory store the
    tests run on checks every event's shape, so a path that builds a wrong one fails its tests
    whatever the environment publishes."""

    @abstractmethod
    def unit_of_work(self, actor: str, at: datetime) -> StagingUnitOfWork: ...

    @abstractmethod
    def audit_head(self, subject: str) -> tuple[int, str]:
        """The stored chain head of ``subject`` (``(0, GENESIS)`` for none)."""

    @abstractmethod
    def get_key(self, key: str) -> dict[str, Any] | None: ...

    def retrying(self, attempts: int, call: Callable[[], T]) -> T:
        """``call()``, tried again after a transient error (contention, throttling), after
        ``_pause``, up to ``attempts`` tries; the last transient error is raised."""
        for n in range(1, attempts + 1):
            try:
                return call()
            except TRANSIENT:
                if n == attempts:
                    raise
                self._pause(n)
        raise AssertionError("unreachable")

    def _pause(self, n: int) -> None:
        """The wait before try ``n + 1`` (none by default)."""
        return

    def tasks_epoch(self) -> int:
        """A counter every task write increments: an unchanged epoch means an unchanged task list."""
        item = self.get_key(TASKS_EPOCH)
        return int(item.get("epoch", 0)) if item else 0

    def save_task(
        self,
        task: Task,
        *,
        previous: StoredTask | None,
        actor: str,
        at: datetime,
        action: str,
        schedule_names: tuple[str, ...] = (),
        evidence: dict[str, Any] | None = None,
        head: tuple[int, str] | None = None,
    ) -> StoredTask:
        """Create or replace a task definition, guarded by its version, with an audit record
        (appended after ``head`` when given: a repair of a stale head)."""
        uow = self.unit_of_work(actor, at)
        stored = uow.stage_task(
            task, previous, action=action, schedule_names=schedule_names, evidence=evidence, head=head
        )
        uow.commit()
        return stored

    def remove_task(
        self,
        stored: StoredTask,
        *,
        actor: str,
        at: datetime,
        action: str,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        """Remove a task's item (guarded by its version); its audit chain stays, ended by a record."""
        uow = self.unit_of_work(actor, at)
        uow.stage_task_removal(stored, action=action, evidence=evidence)
        uow.commit()

    def put_tenant(self, tenant: str, settings: TenantSettings, *, actor: str, at: datetime) -> None:
        uow = self.unit_of_work(actor, at)
        uow.stage_tenant(tenant, settings)
        uow.commit()
