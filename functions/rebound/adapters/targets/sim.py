"""The built-in simulated target, for demos and tests. Deterministic for a given run and attempt."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Protocol

from rebound.domain.completion import ASYNC_PAYLOAD_KEY
from rebound.domain.target_specs import SimAsync, SimTarget
from rebound.domain.timefmt import iso
from rebound.engine.ports import Clock
from rebound.engine.ports.targets import TIMEOUT, Invocation, Outcome

SIM_FAILURE = "SIM_FAILURE"
SIM_OUTAGE = "SIM_OUTAGE"
STALL_S = 7 * 86400.0
"""How long a stalled sim target sleeps: far past any function's timeout."""


def _unit_interval(seed: int, run_id: str, attempt: int) -> float:
    digest = hashlib.sha256(f"{seed}:{run_id}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SimWorkers(Protocol):
    """Plays simulated asynchronous work: its heartbeats and its completion, reported with the
    attempt's completion token (the local runtime's ``rebound_local.sim_workers``)."""

    def start(self, call: Invocation, behavior: SimAsync, token: str) -> None: ...


class SimInvoker:
    def __init__(
        self, clock: Clock, workers: SimWorkers | None = None, origin: datetime | None = None
    ) -> None:
        self.clock = clock
        self.workers = workers
        self.origin = origin or clock.now()
        """What an ``outage``'s ``after`` counts from: when this invoker was built (the local
        cloud's start; a simulation's start), unless given."""

    def invoke(self, target: SimTarget, call: Invocation) -> Outcome:
        b = target.behavior
        if b.async_ is not None:
            return self._start(b.async_, call)
        if b.stall:
            self.clock.sleep(STALL_S)  # only the invocation's end (its timeout) stops this
            return Outcome.failure(TIMEOUT, "sim target stalled past its deadline and was never stopped")
        available = (call.deadline - self.clock.now()).total_seconds()
        if b.hang or (b.duration_s is not None and b.duration_s > available):
            self.clock.sleep(max(available, 0.0))
            return Outcome.failure(TIMEOUT, f"sim target ran past its {available:.0f}s deadline")
        if b.duration_s:
            self.clock.sleep(b.duration_s)
        if b.outage is not None:
            began = self.origin + timedelta(seconds=b.outage.after)
            if began <= self.clock.now() < began + timedelta(seconds=b.outage.for_):
                return Outcome.failure(SIM_OUTAGE, f"sim target is down (an outage since {iso(began)})")
        if b.terminal_error:
            return Outcome.failure(b.terminal_error, "sim target raised a terminal error", retryable=False)
        if b.always_fail:
            return Outcome.failure(SIM_FAILURE, f"sim target always fails (attempt {call.attempt})")
        if b.fail_first is not None and call.attempt <= b.fail_first:
            return Outcome.failure(SIM_FAILURE, f"sim target fails its first {b.fail_first} attempts")
        if b.fail_rate is not None and _unit_interval(b.seed or 0, call.run_id, call.attempt) < b.fail_rate:
            return Outcome.failure(SIM_FAILURE, f"sim target failed at rate {b.fail_rate}")
        return Outcome.success({"sim": "ok", "attempt": call.attempt})

    def _start(self, spec: SimAsync, call: Invocation) -> Outcome:
        """Start simulated asynchronous work: accepted at once, played by ``workers`` (none: the
        work never reports, and the attempt ends in HEARTBEAT_TIMEOUT)."""
        block = call.payload.get(ASYNC_PAYLOAD_KEY)
        token = block.get("completion_token") if isinstance(block, dict) else None
        if not isinstance(token, str):
            return Outcome.failure(SIM_FAILURE, "no completion token in the payload", retryable=False)
        if self.workers is not None:
            self.workers.start(call, spec, token)
        return Outcome.success({"sim": "started", "attempt": call.attempt})
