"""The sweeper runs every minute and repairs what the event-driven path could not.

- **Expired leases.** A ``running`` attempt whose lease has expired (its invocation crashed or
  ran out of time) is failed with ``TIMEOUT`` and goes down the retry path.
- **Stuck failures.** A ``failed`` run that no retry decision picked up (its event was lost, or
  the retry scheduler kept failing) is decided again.
- **Stale retry plans.** A ``retry_scheduled`` run whose time passed long ago is dispatched again;
  the executor's claim makes a duplicate harmless.
- **DLQ arrivals without a work order.** A message that SQS moved to the DLQ after
  ``maxReceiveCount`` receives (the crash path) is escalated exactly like an explicit dead letter,
  and stays in the DLQ.
- **The run ledger** (``rebound.engine.ledger``): fires without runs, DST fires Scheduler does not
  deliver, catch-up.
- **SLAs** that are breached while a run is still waiting to start, or still running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rebound.domain import events as ev
from rebound.domain.errors import Conflict, ValidationFailed
from rebound.domain.ids import event_run_id, scheduled_run_id
from rebound.domain.models import AttemptOutcome, Run, RunState, Task, Trigger
from rebound.domain.retry import Reason
from rebound.domain.states import ensure_transition
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine import sla
from rebound.engine import telemetry as m
from rebound.engine.concurrency import leave
from rebound.engine.deps import Deps
from rebound.engine.ledger import Ledger, LedgerReport
from rebound.engine.messages import (
    AttemptMessage,
    EventMessage,
    FireMessage,
    ManualMessage,
    ReplayMessage,
    parse_execution_message,
)
from rebound.engine.retries import DeadLetters, RetryScheduler

log = logging.getLogger(__name__)

TIMEOUT = "TIMEOUT"
RECEIVE_COUNT_EXCEEDED = "RECEIVE_COUNT_EXCEEDED"
STUCK_FAILED_AFTER = timedelta(minutes=2)
STALE_PLAN_AFTER = timedelta(minutes=5)
DLQ_SCAN_LIMIT = 300
DLQ_SEEN_TTL = timedelta(days=15)
DLQ_SCAN_STATE = "dlq#scan"
DLQ_FULL_SCAN_EVERY = timedelta(minutes=10)


@dataclass
class SweepReport:
    leases_expired: list[str] = field(default_factory=list)
    failures_redecided: list[str] = field(default_factory=list)
    plans_redispatched: list[str] = field(default_factory=list)
    dlq_escalated: list[str] = field(default_factory=list)
    dlq_scanned: int = 0
    sla_breaches: list[str] = field(default_factory=list)
    ledger: LedgerReport = field(default_factory=LedgerReport)

    def total(self) -> int:
        return (
            len(self.leases_expired)
            + len(self.failures_redecided)
            + len(self.plans_redispatched)
            + len(self.dlq_escalated)
            + len(self.sla_breaches)
            + len(self.ledger.missed)
            + len(self.ledger.delivered)
        )


class Sweeper:
    def __init__(self, deps: Deps, actor: str = "sweeper") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor
        self.retries = RetryScheduler(deps, actor)
        self.dead_letters = DeadLetters(deps, actor)

    def sweep(self, scan_dlq: bool = True, ledger: bool = True) -> SweepReport:
        report = SweepReport()
        running = self.store.runs_in_state(RunState.RUNNING)
        self.expire_leases(report, running)
        self.redecide_stuck_failures(report)
        self.redispatch_stale_plans(report)
        the_ledger = Ledger(self.deps)
        if any(t.task.sla is not None for t in the_ledger.active_tasks()):
            self.check_slas(report, running)
        if ledger:
            report.ledger = the_ledger.reconcile()
        if scan_dlq:
            self.escalate_dlq_arrivals(report)
        return report

    # --------------------------------------------------------------------------- leases
    def expire_leases(self, report: SweepReport, running: list[Run] | None = None) -> None:
        now = self.clock.now()
        for run in self.store.runs_in_state(RunState.RUNNING) if running is None else running:
            expired = run.lease_expires_at is not None and run.lease_expires_at < now
            if expired and self.fail_expired(run):
                report.leases_expired.append(run.run_id)

    @staticmethod
    def _lease_expired(run: Run, now: datetime) -> bool:
        return run.lease_expires_at is not None and run.lease_expires_at < now

    def fail_expired(self, run: Run) -> bool:
        """Fail a running attempt whose lease ran out, with ``TIMEOUT``; it is then retried."""
        now = self.clock.now()
        current = run.attempts[-1]
        finished = current.model_copy(
            update={
                "ended_at": now,
                "outcome": AttemptOutcome.TIMEOUT,
                "error_code": TIMEOUT,
                "error_message": "lease expired: the attempt's invocation crashed or ran out of time",
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
                "last_error_code": TIMEOUT,
                "last_error_message": finished.error_message,
                "last_error_retryable": True,
            }
        )
        ensure_transition(run.state, after.state, run.run_id)
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            run,
            after,
            action="lease-expired",
            evidence={
                "attempt": run.attempt,
                "outcome": AttemptOutcome.TIMEOUT.value,
                "lease_expires_at": iso(run.lease_expires_at or now),
                "lease_owner": run.lease_owner,
            },
        )
        subject = f"run#{run.run_id}"
        uow.emit(ev.execution_updated(saved, RunState.RUNNING, now), subject)
        uow.emit(ev.execution_failed(saved, retryable=True, at=now), subject)
        for key in run.slots:
            leave(uow, key, run.run_id)
        try:
            uow.commit()
        except Conflict:
            return False
        self.deps.metrics.count(m.LEASE_EXPIRED)
        log.warning(
            "lease expired", extra={"run_id": run.run_id, "attempt": run.attempt, "error_code": TIMEOUT}
        )
        return True

    # --------------------------------------------------------------------------- SLAs
    def check_slas(self, report: SweepReport, running: list[Run] | None = None) -> None:
        """Breaches that show before the run records its own outcome: still waiting, still running."""
        now = self.clock.now()
        tasks: dict[str, Task | None] = {}

        def task_of(task_id: str) -> Task | None:
            if task_id not in tasks:
                stored = self.store.get_task(task_id)
                tasks[task_id] = stored.task if stored else None
            return tasks[task_id]

        for run in self.store.runs_in_state(RunState.RUNNING) if running is None else running:
            if run.state is not RunState.RUNNING or self._lease_expired(run, now):
                continue
            task = task_of(run.task_id)
            if task is None or task.sla is None or task.sla.max_duration is None:
                continue
            started = run.attempts[-1].started_at
            breach = sla.duration_breach(task, run, (now - started).total_seconds())
            if breach is not None and self._record_breach(run, breach):
                report.sla_breaches.append(run.run_id)
        for run in self.store.runs_in_state(RunState.PENDING):
            task = task_of(run.task_id)
            if task is None or task.sla is None or "start_delay" in run.sla_breaches:
                continue
            breach = sla.start_delay_breach(task, run.model_copy(update={"attempt": 1}), now)
            if breach is not None and self._record_breach(run, breach):
                report.sla_breaches.append(run.run_id)

    def _record_breach(self, run: Run, breach: sla.Breach) -> bool:
        uow = self.store.unit_of_work(self.actor, self.clock.now())
        after = uow.save_run(
            run,
            sla.with_breach(run, breach),
            action="sla-breached",
            evidence={
                "kind": breach.kind,
                "observed_s": round(breach.observed_s, 3),
                "limit_s": breach.limit_s,
            },
        )
        sla.stage_breach(uow, run, after, breach, self.deps.metrics)
        try:
            uow.commit()
        except Conflict:
            return False
        return True

    # --------------------------------------------------------------------------- lost decisions
    def redecide_stuck_failures(self, report: SweepReport) -> None:
        cutoff = self.clock.now() - STUCK_FAILED_AFTER
        for run in self.store.runs_in_state(RunState.FAILED, updated_before=cutoff):
            result = self.retries.decide(run)
            if result != "stale":
                report.failures_redecided.append(run.run_id)

    def redispatch_stale_plans(self, report: SweepReport) -> None:
        cutoff = self.clock.now() - STALE_PLAN_AFTER
        for run in self.store.runs_in_state(RunState.RETRY_SCHEDULED):
            if run.next_retry_at is not None and run.next_retry_at < cutoff and run.held_at is None:
                self.retries.dispatch(run)
                report.plans_redispatched.append(run.run_id)
        # A replay whose message was lost (recorded, never sent or never claimed) is sent again;
        # the executor claims it once whatever the number of copies.
        for run in self.store.runs_in_state(RunState.REPLAYED, updated_before=cutoff):
            if run.attempt == run.budget_start:
                body = {"v": 1, "kind": "replay", "run_id": run.run_id, "actor": self.actor}
                self.deps.queues.send("execution", body)
                report.plans_redispatched.append(run.run_id)

    # --------------------------------------------------------------------------- the crash path
    def escalate_dlq_arrivals(self, report: SweepReport) -> None:
        """Escalate DLQ messages that SQS put there itself (no ``reason`` attribute).

        SQS cannot be peeked without receiving, so the DLQ is read only when it holds more
        messages than at the last look (a crash-path arrival adds one), and every ten minutes
        whatever its depth (an arrival can hide behind a redrive that removed others).
        """
        now = self.clock.now()
        depth = self.deps.queues.depth("dlq")
        last = self.store.get_key(DLQ_SCAN_STATE) or {}
        last_at = parse_utc(last["at"]) if last.get("at") else None
        due = last_at is None or now - last_at >= DLQ_FULL_SCAN_EVERY
        if depth == 0 or (depth <= int(last.get("depth", 0)) and not due):
            if depth != int(last.get("depth", -1)):
                self.store.put_key(DLQ_SCAN_STATE, {"depth": depth, "at": last.get("at")})
            return
        messages = self.deps.queues.peek("dlq", DLQ_SCAN_LIMIT, visibility_s=30)
        report.dlq_scanned = len(messages)
        for message in messages:
            if "reason" in message.attributes:
                continue  # Rebound put it there and escalated it on the way.
            if not self.store.claim_key(
                f"dlq-seen#{message.message_id}", now, DLQ_SEEN_TTL, {"receive_count": message.receive_count}
            ):
                continue
            try:
                escalated = self._escalate_arrival(message.message_id, message.body, message.receive_count)
            except Exception:
                self.store.release_key(f"dlq-seen#{message.message_id}")
                raise
            if escalated:
                report.dlq_escalated.append(message.message_id)
        self.store.put_key(DLQ_SCAN_STATE, {"depth": depth, "at": iso(now)})

    def _escalate_arrival(self, message_id: str, body: str, receive_count: int) -> bool:
        detail = f"SQS moved the message to the DLQ after {receive_count} receives"
        try:
            parsed = parse_execution_message(body)
        except ValidationFailed as exc:
            return self.dead_letters.dead_letter_message(
                message_id=message_id,
                body=body,
                receive_count=receive_count,
                reason=Reason.REDRIVE_EXHAUSTED,
                detail=f"{detail}; {exc.message}",
                send=False,
            )
        if isinstance(parsed, FireMessage):
            run_id = scheduled_run_id(parsed.task_id, parsed.scheduled_time)
            run = self.store.get_run(run_id) or self._create_poisoned(
                run_id, parsed.task_id, Trigger.SCHEDULE, parsed.scheduled_time
            )
        elif isinstance(parsed, EventMessage):
            run_id = event_run_id(parsed.task_id, parsed.event_id)
            run = self.store.get_run(run_id) or self._create_poisoned(
                run_id, parsed.task_id, Trigger.EVENT, parsed.time
            )
        elif isinstance(parsed, ManualMessage):
            run = self.store.get_run(parsed.run_id) or self._create_poisoned(
                parsed.run_id, parsed.task_id, Trigger.MANUAL, parsed.requested_at
            )
        else:
            assert isinstance(parsed, AttemptMessage | ReplayMessage)
            run = self.store.get_run(parsed.run_id)
        if run is None:
            return self.dead_letters.dead_letter_message(
                message_id=message_id,
                body=body,
                receive_count=receive_count,
                reason=Reason.REDRIVE_EXHAUSTED,
                detail=f"{detail}; it names no known run",
                send=False,
            )
        return self._dead_letter_run(run, message_id)

    def _create_poisoned(
        self, run_id: str, task_id: str, trigger: Trigger, scheduled_for: object
    ) -> Run | None:
        """The run a poison message would have created, recorded so it can be escalated and replayed."""
        now = self.clock.now()
        stored = self.store.get_task(task_id)
        run = Run.model_validate(
            {
                "run_id": run_id,
                "task_id": task_id,
                "tenant": stored.task.tenant if stored else "unknown",
                "trigger": trigger,
                "scheduled_for": scheduled_for,
                "created_at": now,
                "updated_at": now,
                "budget_started_at": now,
            }
        )
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            None, run, action="created", evidence={"trigger": trigger.value, "path": "redrive_policy"}
        )
        uow.emit(ev.execution_updated(saved, None, now), f"run#{run_id}")
        try:
            uow.commit()
        except Conflict:
            return self.store.get_run(run_id)
        return saved

    def _dead_letter_run(self, run: Run, message_id: str) -> bool:
        if run.state in (
            RunState.RUNNING,
            RunState.SUCCEEDED,
            RunState.DEAD_LETTERED,
            RunState.SKIPPED,
            RunState.CANCELLED,
        ):
            # Running: the lease check owns it. Finished or already dead-lettered: nothing more to do.
            return False
        now = self.clock.now()
        if run.state is RunState.PENDING:
            failed = run.model_copy(
                update={
                    "state": RunState.FAILED,
                    "last_error_code": RECEIVE_COUNT_EXCEEDED,
                    "last_error_message": "the execution message exceeded maxReceiveCount",
                    "last_error_retryable": False,
                }
            )
            uow = self.store.unit_of_work(self.actor, now)
            run = uow.save_run(
                run, failed, action="rejected", evidence={"error_code": RECEIVE_COUNT_EXCEEDED}
            )
            uow.emit(ev.execution_updated(run, RunState.PENDING, now), f"run#{run.run_id}")
            try:
                uow.commit()
            except Conflict:
                return False
        stored = self.store.get_task(run.task_id)
        policy = self.deps.policies.for_task(stored.task if stored else None)
        return (
            self.dead_letters.dead_letter(
                run,
                Reason.REDRIVE_EXHAUSTED,
                policy,
                send=False,
                message_id=message_id,
                error_code=run.last_error_code or RECEIVE_COUNT_EXCEEDED,
            )
            is not None
        )
