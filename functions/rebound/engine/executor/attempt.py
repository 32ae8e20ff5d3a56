"""The attempt: claim it, call the target within the time left, record the outcome.

Owns the claim and what follows it:

- The claim is a conditional transaction on the run (its state must allow a start, its attempt
  counter must be one below the message's attempt, and the message must carry the run's current
  dispatch token, ``rebound.engine.dispatch``), so a duplicate, concurrent or stale delivery of
  the same (run, attempt) loses the claim and never reaches the target. The run's concurrency
  slots are entered in the same transaction; a busy one goes to admission
  (``rebound.engine.executor.admission``). A late start is recorded as an SLA breach there too.
- The claim sets a lease: the attempt's deadline (the task timeout, never cut: an attempt that
  would not fit in what the invocation has left is *released* instead, under a new dispatch
  token, at most ``MAX_RELEASES`` times) plus a grace period. An attempt whose lease expires is
  failed with ``TIMEOUT`` and retried; a run is never left ``running``. The sweeper finds it if
  ``by_state`` lists it; a clean attempt is not listed for its first 10 s, and its message is
  kept invisible until after the lease instead (with the whole batch, by the handler:
  ``delivery.hold``), so the message comes back to find it (``rebound.engine.leases``).
- The outcome is written only if the run is still this attempt, under this lease, and leaves the
  slots. A write that meets contention is tried again until it lands; the outcome is never thrown
  away because another write happened to touch the same item. A long attempt is recorded as an
  SLA breach in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain import tracing
from rebound.domain.basics import MAX_PAYLOAD_BYTES
from rebound.domain.completion import ASYNC_PAYLOAD_KEY
from rebound.domain.errors import Conflict, OperationalError, ReboundError
from rebound.domain.flags import TASK_SLA_MONITOR
from rebound.domain.ids import run_subject
from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.retry import Reason
from rebound.domain.run import Attempt, AttemptOutcome, Run, RunState, Trigger, unlisted_running, with_changes
from rebound.domain.schedule_spec import OverlapPolicy
from rebound.domain.states import ensure_transition
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task
from rebound.domain.timefmt import iso
from rebound.engine import crashpoints as cp
from rebound.engine import sla
from rebound.engine import telemetry as m
from rebound.engine.async_attempts import (
    ASYNC_CLEARED,
    COMPLETION_KEY_MISSING,
    async_claim,
    completion_details,
)
from rebound.engine.concurrency import (
    SLOT_GRACE,
    Slot,
    buffer_slot,
    busy_slots,
    enter,
    expired_holders,
    holders,
    leave,
    reap,
    slots_for,
)
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.executor.admission import UNKNOWN_TASK, Admission, log, waited
from rebound.engine.executor.capacity import RESERVE_TIMEOUT_S, reservation_spec, reserve
from rebound.engine.executor.delivery import delivery, keep_invisible
from rebound.engine.ports import Metrics, UnitOfWork
from rebound.engine.ports.runtime import call_after
from rebound.engine.ports.targets import Invocation, Outcome

LEASE_GRACE_S = 30
SAFETY_MARGIN_S = 10
MIN_ATTEMPT_S = 5
RELEASE_DELAY_S = 1.0
LEASE_RETURN_S = 1.0
"""An unlisted attempt's message comes back this long after its lease ends (a second, so the
executor that receives it finds the lease expired)."""
HOLD_PAST_INVOCATION_S = LEASE_GRACE_S - SAFETY_MARGIN_S + LEASE_RETURN_S
"""How long after its invocation can end a batch's messages are kept invisible
(``delivery.hold``): a claim leaves at least ``SAFETY_MARGIN_S`` of the invocation after its
attempt's deadline, and its lease ends ``LEASE_GRACE_S`` after that deadline, so a message
coming back then finds any lease its invocation set run out."""
LIST_RUNNING_AFTER_S = 10.0
"""A clean attempt still running after this long is put in ``by_state`` (``_list_if_long``)."""
MAX_RELEASES = 3
RECORD_ATTEMPTS = 14
"""Tries of the outcome write under contention: about 10 s of backoff, well inside the lease's grace."""
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
NOT_ENOUGH_TIME = "NOT_ENOUGH_TIME"
TIMEOUT_CODES = frozenset({"TIMEOUT", "HEARTBEAT_TIMEOUT"})


class Attempts(Admission):
    """Claim, call, record; or release (see the module's docstring)."""

    def _claim_and_run(
        self,
        before: Run | None,
        run: Run,
        stored: StoredTask | None,
        ends_at: datetime,
        cancelled_others: bool = False,
        reaped: bool = False,
    ) -> str:
        now = self.clock.now()
        task = stored.task if stored else None
        timeout_s = float(task.timeout_s) if task else float(MIN_ATTEMPT_S)
        if run.budget_overrides is not None and run.budget_overrides.timeout_s is not None:
            timeout_s = float(run.budget_overrides.timeout_s)
        remaining_s = (ends_at - now).total_seconds()
        spec = reservation_spec(task, self._tenant(task.tenant)) if task is not None else None
        asks = spec is not None and stored is not None and not (reaped or cancelled_others)
        if remaining_s - SAFETY_MARGIN_S - (RESERVE_TIMEOUT_S if asks else 0.0) < timeout_s:
            # Never cut an attempt's deadline to what this invocation has left: that would fail
            # it with a TIMEOUT it did not earn. Hand it to a fresh message instead.
            return self._release(before, run, stored, remaining_s)
        attempt_s = timeout_s
        n = run.attempt + 1
        reservation_id: str | None = None
        if asks and spec is not None and stored is not None:
            reservation = reserve(self.deps.targets, spec, run, n, now)
            if not reservation.granted:
                log.warning(
                    "capacity not reserved",
                    extra={"run_id": run.run_id, "reason": reservation.reason, "detail": reservation.detail},
                )
                return self._wait(
                    before, run, stored, [], [], str(reservation.reason), None, detail=reservation.detail
                )
            reservation_id = reservation.reservation_id
            now = self.clock.now()
        slots = slots_for(task, self._tenant(task.tenant)) if task else []
        lease_end = now + timedelta(seconds=attempt_s + LEASE_GRACE_S)
        slot_until = lease_end + SLOT_GRACE
        asynchronous = async_claim(task, run.run_id, n, now, lease_end) if task is not None else None
        if asynchronous is not None:
            lease_end = asynchronous["lease_expires_at"]
            slot_until = asynchronous["async_ends_at"] + SLOT_GRACE
        judge_sla = self.deps.flags.enabled(TASK_SLA_MONITOR)
        running = run.model_copy(
            update={
                **(asynchronous or ASYNC_CLEARED),
                # the sweeper judges its duration while it runs: keep it in by_state
                "watched": True if judge_sla and sla.duration_limit(task) is not None else None,
                "state": RunState.RUNNING,
                "attempt": n,
                "attempts": [*run.attempts, Attempt(n=n, started_at=now)],
                "lease_expires_at": lease_end,
                "lease_owner": self.request_id,
                "next_retry_at": None,
                "held_at": None,
                "slots": [s.key for s in slots],
                "waiting_since": None,
                "wait_reason": None,
                "wait_polls": 0,
            }
        )
        breach = sla.start_delay_breach(task, running, now) if judge_sla else None
        if breach is not None:
            running = sla.with_breach(running, breach)
        # A new run whose fire its task's schedule owes is listed with the task by that fire
        # while it is a clean success: no by_task_keys entry (``rebound.domain.fire_segments``).
        new_clean = before is None and stored is not None and unlisted_running(running)
        if new_clean and stored is not None and stored.lists_by_fire(run.run_id, run.scheduled_for):
            running = running.model_copy(update={"by_fire": True})
        ensure_transition(run.state, RunState.RUNNING, run.run_id)
        subject = run_subject(run.run_id)
        uow = self.store.unit_of_work("executor", now)
        # The lease's end and owner are in the record's changes (``audit.CLAIM_CHANGES_SHOWN``): said
        # once, the record of a new run stays under 1 KB (one write unit, not two).
        evidence: dict[str, Any] = {"attempt": n, "created": before is None}
        if before is not None:  # a new run's trigger is in its changes, and its token is 0
            evidence.update(trigger=run.trigger.value, dispatch=run.dispatch)
        evidence.update(deadline_s=round(attempt_s, 3), delivery=delivery())
        if running.slots:
            evidence["slots"] = running.slots
        if spec is not None:
            evidence["capacity"] = {"reserved": True, "reservation_id": reservation_id}
        if asynchronous is not None:
            evidence["async"] = {
                "token_id": asynchronous["async_token_id"],
                "heartbeat_timeout_s": asynchronous["heartbeat_timeout_s"],
                "ends_at": iso(asynchronous["async_ends_at"]),
            }
        if run.waiting_since is not None:
            evidence["waited"] = {
                "reason": run.wait_reason,
                "since": iso(run.waiting_since),
                "polls": run.wait_polls,
                "waited_s": waited(run, now),
            }
        # A new run is created pending and claimed in the same atomic write; one audit record
        # and one event describe both (``created: true``), as nothing could observe it pending.
        # A clean attempt of a new run commits its record alone: the item waits for the outcome
        # (``item_may_wait``), one write unit and its index entry fewer while it runs.
        claimed = uow.save_run(
            before,
            running,
            action="attempt-started",
            evidence=evidence,
            from_state=run.state,
            defer_item=before is None and unlisted_running(running),
        )
        uow.emit(ev.execution_updated(claimed, run.state, now), subject)
        for slot in slots:
            enter(uow, slot, run.run_id, slot_until)
        for key in set(run.slots) - set(running.slots):
            leave(uow, key, run.run_id)  # a buffered run leaves the buffer as it starts
        if breach is not None:
            sla.stage_breach(uow, run, claimed, breach, self.deps.metrics)
        if unlisted_running(running):
            # No index lists this run while it runs (``in_state_index``): its message, kept
            # invisible until the lease ends, is what finds it if this worker dies (held with its
            # batch already, as a rule: then no request). Before the commit, so no moment has the
            # run claimed and its message due back in 30 minutes.
            keep_invisible(self.deps.queues, (lease_end - now).total_seconds() + LEASE_RETURN_S)
        try:
            uow.commit()
        except Conflict as exc:
            failed = list(exc.details.get("failed", []))
            busy = busy_slots(failed, slots)
            if not busy or f"runs {run.run_id}" in failed or stored is None:
                return "claim-lost"
            return self._blocked(before, run, stored, busy, ends_at, cancelled_others, reaped)
        if slots:
            self.deps.metrics.observe(m.LOCK_CONTENTION, 0.0, "Percent")
        if n > run.budget_start + 1:
            self.deps.metrics.count(m.EXECUTION_RETRY)
        if n == 1 and run.trigger is Trigger.SCHEDULE:
            late = sla.start_delay(task, run, now)
            self.deps.metrics.observe(
                m.SCHEDULER_ON_TIME, 100.0 if late <= m.ON_TIME_WINDOW_S else 0.0, "Percent"
            )
        self.deps.faults.reached(cp.AFTER_CLAIM)

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
            if asynchronous is not None:
                try:
                    payload = {**payload, ASYNC_PAYLOAD_KEY: completion_details(self.deps, claimed, task)}
                except OperationalError as exc:
                    outcome = Outcome.failure(COMPLETION_KEY_MISSING, exc.message, retryable=False)
                    return self._record(claimed, outcome, task)
            call = Invocation(
                run_id=run.run_id,
                task_id=run.task_id,
                tenant=run.tenant,
                attempt=n,
                scheduled_for=run.scheduled_for,
                payload=payload,
                deadline=now + timedelta(seconds=attempt_s),
                trace_id=tracing.trace_id(run.run_id, run.scheduled_for),
            )
            cancel = self._list_if_long(claimed)
            try:
                outcome = self.deps.targets.invoke(task.target, call)
            finally:
                cancel()
        self.deps.faults.reached(cp.AFTER_TARGET)
        if asynchronous is not None and outcome.ok:
            # The work has started and reports for itself (rebound.engine.async_reports); the run
            # stays running under its heartbeat lease, set by the claim. Nothing more to write.
            log.info("asynchronous attempt started", extra={"run_id": run.run_id, "attempt": n})
            return "started-async"
        return self._record(claimed, outcome, task)

    def _list_if_long(self, claimed: Run) -> Callable[[], None]:
        """A clean attempt is not in ``by_state`` (``unlisted_running``); one still running after
        ``LIST_RUNNING_AFTER_S`` is put there (one conditional write, guarded by the claim's
        revision, so an outcome written first wins), so that listings of running runs show every
        run running longer. Returns what cancels it, once the target has answered."""
        if not unlisted_running(claimed):
            return lambda: None

        def relist() -> None:
            try:
                if self.store.relist_running(claimed):
                    log.info("running run listed", extra={"run_id": claimed.run_id})
            except ReboundError as exc:  # only the listing waits: its message still watches it
                log.warning(
                    "could not list a running run", extra={"run_id": claimed.run_id, "error": exc.message}
                )

        return call_after(self.deps.clock, LIST_RUNNING_AFTER_S, relist)

    def _blocked(
        self,
        before: Run | None,
        run: Run,
        stored: StoredTask,
        busy: list[Slot],
        ends_at: datetime,
        cancelled_others: bool,
        reaped: bool,
    ) -> str:
        """A slot the run needs is taken: skip, cancel the other run, or wait, as policy says."""
        task = stored.task
        items = {s.key: self.store.get_key(s.key) for s in busy}
        if not reaped:
            now = self.clock.now()
            expired = [(key, h) for key, item in items.items() for h in expired_holders(item, now)]
            gone = [reap(self.store, key, h, now, "executor") for key, h in expired if h != run.run_id]
            if any(gone):
                log.warning("expired slot holders removed", extra={"run_id": run.run_id, "slots": expired})
                return self._claim_and_run(before, run, stored, ends_at, cancelled_others, reaped=True)
        holder_ids = sorted({h for item in items.values() for h in holders(item)} - {run.run_id})
        task_busy = any(s.kind == "task" for s in busy)
        first = run.attempt == 0
        self.deps.metrics.observe(m.LOCK_CONTENTION, 100.0, "Percent")
        if task_busy and first and task.overlap is OverlapPolicy.SKIP:
            return self._skip(before, run, "overlap", holder_ids)
        cancel = task.overlap is OverlapPolicy.CANCEL_OTHER and not cancelled_others
        if task_busy and first and cancel and len(busy) == 1:
            for other in holder_ids:
                self._cancel_running(other, reason=f"cancelled by {run.run_id} (overlap: cancel_other)")
            self.deps.faults.reached(cp.AFTER_CANCEL_OTHER)
            return self._claim_and_run(before, run, stored, ends_at, cancelled_others=True, reaped=reaped)
        buffering = task_busy and first and task.overlap is OverlapPolicy.BUFFER_ONE
        reason = (
            "overlap"
            if task_busy
            else "mutex_busy"
            if any(s.kind == "mutex" for s in busy)
            else "tenant_quota"
        )
        return self._wait(
            before, run, stored, busy, holder_ids, reason, buffer_slot(task) if buffering else None
        )

    def _record(self, claimed: Run, outcome: Outcome, task: Task | None) -> str:
        now = self.clock.now()
        self.deps.faults.reached(cp.BEFORE_OUTCOME)
        uow = self.store.unit_of_work("executor", now)
        saved, finished = stage_outcome(
            uow,
            claimed,
            outcome,
            task,
            self.deps.metrics,
            now,
            judge_sla=self.deps.flags.enabled(TASK_SLA_MONITOR),
        )
        try:
            # Contention (another write on one of these items at the same moment) is not a
            # verdict on this outcome: try again, patiently, before the lease runs out.
            uow.commit(attempts=RECORD_ATTEMPTS)
        except Conflict:
            latest = self.store.get_run(claimed.run_id)
            log.warning(
                "attempt outcome discarded: the run moved on",
                extra={
                    "run_id": claimed.run_id,
                    "attempt": claimed.attempt,
                    "state": latest.state.value if latest else None,
                    "outcome": finished.outcome.value,
                },
            )
            self.deps.metrics.count(m.OUTCOME_DISCARDED)
            return "outcome-discarded"
        attempt_telemetry(self.deps.metrics, saved, finished)
        return finished.outcome.value

    def _release(self, before: Run | None, run: Run, stored: StoredTask | None, remaining_s: float) -> str:
        """Too little time left to run the whole attempt: hand it to a fresh message under a new
        token (a fresh message starts with a receive count of one, so a release never pushes a
        run towards the DLQ). After ``MAX_RELEASES`` the run is dead-lettered instead."""
        now = self.clock.now()
        if run.releases >= MAX_RELEASES:
            failed = run.model_copy(
                update={
                    "last_error_code": NOT_ENOUGH_TIME,
                    "last_error_message": f"released {run.releases} times: the executor never had the "
                    "task's whole timeout left",
                    "last_error_retryable": False,
                }
            )
            policy = self._policy(stored)
            saved = DeadLetters(self.deps, "executor").dead_letter(
                failed, Reason.NOT_ENOUGH_TIME, policy, error_code=NOT_ENOUGH_TIME, previous=before
            )
            return "not-enough-time" if saved is not None else "duplicate"
        after = with_changes(
            run,
            {
                "dispatch": run.dispatch + 1,
                "releases": run.releases + 1,
                "next_retry_at": now + timedelta(seconds=RELEASE_DELAY_S),
            },
        )
        uow = self.store.unit_of_work("executor", now)
        saved = uow.save_run(
            before,
            after,
            action="released",
            evidence={
                "remaining_s": round(remaining_s, 3),
                "created": before is None,
                "dispatch": after.dispatch,
                "delivery": delivery(),
            },
            from_state=run.state,
        )
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        self.deps.faults.reached(cp.AFTER_RELEASE)
        self.dispatcher.send(saved)
        log.warning(
            "released: not enough time left", extra={"run_id": run.run_id, "remaining_s": remaining_s}
        )
        return "released"


def stage_outcome(
    uow: UnitOfWork,
    claimed: Run,
    outcome: Outcome,
    task: Task | None,
    metrics: Metrics,
    now: datetime,
    *,
    action: str | None = None,
    evidence: dict[str, Any] | None = None,
    judge_sla: bool = True,
) -> tuple[Run, Attempt]:
    """Stage the outcome of ``claimed``'s running attempt: the run (guarded by ``claimed``'s
    revision, so only if it is still this attempt), its events, leaving its slots, the SLA.
    Returns the run as staged and the finished attempt. Shared by the executor (a call that
    returned) and by asynchronous reports (``rebound.engine.async_reports``)."""
    current = claimed.attempts[-1]
    duration_s = (now - current.started_at).total_seconds()
    duration_ms = int(duration_s * 1000)
    if outcome.ok:
        result = AttemptOutcome.SUCCEEDED
    elif outcome.error_code in TIMEOUT_CODES:
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
        "async_token_id": None,
        "watched": None,
    }
    if not outcome.ok:
        update.update(
            last_error_code=outcome.error_code,
            last_error_message=outcome.message or None,
            last_error_retryable=outcome.retryable,
        )
    after = claimed.model_copy(update=update)
    breach = sla.duration_breach(task, claimed, duration_s) if judge_sla else None  # task-sla-monitor
    if breach is not None:
        after = sla.with_breach(after, breach)
    saved = uow.save_run(
        claimed,
        after,
        action=action or ("attempt-succeeded" if outcome.ok else "attempt-failed"),
        evidence={
            "attempt": claimed.attempt,
            "outcome": result.value,
            "error_code": outcome.error_code,
            "retryable": None if outcome.ok else outcome.retryable,
            "duration_ms": duration_ms,
            **(evidence or {}),
        },
    )
    subject = run_subject(claimed.run_id)
    uow.emit(ev.execution_updated(saved, RunState.RUNNING, now), subject)
    if not outcome.ok:
        uow.emit(ev.execution_failed(saved, retryable=outcome.retryable, at=now), subject)
    elif saved.work_order_id:
        # The run of an open work order recovered: escalation resolves the order (the outbox
        # carries this with the success, so a crash cannot lose it).
        uow.emit(ev.run_recovered(saved, now), subject)
    for key in claimed.slots:
        leave(uow, key, claimed.run_id)
    if breach is not None:
        sla.stage_breach(uow, claimed, saved, breach, metrics)
    elif (
        judge_sla
        and outcome.ok
        and task is not None
        and (task.sla is not None or task.is_async)
        and not saved.sla_breaches
    ):
        sla.stage_reset(uow, task.id)
    return saved, finished


def attempt_telemetry(metrics: Metrics, run: Run, attempt: Attempt) -> None:
    is_retry = attempt.n > run.budget_start + 1
    metrics.observe(m.EXECUTION_DURATION, float(attempt.duration_ms or 0))
    if attempt.outcome is AttemptOutcome.SUCCEEDED:
        metrics.count(m.EXECUTION_SUCCESS)
        if is_retry:
            metrics.count(m.RETRY_SUCCESS)
        if attempt.n > 1:
            metrics.count(m.RETRY_RECOVERED)
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
