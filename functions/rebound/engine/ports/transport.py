"""The transport ports: the queues (one message at a time, and in batches of ten for operators),
EventBridge Scheduler, the event bus, and the outbox stream read again."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


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


class QueueAges(Protocol):
    """How old the oldest message of a queue is. SQS has no queue attribute for it: on AWS it is
    CloudWatch's ``ApproximateAgeOfOldestMessage`` metric; on the local cloud, the local runtime
    reads the queue it keeps. ``source`` says which."""

    source: str

    def oldest_age_s(self, queue: str) -> float | None:
        """Seconds since the oldest message was sent; ``None`` if empty or unknown."""
        ...


class Queues(Protocol):
    """The execution queue, its DLQ, the control DLQ: one message per request."""

    def send(
        self,
        queue: str,
        body: Mapping[str, Any] | str,
        *,
        delay_s: float = 0,
        attributes: Mapping[str, Any] | None = None,
        trace: str | None = None,
    ) -> SentMessage:
        """``trace``: an X-Ray header for the message's ``AWSTraceHeader`` (rebound.domain.tracing)."""
        ...

    def release(self, queue: str, receipt_handle: str) -> None: ...

    def peek(self, queue: str, max_messages: int, visibility_s: int = 30) -> list[PeekedMessage]: ...

    def counts(self, queue: str) -> QueueCounts: ...

    def change_visibility(self, queue: str, receipt_handle: str, seconds: float) -> None: ...

    def delete(self, queue: str, receipt_handle: str) -> None: ...

    def depth(self, queue: str) -> int: ...

    def batches(self) -> QueueBatches: ...


# ------------------------------------------------------------------ schedules, bus, streams
@dataclass(frozen=True)
class RecurringSchedule:
    """A recurring schedule as Rebound wants it in Scheduler: what fires when, with which payload,
    to which queue (``queue_arn``; None: the execution queue)."""

    name: str
    expression: str
    timezone: str
    payload: Mapping[str, Any]
    enabled: bool = True
    window_minutes: int | None = None
    """Scheduler's flexible time window, in minutes; None: off."""
    description: str = ""
    end: datetime | None = None
    queue_arn: str | None = None


@dataclass(frozen=True)
class Listed:
    """What ``ListSchedules`` says of one schedule: its ``LastModificationDate`` (ISO), its state
    and its target's ARN."""

    modified: str
    state: str
    target_arn: str


@dataclass(frozen=True)
class Synced:
    """What a sync verified of a recurring schedule: the fingerprint of the request that writes it
    and the schedule's ``LastModificationDate`` (ISO) when it held exactly that."""

    fingerprint: str
    modified: str


@dataclass(frozen=True)
class SyncResult:
    outcome: str
    """``created``, ``updated`` or ``unchanged``."""
    synced: Synced | None
    """What the next sync may trust; None when it could not be verified."""


class Schedules(Protocol):
    """EventBridge Scheduler: one-time schedules (retries) and recurring ones (task schedules)."""

    def create_one_time(self, name: str, when: datetime, payload: dict[str, Any]) -> bool: ...

    def put_recurring(self, schedule: RecurringSchedule, pace: Callable[[], None] = ...) -> str:
        """Create or update: ``created``, ``updated`` or ``unchanged`` (read, compared, written
        only when it differs; ``pace()`` before each request)."""
        ...

    def sync_recurring(
        self,
        schedule: RecurringSchedule,
        *,
        known: Synced | None = None,
        listing: Mapping[str, Listed] | None = None,
        pace: Callable[[], None] = ...,
    ) -> SyncResult:
        """``put_recurring`` that skips the read where ``known`` and ``listing`` show the schedule
        is as wanted, and reports what it verified (``rebound.adapters.scheduler``)."""
        ...

    def listing(self, prefix: str, pace: Callable[[], None] = ...) -> dict[str, Listed]:
        """What ``ListSchedules`` says of every schedule whose name starts with ``prefix``."""
        ...

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
    trace: str | None = None
    """An X-Ray header (``TraceHeader``): the trace of the run the event is about."""


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
        starts: str = "task",
    ) -> str:
        """A rule whose target is ``queue_arn``, turning each matched event into an execution
        message for task ``task_id``; with ``starts="workstream"``, into the message that starts a
        run of workstream ``task_id`` (``rebound.domain.schedules.WORKSTREAM_START``)."""
        ...

    def get_rule(self, name: str) -> dict[str, Any] | None: ...

    def delete_task_rule(self, name: str) -> bool: ...


@dataclass(frozen=True)
class StreamRange:
    """A range of a table's stream that its function gave up on (the outbox's relay, the audit
    table's archiver)."""

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
    def read(self, span: StreamRange) -> list[dict[str, Any]]:
        """Every record from ``first`` to ``last``, as Lambda hands them over, in order."""
        ...

    def read_events(self, span: StreamRange) -> list[BusEvent]:
        """The outbox events (inserts) from ``first`` to ``last``, in stream order."""
        ...


def attribute_text(value: Any) -> str | None:
    """A message attribute as SQS carries it and hands it back (``None``: left out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return str(value)[:1024] or "-"
