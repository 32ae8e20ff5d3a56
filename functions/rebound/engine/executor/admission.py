"""Admission: whether a run may start now, and what happens to it when it may not.

Owns what stands between a message and its claim:

- **Concurrency slots** (``rebound.engine.concurrency``): the tenant's settings (a quota) and
  their per-container cache; a claim that meets a busy slot first reaps expired holders (lazily,
  once), then applies the task's overlap policy (skip, cancel the other run, buffer one) or
  waits. A wait is one *episode* (audited once, ``task.execution.waiting``) made of polls
  ``WAIT_S`` apart, each a new dispatch token and one message; past the policy's ``max_wait`` the
  run is dead-lettered with ``WAIT_EXHAUSTED``.
- **Stagger**: a fire that arrives before its task's stagger offset is ``Deferred`` to the offset
  (the same message, so there is never a second copy).
- **Pause**: a retry (or a waiting run) of a paused task is held until the task resumes.

``Admission`` is the executor's base: it declares the state the executor shares, and the claim
(``rebound.engine.executor.attempt``) that a run admitted after all goes back to.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain.basics import WAIT_POLL_S
from rebound.domain.errors import Conflict, ReboundError
from rebound.domain.ids import run_subject
from rebound.domain.retry import Reason
from rebound.domain.retry_policy import RetryPolicy
from rebound.domain.run import AttemptOutcome, Run, RunState, Trigger, with_changes
from rebound.domain.states import ensure_transition
from rebound.domain.stored import StoredTask
from rebound.domain.task import TenantSettings
from rebound.domain.timefmt import iso
from rebound.engine import crashpoints as cp
from rebound.engine.concurrency import (
    SLOT_GRACE,
    Slot,
    enter,
    leave,
)
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher
from rebound.engine.escalation import count_resolution, stage_closing_resolution
from rebound.engine.ports import Clock, Store

log = logging.getLogger("rebound.engine.executor")
"""The executor's one logger, shared by its modules."""

WAIT_S = WAIT_POLL_S
TENANT_CACHE_S = 60.0
WAIT_EXHAUSTED = "WAIT_EXHAUSTED"
UNKNOWN_TASK = "UNKNOWN_TASK"


class Deferred(ReboundError):
    """Not yet: make this same message visible again in ``delay_s`` (a staggered fire)."""

    code = "DEFERRED"

    def __init__(self, message: str, delay_s: float, **details: Any) -> None:
        super().__init__(message, delay_s=delay_s, **details)
        self.delay_s = delay_s


def staggered(
    stored: StoredTask | None,
    run_id: str,
    task_id: str,
    trigger: Trigger,
    scheduled_for: datetime,
    catch_up: bool,
    now: datetime,
) -> datetime | None:
    """When a scheduled fire is due with its task's stagger offset (``None``: no offset applies).

    Raises ``Deferred`` while that is a second or more away."""
    if stored is None or trigger is not Trigger.SCHEDULE or stored.task.schedule is None:
        return None
    offset = stored.task.schedule.stagger_offset(task_id)
    if not offset or catch_up:
        return None
    due_at = scheduled_for + timedelta(seconds=offset)
    wait = (due_at - now).total_seconds()
    if wait >= 1:
        # Staggered: the same message comes back at the task's own offset into the minute.
        raise Deferred(f"{run_id} is staggered to {iso(due_at)}", wait, run_id=run_id)
    return due_at


def held_by_pause(stored: StoredTask, run: Run) -> bool:
    """Whether a paused task holds this run back: its retries and waits are held; a replay an
    operator asked for is not; a first start due before the pause began is not either."""
    if not stored.paused or run.state is RunState.REPLAYED:
        return False
    if run.state is RunState.PENDING and run.attempt == 0:
        return stored.paused_for(run.scheduled_for)
    return True


def waited(run: Run, now: datetime) -> float:
    """Seconds the run's current wait episode has lasted (0 if it is not waiting)."""
    return round((now - run.waiting_since).total_seconds(), 3) if run.waiting_since else 0.0


class Admission:
    """Slots, overlap, waiting, pause and skip, for the executor (see the module's docstring)."""

    deps: Deps
    store: Store
    clock: Clock
    request_id: str
    dispatcher: Dispatcher

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
        resolved = stage_closing_resolution(
            uow,
            self.store,
            run,
            RunState.SKIPPED,
            by="executor",
            reason=reason.replace("_", " "),
            via="executor skip",
        )
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        if resolved is not None:
            count_resolution(self.deps.metrics, resolved)
        return f"skipped-{reason.replace('_', '-')}"

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
            evidence={"reason": "task_paused", "waited_s": waited(run, now), "slots_left": run.slots},
        )
        for key in run.slots:
            leave(uow, key, run.run_id)  # a held run keeps no place in a buffer
        try:
            uow.commit()
        except Conflict:
            return "duplicate"
        return "held"

    def _wait(
        self,
        before: Run | None,
        run: Run,
        stored: StoredTask,
        busy: list[Slot],
        holder_ids: list[str],
        reason: str,
        buffer: Slot | None,
        detail: str | None = None,
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
                    **({"detail": detail} if detail else {}),
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
        waited_s = waited(run, self.clock.now())
        failed = run.model_copy(
            update={
                "last_error_code": WAIT_EXHAUSTED,
                "last_error_message": f"waited {waited_s:.0f}s for {reason.replace('_', ' ')} "
                f"(held by {', '.join(holder_ids) or 'nobody'}); the limit is {policy.max_wait:.0f}s",
                "last_error_retryable": False,
            }
        )
        saved = DeadLetters(self.deps, "executor").dead_letter(
            failed, Reason.WAIT_EXHAUSTED, policy, error_code=WAIT_EXHAUSTED, previous=before
        )
        return "wait-exhausted" if saved is not None else "duplicate"

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
        resolved = stage_closing_resolution(
            uow,
            self.store,
            other,
            RunState.CANCELLED,
            by="executor",
            reason=reason,
            via="overlap cancel_other",
        )
        try:
            uow.commit()
        except Conflict:
            return
        if resolved is not None:
            count_resolution(self.deps.metrics, resolved)
