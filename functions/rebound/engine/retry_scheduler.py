"""After a failed attempt: schedule the next one, or dead-letter the run.

The decision is recorded first (state, audit record, ``task.retry.scheduled`` event and a new
dispatch token in one transaction), then dispatched (``rebound.engine.dispatch``). A crash
between the two leaves the run ``retry_scheduled`` waiting for a carrier that was never sent; the
sweeper's overdue-dispatch check sends it. Dispatch is single-flight: only a message with the
run's current token can start the attempt, and a one-time schedule's name derives from (run,
attempt, token). A run the policy does not retry is dead-lettered (``rebound.engine.dead_letters``).
A failure whose target is unhealthy is held instead of retried (``rebound.engine.target_budgets``).

Every invocation of the retry scheduler function first records a heartbeat (one put of a fixed
control record): ``rebound health`` compares it with the work waiting for the
worker, so a worker that stopped being invoked is seen even when the sweeper covers for it.
"""

from __future__ import annotations

import logging

from rebound.domain import events as ev
from rebound.domain.errors import Conflict, ReboundError
from rebound.domain.flags import TASK_RETRY_QUEUE
from rebound.domain.ids import retry_dispatch_reference, run_subject
from rebound.domain.retry import Reason, decide_retry, is_terminal
from rebound.domain.run import Run, RunState
from rebound.domain.states import ensure_transition
from rebound.domain.timefmt import iso
from rebound.engine import crashpoints as cp
from rebound.engine import telemetry as m
from rebound.engine.dead_letters import DeadLetters, last_outcome
from rebound.engine.deps import Deps
from rebound.engine.dispatch import MAX_QUEUE_DELAY_S, Dispatcher
from rebound.engine.target_budgets import TargetBudgets

log = logging.getLogger(__name__)

UNKNOWN_POLICY = "UNKNOWN_POLICY"
HEARTBEAT_KEY = "heartbeat#retry_scheduler"
"""Idempotency-table key whose ``at`` is when the retry scheduler function was last invoked."""


def via_for(delay_s: float) -> str:
    return "delay_queue" if delay_s <= MAX_QUEUE_DELAY_S else "scheduler"


class RetryScheduler:
    def __init__(self, deps: Deps, actor: str = "retry-scheduler") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor

    def heartbeat(self) -> None:
        """Record that the retry worker is alive (``HEARTBEAT_KEY``). Never fails the invocation."""
        try:
            self.store.put_key(HEARTBEAT_KEY, {"at": iso(self.clock.now())})
        except ReboundError as exc:
            log.warning("could not record the retry worker's heartbeat: %s", exc.message)

    def on_failed(self, run_id: str, attempt: int) -> str:
        """Handle ``task.execution.failed`` for (run, attempt). Safe to call any number of times.

        Only a ``failed`` run is decided. A run already ``retry_scheduled`` has its carrier on the
        way, or, if a crash lost it, the sweeper sends it: sending it again from here, on every
        redelivery of the event, is what made waiting retries multiply."""
        run = self.store.get_run(run_id)
        if run is None:
            log.error("failed event for an unknown run", extra={"run_id": run_id})
            return "unknown-run"
        if run.attempt != attempt or run.state is not RunState.FAILED:
            return "stale"
        return self.decide(run)

    def decide(self, run: Run) -> str:
        found = self.deps.policies.of_task(run.task_id)
        policy, problem = found.policy, found.problem
        if problem is not None:
            # The run names a policy this deployment does not have: no guess at a retry; a dead
            # letter that says why, with a work order, so an operator fixes the task.
            log.error("unknown retry policy", extra={"run_id": run.run_id, "task_id": run.task_id})
            unknown = run.model_copy(
                update={"last_error_code": UNKNOWN_POLICY, "last_error_message": problem}
            )
            saved = DeadLetters(self.deps, self.actor).dead_letter(
                unknown, Reason.UNKNOWN_POLICY, policy, error_code=UNKNOWN_POLICY, previous=run
            )
            return "dead-lettered" if saved is not None else "stale"
        if run.budget_overrides is not None and run.budget_overrides.max_attempts is not None:
            policy = policy.model_copy(update={"max_attempts": run.budget_overrides.max_attempts})
        now = self.clock.now()
        retryable = bool(run.last_error_retryable) if run.last_error_retryable is not None else True
        if is_terminal(policy, run.last_error_code, retryable) is None:
            # A failure a retry would follow: its target's budget may hold the run instead.
            held = TargetBudgets(self.deps, self.actor).on_failure(run, found.stored, policy)
            if held is not None:
                return held
        decision = decide_retry(
            run,
            policy,
            error_code=run.last_error_code,
            retryable=retryable,
            now=now,
            rng=self.deps.rng(run.run_id, run.attempt),
        )
        if not decision.retry:
            saved = DeadLetters(self.deps, self.actor).dead_letter(run, decision.reason, policy)
            return "dead-lettered" if saved is not None else "stale"
        if not self.deps.flags.enabled(TASK_RETRY_QUEUE):
            # Retries are switched off in this environment (a rollback): the run goes where a
            # spent budget sends it, the DLQ and a work order, and can be replayed from there.
            log.warning("retries off: dead-lettered", extra={"run_id": run.run_id, "flag": TASK_RETRY_QUEUE})
            saved = DeadLetters(self.deps, self.actor).dead_letter(run, Reason.RETRIES_OFF, policy)
            return "dead-lettered" if saved is not None else "stale"
        assert decision.next_retry_at is not None
        token = run.dispatch + 1
        reference = retry_dispatch_reference(run.run_id, run.attempt + 1, token)
        via = via_for(decision.delay_s)
        planned = run.model_copy(
            update={
                "state": RunState.RETRY_SCHEDULED,
                "next_retry_at": decision.next_retry_at,
                "dispatch": token,
                "dispatch_reference": reference,
                "policy_ref": f"{policy.name}@v{policy.version}",
            }
        )
        ensure_transition(run.state, planned.state, run.run_id)
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            run,
            planned,
            action="retry-scheduled",
            evidence={
                "attempt": run.attempt + 1,
                "next_retry_at": iso(decision.next_retry_at),
                "outcome": last_outcome(run),
                "dispatch_reference": reference,
                "dispatch": token,
                "delay_s": round(decision.delay_s, 3),
                "via": via,
                "policy": f"{policy.name}@v{policy.version}",
                "error_code": run.last_error_code,
            },
        )
        subject = run_subject(run.run_id)
        uow.emit(ev.execution_updated(saved, run.state, now), subject)
        uow.emit(ev.retry_scheduled(saved, delay_s=decision.delay_s, via=via), subject)
        try:
            uow.commit()
        except Conflict:
            return "stale"
        self.deps.metrics.count(m.RETRY_SCHEDULED)
        self.deps.faults.reached(cp.AFTER_RETRY_COMMIT)
        self.dispatch(saved)
        return "retry-scheduled"

    def dispatch(self, run: Run) -> str:
        """Send the carrier of the planned attempt: the delay queue, or a one-time schedule."""
        return Dispatcher(self.deps, self.actor).send(run)
