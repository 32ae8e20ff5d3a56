"""Patch 4, SQS receive: the retention check reads the one queue attribute it needs.

moto recomputes all queue attributes for every message received; the retention check needs one
of them.
"""

from __future__ import annotations

from typing import Any


def _patch_sqs_retention() -> None:
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        queue = self.get_queue(queue_name)
        retain_until = int(queue.message_retention_period) + message.sent_timestamp / 1000
        return bool(retain_until > unix_time())

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]
