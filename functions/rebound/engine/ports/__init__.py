"""The ports: everything the engine and the operations need from the world, as narrow protocols
typed with domain types. ``rebound.adapters`` implements them on AWS (the local cloud plays AWS
underneath the same adapters); ``rebound.adapters.memory`` implements the store in memory (the
engine's fast tests, held to the same contract tests as the DynamoDB store).

The engine and ``rebound.ops`` import these protocols, never an adapter, so no AWS type or call
reaches them. Value types that cross a port (a queue's counts, a peeked message, an event for the
bus, a range of the outbox stream) are declared with the port that carries them:

- ``store``: ``Store`` and its ``UnitOfWork``, and the record of the DLQ (``DlqEntry``);
- ``transport``: ``Queues``, ``QueueBatches``, ``Schedules``, ``Bus``, ``OutboxStream``;
- ``delivery``: ``Notifier`` (and its channels), ``Archive`` (the DLQ archive), ``AuditArchive``;
- ``targets``: ``Targets`` (a task's target, called for one attempt: ``Invocation``, ``Outcome``);
- ``keys``: ``AuditKeys`` (the MACs of the audit chain and of actors in queue messages);
- ``runtime``: ``Clock``, ``Metrics``, ``CrashPoints``, ``Fanout``, with their plain implementations.
"""

from rebound.engine.ports.delivery import (
    ARCHIVE_TABLE,
    ARCHIVED,
    DEFAULT_KEEP_DAYS,
    REDRIVEN,
    Archive,
    ArchivedItem,
    ArchiveUnavailable,
    AuditArchive,
    Channel,
    CompletionKeys,
    DeliveryFailed,
    NoCompletionKey,
    Notifier,
    Sent,
)
from rebound.engine.ports.keys import AuditKeys
from rebound.engine.ports.runtime import (
    Clock,
    CrashPoints,
    DefaultFlags,
    Fanout,
    Flags,
    Metrics,
    NoCrashes,
    SequentialFanout,
    SystemClock,
    ThreadFanout,
)
from rebound.engine.ports.store import (
    DlqEntry,
    DlqPage,
    DlqQuery,
    DlqSpan,
    DlqSpanPage,
    DlqStatus,
    RunPage,
    Store,
    UnitOfWork,
    parse_run_cursor,
    run_cursor,
)
from rebound.engine.ports.targets import Targets
from rebound.engine.ports.transport import (
    BATCH,
    BatchResult,
    Bus,
    BusEvent,
    Listed,
    OutboxStream,
    Outgoing,
    PeekedMessage,
    QueueAges,
    QueueBatches,
    QueueCounts,
    Queues,
    Received,
    RecurringSchedule,
    Schedules,
    SentMessage,
    StreamRange,
    Synced,
    SyncResult,
)

__all__ = [
    "ARCHIVED",
    "ARCHIVE_TABLE",
    "BATCH",
    "DEFAULT_KEEP_DAYS",
    "REDRIVEN",
    "Archive",
    "ArchiveUnavailable",
    "ArchivedItem",
    "AuditArchive",
    "AuditKeys",
    "BatchResult",
    "Bus",
    "BusEvent",
    "Channel",
    "Clock",
    "CompletionKeys",
    "CrashPoints",
    "DefaultFlags",
    "DeliveryFailed",
    "DlqEntry",
    "DlqPage",
    "DlqQuery",
    "DlqSpan",
    "DlqSpanPage",
    "DlqStatus",
    "Fanout",
    "Flags",
    "Listed",
    "Metrics",
    "NoCompletionKey",
    "NoCrashes",
    "Notifier",
    "OutboxStream",
    "Outgoing",
    "PeekedMessage",
    "QueueAges",
    "QueueBatches",
    "QueueCounts",
    "Queues",
    "Received",
    "RecurringSchedule",
    "RunPage",
    "Schedules",
    "Sent",
    "SentMessage",
    "SequentialFanout",
    "Store",
    "StreamRange",
    "SyncResult",
    "Synced",
    "SystemClock",
    "Targets",
    "ThreadFanout",
    "UnitOfWork",
    "parse_run_cursor",
    "run_cursor",
]
