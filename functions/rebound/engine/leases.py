"""A running attempt whose lease ran out: failed with ``TIMEOUT`` and retried.

Two readers find such a run. The sweeper reads the running runs the ``by_state`` index lists
each minute (an asynchronous attempt, one its task's duration SLA watches, one started long
after its fire). A run running a clean attempt is not listed (``rebound.domain.run.in_state_index``):
its message is kept invisible until after the lease (``rebound.engine.executor.delivery``), so
a worker that died leaves the message to come back then, and the executor that receives it
fails the attempt here (``rebound.engine.executor.intake``). Either way the write is guarded by
the run's revision, so one of them wins.
"""

from __future__ import annotations

import logging
from datetime import datetime

from rebound.domain import events as ev
from rebound.domain.errors import Conflict
from rebound.domain.flags import TASK_SLA_MONITOR
from rebound.domain.ids import run_subject
from rebound.domain.run import AttemptOutcome, Run, RunState
from rebound.domain.states import ensure_transition
from rebound.domain.task import Task
from rebound.domain.timefmt import iso
from rebound.engine import sla
from rebound.engine import telemetry as m
from rebound.engine.async_attempts import HEARTBEAT_TIMEOUT, timeout_code
from rebound.engine.concurrency import leave
from rebound.engine.deps import Deps

log = logging.getLogger(__name__)

TIMEOUT = "TIMEOUT"
DIED = "lease expired: the attempt's invocation crashed or ran out of time"
"""The error message of a synchronous attempt whose worker died (``worker_died``)."""


def expired(run: Run, now: datetime) -> bool:
    return run.state is RunState.RUNNING and run.lease_expires_at is not None and run.lease_expires_at < now


def worker_died(run: Run) -> bool:
    """Whether ``run`` failed because its synchronous attempt's worker died (its lease ran out):
    a crash, a kill or an invocation out of time, which says nothing of its target. A target that
    hangs is timed out by the worker itself (its own ``TIMEOUT``), and an asynchronous attempt's
    silence is the target's (``HEARTBEAT_TIMEOUT``, or ``TIMEOUT`` past its ``max_duration``)."""
    return run.state is RunState.FAILED and run.last_error_message == DIED


def expire(deps: Deps, actor: str, run: Run) -> Run | None:
    """Fail ``run``'s running attempt, whose lease ran out, with ``TIMEOUT`` (an asynchronous
    attempt whose heartbeats stopped: ``HEARTBEAT_TIMEOUT``); the failure's event sends it down
    the retry path. Returns the run as saved, or None if another write got there first."""
    now = deps.clock.now()
    current = run.attempts[-1]
    asynchronous = run.async_token_id is not None
    code = timeout_code(run, now) if asynchronous else TIMEOUT
    if code == HEARTBEAT_TIMEOUT:
        last = iso(run.heartbeat_at or current.started_at)
        message = f"no heartbeat for {run.heartbeat_timeout_s or 0:g}s (the last at {last})"
    elif asynchronous:
        ended = iso(run.async_ends_at or now)
        message = f"the asynchronous attempt ran past its max_duration (it ended at {ended})"
    else:
        message = DIED
    finished = current.model_copy(
        update={
            "ended_at": now,
            "outcome": AttemptOutcome.TIMEOUT,
            "error_code": code,
            "error_message": message,
            "retryable": True,
            "duration_ms": int((now - current.started_at).total_seconds() * 1000),
        }
    )
    after = run.model_copy(
        update={
            "state": RunState.FAILED,
            "attempts": [*run.attempts[:-1], finished],
            "lease_expires_at": None,
            "lease_owner": None,
            "slots": [],
            "async_token_id": None,
            "watched": None,
            "last_error_code": code,
            "last_error_message": finished.error_message,
            "last_error_retryable": True,
        }
    )
    breach: sla.Breach | None = None
    if asynchronous and code == TIMEOUT:
        stored = deps.store.get_task(run.task_id)
        task: Task | None = stored.task if stored else None
        # Timed out at its max_duration: at (not only past) the limit, which is a breach.
        limit = sla.duration_limit(task)
        ran_s = (now - current.started_at).total_seconds()
        judged = deps.flags.enabled(TASK_SLA_MONITOR)
        if judged and limit is not None and ran_s >= limit and "duration" not in run.sla_breaches:
            breach = sla.Breach("duration", ran_s, limit)
        if breach is not None:
            after = sla.with_breach(after, breach)
    ensure_transition(run.state, after.state, run.run_id)
    uow = deps.store.unit_of_work(actor, now)
    saved = uow.save_run(
        run,
        after,
        action="lease-expired",
        evidence={
            "attempt": run.attempt,
            "outcome": AttemptOutcome.TIMEOUT.value,
            "lease_expires_at": iso(run.lease_expires_at or now),
            "lease_owner": run.lease_owner,
            "error_code": code,
        },
    )
    subject = run_subject(run.run_id)
    uow.emit(ev.execution_updated(saved, RunState.RUNNING, now), subject)
    uow.emit(ev.execution_failed(saved, retryable=True, at=now), subject)
    for key in run.slots:
        leave(uow, key, run.run_id)
    if breach is not None:
        sla.stage_breach(uow, run, saved, breach, deps.metrics)
    try:
        uow.commit()
    except Conflict:
        return None
    deps.metrics.count(m.LEASE_EXPIRED)
    log.warning(
        "lease expired",
        extra={"run_id": run.run_id, "attempt": run.attempt, "error_code": code, "actor": actor},
    )
    return saved
