"""The sweeper runs every minute and repairs what the event-driven path could not.

- **The queue's evidence.** It looks at the execution queue's counts first; a quiet queue
  (nothing visible, nothing in flight) is what tells a lost message from a late one
  (``rebound.engine.dispatch.Evidence``).
- **Expired leases.** A ``running`` attempt the ``by_state`` index lists whose lease has expired
  (its invocation crashed or ran out of time) is failed with ``TIMEOUT`` and goes down the retry
  path; its slots are left. A run running a clean attempt is not listed: its own message comes
  back when its lease ends (``rebound.engine.leases``).
- **Stuck failures.** A ``failed`` run that no retry decision picked up (its event was lost, or
  the retry scheduler kept failing) is decided again.
- **Held runs of unhealthy targets** (``rebound.engine.target_budgets``): probed, released at
  the target's pace once it recovered, dead-lettered past ``max_hold``; the target's work order
  resolved once nothing is held.
- **Overdue dispatches.** A run waiting for its carrier (a retry, a wait's poll, a release, a
  stagger, a catch-up, a replay) whose carrier is overdue *and* provably not in the queue gets a
  new dispatch token and a new carrier. A carrier that is only late (a backed-up queue) is left
  alone, so a backlog never makes messages multiply.
- **The run ledger** (``rebound.engine.ledger``): fires without runs, DST fires Scheduler does
  not deliver, catch-up.
- **SLAs** that are breached while a run is still waiting to start, or still running.
- **DLQ arrivals** (``rebound.engine.dlq_arrivals``). A message that SQS moved to the DLQ after
  ``maxReceiveCount`` receives (the crash path) is escalated exactly like an explicit dead
  letter, and stays in the DLQ. A second DLQ copy of a dead letter (a sender that died before
  recording the first) is removed. A message found without a record in the DLQ's record is
  recorded.
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

from rebound.domain.errors import Conflict, ReboundError
from rebound.domain.events import EventType
from rebound.domain.flags import TASK_SLA_MONITOR
from rebound.domain.run import Run, RunState
from rebound.domain.schedules import WORKSTREAM_START
from rebound.domain.task import Task
from rebound.domain.timefmt import iso
from rebound.engine import crashpoints as cp
from rebound.engine import leases, recovery, sla
from rebound.engine import telemetry as m
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.deps import Deps
from rebound.engine.dispatch import OVERDUE_AFTER, WAITING_STATES, Dispatcher, Evidence, observe_queue
from rebound.engine.dlq_arrivals import DlqArrivals
from rebound.engine.ledger import Ledger, LedgerReport
from rebound.engine.levels import raise_levels
from rebound.engine.outbox import relay
from rebound.engine.ports import StreamRange
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.engine.target_budgets import TargetBudgets, TargetSweep, held_by_target
from rebound.engine.workstreams import Workstreams

log = logging.getLogger(__name__)

T = TypeVar("T")
TIMEOUT = leases.TIMEOUT
STUCK_FAILED_AFTER = timedelta(minutes=2)
CONTROL_SCAN_LIMIT = 50
PERIODIC_S = 300
"""The sweeper's periodic steps (manual recovery completion) run once in each such period."""
WORKSTREAM_EVENTS = (
    WORKSTREAM_START,
    EventType.WORKSTREAM_STEP_ENDED,
    EventType.WORKSTREAM_FAILED,
    EventType.DEPENDENCY_CYCLE_DETECTED,
    EventType.RESOURCE_EXHAUSTED,
)
"""Workstream events the control DLQ pass handles again (``work_control_dlq``)."""
REPORT_PREFIX = "rebound.task."
"""The detail types of an asynchronous attempt's reports (``rebound.engine.async_reports``)."""
ReportAnswerer = Callable[[str, Any], bool]
"""Answers one report event (its detail type and detail); False when it is no report at all."""


@dataclass
class SweepReport:
    leases_expired: list[str] = field(default_factory=list)
    failures_redecided: list[str] = field(default_factory=list)
    plans_redispatched: list[str] = field(default_factory=list)
    dlq_escalated: list[str] = field(default_factory=list)
    dlq_duplicates_removed: list[str] = field(default_factory=list)
    dlq_superseded_removed: list[str] = field(default_factory=list)
    dlq_recorded: list[str] = field(default_factory=list)
    dlq_scanned: int = 0
    events_republished: int = 0
    audit_rearchived: int = 0
    """Audit records of stream batches the archiver gave up on, archived again from the stream."""
    control_handled: list[str] = field(default_factory=list)
    sla_breaches: list[str] = field(default_factory=list)
    levels_raised: list[str] = field(default_factory=list)
    """Open work orders whose escalation level rose with time (``rebound.engine.levels``)."""
    completion_rate: float | None = None
    periodic: bool = False
    """Whether this sweep ran the five-minute steps (the completion rate; the health report)."""
    queue_quiet_at: str | None = None
    failures: list[dict[str, str]] = field(default_factory=list)
    ledger: LedgerReport = field(default_factory=LedgerReport)
    targets: TargetSweep = field(default_factory=TargetSweep)
    """Runs held for an unhealthy target: probed, released, timed out; targets recovered, closed."""
    out_of_time: list[str] = field(default_factory=list)
    """Steps not started because the invocation had less than ``STEP_MARGIN_S`` left: the next
    sweep, a minute later, runs them (every step is idempotent)."""

    def total(self) -> int:
        return (
            self.targets.total()
            + len(self.leases_expired)
            + len(self.failures_redecided)
            + len(self.plans_redispatched)
            + len(self.dlq_escalated)
            + len(self.dlq_duplicates_removed)
            + len(self.dlq_superseded_removed)
            + len(self.dlq_recorded)
            + self.events_republished
            + self.audit_rearchived
            + len(self.control_handled)
            + len(self.sla_breaches)
            + len(self.levels_raised)
            + len(self.failures)
            + len(self.ledger.missed)
            + len(self.ledger.delivered)
        )


PERIOD_ASKED = "sweeper#periodic#asked"
"""The container cache's key for the last five-minute period this container asked to claim."""
STEP_MARGIN_S = 30.0
"""A sweep starts no step with less than this left of its invocation: a step cut off by the
Lambda timeout would leave its work to the next sweep anyway, and its log and report lost."""


class Sweeper:
    def __init__(
        self,
        deps: Deps,
        actor: str = "sweeper",
        remaining_s: Callable[[], float] | None = None,
        reports: ReportAnswerer | None = None,
    ) -> None:
        """``remaining_s`` is the invocation's time left (the Lambda context's); None: unbounded.
        ``reports`` answers an asynchronous attempt's report found in the control DLQ (the
        operations layer's, handed in by the handler); None leaves such reports there."""
        self.remaining_s = remaining_s
        self.reports = reports
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor
        self.retries = RetryScheduler(deps, actor)
        self.dead_letters = DeadLetters(deps, actor)
        self.dispatcher = Dispatcher(deps, actor)
        self.budgets = TargetBudgets(deps, actor)

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
        listed = self._step(report, "tasks", the_ledger.active_tasks)
        tasks = listed or []
        if any(t.task.sla is not None or t.task.is_async for t in tasks):
            self._step(report, "slas", lambda: self.check_slas(report, running))
        if ledger:
            report.ledger = (
                # the list just read (None if that failed: the ledger reads it again)
                self._step(report, "ledger", lambda: the_ledger.reconcile(evidence, listed)) or LedgerReport()
            )
        if scan_dlq:
            self._step(report, "dlq", lambda: self.escalate_dlq_arrivals(report))
            self._step(report, "control_dlq", lambda: self.work_control_dlq(report))
        report.levels_raised = (
            self._step(
                report,
                "levels",
                lambda: raise_levels(
                    self.deps, self.actor, lambda order_id, exc: self._failed(report, "levels", order_id, exc)
                ),
            )
            or []
        )
        if self._step(report, "every_5_minutes", self.first_in_period):
            figure = self._step(
                report,
                "completion",
                lambda: recovery.publish(self.store, self.deps.metrics, self.clock.now()),
            )
            report.completion_rate = figure.rate if figure else None
            report.periodic = True
        self._step(report, "workstreams", lambda: Workstreams(self.deps, self.actor).poll_waiting())
        return report

    def first_in_period(self) -> bool:
        """True for the first sweep of each five-minute period (a control record claims it), so
        the periodic steps run once a period whichever sweep gets there first, and a period whose
        sweeps all failed before it is simply skipped.

        A container that has had its answer for a period (it claimed it, or found it claimed) does
        not ask again within it: the claim lives an hour, so the answer could only be no. The four
        sweeps after the first in a period write nothing (``tests/unit/test_sweeper_deadline.py``)."""
        now = self.clock.now()
        period = int(now.timestamp()) // PERIODIC_S
        asked = self.deps.cache.get(PERIOD_ASKED)
        if asked is not None and asked[1] == period:
            return False
        claimed = self.store.claim_key(f"sweeper#periodic#{period}", now, timedelta(hours=1))
        self.deps.cache[PERIOD_ASKED] = (now.timestamp(), period)  # (when read, what), as every entry
        return claimed

    # --------------------------------------------------------------------------- isolation
    def _step(self, report: SweepReport, name: str, fn: Callable[[], T]) -> T | None:
        if self.remaining_s is not None and self.remaining_s() < STEP_MARGIN_S:
            report.out_of_time.append(name)
            return None
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
        """Fail a running attempt whose lease ran out (``rebound.engine.leases.expire``)."""
        return leases.expire(self.deps, self.actor, run) is not None

    # --------------------------------------------------------------------------- SLAs
    def check_slas(self, report: SweepReport, running: list[Run] | None = None) -> None:
        """Breaches that show before the run records its own outcome: still waiting, still running
        (none where ``task-sla-monitor`` is off)."""
        if not self.deps.flags.enabled(TASK_SLA_MONITOR):
            return
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
            if sla.duration_limit(task) is None:
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

        target_held: list[Run] = []

        def one(run: Run) -> None:
            if run.state not in WAITING_STATES:
                return
            if held_by_target(run) and not task_paused(run.task_id):
                target_held.append(run)  # its target's budget releases it (below)
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
        swept = self._step(report, "targets", lambda: self.budgets.sweep(target_held))
        report.targets = swept or TargetSweep()

    # --------------------------------------------------------------------------- the DLQ
    def escalate_dlq_arrivals(self, report: SweepReport) -> None:
        """Arrivals SQS moved to the DLQ itself, second copies, and messages without a record
        (``rebound.engine.dlq_arrivals``)."""

        def failed(subject: str, exc: Exception) -> None:
            self._failed(report, "dlq", subject, exc)

        seen = DlqArrivals(self.deps, self.actor, self.dead_letters, failed).check()
        report.dlq_scanned = seen.scanned
        report.dlq_escalated += seen.escalated
        report.dlq_duplicates_removed += seen.duplicates_removed
        report.dlq_superseded_removed += seen.superseded_removed
        report.dlq_recorded += seen.recorded

    # --------------------------------------------------------------------------- the control DLQ
    def _workstream_event(self, kind: str, detail: dict[str, Any]) -> None:
        """A workstream's message escalation gave up on: a start starts its run, a step's end
        advances its workstream (or it would wait for ever), a failure opens its work order."""
        from rebound.engine.escalation import Escalation

        if kind == WORKSTREAM_START:
            Workstreams(self.deps, self.actor).on_start(detail)
        elif kind == EventType.WORKSTREAM_STEP_ENDED:
            Workstreams(self.deps, self.actor).on_step_ended(detail)
        elif kind == EventType.RESOURCE_EXHAUSTED:
            Escalation(self.deps, self.actor).on_resource_exhausted(detail)
        else:
            Escalation(self.deps, self.actor).on_workstream_failed(detail)

    def _audit_stream(self, span: StreamRange) -> bool:
        """Whether ``span`` is of the audit table's stream (the archiver's), not the outbox's."""
        return f":table/{self.deps.settings.table('audit')}/stream/" in span.stream_arn

    def work_control_dlq(self, report: SweepReport) -> None:
        """Stream batches the relay gave up on are published again from the stream, and those the
        archiver gave up on are archived again from it; events the
        retry scheduler or escalation gave up on are handled again (a recovered run's
        ``task.recovered`` resolves its work order, a ``workorder.resolved`` sends the resolved
        notices still owed, an asynchronous attempt's report is answered). What is handled is
        removed; what fails again stays for the next sweep (and the control DLQ alarm)."""
        from rebound.engine.escalation import Escalation

        if self.deps.queues.depth("control_dlq") == 0:
            return
        for message in self.deps.queues.peek("control_dlq", CONTROL_SCAN_LIMIT, visibility_s=60):
            try:
                body = json.loads(message.body)
                span = StreamRange.from_failure_record(body) if isinstance(body, dict) else None
                if span is not None and self._audit_stream(span):
                    if self.deps.streams is None or self.deps.audit_archive is None:
                        continue
                    records = self.deps.streams.read(span)
                    report.audit_rearchived += self.deps.audit_archive.archive_stream_records(records)
                elif span is not None:
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
                elif isinstance(body, dict) and body.get("detail-type") in WORKSTREAM_EVENTS:
                    self._workstream_event(str(body["detail-type"]), body["detail"])
                elif isinstance(body, dict) and body.get("detail-type") == EventType.RUN_RECOVERED:
                    Escalation(self.deps, self.actor).on_recovered(body["detail"])  # or it stays open
                elif isinstance(body, dict) and body.get("detail-type") == EventType.WORKORDER_RESOLVED:
                    Escalation(self.deps, self.actor).on_resolved(body["detail"])  # every channel told
                elif isinstance(body, dict) and str(body.get("detail-type")).startswith(REPORT_PREFIX):
                    # An asynchronous attempt's report the retry queue's consumer gave up on: answered
                    # now, or the attempt would time out and be retried although its worker finished.
                    if self.reports is None or not self.reports(str(body["detail-type"]), body.get("detail")):
                        continue  # no answerer here, or not a report: an operator looks at it
                else:
                    continue  # not ours to judge: an operator looks at it
                self.deps.queues.delete("control_dlq", message.receipt_handle)
                report.control_handled.append(message.message_id)
            except Exception as exc:
                self._failed(report, "control_dlq", message.message_id, exc)
