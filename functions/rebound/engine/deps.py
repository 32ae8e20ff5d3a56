"""Everything the engine needs, wired once per Lambda container (or once per local runtime)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rebound.adapters.bus import Bus
from rebound.adapters.dynamo import DynamoStore
from rebound.adapters.queues import Queues
from rebound.adapters.schedules import Schedules
from rebound.engine.ports import Clock, CrashPoints, Fanout, Metrics, NoCrashes, ThreadFanout
from rebound.settings import Settings
from rebound.targets.base import Targets

if TYPE_CHECKING:
    from rebound.adapters.notify import Notifier
    from rebound.adapters.streams import StreamReader
    from rebound.engine.policies import PolicyService


@dataclass
class Deps:
    settings: Settings
    clock: Clock
    store: DynamoStore
    queues: Queues
    schedules: Schedules
    bus: Bus
    targets: Targets
    notifier: Notifier
    policies: PolicyService
    metrics: Metrics
    faults: CrashPoints = field(default_factory=NoCrashes)
    fanout: Fanout = field(default_factory=ThreadFanout)
    """Runs the messages of one executor batch at once, so no attempt waits for another."""
    streams: StreamReader | None = None
    """Reads a range of the outbox stream again (the sweeper's recovery of failed relay batches)."""
    cache: dict[str, tuple[float, object]] = field(default_factory=dict)
    """Small per-container cache (tenant settings); entries carry the clock time they were read."""

    def rng(self, run_id: str, attempt: int) -> random.Random:
        from rebound.domain.retry import jitter_rng

        return jitter_rng(self.settings.jitter_seed, run_id, attempt)
