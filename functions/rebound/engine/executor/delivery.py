"""The queue message the executor is processing, per thread, so the records it writes name their
delivery (``delivery()``)."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


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
