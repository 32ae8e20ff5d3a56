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

Scheduling guarantees that act at the claim:

- **Concurrency slots** (``rebound.engine.concurrency``) are entered in the claim transaction and
  left in the outcome transaction. A busy mutex group or tenant quota makes the run wait: it is
  recorded ``waiting`` (``task.execution.waiting``) and tried again later without spending an
  attempt. A busy task slot applies the task's overlap policy.
- **Stagger**: a fire that arrives before its task's stagger offset is sent back with a delay.
- **Pause**: a retry (or a waiting run) of a paused task is held until the task resumes.
- **SLA**: a late start or a long attempt is recorded as a breach in the same transaction.
"""

from __future__ import annotations

import hashlib
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebound.adapters.dynamo import StoredTask
from rebound.domain import events as ev
from rebound.domain.errors import Conflict, ReboundError, ValidationFailed
from rebound.domain.ids import event_run_id, scheduled_run_id
from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.models import (
    MAX_PAYLOAD_BYTES,
    Attempt,
    AttemptOutcome,
    OverlapPolicy,
    Run,
    RunState,
    Task,
    TenantSettings,
    Trigger,
)
from rebound.domain.retry import Reason
from rebound.domain.states import CLAIMABLE, ensure_transition
from rebound.domain.timefmt import iso
from rebound.engine import sla
from rebound.engine import telemetry as m
from rebound.engine.concurrency import Slot, buffer_slot, busy_slots, enter, holders, leave, slots_for
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
WAIT_S = 30.0
TENANT_CACHE_S = 60.0
UNKNOWN_TASK = "UNKNOWN_TASK"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
UNKNOWN_RUN = "UNKNOWN_RUN"
CLAIM_RETRIES = 3


@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    body: str
    receive_count: int = 1
    receipt_handle: str = ""
    attributes: dict[str, str] | None = None


_DELIVERY: ContextVar[QueueMessage | None] = ContextVar("rebound_delivery", default=None)
"""The queue message being processed (per thread), so the attempt's audit record names its delivery."""


def _delivery() -> dict[str, Any] | None:
    message = _DELIVERY.get()
    if message is None:
        return None
    return {"message_id": message.message_id, "receive_count": message.receive_count}


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
        token = _DELIVERY.set(message)
        try:
            return self._process(message, remaining_s)
        finally:
            _DELIVERY.reset(token)

    def _process(self, message: QueueMessage, remaining_s: float) -> str:
        try:
            parsed = parse_execution_message(message.body)
        except ValidationFailed as exc:
            return self.refuse(message, str(exc.details.get("reason", Reason.INVALID_MESSAGE)), exc.message)
        if isinstance(parsed, FireMessage):
            run_id = scheduled_run_id(parsed.task_id, parsed.scheduled_time)
            return self._start_new(
                run_id,
                parsed.task_id,
                Trigger.SCHEDULE,
                parsed.scheduled_time,
                None,
                remaining_s,
                message,
                catch_up=parsed.catch_up,
            )
        if isinstance(parsed, EventMessage):
            run_id = event_run_id(parsed.task_id, parsed.event_id)
            return self._start_new(
                run_id, parsed.task_id, Trigger.EVENT, parsed.time, parsed.detail, remaining_s, message
            )
        if isinstance(parsed, ManualMessage):
            return self._start_new(
                parsed.run_id, parsed.task_id, Trigger.MANUAL, parsed.requested_at, None, remaining_s, message
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
        message: QueueMessage,
        catch_up: bool = False,
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
        due_at: datetime | None = None
        if stored is not None and trigger is Trigger.SCHEDULE and stored.task.schedule is not None:
            offset = stored.task.schedule.stagger_offset(task_id)
            if offset and not catch_up:
                due_at = scheduled_for + timedelta(seconds=offset)
                if (due_at - now).total_seconds() >= 1:
                    # Staggered: come back at the task's own offset into the minute.
                    self.deps.queues.send("execution", message.body, delay_s=(due_at - now).total_seconds())
                    return "staggered"
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
            due_at=due_at,
            catch_up=catch_up,
        )
        if stored is None:
            return self._unknown_task(run)
        if stored.paused_for(scheduled_for):
            return self._skip(None, run, "task_paused", [])
        # The common path creates and claims in one conditional transaction, without reading
        # first; if the run exists already, the condition fails and we look at what is there.
        result = self._claim_and_run(None, run, stored, remaining_s)
        if result != "claim-lost":
            return result
        existing = self.store.get_run(run_id)
        # A pending run nobody has tried yet (the sweeper made it) is claimed here. One that is
        # waiting for a busy mutex group or tenant quota already has its own message coming back:
        # a second delivery of the fire must not queue a second waiter.
        if (
            existing is not None
            and existing.state is RunState.PENDING
            and existing.attempt == 0
            and existing.waits == 0
        ):
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

    def _skip(self, before: Run | None, run: Run, reason: str, holder_ids: list[str]) -> str:
        """Record the run as skipped (a fire while paused, or the task's overlap policy said so)."""
        now = self.clock.now()
        ensure_transition(run.state, RunState.SKIPPED, run.run_id)
        skipped = run.model_copy(
            update={"state": RunState.SKIPPED, "last_error_message": reason.replace("_", " "), "slots": []}
        )
        uow = self.store.unit_of_work("executor", now)
        saved = uow.save_run(
            before,
            skipped,
            action="skipped",
            evidence={"reason": reason, "holders": holder_ids},
            from_state=run.state,
        )
        for key in run.slots:
            leave(uow, key, run.run_id)
        uow.emit(ev.execution_updated(saved, run.state if before else None, now), f"run#{run.run_id}")
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        return f"skipped-{reason.replace('_', '-')}"

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
            if stored is not None and stored.paused and run.state is not RunState.REPLAYED:
                return self._hold(run)
            result = self._claim_and_run(run, run, stored, remaining_s)
            if result != "claim-lost":
                return result
        return "duplicate"

    def _hold(self, run: Run) -> str:
        """The task is paused: keep the run where it is until the task resumes (which dispatches it)."""
        if run.held_at is not None:
            return "held"
        now = self.clock.now()
        uow = self.store.unit_of_work("executor", now)
        uow.save_run(
            run, run.model_copy(update={"held_at": now}), action="held", evidence={"reason": "task_paused"}
        )
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        return "held"

    def _replay(self, msg: ReplayMessage, message: QueueMessage, remaining_s: float) -> str:
        for _ in range(CLAIM_RETRIES):
            run = self.store.get_run(msg.run_id)
            if run is None:
                return self.refuse(message, UNKNOWN_RUN.lower(), f"no run {msg.run_id!r}")
            stored = self.store.get_task(run.task_id)
            if run.state is RunState.REPLAYED and run.attempt == run.budget_start:
                result = self._claim_and_run(run, run, stored, remaining_s)
            elif run.state is RunState.DEAD_LETTERED:
                if (
                    msg.dead_lettered_at
                    and run.dead_lettered_at
                    and iso(run.dead_lettered_at) != msg.dead_lettered_at
                ):
                    # A copy of an earlier dead letter: the run was replayed and dead-lettered again since.
                    log.info("stale replay message", extra={"run_id": run.run_id})
                    return "duplicate"
                result = self._replay_from_queue(run, stored, msg.actor, remaining_s)
            else:
                log.info(
                    "replay skipped: run is not dead-lettered",
                    extra={"run_id": run.run_id, "state": run.state.value},
                )
                return "duplicate"
            if result != "claim-lost":
                return result
        return "duplicate"

    def _replay_from_queue(self, run: Run, stored: StoredTask | None, actor: str, remaining_s: float) -> str:
        """A replay that arrived without an operator's replay record (a console redrive): start a
        fresh budget, without overrides, and run it."""
        now = self.clock.now()
        replayed = run.model_copy(
            update={
                "state": RunState.REPLAYED,
                "budget_start": run.attempt,
                "budget_started_at": now,
                "budget_overrides": None,
            }
        )
        uow = self.store.unit_of_work(actor, now)
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
            return "claim-lost"
        return self._claim_and_run(saved, saved, stored, remaining_s)

    # --------------------------------------------------------------------------- concurrency
    def _tenant(self, tenant: str) -> TenantSettings | None:
        key = f"tenant#{tenant}"
        now = self.clock.now().timestamp()
        cached = self.deps.cache.get(key)
        if cached is not None and now - cached[0] < TENANT_CACHE_S:
            return cached[1]  # type: ignore[return-value]
        settings = self.store.get_tenant(tenant)
        self.deps.cache[key] = (now, settings)
        return settings

    def _blocked(
        self,
        before: Run | None,
        run: Run,
        stored: StoredTask,
        busy: list[Slot],
        remaining_s: float,
        cancelled_others: bool,
    ) -> str:
        """A slot the run needs is taken: skip, cancel the other run, or wait, as policy says."""
        task = stored.task
        holder_ids = sorted({h for s in busy for h in holders(self.store.get_key(s.key))} - {run.run_id})
        task_busy = any(s.kind == "task" for s in busy)
        first = run.attempt == 0
        self.deps.metrics.observe(m.LOCK_CONTENTION, 100.0, "Percent")
        if task_busy and first and task.overlap is OverlapPolicy.SKIP:
            return self._skip(before, run, "overlap", holder_ids)
        cancel = task.overlap is OverlapPolicy.CANCEL_OTHER and not cancelled_others
        if task_busy and first and cancel and len(busy) == 1:
            for other in holder_ids:
                self._cancel_running(other, reason=f"cancelled by {run.run_id} (overlap: cancel_other)")
            return self._claim_and_run(before, run, stored, remaining_s, cancelled_others=True)
        buffering = task_busy and first and task.overlap is OverlapPolicy.BUFFER_ONE
        reason = (
            "overlap"
            if task_busy
            else "mutex_busy"
            if any(s.kind == "mutex" for s in busy)
            else "tenant_quota"
        )
        return self._wait(
            before, run, task, busy, holder_ids, reason, buffer_slot(task) if buffering else None
        )

    def _wait(
        self,
        before: Run | None,
        run: Run,
        task: Task,
        busy: list[Slot],
        holder_ids: list[str],
        reason: str,
        buffer: Slot | None,
    ) -> str:
        """Record that the run waits, and try again later, without spending an attempt."""
        now = self.clock.now()
        join_buffer = buffer is not None and buffer.key not in run.slots
        waiting = run.model_copy(
            update={
                "waits": run.waits + 1,
                "slots": [*run.slots, buffer.key] if buffer and join_buffer else run.slots,
            }
        )
        uow = self.store.unit_of_work("executor", now)
        saved = uow.save_run(
            before,
            waiting,
            action="waiting",
            evidence={
                "reason": reason,
                "slots": [s.key for s in busy],
                "holders": holder_ids,
                "retry_in_s": WAIT_S,
            },
            from_state=run.state,
        )
        if buffer is not None and join_buffer:
            enter(uow, buffer, run.run_id)
        uow.emit(
            ev.execution_waiting(
                saved, reason=reason, slots=[s.key for s in busy], holders=holder_ids, retry_in_s=WAIT_S
            ),
            f"run#{run.run_id}",
        )
        try:
            uow.commit()
        except Conflict as exc:
            if buffer is not None and buffer.label in exc.details.get("failed", []):
                return self._skip(before, run, "overlap", holder_ids)  # someone is buffered already
            return "duplicate"
        self.deps.queues.send(
            "execution",
            {"v": 1, "kind": "attempt", "run_id": run.run_id, "attempt": run.attempt + 1},
            delay_s=WAIT_S,
        )
        log.warning(
            "run waiting for a slot",
            extra={"run_id": run.run_id, "task_id": run.task_id, "reason": reason, "holders": holder_ids},
        )
        return "waiting"

    def _cancel_running(self, run_id: str, reason: str) -> None:
        other = self.store.get_run(run_id)
        if other is None:
            return
        now = self.clock.now()
        uow = self.store.unit_of_work("executor", now)
        if other.state is not RunState.RUNNING:
            # Not running any more: it left, or is leaving, its slots in its own transaction.
            return
        current = other.attempts[-1]
        finished = current.model_copy(
            update={"ended_at": now, "outcome": AttemptOutcome.CANCELLED, "error_code": "CANCELLED"}
        )
        cancelled = other.model_copy(
            update={
                "state": RunState.CANCELLED,
                "attempts": [*other.attempts[:-1], finished],
                "lease_expires_at": None,
                "lease_owner": None,
                "slots": [],
                "last_error_message": reason,
            }
        )
        ensure_transition(other.state, cancelled.state, other.run_id)
        saved = uow.save_run(other, cancelled, action="cancelled", evidence={"reason": reason})
        for key in other.slots:
            leave(uow, key, other.run_id)
        uow.emit(ev.execution_updated(saved, RunState.RUNNING, now), f"run#{other.run_id}")
        try:
            uow.commit()
        except Conflict:
            return

    # --------------------------------------------------------------------------- claim, call, record
    def _claim_and_run(
        self,
        before: Run | None,
        run: Run,
        stored: StoredTask | None,
        remaining_s: float,
        cancelled_others: bool = False,
    ) -> str:
        now = self.clock.now()
        task = stored.task if stored else None
        timeout_s = float(task.timeout_s) if task else float(MIN_ATTEMPT_S)
        if run.budget_overrides is not None and run.budget_overrides.timeout_s is not None:
            timeout_s = float(run.budget_overrides.timeout_s)
        budget_s = remaining_s - SAFETY_MARGIN_S
        if budget_s < min(timeout_s, MIN_ATTEMPT_S):
            raise NotEnoughTime(f"{remaining_s:.0f}s left; not starting {run.run_id}", run_id=run.run_id)
        attempt_s = min(timeout_s, budget_s)
        slots = slots_for(task, self._tenant(task.tenant)) if task else []
        n = run.attempt + 1
        running = run.model_copy(
            update={
                "state": RunState.RUNNING,
                "attempt": n,
                "attempts": [*run.attempts, Attempt(n=n, started_at=now)],
                "lease_expires_at": now + timedelta(seconds=attempt_s + LEASE_GRACE_S),
                "lease_owner": self.request_id,
                "next_retry_at": None,
                "held_at": None,
                "slots": [s.key for s in slots],
            }
        )
        breach = sla.start_delay_breach(task, running, now)
        if breach is not None:
            running = sla.with_breach(running, breach)
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
                "slots": running.slots,
                "delivery": _delivery(),
            },
            from_state=run.state,
        )
        uow.emit(ev.execution_updated(claimed, run.state, now), subject)
        for slot in slots:
            enter(uow, slot, run.run_id)
        for key in set(run.slots) - set(running.slots):
            leave(uow, key, run.run_id)  # a buffered run leaves the buffer as it starts
        if breach is not None:
            sla.stage_breach(uow, run, claimed, breach, self.deps.metrics)
        try:
            uow.commit()
        except Conflict as exc:
            failed = list(exc.details.get("failed", []))
            busy = busy_slots(failed, slots)
            if not busy or f"runs {run.run_id}" in failed or stored is None:
                return "claim-lost"
            return self._blocked(before, run, stored, busy, remaining_s, cancelled_others)
        if slots:
            self.deps.metrics.observe(m.LOCK_CONTENTION, 0.0, "Percent")
        if n > run.budget_start + 1:
            self.deps.metrics.count(m.EXECUTION_RETRY)
        if n == 1 and run.trigger is Trigger.SCHEDULE:
            late = sla.start_delay(task, run, now)
            self.deps.metrics.observe(
                m.SCHEDULER_ON_TIME, 100.0 if late <= m.ON_TIME_WINDOW_S else 0.0, "Percent"
            )
        self.deps.faults.reached("after_claim")

        payload: dict[str, Any] = {}
        if task is not None:
            payload = {**task.payload, **({"event": run.event_detail} if run.event_detail else {})}
        size = len(canonical_bytes(payload)) if run.event_detail else 0  # a task's own payload was checked
        if task is None:
            outcome = Outcome.failure(UNKNOWN_TASK, f"task {run.task_id!r} no longer exists", retryable=False)
        elif size > MAX_PAYLOAD_BYTES:
            outcome = Outcome.failure(
                PAYLOAD_TOO_LARGE,
                f"the task's payload with the event's detail is {size} bytes; the limit is "
                f"{MAX_PAYLOAD_BYTES} (256 KiB)",
                retryable=False,
            )
        else:
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
            outcome = self.deps.targets.invoke(task.target, call)
        self.deps.faults.reached("after_target")
        return self._record(claimed, outcome, task)

    def _record(self, claimed: Run, outcome: Outcome, task: Task | None) -> str:
        now = self.clock.now()
        current = claimed.attempts[-1]
        duration_s = (now - current.started_at).total_seconds()
        duration_ms = int(duration_s * 1000)
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
            "slots": [],
        }
        if not outcome.ok:
            update.update(
                last_error_code=outcome.error_code,
                last_error_message=outcome.message or None,
                last_error_retryable=outcome.retryable,
            )
        after = claimed.model_copy(update=update)
        breach = sla.duration_breach(task, claimed, duration_s)
        if breach is not None:
            after = sla.with_breach(after, breach)
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
        for key in claimed.slots:
            leave(uow, key, claimed.run_id)
        if breach is not None:
            sla.stage_breach(uow, claimed, saved, breach, self.deps.metrics)
        elif outcome.ok and task is not None and task.sla is not None and not saved.sla_breaches:
            sla.stage_reset(uow, task.id)
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
