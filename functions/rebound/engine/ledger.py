"""The run ledger: every fire a task's schedule owes is accounted for as a run.

Every minute the sweeper asks the ledger to compare each active task's expected fire times with
the runs that exist. A fire without a run is either

- one EventBridge Scheduler never delivers by design: the second occurrence of a repeated hour
  (DST policy ``twice``) or a fire moved out of a spring-forward gap (policy ``shift``). Rebound
  delivers these itself; the ledger even sends them ahead of time, delayed to the exact instant;
- **late**: Scheduler delivered it, but it still waits in a backed-up execution queue (or in
  flight in an invocation that crashed, until its visibility timeout ends). It will arrive and
  run; nothing is decided about it yet;
- or **missed**: it is provably not in the queue (``rebound.engine.dispatch.Evidence``: the
  sweeper saw the queue quiet, nothing visible and nothing in flight, after the fire was due). It counts in
  ``task.scheduler.missed_total`` and the task's catch-up policy decides: ``skip`` records it as a
  skipped run; ``latest`` runs only the most recent, ``all`` runs up to ``max_runs`` of those
  within ``window`` (the rest skipped).

Elapsed time alone never makes a fire missed: a fire that was only late would otherwise be
recorded skipped, and dropped as a duplicate when it arrived. While the queue is never quiet (a
backlog), fires stay undecided; the ledger looks back at most a day.

Every fire the ledger sends (a catch-up, a DST fire) is first recorded as a ``pending`` run with
its own dispatch token, then sent; a crash in between leaves a pending run whose carrier is
overdue, which the sweeper sends. The watermark moves past a fire only once it is decided, so a
late fire is looked at again every minute until it has arrived or is known to be missed.

Resuming a paused task applies the same catch-up policy to the fires of the pause, and sends the
retries that were held while it was paused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain.errors import Conflict
from rebound.domain.fires import MAX_LOOKBACK, ExpectedFire, delivery_lag, expected_fires
from rebound.domain.ids import run_subject, scheduled_run_id
from rebound.domain.run import Run, RunState, Trigger
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.domain.stored import StoredTask
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine import crashpoints as cp
from rebound.engine import telemetry as m
from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher, Evidence, read_evidence
from rebound.engine.task_list import listed_tasks

log = logging.getLogger(__name__)

GRACE = timedelta(minutes=2)
LOOKAHEAD = timedelta(minutes=3)
MAX_SKIPPED_RECORDS = 100
WATERMARK = "ledger#watermark"


@dataclass
class LedgerReport:
    checked_until: datetime | None = None
    expected: int = 0
    missed: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    caught_up: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)


class Ledger:
    def __init__(
        self,
        deps: Deps,
        actor: str = "ledger",
        on_failure: Callable[[str, Exception], None] | None = None,
    ) -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor
        self.on_failure = on_failure
        """Called with (task id, error) when one task's fires could not be handled; the others go on."""
        self.dispatcher = Dispatcher(deps, actor)

    # --------------------------------------------------------------------------- every minute
    def reconcile(
        self, evidence: Evidence | None = None, tasks: list[StoredTask] | None = None
    ) -> LedgerReport:
        """Compare the expected fires with the runs since the watermark. ``tasks``: the active
        tasks, if the caller has just listed them (``active_tasks``); else they are listed here."""
        now = self.clock.now()
        until = now - GRACE
        report = LedgerReport(checked_until=until)
        since = self._watermark(now) or until - timedelta(minutes=1)
        since = max(since, now - MAX_LOOKBACK)
        if until <= since:
            return report
        evidence = evidence or read_evidence(self.deps)
        tasks = self.active_tasks() if tasks is None else tasks
        due: list[tuple[StoredTask, timedelta, list[ExpectedFire]]] = []
        for stored in tasks:
            spec = stored.task.schedule
            assert spec is not None
            # A fire a jitter window or stagger delivers later by design is checked that much later.
            lag = delivery_lag(stored.task.id, spec)
            lo, hi = since - lag, until - lag
            start = max(lo, stored.active_since or lo)
            fires = expected_fires(stored.task.id, spec, start, hi, origin=stored.active_since)
            if fires:
                due.append((stored, lag, fires))
        run_ids = [f.run_id for _, _, fires in due for f in fires]
        report.expected = len(run_ids)
        existing = self._existing(run_ids)
        first_open: datetime | None = None
        for stored, lag, fires in due:
            missing = [f for f in fires if f.run_id not in existing]
            if not missing:
                continue
            try:
                still_open = self._handle_missing(stored, lag, missing, now, evidence, report)
            except Exception as exc:
                self._failed(stored.task.id, exc)
                still_open = missing
            for fire in still_open:
                mark = fire.at + lag
                first_open = mark if first_open is None or mark < first_open else first_open
        for stored in tasks:
            assert stored.task.schedule is not None
            try:
                self._send_ahead(stored, stored.task.schedule, now, report)
            except Exception as exc:
                self._failed(stored.task.id, exc)
        # The watermark stops just before the first fire still undecided: it is looked at again.
        checked = until if first_open is None else min(until, first_open - timedelta(microseconds=1))
        report.checked_until = checked
        self._advance_watermark(max(checked, since))
        return report

    def _failed(self, task_id: str, exc: Exception) -> None:
        if self.on_failure is None:
            raise exc
        self.on_failure(task_id, exc)

    def _handle_missing(
        self,
        stored: StoredTask,
        lag: timedelta,
        missing: list[ExpectedFire],
        now: datetime,
        evidence: Evidence,
        report: LedgerReport,
    ) -> list[ExpectedFire]:
        """Deliver Rebound's own fires; judge Scheduler's. Returns the fires still undecided (late)."""
        for fire in (f for f in missing if not f.by_scheduler):  # Scheduler never sends these
            if self._dispatch(stored, fire.at, catch_up=False):
                report.delivered.append(fire.run_id)
        missed: list[ExpectedFire] = []
        late: list[ExpectedFire] = []
        for fire in (f for f in missing if f.by_scheduler):
            (missed if evidence.gone(fire.at + lag) else late).append(fire)
        report.late.extend(f.run_id for f in late)
        if missed:
            self.deps.metrics.count(m.SCHEDULER_MISSED, len(missed))
            report.missed.extend(f.run_id for f in missed)
            log.warning(
                "missed fires",
                extra={"task_id": stored.task.id, "missed": len(missed), "first": iso(missed[0].at)},
            )
            self.catch_up(stored, [f.at for f in missed], now, report)
        return late

    def _send_ahead(
        self, stored: StoredTask, spec: ScheduleSpec, now: datetime, report: LedgerReport
    ) -> None:
        """Rebound-delivered DST fires in the next few minutes leave now, delayed to their instant."""
        if spec.cron is None or spec.dst.is_scheduler_default:
            return
        for fire in expected_fires(stored.task.id, spec, now, now + LOOKAHEAD):
            if not fire.by_scheduler and self._dispatch(stored, fire.at, catch_up=False):
                report.delivered.append(fire.run_id)

    # --------------------------------------------------------------------------- catch-up
    def catch_up(
        self, stored: StoredTask, missed: list[datetime], now: datetime, report: LedgerReport
    ) -> None:
        policy = stored.task.catch_up
        missed = sorted(missed)
        if policy.policy == "skip":
            run, skip = [], missed
        elif policy.policy == "latest":
            run, skip = missed[-1:], missed[:-1]
        else:
            recent = [at for at in missed if (now - at).total_seconds() <= policy.window]
            run = recent[-policy.max_runs :]
            skip = [at for at in missed if at not in run]
        for at in run:
            if self._dispatch(stored, at, catch_up=True):
                report.caught_up.append(scheduled_run_id(stored.task.id, at))
        for at in skip[-MAX_SKIPPED_RECORDS:]:
            if self._record_skipped(stored, at, now):
                report.skipped.append(scheduled_run_id(stored.task.id, at))

    def _existing(self, run_ids: list[str]) -> set[str]:
        """Which of the expected fires' runs exist: an eventually consistent read of their keys (half
        the price of a strongly consistent one, every fire, every minute), then a strongly
        consistent one of those it did not find, so a run written a moment before is never taken
        for a missed fire."""
        if not run_ids:
            return set()
        existing = self.store.existing_runs(run_ids, consistent=False)
        unseen = [r for r in run_ids if r not in existing]
        return existing | self.store.existing_runs(unseen) if unseen else existing

    def resume(self, before: StoredTask, resumed_at: datetime) -> LedgerReport:
        """After a pause: catch up on the fires of the pause, and send the retries that were held."""
        report = LedgerReport()
        spec = before.task.schedule
        if spec is not None and before.paused_at is not None:
            since = max(before.paused_at, resumed_at - MAX_LOOKBACK)
            fires = expected_fires(before.task.id, spec, since, resumed_at, origin=before.active_since)
            existing = self.store.existing_runs([f.run_id for f in fires]) if fires else set()
            # Scheduler's schedules were disabled: these fires were never delivered.
            missed = [f.at for f in fires if f.run_id not in existing]
            report.missed.extend(scheduled_run_id(before.task.id, at) for at in missed)
            if missed:
                self.catch_up(before, missed, resumed_at, report)
        for run in self._held(before.task.id):
            if self.unhold(run) is not None:
                report.delivered.append(run.run_id)
        return report

    def unhold(self, run: Run) -> Run | None:
        """A held run's next step goes out again, under a new token."""
        return self.dispatcher.renew(
            run,
            due=self.clock.now(),
            action="resumed",
            evidence={"held_at": iso(run.held_at) if run.held_at else None},
            crash_point=cp.AFTER_REDISPATCH_COMMIT,
            update={"held_at": None},
        )

    # --------------------------------------------------------------------------- plumbing
    def _dispatch(self, stored: StoredTask, at: datetime, *, catch_up: bool) -> bool:
        """Record a fire's run as pending with its own token, then send its carrier (delayed to
        the fire's instant if that is ahead). False if the run exists already."""
        now = self.clock.now()
        task = stored.task
        run = Run(
            run_id=scheduled_run_id(task.id, at),
            task_id=task.id,
            tenant=task.tenant,
            trigger=Trigger.SCHEDULE,
            scheduled_for=at,
            created_at=now,
            updated_at=now,
            budget_started_at=now,
            catch_up=catch_up,
            due_at=None if catch_up else at,
            dispatch=1,
            next_retry_at=max(at, now),
        )
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            None,
            run,
            action="created",
            evidence={
                "trigger": Trigger.SCHEDULE.value,
                "path": "ledger",
                "why": "catch_up" if catch_up else "dst",
                "catch_up_policy": task.catch_up.policy if catch_up else None,
                "dispatch": run.dispatch,
            },
        )
        uow.emit(ev.execution_updated(saved, None, now), run_subject(run.run_id))
        try:
            uow.commit()
        except Conflict:
            return False  # a run exists (it arrived after all, or this was decided before)
        self.deps.faults.reached(cp.AFTER_LEDGER_COMMIT)
        self.dispatcher.send(saved)
        return True

    def _record_skipped(self, stored: StoredTask, at: datetime, now: datetime) -> bool:
        run = Run(
            run_id=scheduled_run_id(stored.task.id, at),
            task_id=stored.task.id,
            tenant=stored.task.tenant,
            trigger=Trigger.SCHEDULE,
            scheduled_for=at,
            created_at=now,
            updated_at=now,
            state=RunState.SKIPPED,
            last_error_message="missed fire (catch-up policy)",
        )
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            None,
            run,
            action="skipped",
            evidence={"reason": "missed", "catch_up": stored.task.catch_up.policy},
        )
        uow.emit(ev.execution_updated(saved, None, now), run_subject(run.run_id))
        try:
            uow.commit()
        except Conflict:
            return False  # a run exists after all (a late delivery)
        return True

    def _held(self, task_id: str) -> list[Run]:
        recent = self.store.runs_for_task(task_id, newest_first=True, limit=500)
        return [
            r
            for r in recent
            if r.held_at is not None and r.state in (RunState.RETRY_SCHEDULED, RunState.PENDING)
        ]

    def active_tasks(self) -> list[StoredTask]:
        """The scheduled, active tasks; listed again only when a task was written since the last look
        (``rebound.engine.task_list``)."""
        return [t for t in listed_tasks(self.deps) if t.task.schedule is not None and not t.paused]

    def _watermark(self, now: datetime) -> datetime | None:
        item: dict[str, Any] | None = self.store.get_key(WATERMARK)
        return parse_utc(item["checked_until"]) if item and item.get("checked_until") else None

    def _advance_watermark(self, until: datetime) -> None:
        self.store.put_key(WATERMARK, {"checked_until": iso(until)})
