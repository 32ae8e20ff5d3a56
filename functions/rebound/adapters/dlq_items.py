"""The DLQ's record as items, the same in every store (``rebound.resources.DLQ_MESSAGES``).

One item per DLQ message, keyed by its message id. ``dlq_at`` (``<at>#<message id>``) orders the
two indexes by time and is unique, so it is also the list's cursor. ``dlq_task`` is the sparse
key of ``by_task``: present only while the message is ``in_dlq``. ``expires_at`` (the table's
TTL) is when the queue's retention drops the message (from when the queue first took it) while
it is in the DLQ, and ``KEEP_AFTER_LEAVING`` after it left.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rebound.domain.timefmt import iso, parse_utc
from rebound.engine.ports import DlqEntry, DlqPage, DlqSpan, DlqSpanPage, DlqStatus
from rebound.resources import DLQ_MESSAGES, DLQ_RETENTION_S

TABLE = DLQ_MESSAGES.logical
BY_STATUS, BY_TASK = (index.name for index in DLQ_MESSAGES.indexes)
RETENTION = timedelta(seconds=DLQ_RETENTION_S)
KEEP_AFTER_LEAVING = timedelta(days=14)
"""How long the record of a message that left the DLQ is kept (``dlq show`` says where it went)."""
TOP_LEVEL = frozenset(
    {
        "message_id",
        "status",
        "dlq_at",
        "dlq_task",
        "tenant",
        "error_code",
        "expires_at",
        "changed_at",
        "changed_by",
    }
)
"""What DynamoDB reads itself: keys, index keys, filters, TTL and what a mark updates."""
HIGHEST = "\uffff"


def sort_key(at: datetime, message_id: str) -> str:
    return f"{iso(at)}#{message_id}"


def expiry(sent_at_ms: int) -> int:
    """When the queue's retention drops a message the queue took at ``sent_at_ms`` (epoch seconds)."""
    return sent_at_ms // 1000 + int(RETENTION.total_seconds())


def to_record(entry: DlqEntry) -> dict[str, Any]:
    """The item of ``entry`` (``None`` attributes are left out by the stores)."""
    inside = entry.status is DlqStatus.IN_DLQ
    left_at = entry.changed_at or entry.at
    return {
        "message_id": entry.message_id,
        "status": entry.status.value,
        "dlq_at": sort_key(entry.at, entry.message_id),
        "dlq_task": entry.task_id if inside else None,
        "at": iso(entry.at),
        "body": entry.body,
        "attributes": entry.attributes,
        "sent_at_ms": entry.sent_at_ms,
        "receive_count": entry.receive_count,
        "run_id": entry.run_id,
        "task_id": entry.task_id,
        "tenant": entry.tenant,
        "error_code": entry.error_code,
        "reason": entry.reason,
        "attempts": entry.attempts,
        "recorded_by": entry.recorded_by,
        "changed_at": iso(entry.changed_at) if entry.changed_at else None,
        "changed_by": entry.changed_by,
        "expires_at": expiry(entry.sent_at_ms) if inside else int((left_at + KEEP_AFTER_LEAVING).timestamp()),
    }


def left(status: DlqStatus, at: datetime, actor: str) -> dict[str, Any]:
    """What marking a message as gone from the DLQ sets (``dlq_task`` is removed with it)."""
    return {
        "status": status.value,
        "changed_at": iso(at),
        "changed_by": actor,
        "expires_at": int((at + KEEP_AFTER_LEAVING).timestamp()),
    }


def from_record(item: dict[str, Any]) -> DlqEntry:
    """The entry of an item; a message that was marked without ever being recorded has only how it
    left (no body, no attributes, ``at`` when it left)."""
    changed_at = parse_utc(item["changed_at"]) if item.get("changed_at") else None
    at = parse_utc(item["at"]) if item.get("at") else changed_at
    assert at is not None, f"DLQ record {item.get('message_id')} has neither at nor changed_at"
    attempts = item.get("attempts")
    return DlqEntry(
        message_id=str(item["message_id"]),
        at=at,
        body=str(item.get("body", "")),
        attributes={str(k): str(v) for k, v in (item.get("attributes") or {}).items()},
        sent_at_ms=int(item.get("sent_at_ms", 0)),
        receive_count=int(item.get("receive_count", 0)),
        run_id=item.get("run_id"),
        task_id=item.get("task_id"),
        tenant=item.get("tenant"),
        error_code=item.get("error_code"),
        reason=item.get("reason"),
        attempts=int(attempts) if attempts is not None else None,
        status=DlqStatus(item.get("status", DlqStatus.IN_DLQ.value)),
        recorded_by=str(item.get("recorded_by", "")),
        changed_at=changed_at,
        changed_by=item.get("changed_by"),
    )


SPAN_ATTRIBUTES = ("message_id", "dlq_at", "status", "changed_at", "expires_at")
"""What a span needs of an item (all top-level: ``at`` is the head of ``dlq_at``)."""


def span_of(item: dict[str, Any]) -> DlqSpan:
    changed_at = item.get("changed_at")
    return DlqSpan(
        arrived=parse_utc(str(item["dlq_at"]).split("#", 1)[0]),
        status=DlqStatus(item.get("status", DlqStatus.IN_DLQ.value)),
        changed_at=parse_utc(changed_at) if changed_at else None,
        expires_at=datetime.fromtimestamp(int(item["expires_at"]), tz=UTC),
    )


def span_page(items: list[dict[str, Any]], limit: int) -> DlqSpanPage:
    """As ``page``, of spans."""
    shown = items[:limit]
    cursor = str(shown[-1]["dlq_at"]) if len(items) > limit and shown else None
    return DlqSpanPage([span_of(item) for item in shown], cursor)


def key_range(since: datetime | None, until: datetime | None) -> tuple[str | None, str | None]:
    """The ``dlq_at`` bounds of ``since`` and ``until`` (both included; ``None``: unbounded)."""
    return (iso(since) if since else None, iso(until) + "#" + HIGHEST if until else None)


def cursor_key(cursor: str, partition: tuple[str, str]) -> dict[str, str]:
    """The index key a page ended on, from its cursor (``dlq_at`` names its message id)."""
    return {"message_id": cursor.split("#", 1)[1], partition[0]: partition[1], "dlq_at": cursor}


def page(items: list[dict[str, Any]], limit: int) -> DlqPage:
    """A page of at most ``limit`` from ``items`` (read up to ``limit + 1``: one more says there is more)."""
    shown = items[:limit]
    cursor = str(shown[-1]["dlq_at"]) if len(items) > limit and shown else None
    return DlqPage([from_record(item) for item in shown], cursor)
