"""One pending dispatch per run.

A run that waits for its next step (a retry, a poll of a busy slot, a replay, a released or
staggered start) expects exactly one message to carry that step: its *carrier*. The run records
a dispatch token (``Run.dispatch``) and every carrier names the token it was sent under. Whenever
Rebound puts a new carrier on its way it first records a new token, guarded by the run's write
revision so that two writers cannot both do it, and only then sends the message. A copy of an
older carrier that still arrives (a redelivery, a message a crashed invocation left in flight,
a one-time schedule that fired late) names an older token and is dropped as stale: re-sending is
always safe, and messages cannot multiply.

A crash between recording a token and sending its carrier leaves the run waiting for a message
that never comes. The sweeper finds such runs (``overdue``) and renews their dispatch; it does
so only when it has evidence that the old carrier is not merely late (see ``Evidence``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import tracing
from rebound.domain.errors import Conflict, ReboundError
from rebound.domain.ids import retry_dispatch_reference
from rebound.domain.run import Run, RunState, with_changes
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine import telemetry as m
from rebound.engine.deps import Deps

log = logging.getLogger(__name__)

MAX_QUEUE_DELAY_S = 900
QUIET_KEY = "queue#execution#quiet"
"""Control-table key: when the sweeper last saw the execution queue with nothing visible and
nothing in flight."""
QUIET_SLACK = timedelta(minutes=1)
"""SQS's message counts are approximate and may lag by about a minute."""
DELIVERY_SLACK = timedelta(minutes=1)
"""Scheduler (a one-time retry schedule, a fire) delivers within the minute it is due."""
OVERDUE_AFTER = timedelta(minutes=2)
"""A carrier not claimed this long after it was due may be lost (with evidence, see ``Evidence``)."""
LOST_AFTER = timedelta(hours=1)
"""Past this, a carrier that has not arrived is taken for lost even without a drained queue."""
WAITING_STATES = frozenset({RunState.PENDING, RunState.RETRY_SCHEDULED, RunState.REPLAYED})
"""States in which a run waits for a carrier (the states the executor may start an attempt from)."""


def carrier(run: Run) -> dict[str, Any]:
    """The message body that carries ``run``'s next step under its current token."""
    if run.state is RunState.REPLAYED and run.attempt == run.budget_start:
        return {
            "v": 1,
            "kind": "replay",
            "run_id": run.run_id,
            "task_id": run.task_id,
            "dispatch": run.dispatch,
            "dead_lettered_at": iso(run.dead_lettered_at) if run.dead_lettered_at else None,
        }
    return {
        "v": 1,
        "kind": "attempt",
        "run_id": run.run_id,
        "attempt": run.attempt + 1,
        "dispatch": run.dispatch,
    }


def accepts(run: Run, attempt: int, dispatch: int | None) -> bool:
    """Whether an ``attempt`` message for (``attempt``, ``dispatch``) may start ``run``'s next attempt.

    A message without a token was sent before tokens existed (or by hand); the attempt number
    alone decides for it.
    """
    if run.state not in WAITING_STATES or run.attempt != attempt - 1:
        return False
    return dispatch is None or dispatch == run.dispatch


@dataclass(frozen=True)
class Evidence:
    """What the sweeper knows about the execution queue: the last moments it saw it drained
    (nothing visible) and quiet (nothing visible and nothing in flight).

    SQS cannot be searched for a message. But when nothing is visible, every message that became
    visible before has been received: it was deleted after its effect, or it is in flight. And
    when nothing is in flight either, every such message has been deleted, its effect committed.

    - A **carrier** due before the queue was seen drained, whose run still waits for it, is
      either lost or in flight (about to claim, or left by a crashed invocation until its
      visibility timeout). Renewing the dispatch is safe either way: an in-flight copy names the
      old token and is dropped as stale when it is processed or comes back.
    - A **fire** due before the queue was seen quiet, that left no run, never reached the queue:
      it is missed. Drained is not enough here: a fire left in flight by a crashed invocation has
      no run yet, and comes back.

    Both allow a minute for SQS's approximate counts and a minute for Scheduler's delivery window.
    After ``LOST_AFTER`` a carrier that has not arrived is taken for lost, whatever the queue said
    (renewing it early costs at most a stale copy). A fire is never taken for missed on time
    alone: recording a fire that is only late as missed would skip a run that was delivered.
    """

    quiet_at: datetime | None
    drained_at: datetime | None = None

    def gone(self, due: datetime) -> bool:
        """Whether a fire due at ``due`` can no longer be waiting anywhere in the execution queue."""
        return _before(due, self.quiet_at)

    def carrier_gone(self, due: datetime, now: datetime) -> bool:
        """Whether a carrier due at ``due`` can no longer be waiting to become visible."""
        return now - due >= LOST_AFTER or _before(due, self.drained_at) or _before(due, self.quiet_at)


def _before(due: datetime, seen: datetime | None) -> bool:
    return seen is not None and seen - QUIET_SLACK - DELIVERY_SLACK >= due


def read_evidence(deps: Deps) -> Evidence:
    item = deps.store.get_key(QUIET_KEY) or {}
    return Evidence(
        parse_utc(item["at"]) if item.get("at") else None,
        parse_utc(item["drained_at"]) if item.get("drained_at") else None,
    )


def observe_queue(deps: Deps) -> Evidence:
    """Look at the execution queue's counts; record the moment if it is drained or quiet."""
    now = deps.clock.now()
    counts = deps.queues.counts("execution")
    if counts.visible > 0:
        return read_evidence(deps)
    before = read_evidence(deps)
    quiet = now if counts.in_flight == 0 else before.quiet_at
    deps.store.put_key(QUIET_KEY, {"at": iso(quiet) if quiet else None, "drained_at": iso(now)})
    return Evidence(quiet, now)


class Dispatcher:
    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor

    def send(self, run: Run) -> str:
        """Send the carrier of ``run``'s current token, due at ``next_retry_at`` (now if unset):
        the delay queue within 15 minutes, otherwise a one-time schedule named by the token."""
        due = run.next_retry_at or self.clock.now()
        delay = max((due - self.clock.now()).total_seconds(), 0.0)
        body = carrier(run)
        reference = retry_dispatch_reference(run.run_id, run.attempt + 1, run.dispatch)
        try:
            if delay <= MAX_QUEUE_DELAY_S:
                self.deps.queues.send(
                    "execution",
                    body,
                    delay_s=delay,
                    attributes={
                        "run_id": run.run_id,
                        "dispatch": run.dispatch,
                        "dispatch_reference": reference,
                    },
                    trace=tracing.run_header(run.run_id, run.scheduled_for, reference)
                    if self.deps.settings.tracing
                    else None,
                )
                via = "delay_queue"
            else:
                self.deps.schedules.create_one_time(reference, due, body)
                via = "scheduler"
        except ReboundError:
            self.deps.metrics.count(m.SCHEDULING_FAILURE)
            raise
        self.deps.metrics.count(m.SCHEDULING_SUCCESS)
        log.info(
            "dispatched",
            extra={
                "run_id": run.run_id,
                "attempt": run.attempt + 1,
                "dispatch": run.dispatch,
                "via": via,
                "delay_s": round(delay, 3),
            },
        )
        return via

    def renew(
        self,
        run: Run,
        *,
        due: datetime,
        action: str,
        evidence: dict[str, Any],
        crash_point: str,
        update: dict[str, Any] | None = None,
    ) -> Run | None:
        """Record a new token for ``run`` (audited as ``action``), then send its carrier.

        ``None`` if the run changed meanwhile (someone else moved it on).
        """
        now = self.clock.now()
        after = with_changes(run, {**(update or {}), "dispatch": run.dispatch + 1, "next_retry_at": due})
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            run, after, action=action, evidence={**evidence, "dispatch": after.dispatch, "due": iso(due)}
        )
        try:
            uow.commit()
        except Conflict:
            return None
        self.deps.faults.reached(crash_point)
        self.send(saved)
        return saved
