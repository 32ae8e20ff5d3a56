"""Live carriers: at every moment, which messages in the execution queue could start (or wait for)
a run's next step, for the invariant ``at_most_one_live_message_per_run`` (``LiveCarriers``, fed by
moto's queue events through ``Tee``)."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rebound.domain.ids import event_run_id, scheduled_run_id
from rebound.domain.timefmt import parse_utc
from rebound_local.invariants import CLAIMABLE
from rebound_local.verdict import Invariant


@dataclass(frozen=True)
class Carrier:
    """What an execution message says about the run it would move: enough to tell if it is live."""

    run_id: str
    kind: str
    attempt: int | None = None
    dispatch: int | None = None
    dead_lettered_at: str | None = None

    @classmethod
    def of(cls, body: str) -> Carrier | None:
        try:
            data = json.loads(body)
        except (TypeError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        try:
            kind = str(data["kind"])
            if kind == "fire":
                return cls(
                    scheduled_run_id(str(data["task_id"]), parse_utc(str(data["scheduled_time"]))), kind
                )
            if kind == "event":
                return cls(event_run_id(str(data["task_id"]), str(data["event_id"])), kind)
            if kind == "manual":
                return cls(str(data["run_id"]), kind)
            if kind in ("attempt", "replay"):
                return cls(
                    str(data["run_id"]),
                    kind,
                    int(data["attempt"]) if "attempt" in data else None,
                    int(data["dispatch"]) if data.get("dispatch") is not None else None,
                    data.get("dead_lettered_at"),
                )
        except (KeyError, TypeError, ValueError):
            return None
        return None

    def live(self, run: dict[str, Any] | None) -> bool:
        """Whether delivering this message now could start (or wait for) the run's next step.

        A model of the protocol, written apart from the executor: a start message is live while
        its run does not exist or waits with no carrier of its own (token 0); an attempt message
        is live while the run waits in a claimable state for exactly that attempt under exactly
        that token (a message without a token: for that attempt); a replay message is live while
        its run is dead-lettered (a DLQ copy, without a token) or replayed and waiting for
        exactly that token.
        """
        if self.kind in ("fire", "event", "manual"):
            return run is None or (
                run.get("state") == "pending"
                and int(run.get("attempt", 0)) == 0
                and int(run.get("dispatch", 0)) == 0
            )
        if run is None:
            return False
        state = run.get("state")
        token_ok = self.dispatch is None or self.dispatch == int(run.get("dispatch", 0))
        if self.kind == "attempt":
            return (
                state in CLAIMABLE
                and run.get("held_at") is None
                and self.attempt == int(run.get("attempt", 0)) + 1
                and token_ok
            )
        if state == "dead_lettered":  # a DLQ copy moved back (no token) starts a replay
            return self.dispatch is None and self.dead_lettered_at in (None, run.get("dead_lettered_at"))
        return (
            state == "replayed"
            and run.get("attempt") == run.get("budget_start")
            and self.dispatch is not None
            and self.dispatch == int(run.get("dispatch", 0))
        )


class LiveCarriers:
    """Counts, at every message SQS adds to the execution queue, the live carriers of its run.

    Fed from inside moto (``motopatch.track_messages``), under moto's lock, so the run it reads is
    the run as it is at that moment. Liveness only falls between two adds of a run's messages (a
    claim, a new token), so the peak happens at an add and checking there finds it.
    """

    def __init__(self, queue: str, read_run: Any) -> None:
        self.queue = queue
        self._read_run = read_run
        self._lock = threading.Lock()
        self._present: dict[str, dict[str, Carrier]] = defaultdict(dict)
        self._where: dict[str, str] = {}
        self.peak: Counter[str] = Counter()
        self.checked = 0

    def added(self, queue: str, message_id: str, body: str | None = None) -> None:
        with self._lock:
            if queue != self.queue:
                self._forget(message_id)
                return
            carrier = Carrier.of(body or "")
            if carrier is None:
                return
            self._present[carrier.run_id][message_id] = carrier
            self._where[message_id] = carrier.run_id
            run = self._read_run(carrier.run_id)
            live = sum(1 for c in self._present[carrier.run_id].values() if c.live(run))
            self.checked += 1
            if live > self.peak[carrier.run_id]:
                self.peak[carrier.run_id] = live

    def deleted(self, queue: str, message_id: str) -> None:
        with self._lock:
            self._forget(message_id)

    def purged(self, queue: str, message_ids: Iterable[str]) -> None:
        with self._lock:
            for message_id in message_ids:
                self._forget(message_id)

    def _forget(self, message_id: str) -> None:
        run_id = self._where.pop(message_id, None)
        if run_id is not None:
            self._present[run_id].pop(message_id, None)
            if not self._present[run_id]:
                del self._present[run_id]

    def invariant(self) -> Invariant:
        overall = max(self.peak.values(), default=0)
        over = sorted((run_id for run_id, n in self.peak.items() if n > 1), key=lambda r: -self.peak[r])
        detail = f"peak {overall} live message(s) for one run, over {self.checked} messages added"
        if over:
            return Invariant(
                False,
                f"{len(over)} run(s) had more than one live message at once; {detail}",
                [f"{run_id}: {self.peak[run_id]} live at once" for run_id in over],
            )
        return Invariant(True, detail)


class Tee:
    """Hands every message-ledger report to several listeners."""

    def __init__(self, *listeners: Any) -> None:
        self.listeners = listeners

    def added(self, queue: str, message_id: str, body: str | None = None) -> None:
        for listener in self.listeners:
            listener.added(queue, message_id, body)

    def deleted(self, queue: str, message_id: str) -> None:
        for listener in self.listeners:
            listener.deleted(queue, message_id)

    def purged(self, queue: str, message_ids: Iterable[str]) -> None:
        ids = list(message_ids)
        for listener in self.listeners:
            listener.purged(queue, ids)
