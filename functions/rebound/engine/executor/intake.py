"""Intake: one message from the execution queue, parsed and routed.

Owns the queue message (``QueueMessage``) and the per-delivery context (the delivery being
processed, so the attempt's audit record names it), and the routing of each kind of message:

- a fire, an event or a manual start names a new run: it is created and claimed in one
  conditional transaction (or found to exist already: a duplicate delivery); a fire for a task
  nobody registered fails the run with ``UNKNOWN_TASK``;
- an attempt message starts the run's next attempt if it carries the run's current dispatch token;
- a message that finds its run running a clean attempt, which no index lists, fails the attempt
  if its lease has ended (the claim's own message, back because its worker died), else comes
  back when it ends (``_running``);
- a replay message starts an operator's replay, or a replay redriven from the DLQ;
- a message Rebound cannot run is refused: it goes to the DLQ with its reason, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain.audit import verified_actor
from rebound.domain.errors import Conflict, ReboundError, ValidationFailed
from rebound.domain.flags import TASK_SCHEDULER_V3
from rebound.domain.ids import run_subject
from rebound.domain.retry import Reason
from rebound.domain.run import Run, RunState, Trigger, unlisted_running
from rebound.domain.states import ensure_transition
from rebound.domain.stored import StoredTask
from rebound.domain.timefmt import iso
from rebound.engine import crashpoints as cp
from rebound.engine import leases
from rebound.engine import telemetry as m
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.dispatch import accepts
from rebound.engine.executor.admission import UNKNOWN_TASK, Deferred, held_by_pause, log, staggered
from rebound.engine.executor.attempt import LEASE_RETURN_S, Attempts
from rebound.engine.executor.delivery import _DELIVERY, QueueMessage
from rebound.engine.executor.task_cache import InvocationTasks
from rebound.engine.messages import (
    AttemptMessage,
    EventMessage,
    FireMessage,
    ManualMessage,
    ReplayMessage,
    parse_execution_message,
)

UNKNOWN_RUN = "UNKNOWN_RUN"
CLAIM_RETRIES = 3
QUEUE_REDRIVE_ACTOR = "console-redrive"
"""The audit actor of a replay that came back through the queue naming no actor (a DLQ message
moved back, by the SQS console's redrive for one): who moved it is in CloudTrail, not here."""


class Intake(Attempts):
    """The executor's entry: ``process`` a message, ``refuse`` one it cannot run."""

    tasks: InvocationTasks
    """The tasks of this invocation's new runs (``rebound.engine.executor.task_cache``)."""

    def prime(self, messages: Sequence[QueueMessage]) -> None:
        """Read the tasks epoch now if two or more of ``messages`` start new runs. The handler
        calls this before it processes a batch's messages in parallel threads, which would
        otherwise each read it at once; a failed read is left for the threads to make."""
        if len(messages) < 2:
            return  # one thread: it reads the epoch when it needs it, and a message is parsed once
        starts = 0
        for message in messages:
            try:
                parsed = parse_execution_message(message.body)
            except ValidationFailed:
                continue
            starts += isinstance(parsed, FireMessage | EventMessage | ManualMessage)
        if starts < 2:
            return
        try:
            self.tasks.prime()
        except ReboundError as exc:
            log.warning("could not read the tasks epoch ahead of the batch", extra={"error": exc.message})

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
        stored = self.tasks.get(task_id)
        if stored is None or stored.paused_for(scheduled_for):
            # Rare paths: check first whether this run exists already (a duplicate delivery).
            existing = self.store.get_run(run_id)
            if existing is not None and unlisted_running(existing):
                return self._running(existing)  # paused since its claim: its attempt still ends
            if existing is not None:
                log.info(
                    "duplicate delivery: run exists", extra={"run_id": run_id, "state": existing.state.value}
                )
                return "duplicate"
        now = self.clock.now()
        spec = stored.task.schedule if stored is not None else None
        # task-scheduler-v3 off: every fire starts at its scheduled instant, unstaggered
        staggering = spec is not None and bool(spec.stagger) and self.deps.flags.enabled(TASK_SCHEDULER_V3)
        due_at = (
            staggered(stored, run_id, task_id, trigger, scheduled_for, catch_up, now) if staggering else None
        )
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
        if existing is not None and unlisted_running(existing):
            return self._running(existing)
        log.info("duplicate delivery: run exists", extra={"run_id": run_id})
        return "duplicate"

    def _running(self, run: Run) -> str:
        """A message that finds its run running a clean attempt (``unlisted_running``): the
        claim's own message, back after its invocation's end because its worker died, or a copy.

        Past the lease, the attempt is failed with ``TIMEOUT`` and retried
        (``rebound.engine.leases``): no index lists the run, so this message is what finds it.
        Before, the message comes back when the lease ends, in case the worker dies yet."""
        now = self.clock.now()
        if not leases.expired(run, now):
            left = ((run.lease_expires_at or now) - now).total_seconds()
            raise Deferred(
                f"run {run.run_id} is running; its lease ends in {left:.0f}s", left + LEASE_RETURN_S
            )
        return "lease-expired" if leases.expire(self.deps, "executor", run) is not None else "duplicate"

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

    # --------------------------------------------------------------------------- retries and replays
    def _attempt(self, msg: AttemptMessage, message: QueueMessage, ends_at: datetime) -> str:
        for _ in range(CLAIM_RETRIES):
            run = self.store.get_run(msg.run_id)
            if run is None:
                return self.refuse(message, UNKNOWN_RUN.lower(), f"no run {msg.run_id!r}")
            if unlisted_running(run):
                return self._running(run)
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
            if stored is not None and held_by_pause(stored, run):
                return self._hold(run)
            result = self._claim_and_run(run, run, stored, ends_at)
            if result != "claim-lost":
                return result
        return "duplicate"

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
                result = self._replay_from_queue(run, stored, msg, ends_at)
            elif unlisted_running(run):
                return self._running(run)
            else:
                log.info(
                    "replay skipped: run is not waiting for this replay",
                    extra={"run_id": run.run_id, "state": run.state.value, "dispatch": msg.dispatch},
                )
                return "duplicate"
            if result != "claim-lost":
                return result
        return "duplicate"

    def _replay_from_queue(
        self, run: Run, stored: StoredTask | None, msg: ReplayMessage, ends_at: datetime
    ) -> str:
        """A replay that arrived without an operator's replay record (a DLQ message moved back by
        a console redrive): start a fresh budget, without overrides, under a new dispatch token,
        and run it. If the invocation dies before the claim, this message (it has no token) is
        stale when it comes back, and the sweeper sends the replay's carrier (overdue dispatch).

        The message cannot name its actor: one it names is believed only with the ops layer's
        signature (``rebound.domain.audit.verified_actor``), else recorded as ``unverified`` with
        the name it claimed; a message that names none (the DLQ copy itself, moved back) is the
        fixed system actor ``console-redrive``."""
        keys = self.store.audit_keys
        actor, claimed = verified_actor(
            run.run_id, msg.actor, msg.actor_sig, keys.key_id, keys.check, default=QUEUE_REDRIVE_ACTOR
        )
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
            evidence={
                "fresh_budget_from_attempt": run.attempt + 1,
                "via": "queue",
                **({"claimed_actor": claimed} if claimed is not None else {}),
            },
        )
        uow.emit(ev.execution_updated(saved, run.state, now), run_subject(run.run_id))
        try:
            uow.commit()
        except Conflict:
            return "claim-lost"
        self.deps.faults.reached(cp.AFTER_REPLAY_COMMIT)
        return self._claim_and_run(saved, saved, stored, ends_at)
