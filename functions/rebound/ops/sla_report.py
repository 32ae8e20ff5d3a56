"""The SLA report: on time, missed fires, SLA breaches and start delays per task and tenant.

``rebound sla report --since 7d [--tenant T] [--rebuild]`` and ``GET /sla/report`` read the run
ledger: each task's runs scheduled in the window, one ``by_task_keys`` query per task and a read by
key of the runs of its fires (``Store.runs_for_task``), never a scan of the runs table. For every
scheduled run due in the window (its ``due_at``, else its fire time):

- **on time**: its first attempt started within ``sla.on_time_within`` (default 60 s, as the
  on-time metric) of when it was due, measured as the engine measures a start delay
  (``rebound.engine.sla.start_delay``: after the task's jitter window);
- **late**: started later, or not started although due longer ago than that;
- **missed**: a fire the run ledger found missed (a catch-up run, or one it recorded skipped), also
  counted late; a fire skipped on purpose (a paused task, ``overlap: skip``) is neither;
- **start delay** p50 and p99 over the first attempts that started (catch-up runs, late by design
  from a fire long past, are left out);
- **SLA breaches**: the runs whose ``sla_breaches`` name a start delay or a duration breach, as the
  engine recorded them.

Each task and tenant is flagged when its on-time rate is below ``sla.on_time_target`` or its p99
start delay above ``sla.start_delay_p99_objective`` (``default_policy.yaml``).

``--rebuild`` recomputes the breaches from the runs themselves against each task's current
``sla`` limits (a first attempt that started too late, or a run still not started past its limit;
an attempt that ran too long, or is still running past it) instead of trusting what was recorded,
and rewrites each SLA task's streak counter (``sla#<task id>``, the consecutive breaching runs that
open a work order at three) to the trailing streak of the window's runs. A counter that changes is
rewritten in one transaction with its audit record (subject ``sla-counter#<task id>``, action
``sla-counter-rebuilt``, with the value before and after, and the operator); one already right is
left alone. Runs are never changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rebound.domain.errors import ValidationFailed
from rebound.domain.planning import SlaDefaults
from rebound.domain.run import Run, RunState, Trigger
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task
from rebound.domain.timefmt import iso
from rebound.engine import sla
from rebound.engine.deps import Deps
from rebound.ops.common import parse_when
from rebound.ops.slo import is_missed

MAX_SINCE = timedelta(days=35)
STAGGER_LOOKBACK = timedelta(seconds=900)
"""A run's ``due_at`` is at most its stagger (900 s) after its fire time: queried that much earlier."""
FINAL = (RunState.SUCCEEDED, RunState.DEAD_LETTERED, RunState.SKIPPED, RunState.CANCELLED)


def counter_subject(task_id: str) -> str:
    return f"sla-counter#{task_id}"


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (the value below which ``pct`` % of them are); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Figures:
    """The report's figures for one task, one tenant, or everything."""

    name: str
    scheduled: int = 0
    on_time: int = 0
    late: int = 0
    missed: int = 0
    breaches: dict[str, int] = field(default_factory=lambda: {"start_delay": 0, "duration": 0})
    breaching_runs: int = 0
    delays: list[float] = field(default_factory=list)

    @property
    def on_time_rate(self) -> float | None:
        judged = self.on_time + self.late
        return round(100.0 * self.on_time / judged, 2) if judged else None

    def add(self, other: Figures) -> None:
        self.scheduled += other.scheduled
        self.on_time += other.on_time
        self.late += other.late
        self.missed += other.missed
        self.breaching_runs += other.breaching_runs
        for kind, n in other.breaches.items():
            self.breaches[kind] = self.breaches.get(kind, 0) + n
        self.delays += other.delays

    def as_dict(self, objectives: SlaDefaults) -> dict[str, Any]:
        p50, p99 = percentile(self.delays, 50), percentile(self.delays, 99)
        rate = self.on_time_rate
        return {
            "name": self.name,
            "scheduled": self.scheduled,
            "on_time": self.on_time,
            "late": self.late,
            "missed_fires": self.missed,
            "on_time_percent": rate,
            "on_time_met": None if rate is None else rate >= objectives.on_time_target,
            "start_delay_p50_s": None if p50 is None else round(p50, 3),
            "start_delay_p99_s": None if p99 is None else round(p99, 3),
            "start_delay_met": None if p99 is None else p99 <= objectives.start_delay_p99_objective,
            "sla_breaches": dict(self.breaches),
            "breaching_runs": self.breaching_runs,
        }


@dataclass(frozen=True)
class CounterRewrite:
    task_id: str
    before: int
    after: int
    rewritten: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "before": self.before,
            "after": self.after,
            "rewritten": self.rewritten,
        }


@dataclass
class SlaReport:
    since: datetime
    until: datetime
    objectives: SlaDefaults
    source: str
    """``recorded`` (the breaches the engine recorded) or ``rebuilt`` (recomputed from the runs)."""
    total: Figures
    tasks: list[tuple[str, Figures]]
    tenants: list[Figures]
    counters: list[CounterRewrite] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        o = self.objectives
        return {
            "since": iso(self.since),
            "until": iso(self.until),
            "source": self.source,
            "objectives": {
                "on_time_within_s": o.on_time_within,
                "on_time_target_percent": o.on_time_target,
                "start_delay_p99_objective_s": o.start_delay_p99_objective,
            },
            "total": self.total.as_dict(o),
            "tasks": [{**f.as_dict(o), "tenant": tenant} for tenant, f in self.tasks],
            "tenants": [f.as_dict(o) for f in self.tenants],
            "counters": [c.as_dict() for c in self.counters],
        }


def breaches_of(task: Task, run: Run, now: datetime) -> set[str]:
    """The SLA limits ``run`` broke, judged from its attempts against ``task``'s limits now."""
    found: set[str] = set()
    limit = task.sla.max_start_delay if task.sla is not None else None
    first = run.attempts[0] if run.attempts else None
    if limit is not None:
        if first is not None:
            if first.n == 1 and sla.start_delay(task, run, first.started_at) > limit:
                found.add("start_delay")
        elif run.state not in FINAL and sla.start_delay(task, run, now) > limit:
            found.add("start_delay")
    longest = sla.duration_limit(task)
    if longest is not None:
        for attempt in run.attempts:
            ended = attempt.ended_at or (now if run.state is RunState.RUNNING else None)
            if ended is not None and (ended - attempt.started_at).total_seconds() > longest:
                found.add("duration")
    return found


def trailing_streak(task: Task, runs: Iterable[Run], now: datetime, rebuilt: bool) -> tuple[int, str | None]:
    """The consecutive breaching runs at the end of ``runs`` (in fire order) after the last run
    that finished within its limits; and the last of them."""
    count, last = 0, None
    for run in runs:
        kinds = breaches_of(task, run, now) if rebuilt else set(run.sla_breaches)
        if kinds:
            count, last = count + 1, run.run_id
        elif run.state is RunState.SUCCEEDED or run.state is RunState.DEAD_LETTERED:
            count, last = 0, None
    return count, last


class SlaReportOps:
    def __init__(self, deps: Deps, actor: str = "sla-report") -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor

    def report(
        self,
        since: str,
        *,
        tenant: str | None = None,
        task_id: str | None = None,
        rebuild: bool = False,
        option: str = "since",
    ) -> SlaReport:
        """The figures of the runs due since ``since`` (a duration ago, ``7d``, or a timestamp);
        an error names ``option``."""
        now = self.deps.clock.now()
        try:
            start = parse_when(since, now, option=option)
        except OverflowError:  # a duration ago before year 1
            start = None
        if start is None or not timedelta(minutes=1) <= now - start <= MAX_SINCE:
            raise ValidationFailed(f"{option}: between 1m and 35d ago, got {since!r}", key_path=option)
        objectives = self.deps.policies.book.planning.sla
        stored = [
            s
            for s in self.store.list_tasks()
            if (tenant is None or s.task.tenant == tenant) and (task_id is None or s.task.id == task_id)
        ]
        if task_id is not None and not stored:
            raise ValidationFailed(
                f"task_id: no task {task_id!r}" + (f" of tenant {tenant}" if tenant else ""),
                key_path="task_id",
            )
        total = Figures("all")
        rows: list[tuple[str, Figures]] = []
        by_tenant: dict[str, Figures] = {}
        counters: list[CounterRewrite] = []
        for s in sorted(stored, key=lambda s: (s.task.tenant, s.task.id)):
            runs = self.store.runs_for_task(s.task.id, since=start - STAGGER_LOOKBACK, newest_first=False)
            runs = [r for r in runs if start <= (r.due_at or r.scheduled_for) <= now]
            figures = self._figures(s.task, runs, now, objectives, rebuild)
            rows.append((s.task.tenant, figures))
            by_tenant.setdefault(s.task.tenant, Figures(s.task.tenant)).add(figures)
            total.add(figures)
            if rebuild and s.task.sla is not None:
                counters.append(self._rewrite_counter(s, runs, now, start))
        return SlaReport(
            start,
            now,
            objectives,
            "rebuilt" if rebuild else "recorded",
            total,
            rows,
            [by_tenant[t] for t in sorted(by_tenant)],
            counters,
        )

    def _figures(self, task: Task, runs: list[Run], now: datetime, o: SlaDefaults, rebuilt: bool) -> Figures:
        f = Figures(task.id)
        for run in runs:
            kinds = breaches_of(task, run, now) if rebuilt else set(run.sla_breaches)
            for kind in kinds:
                f.breaches[kind] = f.breaches.get(kind, 0) + 1
            f.breaching_runs += bool(kinds)
            if run.trigger is not Trigger.SCHEDULE:
                continue
            f.scheduled += 1
            if is_missed(run):
                f.missed += 1
                f.late += 1
                continue
            first = run.attempts[0] if run.attempts else None
            if first is None:
                if run.state is not RunState.SKIPPED and sla.start_delay(task, run, now) > o.on_time_within:
                    f.late += 1
                continue
            delay = max(0.0, sla.start_delay(task, run, first.started_at))
            f.delays.append(delay)
            if delay <= o.on_time_within:
                f.on_time += 1
            else:
                f.late += 1
        return f

    def _rewrite_counter(
        self, stored: StoredTask, runs: list[Run], now: datetime, start: datetime
    ) -> CounterRewrite:
        task = stored.task
        key = sla.counter_key(task.id)
        before = int((self.store.get_key(key) or {}).get("consecutive", 0))
        after, last = trailing_streak(task, runs, now, rebuilt=True)
        if after == before:
            return CounterRewrite(task.id, before, after, rewritten=False)
        uow = self.store.unit_of_work(self.actor, now)
        uow.set_streak(key, after, last, f"sla counter {task.id}")
        uow.append_audit(
            counter_subject(task.id),
            action="sla-counter-rebuilt",
            evidence={
                "consecutive_before": before,
                "consecutive_after": after,
                "last_run": last,
                "runs_since": iso(start),
                "runs_examined": len(runs),
            },
        )
        uow.commit()
        return CounterRewrite(task.id, before, after, rewritten=True)
