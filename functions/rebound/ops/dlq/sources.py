"""Where DLQ messages are read from: the queue itself, or the archive, in batches of ten.

A ``Source`` yields batches, removes what an operation is done with (deletes it from the queue,
marks it ``redriven`` in the archive) and releases what it only looked at. Reading the queue hides
messages for a visibility timeout: list, show and dry runs release them when done, and whatever
an interrupted operation could not release reappears by itself when that timeout runs out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Protocol

from rebound.domain.errors import ReboundError
from rebound.engine.ports import ARCHIVED, BATCH, Archive, BatchResult, QueueBatches
from rebound.ops.dlq.message import DlqMessage, from_stored

log = logging.getLogger(__name__)

DLQ = "dlq"
REDRIVE_VISIBILITY_S = 120
"""How long a redrive hides the messages it received; an interrupted redrive resumes after it."""
SCAN_VISIBILITY_S = 60
"""How long list, show and dry runs hide what they read; they make it visible again when done."""
DEFAULT_WAIT_S = 1
"""Long polling: SQS then answers from every server, so batches come back full."""


class Source(Protocol):
    name: str

    def batches(self) -> Iterator[list[DlqMessage]]: ...

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult: ...

    def release(self, messages: Sequence[DlqMessage]) -> None: ...


class QueueSource:
    """The DLQ itself. Every message is received at most once per pass (duplicates are dropped)."""

    name = "queue"

    def __init__(self, batches: QueueBatches, visibility_s: int, wait_s: int) -> None:
        self.queue = batches
        self.visibility_s = visibility_s
        self.wait_s = wait_s

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

    def release(self, messages: Sequence[DlqMessage]) -> None:
        return None


def release_quietly(source: Source, messages: Sequence[DlqMessage]) -> None:
    """Make what we only looked at visible again; if that fails, it reappears by itself."""
    try:
        source.release(messages)
    except ReboundError as exc:
        log.warning("could not release DLQ messages early: %s", exc.message)
