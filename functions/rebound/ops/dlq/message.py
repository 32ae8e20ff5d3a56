"""What a DLQ message is: how it arrived, what it is about, and which operator filters it matches.

``describe`` reads a message's attributes (or, on the crash path, its body) into a ``DlqMessage``;
``from_entry`` does it for one in the DLQ's record, ``from_stored`` for one received from the
queue or read from the archive. ``Examined`` is
a message with its run, ``MessageDetail`` what ``dlq show`` reports about one, ``DlqFilter``
which messages an operation applies to.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rebound.domain.run import Run
from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder
from rebound.engine.dlq_record import About, read_message
from rebound.engine.ports import ArchivedItem, DlqEntry, Received
from rebound.ops.common import when


class Arrival(StrEnum):
    """How a message reached the DLQ."""

    EXPLICIT = "explicit"
    """Rebound dead-lettered the run (attempts, age or a terminal error) and sent the message."""
    REDRIVE_POLICY = "redrive_policy"
    """SQS moved an execution message after ``maxReceiveCount`` receives (the crash path)."""
    REFUSED = "refused"
    """Rebound refused a message it cannot run (malformed, unknown run)."""


@dataclass(frozen=True)
class DlqMessage(About):
    """A DLQ message: what it says about itself (``About``), and how and where it is."""

    message_id: str
    body: str
    attributes: dict[str, str]
    sent_at: datetime
    receive_count: int
    arrival: Arrival
    receipt_handle: str | None = None
    archive_status: str | None = None

    @property
    def at(self) -> datetime:
        """When it was dead-lettered (or, for the crash path, when SQS last received it)."""
        return self.dead_lettered_at or self.sent_at

    def as_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "tenant": self.tenant,
            "error_code": self.error_code,
            "reason": self.reason,
            "arrival": self.arrival.value,
            "kind": self.kind,
            "dead_lettered_at": when(self.dead_lettered_at),
            "sent_at": iso(self.sent_at),
            "receive_count": self.receive_count,
            "attempts": self.attempts,
            "archive_status": self.archive_status,
        }


def describe(
    *,
    message_id: str,
    body: str,
    attributes: dict[str, str],
    sent_at_ms: int,
    receive_count: int,
    receipt_handle: str | None = None,
    archive_status: str | None = None,
) -> DlqMessage:
    """What a DLQ message is about, from its attributes, or from its body on the crash path."""
    about = read_message(body, attributes)
    if "reason" not in attributes:
        arrival = Arrival.REDRIVE_POLICY
    else:
        arrival = Arrival.EXPLICIT if attributes.get("run_id") else Arrival.REFUSED
    return DlqMessage(
        message_id=message_id,
        body=body,
        attributes=dict(attributes),
        sent_at=datetime.fromtimestamp(sent_at_ms / 1000, tz=UTC),
        receive_count=receive_count,
        arrival=arrival,
        receipt_handle=receipt_handle,
        archive_status=archive_status,
        **{f.name: getattr(about, f.name) for f in fields(About)},
    )


def from_entry(entry: DlqEntry) -> DlqMessage:
    """A message as the DLQ's record describes it; what the recorder knew of its run fills in what
    the message does not say."""
    msg = describe(
        message_id=entry.message_id,
        body=entry.body,
        attributes=entry.attributes,
        sent_at_ms=entry.sent_at_ms,
        receive_count=entry.receive_count,
    )
    return replace(
        msg,
        run_id=msg.run_id or entry.run_id,
        task_id=msg.task_id or entry.task_id,
        tenant=msg.tenant or entry.tenant,
        error_code=msg.error_code or entry.error_code,
    )


def from_stored(msg: Received | ArchivedItem) -> DlqMessage:
    """A message as received from the DLQ (with its receipt handle) or read from the archive (its status)."""
    return describe(
        message_id=msg.message_id,
        body=msg.body,
        attributes=msg.attributes,
        sent_at_ms=msg.sent_at_ms,
        receive_count=msg.receive_count,
        receipt_handle=msg.receipt_handle if isinstance(msg, Received) else None,
        archive_status=msg.status if isinstance(msg, ArchivedItem) else None,
    )


@dataclass(frozen=True)
class DlqFilter:
    """Which DLQ messages an operation applies to. A message's run fills in what it does not say."""

    task_id: str | None = None
    tenant: str | None = None
    error_code: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def matches(self, msg: DlqMessage, run: Run | None) -> bool:
        task = msg.task_id or (run.task_id if run else None)
        tenant = msg.tenant or (run.tenant if run else None)
        code = msg.error_code or (run.last_error_code if run else None)
        at = msg.at
        return (
            (self.task_id is None or task == self.task_id)
            and (self.tenant is None or tenant == self.tenant)
            and (self.error_code is None or code == self.error_code)
            and (self.since is None or at >= self.since)
            and (self.until is None or at <= self.until)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "tenant": self.tenant,
            "error_code": self.error_code,
            "since": when(self.since),
            "until": when(self.until),
        }


@dataclass(frozen=True)
class Examined:
    message: DlqMessage
    run: Run | None

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.message.as_dict(),
            "task_id": self.message.task_id or (self.run.task_id if self.run else None),
            "tenant": self.message.tenant or (self.run.tenant if self.run else None),
            "error_code": self.message.error_code or (self.run.last_error_code if self.run else None),
            "run_state": self.run.state.value if self.run else None,
            "work_order_id": self.run.work_order_id if self.run else None,
        }


@dataclass(frozen=True)
class MessageDetail:
    examined: Examined
    location: str
    work_order: WorkOrder | None

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.examined.as_dict(),
            "location": self.location,
            "body": self.examined.message.body,
            "attributes": self.examined.message.attributes,
            "work_order": self.work_order.model_dump(mode="json") if self.work_order else None,
        }
