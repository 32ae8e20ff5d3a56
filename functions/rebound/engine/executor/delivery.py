"""The queue message the executor is processing, per thread, so the records it writes name their
delivery (``delivery()``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from rebound.domain.errors import ReboundError
from rebound.engine.ports import Queues

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    body: str
    receive_count: int = 1
    receipt_handle: str = ""
    attributes: dict[str, str] | None = None
    held: bool = False
    """Kept invisible past the invocation's end already (``hold``): a claim need not extend it."""


_DELIVERY: ContextVar[QueueMessage | None] = ContextVar("rebound_delivery", default=None)
"""The queue message being processed (per thread), so the attempt's audit record names its delivery."""


def delivery() -> dict[str, Any] | None:
    """The delivery being processed, as an audit record names it (``None`` outside ``process``)."""
    message = _DELIVERY.get()
    if message is None:
        return None
    return {"message_id": message.message_id, "receive_count": message.receive_count}


def hold(queues: Queues, messages: Sequence[QueueMessage], seconds: float) -> list[QueueMessage]:
    """Keep a batch's messages invisible for ``seconds`` from now, with one
    ``ChangeMessageVisibilityBatch`` (instead of the queue's 30 minutes): the executor passes the
    time its invocation has left plus ``HOLD_PAST_INVOCATION_S``, so a message comes back only
    after the invocation has ended and any lease its claim set has run out, and a worker that dies
    leaves its message to find its run then. Returns the messages, those SQS accepted ``held``; a
    refused batch is logged, and each claim keeps its own message invisible instead
    (``keep_invisible``)."""
    handles = [(m.message_id, m.receipt_handle) for m in messages if m.receipt_handle]
    if not handles:
        return list(messages)
    try:
        result = queues.batches().set_visibility("execution", handles, math.ceil(seconds))
    except ReboundError as exc:
        log.warning("could not keep the batch's messages invisible", extra={"error": exc.message})
        return list(messages)
    for message_id, error in result.failed.items():
        log.warning("could not keep a message invisible", extra={"message_id": message_id, "error": error})
    ok = set(result.ok)
    return [replace(m, held=True) if m.message_id in ok else m for m in messages]


def keep_invisible(queues: Queues, seconds: float) -> bool:
    """Keep the message being processed invisible for ``seconds`` from now: it comes back then
    unless the invocation ends first and it is deleted. True at once for a message ``hold`` kept
    invisible past the invocation's end (longer than any lease its claim sets). False outside
    ``process``, for a message that has no receipt handle, or if SQS refused (it then comes back
    after the queue's visibility timeout, 30 minutes)."""
    message = _DELIVERY.get()
    if message is None or not message.receipt_handle:
        return False
    if message.held:
        return True
    try:
        queues.change_visibility("execution", message.receipt_handle, seconds)
    except ReboundError as exc:
        log.warning(
            "could not keep the message invisible until the lease ends",
            extra={"message_id": message.message_id, "error": exc.message},
        )
        return False
    return True
