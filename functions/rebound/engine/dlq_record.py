"""The record of the execution DLQ: what a DLQ message says about itself, and its ``DlqEntry``.

Reading the DLQ must never hide it, and SQS cannot be read without receiving (which hides what
it returns). So every message is recorded in the store where it arrives, by the code that put
it there or found it, and ``rebound dlq list``/``show`` read that record
(``Store.dlq_entries``, a query on an index ordered by time); only moving or deleting messages
receives from the queue.

- A dead letter's message (``DeadLetters.send_to_dlq``, on the dead-letter path and on the
  escalation path's ``ensure_in_dlq``) is recorded in the transaction that names it on its run.
- A refused message (``DeadLetters.dead_letter_message``) is recorded with its audit record.
- A crash-path arrival, which SQS moved there itself after ``maxReceiveCount``, is recorded with
  the dead letter the sweeper writes for it; any other message the sweeper's DLQ check finds
  without a record (a send whose id was never recorded, a stale copy) is recorded then
  (``rebound.engine.dlq_arrivals``).
- A message leaving the queue is marked: ``redriven`` or ``deleted`` by a redrive, ``deleted``
  by the sweeper (a second copy), ``archived`` by ``dlq archive --delete``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rebound.domain.errors import ValidationFailed
from rebound.domain.run import Run
from rebound.domain.timefmt import parse_utc
from rebound.engine.messages import parse_execution_message
from rebound.engine.ports import DlqEntry
from rebound.engine.ports.transport import attribute_text


def attribute_texts(values: Mapping[str, Any]) -> dict[str, str]:
    """Message attributes as the queue hands them back."""
    texts = {name: attribute_text(value) for name, value in values.items()}
    return {name: text for name, text in texts.items() if text is not None}


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class About:
    """What a DLQ message says about itself: its attributes, or its body on the crash path."""

    kind: str | None
    run_id: str | None
    task_id: str | None
    tenant: str | None
    error_code: str | None
    reason: str | None
    dead_lettered_at: datetime | None
    attempts: int | None


def read_message(body: str, attributes: Mapping[str, str]) -> About:
    run_id = attributes.get("run_id")
    task_id = attributes.get("task_id")
    kind = None
    try:
        parsed = parse_execution_message(body)
    except ValidationFailed:
        parsed = None
    if parsed is not None:
        kind = parsed.kind
        run_id = run_id or parsed.run_id
        task_id = task_id or getattr(parsed, "task_id", None)
    dead_lettered_at = None
    with contextlib.suppress(ValueError, KeyError):
        dead_lettered_at = parse_utc(attributes["dead_lettered_at"])
    code = attributes.get("error_code")
    return About(
        kind=kind,
        run_id=run_id,
        task_id=task_id,
        tenant=attributes.get("tenant"),
        error_code=None if code in (None, "NONE") else code,
        reason=attributes.get("reason"),
        dead_lettered_at=dead_lettered_at,
        attempts=_int(attributes.get("attempts")),
    )


def dlq_entry(
    *,
    message_id: str,
    body: str,
    attributes: Mapping[str, Any],
    sent_at_ms: int,
    actor: str,
    receive_count: int = 0,
    run: Run | None = None,
    reason: str | None = None,
) -> DlqEntry:
    """The record of a DLQ message. ``run`` (the run it names, as the recorder knows it) fills in
    what the message does not say; ``reason`` is the recorder's, where the message has none."""
    texts = attribute_texts(attributes)
    about = read_message(body, texts)
    return DlqEntry(
        message_id=message_id,
        at=about.dead_lettered_at or datetime.fromtimestamp(sent_at_ms / 1000, tz=UTC),
        body=body,
        attributes=texts,
        sent_at_ms=sent_at_ms,
        receive_count=receive_count,
        run_id=about.run_id or (run.run_id if run else None),
        task_id=about.task_id or (run.task_id if run else None),
        tenant=about.tenant or (run.tenant if run else None),
        error_code=about.error_code or (run.last_error_code if run else None),
        reason=about.reason or reason,
        attempts=about.attempts if about.attempts is not None else (run.attempt if run else None),
        recorded_by=actor,
    )


def millis(at: datetime) -> int:
    """A time as SQS's ``SentTimestamp`` gives it (epoch milliseconds)."""
    return int(at.timestamp() * 1000)
