"""Everything the engine needs, wired once per Lambda container (or once per local runtime).

Every field is typed by a port (``rebound.engine.ports``); ``rebound.wiring`` chooses the adapters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rebound.domain.retry import jitter_rng
from rebound.engine.ports import (
    Archive,
    AuditArchive,
    Bus,
    Clock,
    CompletionKeys,
    CrashPoints,
    DefaultFlags,
    Fanout,
    Flags,
    Metrics,
    NoCompletionKey,
    NoCrashes,
    Notifier,
    OutboxStream,
    QueueAges,
    Queues,
    Schedules,
    Store,
    Targets,
    ThreadFanout,
)
from rebound.settings import Settings

if TYPE_CHECKING:
    from rebound.engine.policies import PolicyService


@dataclass
class Deps:
    settings: Settings
    clock: Clock
    store: Store
    queues: Queues
    schedules: Schedules
    bus: Bus
    targets: Targets
    notifier: Notifier
    policies: PolicyService
    metrics: Metrics
    faults: CrashPoints = field(default_factory=NoCrashes)
    flags: Flags = field(default_factory=DefaultFlags)
    """The environment's feature flags (``rebound.domain.flags``); all on where none are configured."""
    fanout: Fanout = field(default_factory=ThreadFanout)
    """Runs the messages of one executor batch at once, so no attempt waits for another."""
    streams: OutboxStream | None = None
    """Reads a range of the outbox stream again (the sweeper's recovery of failed relay batches)."""
    archive: Archive | None = None
    """The DLQ archive; ``None`` where the environment has no archive table."""
    audit_archive: AuditArchive | None = None
    """Where audit records are kept after they expire (S3); ``None``: the environment has none."""
    completion_keys: CompletionKeys = field(default_factory=NoCompletionKey)
    """Signs and verifies the completion tokens of asynchronous attempts."""
    queue_ages: QueueAges | None = None
    """The oldest message's age per queue (the console's live view); ``None``: not known here."""
    cache: dict[str, tuple[float, object]] = field(default_factory=dict)
    """Small per-container cache (tenant settings); entries carry the clock time they were read."""

    def rng(self, run_id: str, attempt: int) -> random.Random:
        return jitter_rng(self.settings.jitter_seed, run_id, attempt)
