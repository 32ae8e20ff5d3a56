"""Change counters: what the runtime's coordinator reads to know whether anything changed.

With interleaving (``model.concurrency``) the coordinator wakes a worker at every AWS call; most
of those calls are DynamoDB reads and writes that cannot start any new work. The coordinator
looks at the queues, the stream and the schedules again (a pump and a ``next_due``) only when
one of these counters moved, or when the next thing it knew to be due has come:

- ``motopatch.versions["sqs"]``: a message was added to a queue (sent, delayed, redriven) or its
  visibility changed, so it may be receivable sooner than the runtime last computed;
- ``motopatch.versions["stream"]``: a stream record was written;
- ``motopatch.versions["scheduler"]`` (``motopatch``): a schedule was created, updated or deleted.

Receives and deletes only ever make work later or gone, so they are not counted.
"""

from __future__ import annotations

from typing import Any

from rebound_local import motopatch

_installed = [False]


def install() -> None:
    """Count changes, once per process (with the other moto patches)."""
    if _installed[0]:
        return
    from moto.dynamodb.models.table import StreamShard
    from moto.sqs.models import Queue, SQSBackend

    add_message, change_visibility, add_record = (
        Queue.add_message,
        SQSBackend.change_message_visibility,
        StreamShard.add,
    )
    motopatch.versions.setdefault("sqs", 0)
    motopatch.versions.setdefault("stream", 0)

    def counted_add(self: Any, message: Any) -> None:
        add_message(self, message)
        motopatch.versions["sqs"] += 1

    def counted_visibility(self: Any, *args: Any, **kwargs: Any) -> None:
        change_visibility(self, *args, **kwargs)
        motopatch.versions["sqs"] += 1

    def counted_record(self: Any, old: Any, new: Any) -> None:
        add_record(self, old, new)
        motopatch.versions["stream"] += 1

    Queue.add_message = counted_add  # type: ignore[method-assign]
    SQSBackend.change_message_visibility = counted_visibility  # type: ignore[method-assign]
    StreamShard.add = counted_record  # type: ignore[method-assign]
    _installed[0] = True
