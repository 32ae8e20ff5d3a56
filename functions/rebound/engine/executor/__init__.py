"""Execute one message from the execution queue: find or create the run, claim the attempt, call
the target, record the outcome.

Exactly-once in effect: a duplicate, concurrent or stale delivery of the same (run, attempt)
loses the claim (a conditional transaction on the run, under its dispatch token) and never
reaches the target; the claim sets a lease the sweeper enforces, so a run is never left
``running``; the outcome is written only while the run is still this attempt.

Scheduling guarantees act at the claim: concurrency slots (skip, cancel, buffer or wait, as the
overlap policy says), stagger, pause, and the SLA (a late start or a long attempt is recorded as a
breach in the same transaction).

The ``Executor`` is one pipeline, each stage a module that builds on the one before (no stage
calls one it does not inherit):

- ``admission``: whether a run may start now (slots, tenant quotas, waiting, stagger, pause), and
  the executor's shared state;
- ``attempt``: what a busy slot means (skip, cancel the other, wait), the claim, the call within
  the time left, the outcome; the release of an attempt there is not time for;
- ``intake``: the queue message, parsed and routed to a new, an attempt or a replay; refusal to
  the DLQ;
- ``delivery``: the message being processed, which the records name.
"""

from __future__ import annotations

from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher
from rebound.engine.executor.admission import TENANT_CACHE_S, UNKNOWN_TASK, WAIT_EXHAUSTED, WAIT_S, Deferred
from rebound.engine.executor.attempt import (
    HOLD_PAST_INVOCATION_S,
    LEASE_GRACE_S,
    MAX_RELEASES,
    MIN_ATTEMPT_S,
    NOT_ENOUGH_TIME,
    PAYLOAD_TOO_LARGE,
    RECORD_ATTEMPTS,
    RELEASE_DELAY_S,
    SAFETY_MARGIN_S,
)
from rebound.engine.executor.delivery import QueueMessage, hold
from rebound.engine.executor.intake import CLAIM_RETRIES, UNKNOWN_RUN, Intake
from rebound.engine.executor.task_cache import InvocationTasks

__all__ = [
    "CLAIM_RETRIES",
    "HOLD_PAST_INVOCATION_S",
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
    "hold",
]


class Executor(Intake):
    """Handle messages from the execution queue: ``process`` one, or ``refuse`` one it cannot run."""

    def __init__(self, deps: Deps, request_id: str = "local") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.request_id = request_id
        self.tasks = InvocationTasks(deps)
        self.dispatcher = Dispatcher(deps, "executor")
