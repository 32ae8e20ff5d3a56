"""Execute one message from the execution queue: find or create the run, claim the attempt, call
the target, record the outcome.

Exactly-once in effect:

- The claim is a conditional transaction on the run (its state must allow a start and its
  attempt counter must be one below the message's attempt), so a duplicate or concurrent
  delivery of the same (run, attempt) loses the claim and never reaches the target.
- The claim sets a lease: the attempt's deadline (the task timeout, cut to what the invocation
  has left) plus a grace period. An attempt whose lease expires is failed with ``TIMEOUT`` by the
  sweeper and retried; a run is never left ``running``.
- The outcome is written only if the run is still ``running`` this attempt, under this lease.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebound.adapters.dynamo import StoredTask
from rebound.domain import events as ev
from rebound.domain.errors import Conflict, ReboundError, ValidationFailed
from rebound.domain.ids import event_run_id, scheduled_run_id
from rebound.domain.models import Attempt, AttemptOutcome, Run, RunState, Trigger
from rebound.domain.retry import Reason
from rebound.domain.states import CLAIMABLE, ensure_transition
from rebound.domain.timefmt import iso
from rebound.engine import telemetry as m
from rebound.engine.deps import Deps
from rebound.engine.messages import (
    AttemptMessage,
    EventMessage,
    FireMessage,
    ManualMessage,
    ReplayMessage,
    parse_execution_message,
)
from rebound.engine.retries import DeadLetters
from rebound.targets.base import Invocation, Outcome

log = logging.getLogger(__name__)

LEASE_GRACE_S = 30
SAFETY_MARGIN_S = 10
MIN_ATTEMPT_S = 5
UNKNOWN_TASK = "UNKNOWN_TASK"
UNKNOWN_RUN = "UNKNOWN_RUN"
CLAIM_RETRIES = 3


@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    body: str
    receive_count: int = 1
    receipt_handle: str = ""
    attributes: dict[str, str] | None = None


class NotEnoughTime(ReboundError):
    """The invocation has too little time left to run this attempt; hand the message back."""

    code = "NOT_ENOUGH_TIME"


class Executor:
    def __init__(self, deps: Deps, request_id: str = "local") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.request_id = request_id

    # --------------------------------------------------------------------------- entry
    def process(self, message: QueueMessage, remaining_s: float) -> str:
        """Handle one message. Returns what happened; raises to have the message redelivered."""
        try:
            parsed = parse_execution_message(message.body)
        except ValidationFailed as exc:
            return self.refuse(message, str(exc.details.get("reason", Reason.INVALID_MESSAGE)), exc.message)
        if isinstance(parsed, FireMessage):
            run_id = scheduled_run_id(parsed.task_id, parsed.scheduled_time)
            return self._start_new(
                run_id, parsed.task_id, Trigger.SCHEDULE, parsed.scheduled_time, None, remaining_s
            )
        if isinstance(parsed, EventMessage):
            run_id = event_run_id(parsed.task_id, parsed.event_id)
            return self._start_new(
                run_id, parsed.task_id, Trigger.EVENT, parsed.time, parsed.detail, remaining_s
            )
        if isinstance(parsed, ManualMessage):
            return self._start_new(
                parsed.run_id, parsed.task_id, Trigger.MANUAL, parsed.requested_at, None, remaining_s
            )
        if isinstance(parsed, AttemptMessage):
            return self._retry(parsed, message, remaining_s)
        return self._replay(parsed, message, remaining_s)

    # --------------------------------------------------------------------------- refusal
    def refuse(self, message: QueueMessage, reason: str, detail: str) -> str:
        """A message Rebound cannot run goes to the DLQ with its reason, once, and is escalated."""
        log.error(
            "refused execution message",
            extra={"message_id": message.message_id, "reason": reason, "detail": detail, "status": "refused"},
        )
        self.deps.metrics.count(m.INVALID_MESSAGE)
        first = DeadLetters(self.deps, "executor").dead_letter_message(
            message_id=message.message_id,
            body=message.body,
            receive_count=message.receive_count,
            reason=reason,
            detail=detail,
            send=True,
        )
        return "refused" if first else "refused-again"

    # --------------------------------------------------------------------------- new runs
    def _start_new(
        self,
        run_id: str,
        task_id: str,
        trigger: Trigger,
        scheduled_for: datetime,
        detail: dict[str, Any] | None,
        remaining_s: float,
    ) -> str:
        stored = self.store.get_task(task_id)
        if stored is None or stored.paused_for(scheduled_for):
            # Rare paths: check first whether this run exists already (a duplicate delivery).
            existing = self.store.get_run(run_id)
            if existing is not None:
                log.info(
                    "duplicate delivery: run exists", extra={"run_id": run_id, "state": existing.state.value}
                )
                return "duplicate"
        now = self.clock.now()
        run = Run(
            run_id=run_id,
            task_id=task_id,
            tenant=stored.task.tenant if stored else "unknown",
            trigger=trigger,
            scheduled_for=scheduled_for,
            created_at=now,
            updated_at=now,
            budget_started_at=now,
            event_detail=detail,
        )
        if stored is None:
            return self._unknown_task(run)
        if stored.paused_for(scheduled_for):
            return self._skip_paused(run)
        # The common path creates and claims in one conditional transaction, without reading
        # first; if the run exists already, the condition fails and we look at what is there.
        result = self._claim_and_run(None, run, stored, remaining_s)
        if result != "claim-lost":
            return result
        existing = self.store.get_run(run_id)
        if existing is not None and existing.state is RunState.PENDING and existing.attempt == 0:
            result = self._claim_and_run(existing, existing, stored, remaining_s)
            if result != "claim-lost":
                return result
        log.info("duplicate delivery: run exists", extra={"run_id": run_id})
        return "duplicate"

    def _unknown_task(self, run: Run) -> str:
        """A fire for a task nobody registered: a terminal failure, escalated like any other."""
        now = self.clock.now()
        uow = self.store.unit_of_work("executor", now)
        created = uow.save_run(None, run, action="created", evidence={"trigger": run.trigger.value})
        failed = created.model_copy(
            update={
                "state": RunState.FAILED,
                "last_error_code": UNKNOWN_TASK,
                "last_error_message": f"no task {run.task_id!r} is registered",
                "last_error_retryable": False,
            }
        )
        ensure_transition(created.state, failed.state, run.run_id)
        failed = uow.save_run(
            created, failed, action="rejected", evidence={"error_code": UNKNOWN_TASK, "outcome": "refused"}
        )
        uow.emit(ev.execution_updated(failed, None, now), f"run#{run.run_id}")
        uow.emit(ev.execution_failed(failed, retryable=False, at=now), f"run#{run.run_id}")
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        log.error(
            "unknown task", extra={"task_id": run.task_id, "run_id": run.run_id, "error_code": UNKNOWN_TASK}
        )
        return "unknown-task"

    def _skip_paused(self, run: Run) -> str:
        now = self.clock.now()
        skipped = run.model_copy(update={"state": RunState.SKIPPED, "last_error_message": "task is paused"})
        uow = self.store.unit_of_work("executor", now)
        saved = uow.save_run(None, skipped, action="skipped", evidence={"reason": "task_paused"})
        uow.emit(ev.execution_updated(saved, None, now), f"run#{run.run_id}")
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        return "skipped-paused"

    # --------------------------------------------------------------------------- retries and replays
    def _retry(self, msg: AttemptMessage, message: QueueMessage, remaining_s: float) -> str:
        for _ in range(CLAIM_RETRIES):
            run = self.store.get_run(msg.run_id)
            if run is None:
                return self.refuse(message, UNKNOWN_RUN.lower(), f"no run {msg.run_id!r}")
            if run.state not in CLAIMABLE or run.attempt != msg.attempt - 1:
                log.info(
                    "stale or duplicate attempt message",
                    extra={"run_id": run.run_id, "state": run.state.value, "attempt": msg.attempt},
                )
                return "duplicate"
            stored = self.store.get_task(run.task_id)
            result = self._claim_and_run(run, run, stored, remaining_s)
            if result != "claim-lost":
                return result
        return "duplicate"

    def _replay(self, msg: ReplayMessage, message: QueueMessage, remaining_s: float) -> str:
        run = self.store.get_run(msg.run_id)
        if run is None:
            return self.refuse(message, UNKNOWN_RUN.lower(), f"no run {msg.run_id!r}")
        stored = self.store.get_task(run.task_id)
        if run.state is RunState.REPLAYED and run.attempt == run.budget_start:
            return self._claim_and_run(run, run, stored, remaining_s)
        if run.state is not RunState.DEAD_LETTERED:
            log.info(
                "replay skipped: run is not dead-lettered",
                extra={"run_id": run.run_id, "state": run.state.value},
            )
            return "duplicate"
        now = self.clock.now()
        replayed = run.model_copy(
            update={"state": RunState.REPLAYED, "budget_start": run.attempt, "budget_started_at": now}
        )
        uow = self.store.unit_of_work(msg.actor, now)
        saved = uow.save_run(
            run,
            replayed,
            action="replayed",
            evidence={"fresh_budget_from_attempt": run.attempt + 1, "via": "queue"},
        )
        uow.emit(ev.execution_updated(saved, run.state, now), f"run#{run.run_id}")
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        return self._claim_and_run(saved, saved, stored, remaining_s)

    # --------------------------------------------------------------------------- claim, call, record
    def _claim_and_run(
        self, before: Run | None, run: Run, stored: StoredTask | None, remaining_s: float
    ) -> str:
        now = self.clock.now()
        timeout_s = float(stored.task.timeout_s) if stored else float(MIN_ATTEMPT_S)
        budget_s = remaining_s - SAFETY_MARGIN_S
        if budget_s < min(timeout_s, MIN_ATTEMPT_S):
            raise NotEnoughTime(f"{remaining_s:.0f}s left; not starting {run.run_id}", run_id=run.run_id)
        attempt_s = min(timeout_s, budget_s)
        n = run.attempt + 1
        running = run.model_copy(
            update={
                "state": RunState.RUNNING,
                "attempt": n,
                "attempts": [*run.attempts, Attempt(n=n, started_at=now)],
                "lease_expires_at": now + timedelta(seconds=attempt_s + LEASE_GRACE_S),
                "lease_owner": self.request_id,
                "next_retry_at": None,
            }
        )
        ensure_transition(run.state, RunState.RUNNING, run.run_id)
        subject = f"run#{run.run_id}"
        uow = self.store.unit_of_work("executor", now)
        # A new run is created pending and claimed in the same atomic write; one audit record
        # and one event describe both (``created: true``), as nothing could observe it pending.
        claimed = uow.save_run(
            before,
            running,
            action="attempt-started",
            evidence={
                "attempt": n,
                "created": before is None,
                "trigger": run.trigger.value,
                "lease_expires_at": iso(running.lease_expires_at or now),
                "deadline_s": round(attempt_s, 3),
                "lease_owner": self.request_id,
            },
            from_state=run.state,
        )
        uow.emit(ev.execution_updated(claimed, run.state, now), subject)
        try:
            uow.commit()
        except Conflict:
            return "claim-lost"
        if n > run.budget_start + 1:
            self.deps.metrics.count(m.EXECUTION_RETRY)
        if n == 1 and run.trigger is Trigger.SCHEDULE:
            late = (now - run.scheduled_for).total_seconds()
            self.deps.metrics.observe(
                m.SCHEDULER_ON_TIME, 100.0 if late <= m.ON_TIME_WINDOW_S else 0.0, "Percent"
            )
        self.deps.faults.reached("after_claim")

        if stored is None:
            outcome = Outcome.failure(UNKNOWN_TASK, f"task {run.task_id!r} no longer exists", retryable=False)
        else:
            payload = {**stored.task.payload, **({"event": run.event_detail} if run.event_detail else {})}
            call = Invocation(
                run_id=run.run_id,
                task_id=run.task_id,
                tenant=run.tenant,
                attempt=n,
                scheduled_for=run.scheduled_for,
                payload=payload,
                deadline=now + timedelta(seconds=attempt_s),
                trace_id=hashlib.sha256(run.run_id.encode()).hexdigest()[:32],
            )
            outcome = self.deps.targets.invoke(stored.task.target, call)
        self.deps.faults.reached("after_target")
        return self._record(claimed, outcome)

    def _record(self, claimed: Run, outcome: Outcome) -> str:
        now = self.clock.now()
        current = claimed.attempts[-1]
        duration_ms = int((now - current.started_at).total_seconds() * 1000)
        if outcome.ok:
            result = AttemptOutcome.SUCCEEDED
        elif outcome.error_code == "TIMEOUT":
            result = AttemptOutcome.TIMEOUT
        else:
            result = AttemptOutcome.FAILED
        finished = current.model_copy(
            update={
                "ended_at": now,
                "outcome": result,
                "error_code": outcome.error_code,
                "error_message": outcome.message or None,
                "retryable": None if outcome.ok else outcome.retryable,
                "duration_ms": duration_ms,
            }
        )
        update: dict[str, Any] = {
            "state": RunState.SUCCEEDED if outcome.ok else RunState.FAILED,
            "attempts": [*claimed.attempts[:-1], finished],
            "lease_expires_at": None,
            "lease_owner": None,
        }
        if not outcome.ok:
            update.update(
                last_error_code=outcome.error_code,
                last_error_message=outcome.message or None,
                last_error_retryable=outcome.retryable,
            )
        after = claimed.model_copy(update=update)
        self.deps.faults.reached("before_outcome")
        uow = self.store.unit_of_work("executor", now)
        saved = uow.save_run(
            claimed,
            after,
            action="attempt-succeeded" if outcome.ok else "attempt-failed",
            evidence={
                "attempt": claimed.attempt,
                "outcome": result.value,
                "error_code": outcome.error_code,
                "retryable": None if outcome.ok else outcome.retryable,
                "duration_ms": duration_ms,
            },
        )
        subject = f"run#{claimed.run_id}"
        uow.emit(ev.execution_updated(saved, RunState.RUNNING, now), subject)
        if not outcome.ok:
            uow.emit(ev.execution_failed(saved, retryable=outcome.retryable, at=now), subject)
        try:
            uow.commit()
        except Conflict:
            latest = self.store.get_run(claimed.run_id)
            log.warning(
                "attempt outcome discarded: the run moved on",
                extra={
                    "run_id": claimed.run_id,
                    "attempt": claimed.attempt,
                    "state": latest.state.value if latest else None,
                    "outcome": result.value,
                },
            )
            self.deps.metrics.count(m.OUTCOME_DISCARDED)
            return "outcome-discarded"
        self._telemetry(saved, finished)
        return result.value

    def _telemetry(self, run: Run, attempt: Attempt) -> None:
        is_retry = attempt.n > run.budget_start + 1
        metrics = self.deps.metrics
        metrics.observe(m.EXECUTION_DURATION, float(attempt.duration_ms or 0))
        if attempt.outcome is AttemptOutcome.SUCCEEDED:
            metrics.count(m.EXECUTION_SUCCESS)
            if is_retry:
                metrics.count(m.RETRY_SUCCESS)
        else:
            metrics.count(m.EXECUTION_FAILURE)
            if is_retry:
                metrics.count(m.RETRY_FAILURE)
        log.info(
            "attempt finished",
            extra={
                "task_id": run.task_id,
                "tenant_id": run.tenant,
                "run_id": run.run_id,
                "trigger_time": iso(run.scheduled_for),
                "actual_start": iso(attempt.started_at),
                "duration_ms": attempt.duration_ms,
                "status": attempt.outcome.value,
                "retry_count": attempt.n - 1,
                "error_code": attempt.error_code,
            },
        )
