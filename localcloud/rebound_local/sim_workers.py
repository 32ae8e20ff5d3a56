"""Simulated asynchronous work (a sim target with ``behavior: {async: {...}}``), played on the
runtime's clock.

When the executor starts such an attempt, the sim target hands its completion token here
(``rebound.adapters.targets.sim.SimWorkers``). The plan: a heartbeat every ``heartbeat_every`` while the
work runs, none after ``stop_heartbeats_after``; at ``duration``, a completion (or a failure with
``fail_with``), sent ``1 + duplicate_completions`` times. Each report is an event on Rebound's bus
(``rebound.task.*``), exactly what ``rebound.worker.Completion`` sends, so the rule, the queue and
the consumer that answer real workers answer these. A report the bus did not take is sent again
5 s later. The plan lives in memory: a runtime that restarts forgets it, and those attempts end in
``HEARTBEAT_TIMEOUT`` as a crashed worker's would.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rebound.domain.target_specs import SimAsync
from rebound.engine.ports import Bus, BusEvent, Clock
from rebound.engine.ports.targets import Invocation

log = logging.getLogger(__name__)

RESEND_AFTER = timedelta(seconds=5)
DUPLICATE_GAP = timedelta(seconds=1)
HEARTBEAT = "rebound.task.heartbeat"
COMPLETED = "rebound.task.completed"
FAILED = "rebound.task.failed"


@dataclass(frozen=True)
class Planned:
    run_id: str
    attempt: int
    detail_type: str
    detail: str


@dataclass
class PlayerStats:
    started: int = 0
    sent: int = 0
    resent: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


class SimWorkerPlayer:
    def __init__(self, clock: Clock, bus: Bus, source: str) -> None:
        self.clock = clock
        self.bus = bus
        self.source = source
        self.stats = PlayerStats()
        self._plan: list[tuple[datetime, int, Planned]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    # --------------------------------------------------------------------------- SimWorkers
    def start(self, call: Invocation, behavior: SimAsync, token: str) -> None:
        t0 = self.clock.now()
        every = timedelta(seconds=behavior.heartbeat_every)
        duration = timedelta(seconds=behavior.duration)
        stop = (
            timedelta(seconds=behavior.stop_heartbeats_after)
            if behavior.stop_heartbeats_after is not None
            else None
        )
        items: list[tuple[datetime, Planned]] = []
        beat = every
        n = 0
        while beat < duration and (stop is None or beat <= stop):
            n += 1
            progress = round(beat / duration, 3)
            items.append((t0 + beat, self._planned(call, HEARTBEAT, {"token": token, "progress": progress})))
            beat = every * (n + 1)
        if stop is None or stop >= duration:
            end = t0 + duration
        else:
            end = None  # a worker that stopped heartbeating never reports again (it died)
        if end is not None:
            if behavior.fail_with:
                final = self._planned(call, FAILED, {"token": token, "error_code": behavior.fail_with})
            else:
                final = self._planned(call, COMPLETED, {"token": token, "output": {"sim": "done"}})
            for i in range(1 + behavior.duplicate_completions):
                items.append((end + DUPLICATE_GAP * i, final))
        with self._lock:
            self.stats.started += 1
            for at, planned in items:
                heapq.heappush(self._plan, (at, next(self._order), planned))

    def _planned(self, call: Invocation, detail_type: str, detail: dict[str, object]) -> Planned:
        return Planned(call.run_id, call.attempt, detail_type, json.dumps(detail))

    # --------------------------------------------------------------------------- the runtime's side
    def next_due(self) -> datetime | None:
        with self._lock:
            return self._plan[0][0] if self._plan else None

    def pending(self) -> int:
        with self._lock:
            return len(self._plan)

    def play_due(self) -> int:
        """Send every report that is due now; returns how many the bus took."""
        now = self.clock.now()
        due: list[Planned] = []
        with self._lock:
            while self._plan and self._plan[0][0] <= now:
                due.append(heapq.heappop(self._plan)[2])
        if not due:
            return 0
        events = [BusEvent(str(i), self.source, p.detail_type, p.detail) for i, p in enumerate(due)]
        try:
            failed = set(self.bus.publish(events))
        except Exception:  # a throttle or a fault: every one of them goes again
            log.warning("simulated worker reports not sent; sending again", exc_info=True)
            failed = {e.key for e in events}
        sent = 0
        with self._lock:
            for event, planned in zip(events, due, strict=True):
                if event.key in failed:
                    self.stats.resent += 1
                    heapq.heappush(self._plan, (now + RESEND_AFTER, next(self._order), planned))
                else:
                    sent += 1
                    by_type = self.stats.by_type
                    by_type[planned.detail_type] = by_type.get(planned.detail_type, 0) + 1
            self.stats.sent += sent
        return sent
