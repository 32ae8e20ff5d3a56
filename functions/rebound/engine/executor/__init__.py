"""Execute one message from the execution queue: find or create the run, claim the attempt, call
the target, record the outcome.

Exactly-once in effect: a duplicate, concurrent or stale delivery of the same (run, attempt)
loses the claim (a conditional transaction on the run, under its dispatch token) and never
reaches the target; the claim sets a lease the sweeper enforces, so a run is never left
``running``; the outcome is written only while the run is still this attempt.

Scheduling guarantees act at the claim: concurrency slots (skip, cancel, buffer or wait, as the
overlap policy says), stagger, pause, and the SLA (a late start or a long attempt is recorded as a
breach in the same transaction).

The ``Executor`` is made of three parts, each a module:

- ``intake``: the queue message and its delivery, parsed and routed; refusal to the DLQ;
- ``admission``: whether a run may start now (slots, tenant quotas, overlap, waiting, stagger,
  pause), and the executor's shared state;
- ``attempt``: the claim, the call within the time left, the outcome; the release of an attempt
  there is not time for.
"""

from __future__ import annotations

from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher
from rebound.engine.executor.admission import TENANT_CACHE_S, WAIT_EXHAUSTED, WAIT_S, Deferred
from rebound.engine.executor.attempt import (
    LEASE_GRACE_S,
    MAX_RELEASES,
    MIN_ATTEMPT_S,
    NOT_ENOUGH_TIME,
    PAYLOAD_TOO_LARGE,
    RECORD_ATTEMPTS,
    RELEASE_DELAY_S,
    SAFETY_MARGIN_S,
    Attempts,
)
from rebound.engine.executor.intake import (
    CLAIM_RETRIES,
    UNKNOWN_RUN,
    UNKNOWN_TASK,
    Intake,
    QueueMessage,
)

__all__ = [
    "CLAIM_RETRIES",
    "LEASE_GRACE_S",
    "MAX_RELEASES",
    "MIN_ATTEMPT_S",
    "NOT_ENOUGH_TIME",
    "PAYLOAD_TOO_LARGE",
    "RECORD_ATTEMPTS",
    "RELEASE_DELAY_S",
    "SAFETY_MARGIN_S",
    "TENANT_CACHE_S",
    "UNKNOWN_RUN",
    "UNKNOWN_TASK",
    "WAIT_EXHAUSTED",
    "WAIT_S",
    "Deferred",
    "Executor",
    "QueueMessage",
]


class Executor(Intake, Attempts):
    """Handle messages from the execution queue: ``process`` one, or ``refuse`` one it cannot run."""

    def __init__(self, deps: Deps, request_id: str = "local") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.request_id = request_id
        self.dispatcher = Dispatcher(deps, "executor")
