"""The ports: everything the engine and the operations need from the world, as narrow protocols
typed with domain types. ``rebound.adapters`` implements them on AWS; ``rebound.adapters.memory``
implements the store in memory (the engine's fast tests); the local cloud plays the rest.

The engine and ``rebound.ops`` import these protocols, never an adapter, so no AWS type or call
reaches them. Value types that cross a port (a queue's counts, a peeked message, an event for the
bus, a range of the outbox stream) are declared here with the port that carries them.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from rebound.domain.errors import NotFound
from rebound.domain.events import DomainEvent
from rebound.domain.models import (
    AuditRecord,
    Run,
    RunState,
    Task,
    TenantSettings,
    WorkOrder,
    WorkOrderState,
)
from rebound.domain.notification import Notification
from rebound.domain.stored import StoredTask
from rebound.targets.base import Invocation, Outcome, TargetSpec

T = TypeVar("T")
R = TypeVar("R")


# --------------------------------------------------------------------------------- the store
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
    ) -> Run: ...

    def touch_run(self, before: Run, after: Run) -> Run: ...

    def save_work_order(
        self,
        before: WorkOrder | None,
        after: WorkOrder,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
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

    def reap_slot_holder(self, key: str, run_id: str, now: datetime) -> None: ...

    def count_streak(self, key: str, run_id: str, label: str) -> None: ...

    def end_streak(self, key: str, label: str) -> None: ...

    def add_policy_version(self, name: str, version: int, data: Mapping[str, Any]) -> None: ...

    def commit(self, attempts: int = ...) -> None: ...


class Store(Protocol):
    """Tasks, runs, audit chains, work orders, control records, tenants and policies."""

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
    ) -> StoredTask: ...

    # runs
    def get_run(self, run_id: str) -> Run | None: ...

    def get_runs(self, run_ids: list[str]) -> dict[str, Run]: ...

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
    ) -> list[Run]: ...

    def scan_runs(self) -> Iterator[Run]: ...

    # audit
    def audit_trail(self, subject: str) -> list[AuditRecord]: ...

    def audit_head(self, subject: str) -> tuple[int, str]: ...

    def audit_subjects(self) -> list[str]: ...

    # work orders
    def get_work_order(self, work_order_id: str) -> WorkOrder | None: ...

    def work_orders(self, state: WorkOrderState | None = None) -> list[WorkOrder]: ...

    # control records: idempotency keys, watermarks, heartbeats, slots, counters
    def claim_key(
        self, key: str, at: datetime, ttl: timedelta, data: Mapping[str, Any] | None = None
    ) -> bool: ...

    def put_key(self, key: str, data: Mapping[str, Any]) -> None: ...

    def get_key(self, key: str) -> dict[str, Any] | None: ...

    def release_key(self, key: str) -> None: ...

    # tenants
    def get_tenant(self, tenant: str) -> TenantSettings | None: ...

    def put_tenant(self, tenant: str, settings: TenantSettings, *, actor: str, at: datetime) -> None: ...

    # policies
    def latest_policy(self, name: str) -> dict[str, Any] | None: ...

    def policy_versions(self, name: str) -> list[dict[str, Any]]: ...

    def stored_policy_names(self) -> list[str]: ...


# -------------------------------------------------------------------------------- the queues
@dataclass(frozen=True)
class SentMessage:
    message_id: str
    delay_s: int


@dataclass(frozen=True)
class QueueCounts:
    """SQS's approximate counts: visible, in flight (received, not deleted) and delayed."""

    visible: int
    in_flight: int
    delayed: int

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed


@dataclass(frozen=True)
class PeekedMessage:
    message_id: str
    body: str
    receipt_handle: str
    receive_count: int
    sent_at_ms: int
    attributes: dict[str, str]


@dataclass(frozen=True)
class Received:
    """A message received in a batch, with its receipt handle."""

    message_id: str
    receipt_handle: str
    body: str
    attributes: dict[str, str]
    sent_at_ms: int
    receive_count: int


@dataclass(frozen=True)
class Outgoing:
    key: str
    body: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class BatchResult:
    """Which entries of a batch request the queue accepted, by the caller's key, and why the others failed."""

    ok: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


BATCH = 10
"""The most entries SQS takes in one batch request, and the most messages one receive returns."""


class QueueBatches(Protocol):
    """A queue in batches of ten, for operators moving many messages; counts its requests."""

    requests: int

    def receive(self, queue: str, *, visibility_s: int, wait_s: int = 0) -> list[Received]: ...

    def send(self, queue: str, messages: Sequence[Outgoing]) -> BatchResult: ...

    def delete(self, queue: str, messages: Sequence[tuple[str, str]]) -> BatchResult: ...

    def set_visibility(
        self, queue: str, messages: Sequence[tuple[str, str]], seconds: int
    ) -> BatchResult: ...

    def depth(self, queue: str) -> QueueCounts: ...


class Queues(Protocol):
    """The execution queue, its DLQ, the control DLQ: one message per request."""

    def send(
        self,
        queue: str,
        body: Mapping[str, Any] | str,
        *,
        delay_s: float = 0,
        attributes: Mapping[str, Any] | None = None,
    ) -> SentMessage: ...

    def release(self, queue: str, receipt_handle: str) -> None: ...

    def peek(self, queue: str, max_messages: int, visibility_s: int = 30) -> list[PeekedMessage]: ...

    def counts(self, queue: str) -> QueueCounts: ...

    def change_visibility(self, queue: str, receipt_handle: str, seconds: float) -> None: ...

    def delete(self, queue: str, receipt_handle: str) -> None: ...

    def depth(self, queue: str) -> int: ...

    def batches(self) -> QueueBatches: ...


# ------------------------------------------------------------------ schedules, bus, streams
class Schedules(Protocol):
    """EventBridge Scheduler: one-time schedules (retries) and recurring ones (task schedules)."""

    def create_one_time(self, name: str, when: datetime, payload: dict[str, Any]) -> bool: ...

    def put_recurring(
        self,
        name: str,
        expression: str,
        timezone: str,
        payload: dict[str, Any],
        *,
        enabled: bool = True,
        window_minutes: int | None = None,
        description: str = "",
        end: datetime | None = None,
    ) -> str: ...

    def delete(self, name: str) -> bool: ...

    def get(self, name: str) -> dict[str, Any] | None: ...

    def states(self, prefix: str) -> dict[str, str]:
        """Every schedule of the group whose name starts with ``prefix``: name -> state."""
        ...


@dataclass(frozen=True)
class BusEvent:
    key: str
    source: str
    detail_type: str
    detail: str


class Bus(Protocol):
    def publish(self, events: Sequence[BusEvent]) -> list[str]: ...

    def put_task_rule(
        self,
        name: str,
        task_id: str,
        pattern: str,
        queue_arn: str,
        dead_letter_arn: str,
        *,
        enabled: bool,
        description: str = "",
    ) -> str: ...

    def get_rule(self, name: str) -> dict[str, Any] | None: ...

    def delete_task_rule(self, name: str) -> bool: ...


@dataclass(frozen=True)
class StreamRange:
    """A range of the outbox table's stream that the relay gave up on."""

    stream_arn: str
    shard_id: str
    first: str
    last: str

    @classmethod
    def from_failure_record(cls, body: Mapping[str, Any]) -> StreamRange | None:
        """The range of a Lambda on-failure record for a DynamoDB stream, or None if it is not one."""
        info = body.get("DDBStreamBatchInfo")
        if not isinstance(info, Mapping):
            return None
        try:
            return cls(
                str(info["streamArn"]),
                str(info["shardId"]),
                str(info["startSequenceNumber"]),
                str(info["endSequenceNumber"]),
            )
        except KeyError:
            return None


class OutboxStream(Protocol):
    def read_events(self, span: StreamRange) -> list[BusEvent]:
        """The outbox events (inserts) from ``first`` to ``last``, in stream order."""
        ...


# ------------------------------------------------------------------- notifications, targets
class DeliveryFailed(Exception):
    def __init__(self, channel: str, detail: str) -> None:
        super().__init__(f"{channel}: {detail}")
        self.channel = channel
        self.detail = detail


class Channel(Protocol):
    name: str

    def send(self, note: Notification) -> str:
        """Deliver ``note``; returns what the channel answered. Raises ``DeliveryFailed``."""
        ...


class Notifier(Protocol):
    @property
    def channels(self) -> Sequence[Channel]: ...

    @property
    def names(self) -> list[str]: ...

    def alert(self, subject: str, body: dict[str, Any], severity: str) -> list[str]: ...


class Targets(Protocol):
    def invoke(self, target: TargetSpec, call: Invocation) -> Outcome: ...


# -------------------------------------------------------------------------- the DLQ archive
ARCHIVED = "archived"
REDRIVEN = "redriven"
DEFAULT_KEEP_DAYS = 400
ARCHIVE_TABLE = "dlq_archive"
"""Logical name of the archive table in ``rebound.resources.SPEC``."""


class ArchiveUnavailable(NotFound):
    code = "ARCHIVE_UNAVAILABLE"

    def __init__(self) -> None:
        super().__init__(
            f"this environment has no DLQ archive table ({ARCHIVE_TABLE}); "
            "deploy the stack version that creates it",
            table=ARCHIVE_TABLE,
        )


@dataclass(frozen=True)
class ArchivedItem:
    message_id: str
    body: str
    attributes: dict[str, str]
    sent_at_ms: int
    receive_count: int
    status: str
    archived_at: str
    archived_by: str
    redriven_at: str | None = None
    redriven_by: str | None = None


class Archive(Protocol):
    """DLQ messages kept beyond the queue's retention, redrivable from there."""

    def put(
        self,
        *,
        message_id: str,
        body: str,
        attributes: dict[str, str],
        sent_at_ms: int,
        receive_count: int,
        at: datetime,
        actor: str,
        keep_days: int = DEFAULT_KEEP_DAYS,
        index: dict[str, Any] | None = None,
    ) -> bool:
        """Archive one message. False if it was archived before (the first copy is kept)."""
        ...

    def get(self, message_id: str) -> ArchivedItem | None: ...

    def scan(self, status: str | None = None) -> Iterator[ArchivedItem]: ...

    def mark_redriven(self, message_id: str, at: datetime, actor: str) -> bool:
        """``archived`` -> ``redriven``. False if it was not ``archived`` any more."""
        ...


# ------------------------------------------------------------------ time, metrics, fan-out
class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class Metrics(Protocol):
    def count(self, name: str, value: float = 1.0) -> None: ...

    def observe(self, name: str, value: float, unit: str = "Milliseconds") -> None: ...


class CrashPoints(Protocol):
    """Named places where fault injection may stop an invocation. A no-op on AWS."""

    def reached(self, point: str) -> None: ...


class NoCrashes:
    def reached(self, point: str) -> None:
        return None


class Fanout(Protocol):
    """Runs one function over several items at once (the executor's batch), results in order.

    ``fn`` should not raise. If a call does, ``map`` still waits for every other call, then
    raises the first exception (a ``BaseException`` such as a simulated crash included).
    """

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...


class ThreadFanout:
    """One thread per item (a batch is at most 10 items), each with a copy of the caller's context."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="batch") as pool:
            futures = [pool.submit(contextvars.copy_context().run, fn, item) for item in items]
        results: list[R] = []
        first: BaseException | None = None
        for future in futures:
            error = future.exception()
            if error is not None:
                first = first or error
                continue
            results.append(future.result())
        if first is not None:
            raise first
        return results


class SequentialFanout:
    """One item after the other (deterministic tests)."""

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return [fn(item) for item in items]
