"""Where DLQ messages are read from: the DLQ's record, the queue itself, or the archive, in batches.

A ``Source`` yields batches, removes what an operation is done with (deletes it from the queue,
marks it ``redriven`` in the archive), says how a removed message left (``left``: the queue's
record is marked) and releases what it only looked at.

Reading the queue hides what it returns for a visibility timeout, from every other reader. So
only moving or deleting messages receives from it (``QueueSource``: a redrive, ``dlq archive
--delete``); whatever an interrupted one could not release reappears by itself when that timeout
runs out. Looking (``dlq list``, ``show``, a dry run, archiving without ``--delete``) reads the
DLQ's record (``RecordSource``, ``rebound.engine.dlq_record``), which hides nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Protocol

from rebound.domain.errors import ReboundError
from rebound.engine.ports import (
    ARCHIVED,
    BATCH,
    Archive,
    BatchResult,
    DlqQuery,
    DlqStatus,
    QueueBatches,
    Store,
)
from rebound.ops.dlq.message import DlqFilter, DlqMessage, from_entry, from_stored

log = logging.getLogger(__name__)

DLQ = "dlq"
REDRIVE_VISIBILITY_S = 120
"""How long a redrive hides the messages it received; an interrupted redrive resumes after it."""
RECORD_PAGE = 100
"""Messages per page read from the DLQ's record."""
DEFAULT_WAIT_S = 1
"""Long polling: SQS then answers from every server, so batches come back full."""


class Source(Protocol):
    name: str

    def batches(self) -> Iterator[list[DlqMessage]]: ...

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult: ...

    def left(self, message_ids: list[str], status: DlqStatus) -> None: ...

    def release(self, messages: Sequence[DlqMessage]) -> None: ...


def record_query(filters: DlqFilter, now: datetime, *, limit: int, after: str | None = None) -> DlqQuery:
    """What the DLQ's record is asked for ``filters`` (what the queue's retention dropped left out)."""
    return DlqQuery(
        task_id=filters.task_id,
        tenant=filters.tenant,
        error_code=filters.error_code,
        since=filters.since,
        until=filters.until,
        present_at=now,
        limit=limit,
        after=after,
    )


class RecordSource:
    """The DLQ as its record lists it, matching ``filters``, oldest first: reading it receives
    nothing, so it hides nothing. It removes nothing either (moving needs the queue)."""

    name = "queue"

    def __init__(self, store: Store, filters: DlqFilter, now: datetime) -> None:
        self.store = store
        self.filters = filters
        self.now = now

    def batches(self) -> Iterator[list[DlqMessage]]:
        after: str | None = None
        while True:
            page = self.store.dlq_entries(
                record_query(self.filters, self.now, limit=RECORD_PAGE, after=after)
            )
            if page.entries:
                yield [from_entry(entry) for entry in page.entries]
            if page.cursor is None:
                return
            after = page.cursor

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult:
        return BatchResult(
            failed={m.message_id: "read from the DLQ's record: not removable" for m in messages}
        )

    def left(self, message_ids: list[str], status: DlqStatus) -> None:
        return None

    def release(self, messages: Sequence[DlqMessage]) -> None:
        return None


class QueueSource:
    """The DLQ itself. Every message is received at most once per pass (duplicates are dropped).

    ``mark(message_ids, status)`` records how removed messages left (the DLQ's record)."""

    name = "queue"

    def __init__(
        self,
        batches: QueueBatches,
        visibility_s: int,
        wait_s: int,
        mark: Callable[[list[str], DlqStatus], None],
    ) -> None:
        self.queue = batches
        self.visibility_s = visibility_s
        self.wait_s = wait_s
        self.mark = mark

    def batches(self) -> Iterator[list[DlqMessage]]:
        seen: set[str] = set()
        stale = 0
        while True:
            received = self.queue.receive(DLQ, visibility_s=self.visibility_s, wait_s=self.wait_s)
            if not received:
                return
            fresh = [m for m in received if m.message_id not in seen]
            if not fresh:
                # Only messages seen before (their visibility ran out in a long pass): done twice over.
                stale += 1
                if stale >= 2:
                    return
                continue
            stale = 0
            seen.update(m.message_id for m in fresh)
            yield [from_stored(m) for m in fresh]

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult:
        return self.queue.delete(DLQ, [(m.message_id, m.receipt_handle or "") for m in messages])

    def left(self, message_ids: list[str], status: DlqStatus) -> None:
        """Mark removed messages in the DLQ's record. If that fails they are gone all the same; their
        records say ``in_dlq`` until they expire, and the failure is logged."""
        if not message_ids:
            return
        try:
            self.mark(message_ids, status)
        except ReboundError as exc:
            log.warning(
                "removed DLQ messages not marked in the DLQ's record: %s",
                exc.message,
                extra={"message_ids": message_ids, "status": status.value},
            )

    def release(self, messages: Sequence[DlqMessage]) -> None:
        handles = [(m.message_id, m.receipt_handle or "") for m in messages if m.receipt_handle]
        for start in range(0, len(handles), BATCH):
            self.queue.set_visibility(DLQ, handles[start : start + BATCH], 0)


class ArchiveSource:
    """Archived messages with ``status`` (a redrive takes only those not redriven yet; ``None``: all).

    Removing one marks it ``redriven``.
    """

    name = "archive"

    def __init__(
        self, archive: Archive, clock: Callable[[], datetime], actor: str, status: str | None = ARCHIVED
    ) -> None:
        self.archive = archive
        self.clock = clock
        self.actor = actor
        self.status = status

    def batches(self) -> Iterator[list[DlqMessage]]:
        chunk: list[DlqMessage] = []
        for item in self.archive.scan(self.status):
            chunk.append(from_stored(item))
            if len(chunk) == BATCH:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult:
        result = BatchResult()
        for msg in messages:
            if self.archive.mark_redriven(msg.message_id, self.clock(), self.actor):
                result.ok.append(msg.message_id)
            else:
                result.failed[msg.message_id] = "no longer archived (redriven by someone else?)"
        return result

    def left(self, message_ids: list[str], status: DlqStatus) -> None:
        return None  # the archive item says it was redriven; the DLQ's record already said archived

    def release(self, messages: Sequence[DlqMessage]) -> None:
        return None


def release_quietly(source: Source, messages: Sequence[DlqMessage]) -> None:
    """Make what we only looked at visible again; if that fails, it reappears by itself."""
    try:
        source.release(messages)
    except ReboundError as exc:
        log.warning("could not release DLQ messages early: %s", exc.message)
