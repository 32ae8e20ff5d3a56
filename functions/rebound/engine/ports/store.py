"""The store port: tasks, runs, audit chains, work orders, control records, tenants, policies,
the record of the DLQ's messages, and the unit of work that changes them in one transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from rebound.domain.audit import AuditFields
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import ValidationFailed
from rebound.domain.events import DomainEvent
from rebound.domain.run import Run, RunState
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task, TenantSettings
from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder, WorkOrderState
from rebound.engine.ports.keys import AuditKeys

T = TypeVar("T")


# -------------------------------------------------------------------------- the DLQ's record
class DlqStatus(StrEnum):
    """Where a recorded DLQ message is: still in the queue, or how it left."""

    IN_DLQ = "in_dlq"
    REDRIVEN = "redriven"
    """A redrive replayed its run (or found it replayed from it) and deleted it."""
    DELETED = "deleted"
    """Removed as a second copy (by a redrive or the sweeper)."""
    ARCHIVED = "archived"
    """Copied into the archive and removed from the queue (``rebound dlq archive --delete``)."""
    SUPERSEDED = "superseded"
    """Its run was superseded (a workstream ran its step again): no longer a dead letter; the
    sweeper's next DLQ check (or a redrive) deletes it from the queue."""


@dataclass(frozen=True)
class DlqEntry:
    """The record of one message in the execution DLQ, written where it arrives
    (``rebound.engine.dlq_record``): what listing, showing and counting it needs, so that
    reading the DLQ never receives (and so never hides) a message."""

    message_id: str
    at: datetime
    """When it was dead-lettered (its ``dead_lettered_at`` attribute), else when it was sent: the
    order of the list, and what ``--since``/``--until`` compare."""
    body: str
    attributes: dict[str, str]
    """Its message attributes, as SQS hands them back (strings)."""
    sent_at_ms: int
    """When the queue first took it (its retention counts from here)."""
    receive_count: int = 0
    run_id: str | None = None
    task_id: str | None = None
    tenant: str | None = None
    error_code: str | None = None
    reason: str | None = None
    attempts: int | None = None
    status: DlqStatus = DlqStatus.IN_DLQ
    recorded_by: str = ""
    changed_at: datetime | None = None
    changed_by: str | None = None


@dataclass(frozen=True)
class DlqQuery:
    """Which recorded messages to list: oldest first, ``limit`` at a time.

    ``status`` is where they are: still in the DLQ (the default), or how they left. Filters:
    ``task_id`` (only with ``in_dlq``: ``by_task`` holds only what is in the DLQ), ``tenant``,
    ``error_code``; ``since``/``until`` bound ``DlqEntry.at`` (both included); ``changed_since``
    keeps messages whose status changed at or after it (those that left since). ``present_at``
    leaves out messages the queue's retention has dropped by then. ``after`` is the ``cursor`` of
    the page before."""

    task_id: str | None = None
    tenant: str | None = None
    error_code: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    present_at: datetime | None = None
    limit: int = 100
    after: str | None = None
    status: DlqStatus = DlqStatus.IN_DLQ
    changed_since: datetime | None = None

    def __post_init__(self) -> None:
        if self.task_id is not None and self.status is not DlqStatus.IN_DLQ:
            raise ValidationFailed(
                f"task_id: a task's messages are listed only while in the DLQ, not {self.status.value}",
                key_path="task_id",
            )


@dataclass(frozen=True)
class DlqPage:
    entries: list[DlqEntry]
    cursor: str | None
    """Pass as ``DlqQuery.after`` for the next page; ``None`` when this page is the last."""


@dataclass(frozen=True)
class DlqSpan:
    """When a recorded message arrived in the DLQ and how long it stayed: what the DLQ's depth over
    time needs of its record, and no more (``Store.dlq_spans`` reads only these attributes)."""

    arrived: datetime
    """``DlqEntry.at``."""
    status: DlqStatus
    changed_at: datetime | None
    """When it left (``None`` while it is in the DLQ)."""
    expires_at: datetime
    """While it is in the DLQ: when the queue's retention drops it."""


@dataclass(frozen=True)
class DlqSpanPage:
    spans: list[DlqSpan]
    cursor: str | None
    """Pass as ``DlqQuery.after`` for the next page; ``None`` when this page is the last."""


@dataclass(frozen=True)
class RunPage:
    """A page of runs in one state, latest change first."""

    runs: list[Run]
    cursor: str | None
    """Pass as ``after`` for the next page; ``None`` when this page is the last."""


def run_cursor(run: Run) -> str:
    """The cursor after ``run`` in a listing by state (its ``by_state`` key: when it changed, its id)."""
    return f"{iso(run.updated_at)}|{run.run_id}"


def parse_run_cursor(cursor: str) -> tuple[str, str]:
    """``(updated_at, run_id)`` of a cursor; ``ValidationFailed`` naming ``after`` if it is not one."""
    updated_at, sep, run_id = cursor.partition("|")
    if not sep or not run_id or not updated_at:
        raise ValidationFailed(f"after: {cursor!r} is not a cursor of a runs page", key_path="after")
    return updated_at, run_id


class UnitOfWork(Protocol):
    """Changes collected and committed as one transaction: all of them or none.

    ``commit`` raises ``Conflict`` when a guard failed (someone changed a record first, or a slot
    is full); its ``details["failed"]`` names the labels of the guards that failed.
    """

    actor: str
    at: datetime

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
        """Stage ``after`` (guarded by ``before`` as stored) and its audit record, appended after
        ``head`` when given (a repair of a stale head), else after ``before``'s. ``defer_item``:
        a new run's item may wait for its next write (``rebound.domain.run.item_may_wait``)."""
        ...

    def touch_run(self, before: Run, after: Run) -> Run: ...

    def save_work_order(
        self,
        before: WorkOrder | None,
        after: WorkOrder,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
        head: tuple[int, str] | None = None,
    ) -> WorkOrder: ...

    def append_audit(
        self,
        subject: str,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
        head: tuple[int, str] | None = None,
        from_state: str | None = None,
        to_state: str | None = None,
    ) -> AuditRecord: ...

    def emit(self, event: DomainEvent, subject: str) -> None: ...

    def enter_slot(self, key: str, cap: int, run_id: str, until: datetime, label: str) -> None: ...

    def leave_slot(self, key: str, run_id: str) -> None: ...

    def enter_slot_many(
        self, key: str, cap: int, run_ids: Sequence[str], until: datetime, label: str
    ) -> None:
        """Enter several holders into one slot in one write (a transaction may write an item only
        once); the commit fails if the slot has no room for all of them."""
        ...

    def leave_slot_many(self, key: str, run_ids: Sequence[str]) -> None:
        """Several holders leave one slot in one write."""
        ...

    def reap_slot_holder(self, key: str, run_id: str, now: datetime) -> None: ...

    def count_streak(self, key: str, run_id: str, label: str) -> None: ...

    def end_streak(self, key: str, label: str) -> None: ...

    def set_streak(self, key: str, consecutive: int, last_run: str | None, label: str) -> None:
        """Rewrite a streak counter's ``consecutive`` (and ``last_run``), keeping ``streak``
        (the streaks ended, which names their work orders): the SLA report's rebuild."""
        ...

    def add_policy_version(self, name: str, version: int, data: Mapping[str, Any]) -> None: ...

    def stage_versioned(self, key: str, body: dict[str, Any], expect: int | None, label: str) -> int:
        """Write control record ``key`` (``body`` as JSON) only if its version is still ``expect``
        (``None``: only if it does not exist); returns the version written."""
        ...

    def stage_record(self, key: str, body: dict[str, Any], label: str) -> None:
        """Write control record ``key`` (``body`` as JSON), replacing any."""
        ...

    def record_dlq_entry(self, entry: DlqEntry) -> None:
        """Record a message in the DLQ with the change that put it there (replacing any record)."""
        ...

    def commit(self, attempts: int = ...) -> None: ...


class Store(Protocol):
    """Tasks, runs, audit chains, work orders, control records, tenants and policies."""

    audit_keys: AuditKeys
    """The keys of the audit records it writes; also what verifies them, and actors in messages."""

    def unit_of_work(self, actor: str, at: datetime) -> UnitOfWork: ...

    def retrying(self, attempts: int, call: Callable[[], T]) -> T: ...

    # tasks
    def get_task(self, task_id: str) -> StoredTask | None: ...

    def list_tasks(self) -> list[StoredTask]: ...

    def tasks_epoch(self) -> int: ...

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
    ) -> StoredTask: ...

    def remove_task(
        self,
        stored: StoredTask,
        *,
        actor: str,
        at: datetime,
        action: str,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        """Remove a task's item, guarded by its version; its chain ends with an audit record."""
        ...

    # runs
    def get_run(self, run_id: str) -> Run | None: ...

    def get_runs(self, run_ids: list[str]) -> dict[str, Run]: ...

    def existing_runs(self, run_ids: list[str], *, consistent: bool = True) -> set[str]:
        """Which of ``run_ids`` exist, without reading the runs (the ledger's check of every
        expected fire, each minute). ``consistent=False``: an eventually consistent read, at half
        the price, which may miss a run written a moment before."""
        ...

    def runs_segment_parts(
        self, segment: int, segments: int, page_size: int | None = None
    ) -> Iterator[dict[str, dict[str, Any]]]:
        """Every run in one of ``segments`` parts of the runs table, by id, each as stored: its
        JSON form, unset (``None``) fields possibly left out, no model built of it (``audit
        verify --all``). Every run is in exactly one segment, once; the segment comes in parts as
        its scan pages do (``page_size`` items a page, or as large as the store answers)."""
        ...

    def runs_for_task(
        self,
        task_id: str,
        since: datetime | None = None,
        until: datetime | None = None,
        newest_first: bool = True,
        limit: int | None = None,
    ) -> list[Run]: ...

    def runs_in_state(
        self, state: RunState, *, updated_before: datetime | None = None, limit: int | None = None
    ) -> list[Run]:
        """Runs in ``state`` (the ``by_state`` index), oldest change first. The index is sparse
        (``rebound.domain.run.in_state_index``): ``SUCCEEDED`` lists the runs that succeeded after
        a retry, never a clean success, and ``RUNNING`` never a clean attempt, here and in the two
        calls below (``rebound.ops.running`` lists and counts every running run)."""
        ...

    def runs_in_state_page(
        self, state: RunState, *, since: datetime | None = None, limit: int = 100, after: str | None = None
    ) -> RunPage:
        """Runs in ``state``, latest ``updated_at`` first, changed at or after ``since``: one page
        of the ``by_state`` index from ``after`` (a ``RunPage.cursor``). A query, never a scan."""
        ...

    def count_runs_in_state(
        self, state: RunState, *, since: datetime | None = None, at_most: int | None = None
    ) -> int:
        """How many runs are in ``state``, changed at or after ``since`` (a counting query on
        ``by_state``); counting stops once past ``at_most``."""
        ...

    def scan_runs(self) -> Iterator[Run]: ...

    def set_run_expiry(self, run_id: str, rev: int, expires_at: int) -> bool:
        """Give a finished run written before retention its ``ttl`` (epoch seconds): storage only,
        no audit record, nothing of the run changed. False if the run changed since it was read
        (``rev``), is gone, or has an expiry already."""
        ...

    def relist_running(self, run: Run) -> bool:
        """Put a run running a clean attempt in ``by_state`` (its keys as top-level attributes):
        the executor's once the attempt has run for 10 s, and ``rebound migrate
        relist-running``'s for an earlier version, which finds running runs there alone.
        Storage only, nothing of the run changes (its next write stores it anew). False if it is
        listed already, or changed since it was read (``run.rev``)."""
        ...

    def relist_by_fire(self, run: Run) -> bool:
        """Put a clean success found by its fire (``rebound.domain.run.found_by_fire``) in
        ``by_task_keys``, for a rollback to an earlier version, which lists a task's runs from the
        index alone (``rebound migrate relist-by-fire``): storage only, nothing of the run changes.
        False if it is not such a run, is listed already, or changed since it was read."""
        ...

    def unlist_clean_success(self, run: Run) -> bool:
        """Move a clean success written before the sparse ``by_state`` index out of it
        (``rebound.domain.run.in_state_index``): storage only, nothing of the run changes. False
        if it is not such a run, is out already, or changed since it was read (``run.rev``)."""
        ...

    def scan_runs_page(self, *, limit: int = 100, after: str | None = None) -> tuple[list[Run], str | None]:
        """Up to ``limit`` runs of a scan of the whole table, from ``after`` (the cursor of the
        page before); the cursor of the next page, ``None`` after the last."""
        ...

    # audit
    def audit_trail(self, subject: str) -> list[AuditRecord]: ...

    def audit_head(self, subject: str) -> tuple[int, str]: ...

    def audit_subjects(self) -> list[str]: ...

    def audit_segment_parts(
        self, segment: int, segments: int, page_size: int | None = None
    ) -> Iterator[dict[str, list[AuditFields]]]:
        """Every audit record in one of ``segments`` parts of the audit trail, by subject, each
        subject's in sequence order, each as stored (``AuditFields``: no model is built of it),
        integral numbers as ints (``jsonutil.plain_loads``). Every subject is in exactly one
        segment, whole, in one of its parts: the segment comes in parts as its scan pages do
        (``page_size`` items a page, or as large as the store answers), each part the subjects
        whose trails are whole by then."""
        ...

    # work orders
    def get_work_order(self, work_order_id: str) -> WorkOrder | None: ...

    def work_orders(
        self, state: WorkOrderState | None = None, *, opened_since: datetime | None = None
    ) -> list[WorkOrder]:
        """Work orders (in ``state``; opened at or after ``opened_since``), oldest first."""
        ...

    def scan_work_orders_page(
        self, *, limit: int = 100, after: str | None = None
    ) -> tuple[list[WorkOrder], str | None]:
        """Up to ``limit`` work orders of a scan of the whole table, as ``scan_runs_page``."""
        ...

    # control records: idempotency keys, watermarks, heartbeats, slots, counters
    def claim_key(
        self, key: str, at: datetime, ttl: timedelta, data: Mapping[str, Any] | None = None
    ) -> bool: ...

    def put_key(self, key: str, data: Mapping[str, Any]) -> None: ...

    def get_key(self, key: str) -> dict[str, Any] | None: ...

    def get_keys(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The records that exist among ``keys``, by key (read 100 at a time)."""
        ...

    def release_key(self, key: str) -> None: ...

    # tenants
    def get_tenant(self, tenant: str) -> TenantSettings | None: ...

    def put_tenant(self, tenant: str, settings: TenantSettings, *, actor: str, at: datetime) -> None: ...

    # policies
    def latest_policy(self, name: str) -> dict[str, Any] | None: ...

    def policy_versions(self, name: str) -> list[dict[str, Any]]: ...

    def stored_policy_names(self) -> list[str]: ...

    # the DLQ's record: one item per DLQ message, listed from an index ordered by time
    def add_dlq_entry(self, entry: DlqEntry) -> bool:
        """Record a DLQ message found without a record. False if it had one (kept as it is)."""
        ...

    def get_dlq_entry(self, message_id: str) -> DlqEntry | None: ...

    def get_dlq_entries(self, message_ids: list[str]) -> dict[str, DlqEntry]: ...

    def dlq_entries(self, query: DlqQuery) -> DlqPage:
        """Recorded messages in ``query.status`` (still in the DLQ, or how they left), oldest
        first: a query, never a scan."""
        ...

    def dlq_spans(self, query: DlqQuery) -> DlqSpanPage:
        """What ``dlq_entries`` would list, as spans only (arrival, status, departure, expiry): the
        same query, reading a few attributes of each item instead of the whole message."""
        ...

    def mark_dlq_entries(
        self, message_ids: list[str], status: DlqStatus, *, at: datetime, actor: str
    ) -> None:
        """The messages left the DLQ (``status``). A message never recorded gets a record of how it
        left, so a late ``add_dlq_entry`` cannot put it back."""
        ...
