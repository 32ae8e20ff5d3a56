"""Pre-flight: what a task file would do over the next hours, before anything changes.

``rebound tasks dryrun -f tasks.yaml [--window 24h]`` (and ``tasks apply``, which runs it first,
and ``POST /tasks/dryrun``) loads the file with the same loader as ``apply``, adds the tasks already
deployed that the file does not name (they share mutex groups, resources and tenants' quotas with
it), and computes, without writing anything:

- **the fires** of every scheduled task in the window (``rebound.domain.fires.expected_fires``:
  the run ledger's own fire times, time zones and DST policy included);
- **each run's window**: from its fire plus the task's stagger offset to that plus the jitter
  window (Scheduler delivers anywhere inside it), the run's expected duration (the
  ``conflicts.expected_duration`` default: the median of the task's last attempts, a sim target's
  ``duration_s``, else its timeout) and ``DISPATCH_SLACK``. A window is the latest a run can end,
  so two runs whose windows do not meet cannot collide;
- **collisions**: every span where more runs' windows overlap than a slot holds. A mutex group's
  slot holds one run, a task's own slot one (``overlap`` other than ``allow_all``), a workstream
  resource ``max_holders`` steps, a tenant ``max_concurrent_runs`` (less ``min_quota_headroom``).
  Each span is one warning naming its first instant, its end, the tasks and the runs involved, and
  the longest wait it predicts (runs served first come, first served); a wait longer than
  ``conflicts.mutex_max_wait`` makes it high severity, one longer than the task's ``max_wait``
  says the run would be dead-lettered (``WAIT_EXHAUSTED``);
- **tenant quota headroom** at each instant: free slots after the runs in flight, its minimum and
  when;
- **catch-up storms**: a task paused at the end of the window (in the file, or deployed and left
  alone) that is resumed then releases its missed fires at once under its catch-up policy
  (``latest``: one, ``all``: up to ``max_runs`` within ``window``); ``catch_up_storm`` or more is a
  warning.

The prediction is a pure function (``predict``) of the tasks, tenants, workstreams and resources;
``rebound.ops.preflight.PreflightOps`` reads the deployed part; ``hit_rate`` scores the warnings
against the collisions a simulation recorded (``make bench``, group ``conflicts``).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rebound.domain import cron
from rebound.domain.basics import WAIT_POLL_S
from rebound.domain.fires import MAX_LOOKBACK, expected_fires
from rebound.domain.ids import scheduled_run_id
from rebound.domain.planning import ConflictDefaults
from rebound.domain.schedule_spec import OverlapPolicy, ScheduleSpec
from rebound.domain.target_specs import SimTarget
from rebound.domain.task import Task, TaskState, TenantSettings
from rebound.domain.timefmt import iso
from rebound.domain.workstreams import ResourceSpec, TaskDocument, Workstream

DEFAULT_WINDOW = timedelta(hours=24)
MAX_WINDOW = timedelta(days=7)
DISPATCH_SLACK = timedelta(seconds=10)
"""Added to every run's window: the time from a fire to its claim (queue, batch, claim write)."""
POLL = timedelta(seconds=WAIT_POLL_S)
"""How often a run waiting for a slot looks again (the executor's poll)."""
MAX_FIRES_PER_TASK = 10_080
"""Fires of one task the window may hold (once a minute for a week); more are cut, and said."""
MAX_FIRES = 100_000
"""Fires judged in all: with many tasks each gets its share (at least ``MIN_FIRES_PER_TASK``), so
the dry run of a large file stays a matter of seconds; a task cut short says so."""
MIN_FIRES_PER_TASK = 8
SHOWN_FIRES = 5
SHOWN_RUNS = 50
SHOWN_HEADROOM = 200
OBSERVED_ATTEMPTS = 20
HOLDERS_NAMED = 64
"""A run that finds a large slot (a tenant's quota) full is said to meet this many of its holders."""
OBSERVED_AT_MOST = 200
"""Deployed tasks whose recent durations are read (one query each): those sharing a slot with
another run, in file order; the rest are judged by their timeout."""


@dataclass(frozen=True)
class RunWindow:
    """One predicted run: from its earliest start to its latest end."""

    run_id: str
    task_id: str
    tenant: str
    fire: datetime
    start: datetime
    end: datetime


@dataclass(frozen=True)
class PreflightWarning:
    kind: str
    """``mutex``, ``resource``, ``overlap``, ``self_overlap``, ``tenant_quota`` or ``catch_up_storm``."""
    at: datetime
    until: datetime
    tasks: tuple[str, ...]
    runs: tuple[str, ...]
    message: str
    severity: str = "warning"
    """``warning``, or ``high`` when a predicted wait passes ``mutex_max_wait`` (or a run would be
    dead-lettered for waiting)."""
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": iso(self.at),
            "until": iso(self.until),
            "tasks": list(self.tasks),
            "runs": list(self.runs[:SHOWN_RUNS]),
            "runs_total": len(self.runs),
            "severity": self.severity,
            "message": self.message,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class TaskFires:
    task_id: str
    tenant: str
    source: str
    """``file``, or ``deployed`` (a registered task the file does not name)."""
    fires: int
    next: tuple[datetime, ...]
    duration_s: float
    duration_from: str
    """``sim``, ``observed``, ``timeout`` or ``max_duration``."""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "tenant": self.tenant,
            "source": self.source,
            "fires": self.fires,
            "next": [iso(at) for at in self.next],
            "expected_duration_s": round(self.duration_s, 3),
            "duration_from": self.duration_from,
            "note": self.note,
        }


@dataclass(frozen=True)
class QuotaHeadroom:
    tenant: str
    cap: int | None
    peak: int
    peak_at: datetime | None
    timeline: tuple[tuple[datetime, int], ...]
    """Each instant the tenant's runs in flight change, with the free slots then (``cap`` less in
    flight; the runs in flight when there is no cap)."""

    @property
    def min_headroom(self) -> int | None:
        return None if self.cap is None else self.cap - self.peak

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "max_concurrent_runs": self.cap,
            "peak_in_flight": self.peak,
            "peak_at": iso(self.peak_at) if self.peak_at else None,
            "min_headroom": self.min_headroom,
            "headroom": [
                {"at": iso(at), "headroom" if self.cap is not None else "in_flight": value}
                for at, value in self.timeline[:SHOWN_HEADROOM]
            ],
            "headroom_total": len(self.timeline),
        }


@dataclass
class PreflightReport:
    start: datetime
    end: datetime
    tasks: list[TaskFires]
    quotas: list[QuotaHeadroom]
    warnings: list[PreflightWarning]

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": {"from": iso(self.start), "until": iso(self.end)},
            "fires_total": sum(t.fires for t in self.tasks),
            "tasks": [t.as_dict() for t in self.tasks],
            "quotas": [q.as_dict() for q in self.quotas],
            "warnings": [w.as_dict() for w in self.warnings],
        }


@dataclass(frozen=True)
class Planned:
    """A task the prediction considers, with what it knows of the deployed one."""

    task: Task
    source: str
    paused_at: datetime | None = None
    active_since: datetime | None = None


Durations = Callable[[Task], tuple[float, str]]


def planned_duration(task: Task, observed: Mapping[str, float], mode: str) -> tuple[float, str]:
    """How long a run of ``task`` is expected to last, and where that figure comes from."""
    if task.is_async:
        limit = float(task.max_duration or 0)
        behavior = task.target.behavior if isinstance(task.target, SimTarget) else None
        if behavior is not None and behavior.async_ is not None:
            return min(float(behavior.async_.duration), limit), "sim"
        if mode == "observed" and task.id in observed:
            return observed[task.id], "observed"
        return limit, "max_duration"
    timeout = float(task.timeout_s)
    if isinstance(task.target, SimTarget):
        behavior = task.target.behavior
        if behavior.hang or behavior.stall:
            return timeout, "sim"
        if behavior.duration_s is not None:
            return min(float(behavior.duration_s), timeout), "sim"
    if mode == "observed" and task.id in observed:
        return observed[task.id], "observed"
    return timeout, "timeout"


# --------------------------------------------------------------------------- the sweep
@dataclass
class Span:
    """Runs that found a slot full, with the runs holding it then; collisions that meet are one."""

    start: datetime
    end: datetime
    involved: dict[str, RunWindow]
    found_full: int = 0
    longest_wait: timedelta = timedelta(0)

    @property
    def runs(self) -> tuple[RunWindow, ...]:
        return tuple(sorted(self.involved.values(), key=lambda r: (r.start, r.run_id)))


def contention(windows: Iterable[RunWindow], cap: int, on_full: str = "wait") -> list[Span]:
    """Serve the runs first come, first served by ``cap`` slots, each run holding one for its
    window's length from when it gets it. A run that finds every slot taken collides with their
    holders: it waits for the first to free up (``on_full="wait"``, its window moves later, so
    the runs after it see it), is dropped (``skip``), or takes the slot from the holder
    (``cancel``). Collisions whose spans meet are one ``Span``. Runs whose windows only touch do
    not collide."""
    slots: list[tuple[datetime, int]] = []  # (free at, index of the holder): a heap
    items = sorted(windows, key=lambda w: (w.start, w.run_id))
    spans: list[Span] = []
    latest = datetime.min.replace(tzinfo=UTC)  # the latest a slot frees (the heap's largest)
    room = max(1, cap)
    for i, w in enumerate(items):
        current = spans[-1] if spans and w.start < spans[-1].end else None
        if len(slots) < room or slots[0][0] <= w.start:
            if len(slots) >= room:
                heapq.heappop(slots)
            heapq.heappush(slots, (w.end, i))
            latest = max(latest, w.end)
            if current is not None:  # it holds a slot while others wait: it is part of it
                current.involved[w.run_id] = w
            continue
        if current is None:  # the span opens: the runs holding the slots now are in it
            current = Span(w.start, w.start, {items[j].run_id: items[j] for _, j in slots[:HOLDERS_NAMED]})
            spans.append(current)
        wait = timedelta(0)
        if on_full == "wait":
            free, _ = heapq.heappop(slots)
            begins = free + POLL  # a waiting run looks again every poll: at worst one poll late
            wait = begins - w.start
            heapq.heappush(slots, (begins + (w.end - w.start), i))
            latest = max(latest, begins + (w.end - w.start))
        elif on_full == "cancel":
            heapq.heappop(slots)
            heapq.heappush(slots, (w.end, i))
        current.end = max(current.end, latest)
        current.involved[w.run_id] = w
        current.found_full += 1
        current.longest_wait = max(current.longest_wait, wait)
    return spans


def headroom(
    windows: Iterable[RunWindow], cap: int | None
) -> tuple[int, datetime | None, list[tuple[datetime, int]]]:
    """The most runs in flight at once, when, and each change of the free slots (or of the runs
    in flight, without a cap)."""
    edges = sorted(e for w in windows for e in ((w.start, 1), (w.end, -1)))
    in_flight, peak, peak_at = 0, 0, None
    timeline: list[tuple[datetime, int]] = []
    for at, step in edges:
        in_flight += step
        if in_flight > peak:
            peak, peak_at = in_flight, at
        value = in_flight if cap is None else cap - in_flight
        if timeline and timeline[-1][0] == at:
            timeline[-1] = (at, value)
        else:
            timeline.append((at, value))
    return peak, peak_at, timeline


# --------------------------------------------------------------------------- the prediction
@dataclass
class Prediction:
    """What ``predict`` needs besides the tasks."""

    start: datetime
    end: datetime
    conflicts: ConflictDefaults
    tenants: Mapping[str, TenantSettings | None]
    max_wait: Callable[[Task], float]
    durations: Durations
    workstreams: list[Workstream] = field(default_factory=list)
    resources: list[ResourceSpec] = field(default_factory=list)


def predict(planned: list[Planned], p: Prediction) -> PreflightReport:
    """The fires, the headroom and the warnings of ``planned`` over ``(p.start, p.end]``."""
    fires: list[TaskFires] = []
    windows: list[RunWindow] = []
    tasks = {pl.task.id: pl.task for pl in planned}
    share = min(MAX_FIRES_PER_TASK, max(MIN_FIRES_PER_TASK, MAX_FIRES // max(1, len(planned))))
    for pl in planned:
        row, runs = _task_windows(pl, p, share)
        fires.append(row)
        windows += runs
    step_windows, held = _workstream_windows(p, tasks)
    warnings: list[PreflightWarning] = []
    by_mutex: dict[str, list[RunWindow]] = defaultdict(list)
    by_task: dict[str, list[RunWindow]] = defaultdict(list)
    by_tenant: dict[str, list[RunWindow]] = defaultdict(list)
    for w in windows + step_windows:
        task = tasks[w.task_id]
        by_task[w.task_id].append(w)
        by_tenant[w.tenant].append(w)
        if task.mutex_group:
            by_mutex[task.mutex_group].append(w)
    for group, runs in sorted(by_mutex.items()):
        warnings += _collisions("mutex", f"mutex group {group}", runs, 1, p, tasks)
    caps = {r.id: r.max_holders for r in p.resources}
    for resource, runs in sorted(held.items()):
        warnings += _collisions("resource", f"resource {resource}", runs, caps.get(resource, 1), p, tasks)
    for task_id, runs in sorted(by_task.items()):
        task = tasks[task_id]
        if task.overlap is not OverlapPolicy.ALLOW_ALL:
            warnings += _collisions(
                "overlap",
                f"task {task_id} (overlap: {task.overlap.value})",
                runs,
                1,
                p,
                tasks,
                ON_FULL.get(task.overlap, "wait"),
            )
        elif p.conflicts.self_overlap == "warn":
            what = f"task {task_id} (overlap: allow_all)"
            warnings += _collisions("self_overlap", what, runs, 1, p, tasks, "skip")
    quotas: list[QuotaHeadroom] = []
    for tenant, runs in sorted(by_tenant.items()):
        settings = p.tenants.get(tenant)
        cap = settings.max_concurrent_runs if settings is not None else None
        peak, peak_at, timeline = headroom(runs, cap)
        quotas.append(QuotaHeadroom(tenant, cap, peak, peak_at, tuple(timeline)))
        if cap is not None:
            allowed = max(1, cap - p.conflicts.min_quota_headroom)
            warnings += _collisions(
                "tenant_quota", f"tenant {tenant} (max_concurrent_runs {cap})", runs, allowed, p, tasks
            )
    warnings += _storms(planned, p)
    warnings.sort(key=lambda w: (w.at, w.kind, w.tasks))
    return PreflightReport(p.start, p.end, fires, quotas, warnings)


def fires_within(
    task_id: str, spec: ScheduleSpec, start: datetime, end: datetime, origin: datetime | None, limit: int
) -> tuple[list[datetime], bool]:
    """The fires in ``(start, end]`` as the run ledger expects them, at most ``limit`` (and
    whether there were more): a Unix cron is stepped only as far as ``limit``."""
    if spec.cron is not None:
        policy = cron.DstPolicy(repeated=spec.dst.repeated, missing=spec.dst.missing)
        found = cron.unix_fire_times(spec.cron, spec.timezone, start, limit + 1, policy)
        at = [f.at for f in found if f.at <= end and spec.fires_at(f.at)]
    else:
        at = [f.at for f in expected_fires(task_id, spec, start, end, origin=origin)]
    return at[:limit], len(at) > limit


def _task_windows(pl: Planned, p: Prediction, limit: int) -> tuple[TaskFires, list[RunWindow]]:
    task = pl.task
    duration, source = p.durations(task)
    spec = task.schedule
    if spec is None:
        return TaskFires(
            task.id,
            task.tenant,
            pl.source,
            0,
            (),
            duration,
            source,
            "triggered by events or by hand: no fire times",
        ), []
    if task.state is TaskState.PAUSED:
        return TaskFires(
            task.id, task.tenant, pl.source, 0, (), duration, source, "paused: no fires until resumed"
        ), []
    at, cut = fires_within(task.id, spec, p.start, p.end, pl.active_since or p.start, limit)
    note = f"only the first {limit} fires are judged (until {iso(at[-1])})" if cut else ""
    offset = timedelta(seconds=spec.stagger_offset(task.id))
    jitter = timedelta(seconds=spec.jitter_window or 0)
    length = timedelta(seconds=duration) + jitter + DISPATCH_SLACK
    runs = [
        RunWindow(scheduled_run_id(task.id, f), task.id, task.tenant, f, f + offset, f + offset + length)
        for f in at
    ]
    row = TaskFires(task.id, task.tenant, pl.source, len(at), tuple(at[:SHOWN_FIRES]), duration, source, note)
    return row, runs


def _workstream_windows(
    p: Prediction, tasks: Mapping[str, Task]
) -> tuple[list[RunWindow], dict[str, list[RunWindow]]]:
    """The steps of each scheduled workstream's runs: a step starts when the steps it needs end
    (their latest ends), and holds its resources for its window."""
    windows: list[RunWindow] = []
    held: dict[str, list[RunWindow]] = defaultdict(list)
    for ws in p.workstreams:
        if ws.schedule is None:
            continue
        for fire in fires_within(ws.id, ws.schedule, p.start, p.end, None, MIN_FIRES_PER_TASK * 10)[0]:
            ends: dict[str, datetime] = {}
            pending = list(ws.steps)
            while pending:
                ready = [s for s in pending if all(n in ends for n in s.needs)]
                if not ready:
                    break  # a cycle: the loader refuses it; nothing more to predict
                for step in ready:
                    pending.remove(step)
                    task = tasks.get(step.task_id)
                    if task is None:
                        ends[step.task] = fire
                        continue
                    begins = max([fire, *(ends[n] for n in step.needs)])
                    ends[step.task] = begins + timedelta(seconds=p.durations(task)[0]) + DISPATCH_SLACK
                    window = RunWindow(
                        f"{ws.id}@{iso(fire)}#{step.task}",
                        task.id,
                        task.tenant,
                        fire,
                        begins,
                        ends[step.task],
                    )
                    windows.append(window)
                    for resource in step.resources:
                        held[resource].append(window)
    return windows, held


ON_FULL = {OverlapPolicy.SKIP: "skip", OverlapPolicy.CANCEL_OTHER: "cancel"}
OVERLAP_SAYS = {
    OverlapPolicy.SKIP: "; overlap: skip skips the later run",
    OverlapPolicy.BUFFER_ONE: "; overlap: buffer_one makes one run wait and skips a third",
    OverlapPolicy.CANCEL_OTHER: "; overlap: cancel_other cancels the running run",
}


def _collisions(
    kind: str,
    what: str,
    runs: list[RunWindow],
    cap: int,
    p: Prediction,
    tasks: Mapping[str, Task],
    on_full: str = "wait",
) -> list[PreflightWarning]:
    out: list[PreflightWarning] = []
    for span in contention(runs, cap, on_full):
        involved = span.runs
        names = tuple(sorted({r.task_id for r in involved}))
        wait = span.longest_wait
        limit = min(p.max_wait(tasks[t]) for t in names)
        severity = "high" if wait.total_seconds() > p.conflicts.mutex_max_wait else "warning"
        message = (
            f"{what}: {span.found_full} run(s) find it full ({cap} at once) from {iso(span.start)} to "
            f"{iso(span.end)} ({', '.join(names)}); the longest predicted wait is {_span_text(wait)}"
        )
        if kind == "overlap":
            message += OVERLAP_SAYS.get(tasks[names[0]].overlap, "")
        elif kind == "self_overlap":
            message = (
                f"{what}: runs overlap each other from {iso(span.start)} to {iso(span.end)}; they run "
                "side by side and each counts against the tenant's quota"
            )
            wait, severity = timedelta(0), "warning"
        if wait.total_seconds() > limit:
            severity = "high"
            message += f"; past max_wait ({limit:g}s) a run is dead-lettered with WAIT_EXHAUSTED"
        out.append(
            PreflightWarning(
                kind,
                span.start,
                span.end,
                names,
                tuple(r.run_id for r in involved),
                message,
                severity,
                {"found_full": span.found_full, "capacity": cap, "longest_wait_s": wait.total_seconds()},
            )
        )
    return out


def _storms(planned: list[Planned], p: Prediction) -> list[PreflightWarning]:
    """A task still paused at the end of the window, resumed then: the runs its catch-up policy
    releases at once (what ``Ledger.resume`` would send)."""
    out: list[PreflightWarning] = []
    for pl in planned:
        task = pl.task
        if task.state is not TaskState.PAUSED or task.schedule is None:
            continue
        since = max(pl.paused_at or p.start, p.end - MAX_LOOKBACK)
        missed = [f.at for f in expected_fires(task.id, task.schedule, since, p.end, origin=pl.active_since)]
        policy = task.catch_up
        if policy.policy == "skip":
            released: list[datetime] = []
        elif policy.policy == "latest":
            released = missed[-1:]
        else:
            recent = [at for at in missed if (p.end - at).total_seconds() <= policy.window]
            released = recent[-policy.max_runs :]
        if len(released) < p.conflicts.catch_up_storm:
            continue
        message = (
            f"task {task.id} is paused since {iso(since)}: resumed at {iso(p.end)} it releases "
            f"{len(released)} runs at once (catch_up: {policy.policy}, max_runs {policy.max_runs})"
        )
        if task.mutex_group or task.overlap is not OverlapPolicy.ALLOW_ALL:
            message += "; they share one slot, so they run one after another"
        out.append(
            PreflightWarning(
                "catch_up_storm",
                p.end,
                p.end,
                (task.id,),
                tuple(scheduled_run_id(task.id, at) for at in released),
                message,
                "high" if len(released) >= 2 * p.conflicts.catch_up_storm else "warning",
                {"released": len(released), "missed": len(missed), "policy": policy.policy},
            )
        )
    return out


def _span_text(wait: timedelta) -> str:
    seconds = int(wait.total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def preflight(
    planned: list[Planned],
    document: TaskDocument,
    start: datetime,
    end: datetime,
    conflicts: ConflictDefaults,
    tenants: Mapping[str, TenantSettings | None],
    max_wait: Callable[[Task], float],
    observed: Mapping[str, float] | None = None,
) -> PreflightReport:
    """``predict`` with each task's expected duration (``conflicts.expected_duration``, from
    ``observed`` medians where there are some) and the document's workstreams and resources."""
    cache: dict[str, tuple[float, str]] = {}

    def durations(task: Task) -> tuple[float, str]:
        if task.id not in cache:
            cache[task.id] = planned_duration(task, observed or {}, conflicts.expected_duration)
        return cache[task.id]

    prediction = Prediction(
        start,
        end,
        conflicts,
        tenants,
        max_wait,
        durations,
        list(document.workstreams),
        list(document.resources),
    )
    return predict(planned, prediction)
