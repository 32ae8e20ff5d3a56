"""Is the retry and recovery loop healthy? One report, each check ``ok``, ``warn`` or ``fail``.

The caller's ``expected_interval`` and ``stale_metadata`` decide when the retry checks fail, fixed
levels below them when they warn (``rebound.engine.health.report`` says which limit drives which).

- ``retry_worker``: is the retry scheduler alive and keeping up? Each invocation of it records
  a heartbeat (``rebound.engine.retry_scheduler.HEARTBEAT_KEY``). When there is work the worker
  should have done (a ``failed`` run, or a message in the retry queue, waiting longer than
  ``retry_worker_grace``), it warns once the last heartbeat is 5 minutes old and fails once it is
  older than ``expected_interval`` (or there is none): the worker is not being invoked, even if
  the sweeper covers for it. An idle system (nothing waiting) is ok however old the heartbeat. A
  ``failed`` run undecided (by the worker or the sweeper) warns after 5 minutes and fails after
  ``expected_interval``; a large retry backlog warns. The retry queue's age comes from
  CloudWatch; without it, the messages beyond the runs that failed within the grace count as
  waiting.
- ``stale_retry_plans``: ``retry_scheduled`` runs whose next attempt is overdue: warn after 2
  minutes, fail after ``stale_metadata``.
- ``stuck_replays``: runs replayed (by an operator or a redrive) whose first attempt never started:
  warn after 10 minutes, fail after ``stale_metadata``.
- ``failed_retry_executions``: retry dispatches and events that ended in a DLQ of their own: the
  Scheduler DLQ (a one-time retry schedule could not deliver) and the control DLQ (a retry or
  escalation event the handlers could not process).
- ``disabled_schedules``: disabled or paused schedules. It fails for a schedule disabled or
  missing while its task is active, lists every paused task (ok: a pause is an audited decision),
  and warns when a paused task's schedule is still enabled.
- ``acknowledgement_gaps``: open work orders nobody acknowledged within the SLA of their severity.
- ``dlq_age``: how long the oldest message has waited in the DLQ (SQS keeps them 14 days).

A report is healthy when no check fails; ``warn`` is for a human to look at, not to page.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from rebound.domain.errors import ReboundError
from rebound.domain.ids import task_schedule_name
from rebound.domain.run import Run, RunState
from rebound.domain.task import TaskState
from rebound.domain.timefmt import iso, parse_utc
from rebound.domain.work_order import WorkOrderState
from rebound.engine.deps import Deps
from rebound.engine.health.report import (
    RANK,
    Check,
    RetryHealthQuery,
    RetryHealthReport,
    Status,
    Thresholds,
)
from rebound.engine.ports.store import DlqQuery
from rebound.engine.retry_scheduler import HEARTBEAT_KEY
from rebound.engine.task_list import listed_tasks

__all__ = [
    "Check",
    "HealthChecks",
    "OldestAge",
    "RetryHealthQuery",
    "RetryHealthReport",
    "Status",
    "Thresholds",
]

HEALTH_SUBJECT_PREFIX = "health#"
"""Subject prefix of the work order kept for a failing check (``rebound.engine.health.watch``)."""
ACK_GAPS_SUBJECT = f"{HEALTH_SUBJECT_PREFIX}acknowledgement_gaps"

OldestAge = Callable[[str], float | None]
"""Seconds the oldest message of a queue (by name) has waited, from CloudWatch; ``None`` if unknown."""


CLOCK_SKEW_S = 5.0
"""A heartbeat stamped by another process up to this far ahead of the reader's clock reads as just
now (two clocks are never exactly together); further ahead, it shows as it is: a wrong clock."""


def _ago(seconds: float) -> str:
    if -CLOCK_SKEW_S <= seconds < 0:
        seconds = 0.0
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


class HealthChecks:
    def __init__(self, deps: Deps, *, oldest_age: OldestAge | None = None) -> None:
        self.deps = deps
        self.store = deps.store
        self.queue = deps.queues.batches()
        self.oldest_age = oldest_age

    def retry_health(self, query: RetryHealthQuery | None = None) -> RetryHealthReport:
        """The report for a caller's query: what ``GET /health/retry`` and ``rebound health`` return."""
        q = query or RetryHealthQuery()
        return self.report(Thresholds.from_query(q), generated_by=q.generated_by)

    def report(
        self, thresholds: Thresholds | None = None, *, generated_by: str | None = None
    ) -> RetryHealthReport:
        t = thresholds or Thresholds()
        now = self.deps.clock.now()
        checks = [
            self._guarded("retry_worker", lambda: self.retry_worker(now, t)),
            self._guarded("stale_retry_plans", lambda: self.stale_plans(now, t)),
            self._guarded("stuck_replays", lambda: self.stuck_replays(now, t)),
            self._guarded("failed_retry_executions", self.failed_executions),
            self._guarded("disabled_schedules", self.disabled_schedules),
            self._guarded("acknowledgement_gaps", lambda: self.ack_gaps(now, t)),
            self._guarded("dlq_age", lambda: self.dlq_age(now, t)),
        ]
        return RetryHealthReport.of(self.deps.settings.environment, now, checks, t, generated_by)

    @staticmethod
    def _guarded(name: str, check: Callable[[], Check]) -> Check:
        """A check that cannot look fails, naming why: not knowing is not healthy."""
        try:
            return check()
        except ReboundError as exc:
            return Check(name, Status.FAIL, f"could not check: {exc.message}")

    # --------------------------------------------------------------------------- checks
    def retry_worker(self, now: datetime, t: Thresholds) -> Check:
        failed = self.store.runs_in_state(RunState.FAILED)
        backlog = self.queue.depth("retry")
        heartbeat = self._heartbeat()
        beat = f"last ran {_ago((now - heartbeat).total_seconds())} ago" if heartbeat else "never ran"
        queue = f"retry queue holds {backlog.visible} visible, {backlog.in_flight} in flight"
        found = [
            c
            for c in (
                self._undecided(now, t, failed, f"worker {beat}; {queue}"),
                self._silent(now, t, failed, backlog.visible, heartbeat, beat, queue),
            )
            if c is not None
        ]
        if found:
            return max(found, key=lambda c: RANK[c.status])  # the first of the worst
        status = Status.WARN if backlog.visible >= t.retry_backlog_warn else Status.OK
        return Check(
            "retry_worker",
            status,
            f"worker {beat}; {len(failed)} failed run(s) awaiting a decision; {queue}",
            value=float(backlog.visible),
        )

    @staticmethod
    def _undecided(now: datetime, t: Thresholds, failed: list[Run], context: str) -> Check | None:
        """``failed`` runs nobody decided: warn after 5 minutes, fail after ``expected_interval``."""
        level = t.warn_level(t.failed_run_warn, t.expected_interval)
        stuck = [r for r in failed if now - r.updated_at > level]
        if not stuck:
            return None
        oldest = max((now - r.updated_at).total_seconds() for r in stuck)
        late = oldest > t.expected_interval.total_seconds()
        limit = _ago((t.expected_interval if late else level).total_seconds())
        after = "" if late else f" (fails after {_ago(t.expected_interval.total_seconds())})"
        return Check(
            "retry_worker",
            Status.FAIL if late else Status.WARN,
            f"{len(stuck)} failed run(s) not picked up within {limit}{after}; "
            f"oldest {_ago(oldest)}; {context}",
            [f"{r.run_id}: failed since {iso(r.updated_at)}" for r in stuck[:10]],
            oldest,
        )

    def _silent(
        self,
        now: datetime,
        t: Thresholds,
        failed: list[Run],
        visible: int,
        heartbeat: datetime | None,
        beat: str,
        queue: str,
    ) -> Check | None:
        """Work waits and the worker has not run: warn after 5 minutes, fail after ``expected_interval``."""
        waiting = self._waiting_work(now, t, failed, visible)
        silence = (now - heartbeat).total_seconds() if heartbeat else None
        level = t.warn_level(t.retry_worker_warn, t.expected_interval).total_seconds()
        if not waiting or (silence is not None and silence <= level):
            return None
        limit = _ago(t.expected_interval.total_seconds())
        if silence is None or silence > t.expected_interval.total_seconds():
            summary = f"retry worker stale: {beat} (limit {limit}) while work waits for it; {queue}"
            return Check("retry_worker", Status.FAIL, summary, waiting, silence)
        summary = f"retry worker slow: {beat} while work waits for it (stale after {limit}); {queue}"
        return Check("retry_worker", Status.WARN, summary, waiting, silence)

    def _heartbeat(self) -> datetime | None:
        item = self.store.get_key(HEARTBEAT_KEY)
        return parse_utc(item["at"]) if item and item.get("at") else None

    def _waiting_work(self, now: datetime, t: Thresholds, failed: list[Run], visible: int) -> list[str]:
        """What the retry worker should have done by now (empty when nothing is overdue)."""
        grace = t.retry_worker_grace
        fresh = sum(1 for r in failed if now - r.updated_at <= grace)
        waiting = [
            f"{r.run_id}: failed since {iso(r.updated_at)}" for r in failed if now - r.updated_at > grace
        ][:10]
        if visible:
            age = self.oldest_age(self.deps.settings.queue("retry").name) if self.oldest_age else None
            if age is not None and age > grace.total_seconds():
                waiting.append(f"retry queue: {visible} message(s), the oldest waiting {_ago(age)}")
            elif age is None and visible > fresh:
                # Without CloudWatch, each run that failed within the grace explains one message.
                waiting.append(
                    f"retry queue: {visible} message(s), more than the {fresh} run(s) that failed "
                    f"in the last {_ago(grace.total_seconds())}"
                )
        return waiting

    def stale_plans(self, now: datetime, t: Thresholds) -> Check:
        level = t.warn_level(t.plan_overdue_warn, t.stale_metadata)
        overdue = [
            r
            for r in self.store.runs_in_state(RunState.RETRY_SCHEDULED)
            if r.next_retry_at is not None and now - r.next_retry_at > level
        ]
        if not overdue:
            return Check("stale_retry_plans", Status.OK, "no retry plan is overdue", value=0.0)
        worst = max((now - r.next_retry_at).total_seconds() for r in overdue if r.next_retry_at)
        status = Status.FAIL if worst > t.stale_metadata.total_seconds() else Status.WARN
        return Check(
            "stale_retry_plans",
            status,
            f"{len(overdue)} retry plan(s) overdue; worst by {_ago(worst)} "
            f"(stale after {_ago(t.stale_metadata.total_seconds())})",
            [
                f"{r.run_id}: attempt {r.attempt + 1} was due {iso(r.next_retry_at)}"
                for r in overdue[:10]
                if r.next_retry_at
            ],
            worst,
        )

    def stuck_replays(self, now: datetime, t: Thresholds) -> Check:
        level = t.warn_level(t.replay_unstarted_warn, t.stale_metadata)
        stuck = [
            r
            for r in self.store.runs_in_state(RunState.REPLAYED, updated_before=now - level)
            if r.attempt == r.budget_start
        ]
        if not stuck:
            return Check("stuck_replays", Status.OK, "every replay has started", value=0.0)
        oldest = max((now - r.updated_at).total_seconds() for r in stuck)
        stale = oldest > t.stale_metadata.total_seconds()
        return Check(
            "stuck_replays",
            Status.FAIL if stale else Status.WARN,
            f"{len(stuck)} replayed run(s) never started, the oldest for {_ago(oldest)} "
            f"(stale after {_ago(t.stale_metadata.total_seconds())}); "
            "send them again with `rebound runs retry RUN_ID`",
            [f"{r.run_id}: replayed {iso(r.updated_at)}" for r in stuck[:10]],
            float(len(stuck)),
        )

    def failed_executions(self) -> Check:
        scheduler = self.queue.depth("scheduler_dlq").total
        control = self.queue.depth("control_dlq").total
        total = scheduler + control
        summary = f"scheduler DLQ holds {scheduler}, control DLQ holds {control}"
        return Check(
            "failed_retry_executions", Status.FAIL if total else Status.OK, summary, value=float(total)
        )

    def disabled_schedules(self) -> Check:
        live = self._live_schedules()
        tasks = listed_tasks(self.deps)  # scanned again only after a task write
        problems: list[str] = []
        drift: list[str] = []
        paused: list[str] = []
        for stored in tasks:
            task = stored.task
            if task.schedule is None:
                continue
            names = stored.schedule_names or (task_schedule_name(task.id),)
            if task.state is TaskState.PAUSED:
                since = f" since {iso(stored.paused_at)}" if stored.paused_at else ""
                paused.append(f"task {task.id}: paused{since} ({', '.join(names)})")
                drift += [
                    f"{n}: ENABLED while task {task.id} is paused" for n in names if live.get(n) == "ENABLED"
                ]
                continue
            for name in names:
                state = live.get(name)
                if state is None:
                    problems.append(f"{name}: missing (task {task.id} is active)")
                elif state != "ENABLED":
                    problems.append(f"{name}: {state} (task {task.id} is active)")
        owned = {n for s in tasks for n in s.schedule_names}
        orphans = sorted(n for n, state in live.items() if state != "ENABLED" and n not in owned)
        problems += [f"{name}: DISABLED and no task owns it" for name in orphans]
        summary = (
            f"{len(problems)} schedule problem(s); {len(paused)} task(s) paused"
            if problems
            else f"every active task's schedules are enabled; {len(paused)} task(s) paused"
        )
        if drift:
            summary += f"; {len(drift)} paused task schedule(s) still enabled"
        status = Status.FAIL if problems else Status.WARN if drift else Status.OK
        return Check("disabled_schedules", status, summary, problems + drift + paused, float(len(problems)))

    def _live_schedules(self) -> dict[str, str]:
        return self.deps.schedules.states("task-")

    def ack_gaps(self, now: datetime, t: Thresholds) -> Check:
        # The work order that reports acknowledgement gaps is not one of them: counting it would
        # keep the check failing (and its order open) after every order it names was acknowledged.
        late = [
            o
            for o in self.store.work_orders(WorkOrderState.OPEN)
            if now - o.opened_at > t.ack_sla.get(o.severity, timedelta(minutes=15))
            and o.subject != ACK_GAPS_SUBJECT
        ]
        if not late:
            return Check(
                "acknowledgement_gaps", Status.OK, "every open work order is within its SLA", value=0.0
            )
        worst = max((now - o.opened_at).total_seconds() for o in late)
        return Check(
            "acknowledgement_gaps",
            Status.FAIL,
            f"{len(late)} work order(s) not acknowledged within their SLA; oldest open {_ago(worst)}",
            [
                f"{o.work_order_id} ({o.severity.value}, {o.task_id or o.subject}): "
                f"open since {iso(o.opened_at)}"
                for o in late[:10]
            ],
            worst,
        )

    def dlq_age(self, now: datetime, t: Thresholds) -> Check:
        depth = self.queue.depth("dlq")
        if depth.total == 0:
            return Check("dlq_age", Status.OK, "the DLQ is empty", value=0.0)
        age = self.oldest_age(self.deps.settings.queue("dlq").name) if self.oldest_age else None
        source = "CloudWatch"
        if age is None:
            sample = self.store.dlq_entries(DlqQuery(present_at=now, limit=100)).entries
            age = max((now.timestamp() - e.sent_at_ms / 1000 for e in sample), default=0.0)
            source = f"a sample of {len(sample)}"
        # Messages waiting are someone's work order, not an outage, until retention comes close.
        status = Status.FAIL if age > t.dlq_age_fail.total_seconds() else Status.WARN
        return Check(
            "dlq_age",
            status,
            f"{depth.total} message(s); the oldest has waited {_ago(age)} ({source}); SQS keeps them 14 days",
            ["archive what must outlive retention: rebound dlq archive --older-than 7d --delete"]
            if status is Status.FAIL
            else [],
            age,
        )
