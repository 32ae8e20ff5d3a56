"""Patch 8, the message ledger: every message SQS accepts, moves, deletes or purges is reported.

With ``track_messages(ledger)``, every message SQS accepts, deletes, purges or moves to a
dead-letter queue is reported to the ledger, whichever client or path (HTTP, in-process, direct,
Scheduler, bus rule) caused it. The simulator accounts for every message with it.
"""

from __future__ import annotations

from typing import Any

_ledger: list[Any] = [None]


def track_messages(ledger: Any) -> None:
    """Report every message SQS accepts, moves, deletes or purges to ``ledger`` (``None``: stop).

    ``ledger`` has ``added(queue, message_id, body)``, ``deleted(queue, message_id)`` and
    ``purged(queue, message_ids)``; a message added again under the same id is a move to a
    dead-letter queue (moto moves the message object itself).
    """
    _ledger[0] = ledger


def _patch_sqs_ledger() -> None:
    from moto.sqs.models import Queue, SQSBackend

    add_message, delete_message = Queue.add_message, Queue.delete_message
    purge_queue, delete_queue = SQSBackend.purge_queue, SQSBackend.delete_queue

    def tracked_add(self: Any, message: Any) -> None:
        add_message(self, message)
        ledger = _ledger[0]
        if ledger is not None and self._messages and self._messages[-1] is message:
            ledger.added(self.name, message.id, message.body)

    def tracked_delete(self: Any, receipt_handle: str) -> Any:
        deleted = delete_message(self, receipt_handle)  # the indexed delete: the message, or None
        ledger = _ledger[0]
        if ledger is not None and deleted is not None:
            ledger.deleted(self.name, deleted.id)
        return deleted

    def tracked_purge(self: Any, queue_name: str) -> None:
        ledger = _ledger[0]
        ids = [m.id for m in self.get_queue(queue_name)._messages] if ledger is not None else []
        purge_queue(self, queue_name)
        if ledger is not None:
            ledger.purged(queue_name, ids)

    def tracked_delete_queue(self: Any, queue_name: str) -> None:
        ledger = _ledger[0]
        ids = [m.id for m in self.get_queue(queue_name)._messages] if ledger is not None else []
        delete_queue(self, queue_name)
        if ledger is not None:
            ledger.purged(queue_name, ids)

    Queue.add_message = tracked_add  # type: ignore[method-assign]
    Queue.delete_message = tracked_delete  # type: ignore[method-assign]
    SQSBackend.purge_queue = tracked_purge  # type: ignore[method-assign]
    SQSBackend.delete_queue = tracked_delete_queue  # type: ignore[method-assign]
