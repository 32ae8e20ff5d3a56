"""The queue message the executor is processing, per thread, so the records it writes name their
delivery (``delivery()``)."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
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


_DELIVERY: ContextVar[QueueMessage | None] = ContextVar("rebound_delivery", default=None)
"""The queue message being processed (per thread), so the attempt's audit record names its delivery."""


def delivery() -> dict[str, Any] | None:
    """The delivery being processed, as an audit record names it (``None`` outside ``process``)."""
    message = _DELIVERY.get()
    if message is None:
        return None
    return {"message_id": message.message_id, "receive_count": message.receive_count}


def keep_invisible(queues: Queues, seconds: float) -> bool:
    """Keep the message being processed invisible for ``seconds`` from now: it comes back then
    unless the invocation ends first and it is deleted. False outside ``process``, for a message
    that has no receipt handle, or if SQS refused (it then comes back after the queue's visibility
    timeout, 30 minutes)."""
    message = _DELIVERY.get()
    if message is None or not message.receipt_handle:
        return False
    try:
        queues.change_visibility("execution", message.receipt_handle, seconds)
    except ReboundError as exc:
        log.warning(
            "could not keep the message invisible until the lease ends",
            extra={"message_id": message.message_id, "error": exc.message},
        )
        return False
    return True
