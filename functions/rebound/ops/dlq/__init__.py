"""Operating the execution DLQ: list, show, redrive and archive its messages.

- ``message``: what a DLQ message is (``DlqMessage``, ``describe``), ``Examined``, ``MessageDetail``
  and the operator's ``DlqFilter``.
- ``sources``: where messages are read from: the DLQ's record (``RecordSource``: looking hides
  nothing), the queue (``QueueSource``: only to move or delete) or the archive (``ArchiveSource``),
  in batches.
- ``redrive``: moving messages back to the execution queue as replays, exactly once under
  interruption (the argument is in its docstring), with its report and progress items.
- ``archive``: archiving DLQ messages into the archive port (redriving from it reads it as a source).
- ``history``: the DLQ's depth over time, from the arrivals and departures its record holds.
- ``operations``: ``DlqOps``, the operations both the CLI and the ops API call.
"""

from rebound.ops.dlq.archive import ArchiveReport
from rebound.ops.dlq.history import WINDOWS, DepthHistory, DepthPoint
from rebound.ops.dlq.message import DlqFilter, DlqMessage, Examined, MessageDetail
from rebound.ops.dlq.operations import DlqOps, FoundPage
from rebound.ops.dlq.redrive import (
    CLEANED_UP,
    DUPLICATE_REMOVED,
    FAILED,
    MOVED,
    RESUMED,
    SKIPPED,
    RedriveItem,
    RedriveReport,
)
from rebound.ops.dlq.sources import DEFAULT_WAIT_S, REDRIVE_VISIBILITY_S

__all__ = [
    "CLEANED_UP",
    "DEFAULT_WAIT_S",
    "DUPLICATE_REMOVED",
    "FAILED",
    "MOVED",
    "REDRIVE_VISIBILITY_S",
    "RESUMED",
    "SKIPPED",
    "WINDOWS",
    "ArchiveReport",
    "DepthHistory",
    "DepthPoint",
    "DlqFilter",
    "DlqMessage",
    "DlqOps",
    "Examined",
    "FoundPage",
    "MessageDetail",
    "RedriveItem",
    "RedriveReport",
]
