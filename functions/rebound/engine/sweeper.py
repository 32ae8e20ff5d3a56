"""The sweeper runs every minute and repairs what the event-driven path could not.

- **The queue's evidence.** It looks at the execution queue's counts first; a quiet queue
  (nothing visible, nothing in flight) is what tells a lost message from a late one
  (``rebound.engine.dispatch.Evidence``).
- **Expired leases.** A ``running`` attempt whose lease has expired (its invocation crashed or
  ran out of time) is failed with ``TIMEOUT`` and goes down the retry path; its slots are left.
- **Stuck failures.** A ``failed`` run that no retry decision picked up (its event was lost, or
  the retry scheduler kept failing) is decided again.
- **Overdue dispatches.** A run waiting for its carrier (a retry, a wait's poll, a release, a
  stagger, a catch-up, a replay) whose carrier is overdue *and* provably not in the queue gets a
  new dispatch token and a new carrier. A carrier that is only late (a backed-up queue) is left
  alone, so a backlog never makes messages multiply.
- **The run ledger** (``rebound.engine.ledger``): fires without runs, DST fires Scheduler does
  not deliver, catch-up.
- **SLAs** that are breached while a run is still waiting to start, or still running.
- **DLQ arrivals.** A message that SQS moved to the DLQ after ``maxReceiveCount`` receives (the
  crash path) is escalated exactly like an explicit dead letter, and stays in the DLQ. A second
  DLQ copy of a dead letter (a sender that died before recording the first) is removed.
- **The control DLQ.** Stream batches the outbox relay gave up on are read again from the
  stream and published; events the retry scheduler or escalation gave up on are handled again.

Every step, and every item within a step, is isolated: one that fails is counted
(``task.sweeper.failure_total``, alarmed), logged with its run id, and the rest go on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from rebound.domain import events as ev
from rebound.domain.errors import Conflict, ReboundError, ValidationFailed
from rebound.domain.events import EventType
from rebound.domain.ids import message_subject, run_subject
from rebound.domain.models import AttemptOutcome, Run, RunState, Task, Trigger
from rebound.domain.retry import Reason
from rebound.domain.states import ensure_transition
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine import crashpoints as cp
from rebound.engine import sla
from rebound.engine import telemetry as m
from rebound.engine.concurrency import leave
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.deps import Deps
from rebound.engine.dispatch import OVERDUE_AFTER, WAITING_STATES, Dispatcher, Evidence, observe_queue
from rebound.engine.ledger import Ledger, LedgerReport
from rebound.engine.messages import (
    AttemptMessage,
    EventMessage,
    FireMessage,
    ManualMessage,
    ReplayMessage,
    parse_execution_message,
)
from rebound.engine.outbox import relay
from rebound.engine.ports import StreamRange
from rebound.engine.retry_scheduler import RetryScheduler

log = logging.getLogger(__name__)

T = TypeVar("T")
TIMEOUT = "TIMEOUT"
RECEIVE_COUNT_EXCEEDED = "RECEIVE_COUNT_EXCEEDED"
STUCK_FAILED_AFTER = timedelta(minutes=2)
DLQ_SCAN_LIMIT = 2000
"""Messages one DLQ check reads (each hidden 30 s). Enough to see every arrival and every second
copy in a DLQ of that size; a larger one is read in full over the ten-minute checks."""
CONTROL_SCAN_LIMIT = 50
DLQ_SEEN_TTL = timedelta(days=15)
DLQ_SCAN_STATE = "dlq#scan"
DLQ_FULL_SCAN_EVERY = timedelta(minutes=10)


@dataclass
class SweepReport:
    leases_expired: list[str] = field(default_factory=list)
    failures_redecided: list[str] = field(default_factory=list)
    plans_redispatched: list[str] = field(default_factory=list)
    dlq_escalated: list[str] = field(default_factory=list)
    dlq_duplicates_removed: list[str] = field(default_factory=list)
    dlq_scanned: int = 0
    events_republished: int = 0
    control_handled: list[str] = field(default_factory=list)
    sla_breaches: list[str] = field(default_factory=list)
    queue_quiet_at: str | None = None
    failures: list[dict[str, str]] = field(default_factory=list)
    ledger: LedgerReport = field(default_factory=LedgerReport)

    def total(self) -> int:
        return (
            len(self.leases_expired)
            + len(self.failures_redecided)
            + len(self.plans_redispatched)
            + len(self.dlq_escalated)
            + len(self.dlq_duplicates_removed)
            + self.events_republished
            + len(self.control_handled)
            + len(self.sla_breaches)
            + len(self.failures)
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
        self.dispatcher = Dispatcher(deps, actor)

    def sweep(self, scan_dlq: bool = True, ledger: bool = True) -> SweepReport:
        report = SweepReport()
        evidence = self._step(report, "queue", lambda: observe_queue(self.deps)) or Evidence(None)
        report.queue_quiet_at = iso(evidence.quiet_at) if evidence.quiet_at else None
        running = self._step(report, "running", lambda: self.store.runs_in_state(RunState.RUNNING)) or []
        self._step(report, "leases", lambda: self.expire_leases(report, running))
        self._step(report, "failures", lambda: self.redecide_stuck_failures(report))
        self._step(report, "dispatches", lambda: self.redispatch_overdue(report, evidence))
        the_ledger = Ledger(
            self.deps, on_failure=lambda task_id, exc: self._failed(report, "ledger", task_id, exc)
        )
        tasks = self._step(report, "tasks", the_ledger.active_tasks) or []
        if any(t.task.sla is not None for t in tasks):
            self._step(report, "slas", lambda: self.check_slas(report, running))
        if ledger:
            report.ledger = (
                self._step(report, "ledger", lambda: the_ledger.reconcile(evidence)) or LedgerReport()
            )
        if scan_dlq:
            self._step(report, "dlq", lambda: self.escalate_dlq_arrivals(report))
            self._step(report, "control_dlq", lambda: self.work_control_dlq(report))
        return report

    # --------------------------------------------------------------------------- isolation
    def _step(self, report: SweepReport, name: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as exc:
            self._failed(report, name, None, exc)
            return None

    def _each(
        self,
        report: SweepReport,
        step: str,
        items: Iterable[T],
        key: Callable[[T], str],
        fn: Callable[[T], None],
    ) -> None:
        for item in items:
            try:
                fn(item)
            except Exception as exc:
                self._failed(report, step, key(item), exc)

    def _failed(self, report: SweepReport, step: str, subject: str | None, exc: Exception) -> None:
        detail = exc.message if isinstance(exc, ReboundError) else f"{type(exc).__name__}: {exc}"
        report.failures.append({"step": step, "subject": subject or "", "error": detail})
        self.deps.metrics.count(m.SWEEPER_FAILURE)
        log.error(
            "sweeper step failed; the other steps go on",
            extra={"step": step, "run_id": subject, "error": detail},
            exc_info=not isinstance(exc, ReboundError),
        )

    # --------------------------------------------------------------------------- leases
    def expire_leases(self, report: SweepReport, running: list[Run] | None = None) -> None:
        now = self.clock.now()
        runs = self.store.runs_in_state(RunState.RUNNING) if running is None else running
        expired = [r for r in runs if r.lease_expires_at is not None and r.lease_expires_at < now]

        def one(run: Run) -> None:
            if self.fail_expired(run):
                report.leases_expired.append(run.run_id)

        self._each(report, "leases", expired, lambda r: r.run_id, one)

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
        subject = run_subject(run.run_id)
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

        def running_one(run: Run) -> None:
            if run.state is not RunState.RUNNING or self._lease_expired(run, now):
                return
            task = task_of(run.task_id)
            if task is None or task.sla is None or task.sla.max_duration is None:
                return
            started = run.attempts[-1].started_at
            breach = sla.duration_breach(task, run, (now - started).total_seconds())
            if breach is not None and self._record_breach(run, breach):
                report.sla_breaches.append(run.run_id)

        def pending_one(run: Run) -> None:
            task = task_of(run.task_id)
            if task is None or task.sla is None or "start_delay" in run.sla_breaches:
                return
            breach = sla.start_delay_breach(task, run.model_copy(update={"attempt": 1}), now)
            if breach is not None and self._record_breach(run, breach):
                report.sla_breaches.append(run.run_id)

        runs = self.store.runs_in_state(RunState.RUNNING) if running is None else running
        self._each(report, "slas", runs, lambda r: r.run_id, running_one)
        self._each(
            report, "slas", self.store.runs_in_state(RunState.PENDING), lambda r: r.run_id, pending_one
        )

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

        def one(run: Run) -> None:
            if self.retries.decide(run) != "stale":
                report.failures_redecided.append(run.run_id)

        runs = self.store.runs_in_state(RunState.FAILED, updated_before=cutoff)
        self._each(report, "failures", runs, lambda r: r.run_id, one)

    def redispatch_overdue(self, report: SweepReport, evidence: Evidence) -> None:
        """Runs whose carrier is overdue and provably not in the queue get a new one."""
        now = self.clock.now()
        cutoff = now - OVERDUE_AFTER

        paused: dict[str, bool] = {}

        def task_paused(task_id: str) -> bool:
            if task_id not in paused:
                stored = self.store.get_task(task_id)
                paused[task_id] = stored is not None and stored.paused
            return paused[task_id]

        def one(run: Run) -> None:
            if run.state not in WAITING_STATES:
                return
            if run.held_at is not None:
                # Held while its task was paused; a resume that did not see it (an index that
                # lagged) leaves it here: once the task is active again, send it.
                if not task_paused(run.task_id) and Ledger(self.deps, self.actor).unhold(run) is not None:
                    report.plans_redispatched.append(run.run_id)
                return
            if run.state is RunState.REPLAYED and run.attempt != run.budget_start:
                return
            due = run.next_retry_at or run.updated_at
            if due > cutoff or not evidence.carrier_gone(due, now):
                return  # not overdue, or perhaps only late: its carrier may still arrive
            renewed = self.dispatcher.renew(
                run,
                due=now,
                action="redispatched",
                evidence={
                    "overdue_s": round((now - due).total_seconds(), 3),
                    "previous_dispatch": run.dispatch,
                    "queue_quiet_at": iso(evidence.quiet_at) if evidence.quiet_at else None,
                },
                crash_point=cp.AFTER_REDISPATCH_COMMIT,
            )
            if renewed is not None:
                report.plans_redispatched.append(run.run_id)
                log.warning(
                    "overdue dispatch sent again", extra={"run_id": run.run_id, "dispatch": renewed.dispatch}
                )

        for state in (RunState.PENDING, RunState.RETRY_SCHEDULED, RunState.REPLAYED):
            runs = self.store.runs_in_state(state, updated_before=cutoff)
            self._each(report, "dispatches", runs, lambda r: r.run_id, one)

    # --------------------------------------------------------------------------- the DLQ
    def escalate_dlq_arrivals(self, report: SweepReport) -> None:
        """Escalate DLQ messages that SQS put there itself (no ``reason`` attribute), and remove
        second copies of a dead letter's message.

        SQS cannot be peeked without receiving, so the DLQ is read only when it holds more
        messages than at the last look (an arrival adds one), and every ten minutes whatever its
        depth (an arrival can hide behind a redrive that removed others).
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
        runs: dict[str, Run | None] = {}

        def one(message: Any) -> None:
            if "reason" in message.attributes:
                # Rebound put it there and escalated it on the way; keep exactly one copy.
                if self._duplicate(message, runs):
                    self.deps.queues.delete("dlq", message.receipt_handle)
                    report.dlq_duplicates_removed.append(message.message_id)
                return
            seen = f"dlq-seen#{message.message_id}"
            if self.store.get_key(seen) is not None:
                return
            escalated = self._escalate_arrival(message.message_id, message.body, message.receive_count)
            self.deps.faults.reached(cp.AFTER_ARRIVAL_ESCALATED)
            self.store.claim_key(seen, now, DLQ_SEEN_TTL, {"receive_count": message.receive_count})
            if escalated:
                report.dlq_escalated.append(message.message_id)

        self._each(report, "dlq", messages, lambda msg: msg.message_id, one)
        self.store.put_key(DLQ_SCAN_STATE, {"depth": depth, "at": iso(now)})

    def _duplicate(self, message: Any, runs: dict[str, Run | None]) -> bool:
        """Whether a Rebound-sent DLQ message is a second copy of a dead letter that has one.

        A dead letter's copy is the one its run (or its message's audit chain) names. A run that
        names none adopts this one."""
        attrs = message.attributes
        run_id = attrs.get("run_id")
        if run_id:
            if run_id not in runs:
                runs[run_id] = self.store.get_run(run_id)
            run = runs[run_id]
            if run is None or run.state is not RunState.DEAD_LETTERED or run.dead_lettered_at is None:
                return False
            if attrs.get("dead_lettered_at") != iso(run.dead_lettered_at):
                return False
            if run.dlq_message_id is None:
                runs[run_id] = self.dead_letters.record_dlq_message(run, message.message_id)
                return False
            return bool(run.dlq_message_id != message.message_id)
        source = attrs.get("source_message_id")
        if source:
            trail = self.store.audit_trail(message_subject(source))
            kept = next(
                (r.evidence.get("dlq_message_id") for r in trail if r.action == "dead-lettered"), None
            )
            return kept is not None and kept != message.message_id
        return False

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
            run = self.store.get_run(parsed.run_id) or self._create_poisoned(
                parsed.run_id, parsed.task_id, Trigger.SCHEDULE, parsed.scheduled_time
            )
        elif isinstance(parsed, EventMessage):
            run = self.store.get_run(parsed.run_id) or self._create_poisoned(
                parsed.run_id, parsed.task_id, Trigger.EVENT, parsed.time
            )
        elif isinstance(parsed, ManualMessage):
            run = self.store.get_run(parsed.run_id) or self._create_poisoned(
                parsed.run_id, parsed.task_id, Trigger.MANUAL, parsed.requested_at
            )
        else:
            assert isinstance(parsed, AttemptMessage | ReplayMessage)
            run = self.store.get_run(parsed.run_id)
            token = parsed.dispatch
            if run is not None and token is not None and token != run.dispatch:
                return False  # a stale copy: the run has another carrier (or moved on)
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
        uow.emit(ev.execution_updated(saved, None, now), run_subject(run_id))
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
        policy = self.deps.policies.of_task(run.task_id).policy
        failed = run.model_copy(
            update={
                "last_error_code": run.last_error_code or RECEIVE_COUNT_EXCEEDED,
                "last_error_message": run.last_error_message
                or "the execution message exceeded maxReceiveCount",
            }
        )
        return (
            self.dead_letters.dead_letter(
                failed,
                Reason.REDRIVE_EXHAUSTED,
                policy,
                send=False,
                message_id=message_id,
                error_code=failed.last_error_code,
                previous=run,
            )
            is not None
        )

    # --------------------------------------------------------------------------- the control DLQ
    def work_control_dlq(self, report: SweepReport) -> None:
        """Stream batches the relay gave up on are published again from the stream; events the
        retry scheduler or escalation gave up on are handled again. What is handled is removed;
        what fails again stays for the next sweep (and the control DLQ alarm)."""
        from rebound.engine.escalation import Escalation

        if self.deps.queues.depth("control_dlq") == 0:
            return
        for message in self.deps.queues.peek("control_dlq", CONTROL_SCAN_LIMIT, visibility_s=60):
            try:
                body = json.loads(message.body)
                span = StreamRange.from_failure_record(body) if isinstance(body, dict) else None
                if span is not None:
                    if self.deps.streams is None:
                        continue
                    events = self.deps.streams.read_events(span)
                    if relay(events, self.deps.bus):
                        raise ReboundError(
                            f"the bus refused events of stream batch {span.first}..{span.last}"
                        )
                    report.events_republished += len(events)
                    self.deps.faults.reached(cp.AFTER_REPUBLISH)
                elif isinstance(body, dict) and body.get("detail-type") == EventType.EXECUTION_FAILED:
                    detail = body["detail"]
                    self.retries.on_failed(str(detail["run_id"]), int(detail["attempt"]))
                elif isinstance(body, dict) and body.get("detail-type") in (
                    EventType.DEAD_LETTERED,
                    EventType.SLA_BREACHED,
                ):
                    escalation = Escalation(self.deps, self.actor)
                    if body["detail-type"] == EventType.DEAD_LETTERED:
                        escalation.on_dead_lettered(body["detail"])
                    else:
                        escalation.on_sla_breached(body["detail"])
                else:
                    continue  # not ours to judge: an operator looks at it
                self.deps.queues.delete("control_dlq", message.receipt_handle)
                report.control_handled.append(message.message_id)
            except Exception as exc:
                self._failed(report, "control_dlq", message.message_id, exc)
