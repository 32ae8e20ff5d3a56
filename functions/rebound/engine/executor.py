"""Execute one message from the execution queue: find or create the run, claim the attempt, call
the target, record the outcome.

Exactly-once in effect:

- The claim is a conditional transaction on the run (its state must allow a start, its attempt
  counter must be one below the message's attempt, and the message must carry the run's current
  dispatch token, ``rebound.engine.dispatch``), so a duplicate, concurrent or stale delivery of
  the same (run, attempt) loses the claim and never reaches the target.
- The claim sets a lease: the attempt's deadline (the task timeout, never cut: an attempt that
  would not fit in what the invocation has left is *released* instead) plus a grace period. An
  attempt whose lease expires is failed with ``TIMEOUT`` by the sweeper and retried; a run is
  never left ``running``.
- The outcome is written only if the run is still this attempt, under this lease. A write that
  meets contention is tried again until it lands; the outcome is never thrown away because
  another write happened to touch the same item.

Scheduling guarantees that act at the claim:

- **Concurrency slots** (``rebound.engine.concurrency``) are entered in the claim transaction and
  left in the outcome transaction. A busy mutex group or tenant quota makes the run wait: one
  wait *episode* (audited once, ``task.execution.waiting``) made of polls 30 s apart, each a new
  dispatch token and one message; past the policy's ``max_wait`` the run is dead-lettered with
  ``WAIT_EXHAUSTED``. A busy task slot applies the task's overlap policy.
- **Stagger**: a fire that arrives before its task's stagger offset is made visible again at the
  offset (the same message, so there is never a second copy).
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

from rebound.domain import events as ev
from rebound.domain.errors import Conflict, ReboundError, ValidationFailed
from rebound.domain.ids import run_subject
from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.models import (
    MAX_PAYLOAD_BYTES,
    Attempt,
    AttemptOutcome,
    OverlapPolicy,
    RetryPolicy,
    Run,
    RunState,
    Task,
    TenantSettings,
    Trigger,
    with_changes,
)
from rebound.domain.retry import Reason
from rebound.domain.states import ensure_transition
from rebound.domain.stored import StoredTask
from rebound.domain.timefmt import iso
from rebound.engine import crashpoints as cp
from rebound.engine import sla
from rebound.engine import telemetry as m
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
from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher, accepts
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
RELEASE_DELAY_S = 1.0
MAX_RELEASES = 3
TENANT_CACHE_S = 60.0
RECORD_ATTEMPTS = 14
"""Tries of the outcome write under contention: about 10 s of backoff, well inside the lease's grace."""
UNKNOWN_TASK = "UNKNOWN_TASK"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
UNKNOWN_RUN = "UNKNOWN_RUN"
WAIT_EXHAUSTED = "WAIT_EXHAUSTED"
NOT_ENOUGH_TIME = "NOT_ENOUGH_TIME"
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


class Deferred(ReboundError):
    """Not yet: make this same message visible again in ``delay_s`` (a staggered fire)."""

    code = "DEFERRED"

    def __init__(self, message: str, delay_s: float, **details: Any) -> None:
        super().__init__(message, delay_s=delay_s, **details)
        self.delay_s = delay_s


class Executor:
    def __init__(self, deps: Deps, request_id: str = "local") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.request_id = request_id
        self.dispatcher = Dispatcher(deps, "executor")

    # --------------------------------------------------------------------------- entry
    def process(self, message: QueueMessage, remaining_s: float) -> str:
        """Handle one message. Returns what happened; raises to have the message redelivered
        (``Deferred``: at a given time)."""
        token = _DELIVERY.set(message)
        try:
            # The invocation's end, on the engine's clock: what is left is judged when it matters
            # (at the claim), not when the message was picked up.
            return self._process(message, self.clock.now() + timedelta(seconds=remaining_s))
        finally:
            _DELIVERY.reset(token)

    def _process(self, message: QueueMessage, ends_at: datetime) -> str:
        try:
            parsed = parse_execution_message(message.body)
        except ValidationFailed as exc:
            return self.refuse(message, str(exc.details.get("reason", Reason.INVALID_MESSAGE)), exc.message)
        if isinstance(parsed, FireMessage):
            return self._start_new(
                parsed.run_id,
                parsed.task_id,
                Trigger.SCHEDULE,
                parsed.scheduled_time,
                None,
                ends_at,
                catch_up=parsed.catch_up,
            )
        if isinstance(parsed, EventMessage):
            return self._start_new(
                parsed.run_id, parsed.task_id, Trigger.EVENT, parsed.time, parsed.detail, ends_at
            )
        if isinstance(parsed, ManualMessage):
            return self._start_new(
                parsed.run_id, parsed.task_id, Trigger.MANUAL, parsed.requested_at, None, ends_at
            )
        if isinstance(parsed, AttemptMessage):
            return self._attempt(parsed, message, ends_at)
        return self._replay(parsed, message, ends_at)

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
        ends_at: datetime,
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
                wait = (due_at - now).total_seconds()
                if wait >= 1:
                    # Staggered: the same message comes back at the task's own offset into the minute.
                    raise Deferred(f"{run_id} is staggered to {iso(due_at)}", wait, run_id=run_id)
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
        result = self._claim_and_run(None, run, stored, ends_at)
        if result != "claim-lost":
            return result
        existing = self.store.get_run(run_id)
        # A pending run that no message has been sent for yet (token 0) is this fire's to claim.
        # Any other (waiting, released, staggered, caught up) has its own message coming.
        if (
            existing is not None
            and existing.state is RunState.PENDING
            and existing.attempt == 0
            and existing.dispatch == 0
        ):
            result = self._claim_and_run(existing, existing, stored, ends_at)
            if result != "claim-lost":
                return result
        log.info("duplicate delivery: run exists", extra={"run_id": run_id})
        return "duplicate"

    def _unknown_task(self, run: Run) -> str:
        """A fire for a task nobody registered: a terminal failure, escalated like any other."""
        now = self.clock.now()
        uow = self.store.unit_of_work("executor", now)
        created = uow.save_run(None, run, action="created", evidence={"trigger": run.trigger.value})
        failed = run.model_copy(
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
        subject = run_subject(run.run_id)
        uow.emit(ev.execution_updated(failed, None, now), subject)
        uow.emit(ev.execution_failed(failed, retryable=False, at=now), subject)
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
            update={
                "state": RunState.SKIPPED,
                "last_error_message": reason.replace("_", " "),
                "slots": [],
                "next_retry_at": None,
                "waiting_since": None,
            }
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
        uow.emit(ev.execution_updated(saved, run.state if before else None, now), run_subject(run.run_id))
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        return f"skipped-{reason.replace('_', '-')}"

    # --------------------------------------------------------------------------- retries and replays
    def _attempt(self, msg: AttemptMessage, message: QueueMessage, ends_at: datetime) -> str:
        for _ in range(CLAIM_RETRIES):
            run = self.store.get_run(msg.run_id)
            if run is None:
                return self.refuse(message, UNKNOWN_RUN.lower(), f"no run {msg.run_id!r}")
            if not accepts(run, msg.attempt, msg.dispatch):
                log.info(
                    "stale or duplicate attempt message",
                    extra={
                        "run_id": run.run_id,
                        "state": run.state.value,
                        "attempt": msg.attempt,
                        "dispatch": msg.dispatch,
                        "current_dispatch": run.dispatch,
                    },
                )
                return "duplicate"
            stored = self.store.get_task(run.task_id)
            if stored is not None and _held_by_pause(stored, run):
                return self._hold(run)
            result = self._claim_and_run(run, run, stored, ends_at)
            if result != "claim-lost":
                return result
        return "duplicate"

    def _hold(self, run: Run) -> str:
        """The task is paused: keep the run where it is until the task resumes (which dispatches it).

        A wait episode ends here, and a buffered run leaves the buffer; it waits again, from the
        start, if it is still blocked after the resume."""
        if run.held_at is not None:
            return "held"
        now = self.clock.now()
        uow = self.store.unit_of_work("executor", now)
        uow.save_run(
            run,
            run.model_copy(
                update={
                    "held_at": now,
                    "next_retry_at": None,
                    "waiting_since": None,
                    "wait_polls": 0,
                    "slots": [],
                }
            ),
            action="held",
            evidence={"reason": "task_paused", "waited_s": _waited(run, now), "slots_left": run.slots},
        )
        for key in run.slots:
            leave(uow, key, run.run_id)  # a held run keeps no place in a buffer
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        return "held"

    def _replay(self, msg: ReplayMessage, message: QueueMessage, ends_at: datetime) -> str:
        for _ in range(CLAIM_RETRIES):
            run = self.store.get_run(msg.run_id)
            if run is None:
                return self.refuse(message, UNKNOWN_RUN.lower(), f"no run {msg.run_id!r}")
            stored = self.store.get_task(run.task_id)
            if (
                run.state is RunState.REPLAYED
                and run.attempt == run.budget_start
                and msg.dispatch == run.dispatch
            ):
                result = self._claim_and_run(run, run, stored, ends_at)
            elif run.state is RunState.DEAD_LETTERED and msg.dispatch is None:
                if (
                    msg.dead_lettered_at
                    and run.dead_lettered_at
                    and iso(run.dead_lettered_at) != msg.dead_lettered_at
                ):
                    # A copy of an earlier dead letter: the run was replayed and dead-lettered again since.
                    log.info("stale replay message", extra={"run_id": run.run_id})
                    return "duplicate"
                result = self._replay_from_queue(run, stored, msg.actor, ends_at)
            else:
                log.info(
                    "replay skipped: run is not waiting for this replay",
                    extra={"run_id": run.run_id, "state": run.state.value, "dispatch": msg.dispatch},
                )
                return "duplicate"
            if result != "claim-lost":
                return result
        return "duplicate"

    def _replay_from_queue(self, run: Run, stored: StoredTask | None, actor: str, ends_at: datetime) -> str:
        """A replay that arrived without an operator's replay record (a DLQ message moved back by
        a console redrive): start a fresh budget, without overrides, under a new dispatch token,
        and run it. If the invocation dies before the claim, this message (it has no token) is
        stale when it comes back, and the sweeper sends the replay's carrier (overdue dispatch)."""
        now = self.clock.now()
        replayed = run.model_copy(
            update={
                "state": RunState.REPLAYED,
                "budget_start": run.attempt,
                "budget_started_at": now,
                "budget_overrides": None,
                "next_retry_at": now,
                "dispatch": run.dispatch + 1,
            }
        )
        uow = self.store.unit_of_work(actor, now)
        saved = uow.save_run(
            run,
            replayed,
            action="replayed",
            evidence={"fresh_budget_from_attempt": run.attempt + 1, "via": "queue"},
        )
        uow.emit(ev.execution_updated(saved, run.state, now), run_subject(run.run_id))
        try:
            uow.commit()
        except Conflict:
            return "claim-lost"
        self.deps.faults.reached(cp.AFTER_REPLAY_COMMIT)
        return self._claim_and_run(saved, saved, stored, ends_at)

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

    def _policy(self, stored: StoredTask | None) -> RetryPolicy:
        return self.deps.policies.for_stored(stored).policy

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

    def _wait(
        self,
        before: Run | None,
        run: Run,
        stored: StoredTask,
        busy: list[Slot],
        holder_ids: list[str],
        reason: str,
        buffer: Slot | None,
    ) -> str:
        """Wait for the slot without spending an attempt: one episode, one poll every ``WAIT_S``.

        The episode's first poll is audited and announced (``task.execution.waiting``); the rest
        only renew the dispatch token. Past the policy's ``max_wait`` the run is dead-lettered."""
        now = self.clock.now()
        policy = self._policy(stored)
        if run.waiting_since is not None and (now - run.waiting_since).total_seconds() > policy.max_wait:
            return self._wait_exhausted(before, run, policy, reason, holder_ids)
        join_buffer = buffer is not None and buffer.key not in run.slots
        update: dict[str, Any] = {
            "dispatch": run.dispatch + 1,
            "next_retry_at": now + timedelta(seconds=WAIT_S),
            "slots": [*run.slots, buffer.key] if buffer is not None and join_buffer else run.slots,
        }
        uow = self.store.unit_of_work("executor", now)
        if before is not None and run.waiting_since is not None and not join_buffer:
            saved = uow.touch_run(before, with_changes(run, {**update, "wait_polls": run.wait_polls + 1}))
        else:
            update.update(waits=run.waits + 1, waiting_since=now, wait_reason=reason, wait_polls=0)
            saved = uow.save_run(
                before,
                with_changes(run, update),
                action="waiting",
                evidence={
                    "reason": reason,
                    "slots": [s.key for s in busy],
                    "holders": holder_ids,
                    "poll_every_s": WAIT_S,
                    "max_wait_s": policy.max_wait,
                    "dispatch": update["dispatch"],
                },
                from_state=run.state,
            )
            uow.emit(
                ev.execution_waiting(
                    saved, reason=reason, slots=[s.key for s in busy], holders=holder_ids, retry_in_s=WAIT_S
                ),
                run_subject(run.run_id),
            )
        if buffer is not None and join_buffer:
            until = now + timedelta(seconds=policy.max_wait) + SLOT_GRACE
            enter(uow, buffer, run.run_id, until)
        try:
            uow.commit()
        except Conflict as exc:
            if buffer is not None and buffer.label in exc.details.get("failed", []):
                return self._skip(before, run, "overlap", holder_ids)  # someone is buffered already
            return "duplicate"
        self.deps.faults.reached(cp.AFTER_WAIT)
        self.dispatcher.send(saved)
        if saved.wait_polls == 0:
            log.warning(
                "run waiting for a slot",
                extra={"run_id": run.run_id, "task_id": run.task_id, "reason": reason, "holders": holder_ids},
            )
        return "waiting"

    def _wait_exhausted(
        self, before: Run | None, run: Run, policy: RetryPolicy, reason: str, holder_ids: list[str]
    ) -> str:
        assert before is not None and run.waiting_since is not None
        waited = _waited(run, self.clock.now())
        failed = run.model_copy(
            update={
                "last_error_code": WAIT_EXHAUSTED,
                "last_error_message": f"waited {waited:.0f}s for {reason.replace('_', ' ')} "
                f"(held by {', '.join(holder_ids) or 'nobody'}); the limit is {policy.max_wait:.0f}s",
                "last_error_retryable": False,
            }
        )
        saved = DeadLetters(self.deps, "executor").dead_letter(
            failed, Reason.WAIT_EXHAUSTED, policy, error_code=WAIT_EXHAUSTED, previous=before
        )
        return "wait-exhausted" if saved is not None else "duplicate"

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
                "delivery": _delivery(),
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

    def _cancel_running(self, run_id: str, reason: str) -> None:
        other = self.store.get_run(run_id)
        if other is None or other.state is not RunState.RUNNING:
            # Not running any more: it left, or is leaving, its slots in its own transaction.
            return
        now = self.clock.now()
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
        uow = self.store.unit_of_work("executor", now)
        saved = uow.save_run(other, cancelled, action="cancelled", evidence={"reason": reason})
        for key in other.slots:
            leave(uow, key, other.run_id)
        uow.emit(ev.execution_updated(saved, RunState.RUNNING, now), run_subject(other.run_id))
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
        if remaining_s - SAFETY_MARGIN_S < timeout_s:
            # Never cut an attempt's deadline to what this invocation has left: that would fail
            # it with a TIMEOUT it did not earn. Hand it to a fresh message instead.
            return self._release(before, run, stored, remaining_s)
        attempt_s = timeout_s
        slots = slots_for(task, self._tenant(task.tenant)) if task else []
        n = run.attempt + 1
        lease_end = now + timedelta(seconds=attempt_s + LEASE_GRACE_S)
        running = run.model_copy(
            update={
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
        breach = sla.start_delay_breach(task, running, now)
        if breach is not None:
            running = sla.with_breach(running, breach)
        ensure_transition(run.state, RunState.RUNNING, run.run_id)
        subject = run_subject(run.run_id)
        uow = self.store.unit_of_work("executor", now)
        evidence: dict[str, Any] = {
            "attempt": n,
            "created": before is None,
            "trigger": run.trigger.value,
            "lease_expires_at": iso(lease_end),
            "deadline_s": round(attempt_s, 3),
            "lease_owner": self.request_id,
            "slots": running.slots,
            "dispatch": run.dispatch,
            "delivery": _delivery(),
        }
        if run.waiting_since is not None:
            evidence["waited"] = {
                "reason": run.wait_reason,
                "since": iso(run.waiting_since),
                "polls": run.wait_polls,
                "waited_s": _waited(run, now),
            }
        # A new run is created pending and claimed in the same atomic write; one audit record
        # and one event describe both (``created: true``), as nothing could observe it pending.
        claimed = uow.save_run(
            before, running, action="attempt-started", evidence=evidence, from_state=run.state
        )
        uow.emit(ev.execution_updated(claimed, run.state, now), subject)
        for slot in slots:
            enter(uow, slot, run.run_id, lease_end + SLOT_GRACE)
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
        self.deps.faults.reached(cp.AFTER_TARGET)
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
        self.deps.faults.reached(cp.BEFORE_OUTCOME)
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
        subject = run_subject(claimed.run_id)
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


def _held_by_pause(stored: StoredTask, run: Run) -> bool:
    """Whether a paused task holds this run back: its retries and waits are held; a replay an
    operator asked for is not; a first start due before the pause began is not either."""
    if not stored.paused or run.state is RunState.REPLAYED:
        return False
    if run.state is RunState.PENDING and run.attempt == 0:
        return stored.paused_for(run.scheduled_for)
    return True


def _waited(run: Run, now: datetime) -> float:
    return round((now - run.waiting_since).total_seconds(), 3) if run.waiting_since else 0.0
