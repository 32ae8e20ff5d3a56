"""The pre-flight against the environment: ``rebound tasks dryrun``, ``tasks apply`` (which runs it
first) and ``POST /tasks/dryrun``. The prediction itself is pure (``rebound.domain.prediction.preflight``);
``PreflightOps`` adds the deployed tasks, the tenants' settings and recent durations."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from rebound.config.loader import load_task_document, parse_task_document
from rebound.domain.errors import ValidationFailed
from rebound.domain.flags import TASK_SCHEDULER_V3
from rebound.domain.prediction.preflight import (
    DEFAULT_WINDOW,
    MAX_WINDOW,
    OBSERVED_AT_MOST,
    OBSERVED_ATTEMPTS,
    Planned,
    PreflightReport,
    preflight,
)
from rebound.domain.schedule_spec import OverlapPolicy
from rebound.domain.stored import StoredTask
from rebound.domain.task import Task, TenantSettings
from rebound.domain.workstreams import TaskDocument
from rebound.engine.deps import Deps
from rebound.ops.common import parse_seconds


def parse_window(text: str, *, option: str = "window") -> timedelta:
    """A look-ahead such as ``24h``: between a minute and ``MAX_WINDOW``; ``ValidationFailed``
    naming ``option`` otherwise."""
    seconds = parse_seconds(text, option=option)
    if not 60 <= seconds <= MAX_WINDOW.total_seconds():
        raise ValidationFailed(f"{option}: between 1m and 7d, got {text!r}", key_path=option)
    return timedelta(seconds=seconds)


class PreflightOps:
    """The dry run against the environment: the deployed tasks, tenants and recent durations."""

    def __init__(self, deps: Deps, sees: Callable[[str], bool] | None = None) -> None:
        """``sees``: whether the caller may see a tenant's things (``Guard.sees``). The deployed
        tasks of the tenants it does not see are left out of the prediction, so no answer names
        them; ``None``: every tenant (an administrator, the engine)."""
        self.deps = deps
        self.store = deps.store
        self.sees = sees
        self._stored: list[StoredTask] | None = None

    def load(self, path: Path | str) -> TaskDocument:
        return load_task_document(path, self.deps.policies.book, self._known())

    def parse(self, document: Any, file: str = "request body") -> TaskDocument:
        return parse_task_document(document, file, self.deps.policies.book, self._known())

    def _known(self) -> dict[str, str]:
        return {s.task.id: s.task.tenant for s in self._all()}

    def _all(self) -> list[StoredTask]:
        if self._stored is None:
            self._stored = self.store.list_tasks()
        return self._stored

    def _deployed(self) -> list[StoredTask]:
        sees = self.sees
        return [s for s in self._all() if sees is None or sees(s.task.tenant)]

    def dryrun(self, document: TaskDocument, window: timedelta = DEFAULT_WINDOW) -> PreflightReport:
        now = self.deps.clock.now()
        deployed = {s.task.id: s for s in self._deployed()}
        planned: list[Planned] = []
        for task in document.tasks:
            was = deployed.get(task.id)
            paused_at = was.paused_at if was is not None and was.paused else None
            planned.append(Planned(task, "file", paused_at, was.active_since if was else None))
        named = {t.id for t in document.tasks}
        planned += [
            Planned(s.task, "deployed", s.paused_at, s.active_since)
            for s in deployed.values()
            if s.task.id not in named
        ]
        tenants: dict[str, TenantSettings | None] = {}
        for pl in planned:
            tenant = pl.task.tenant
            if tenant not in tenants:
                tenants[tenant] = document.tenants.get(tenant) or self.store.get_tenant(tenant)
        planning = self.deps.policies.book.planning
        observed: dict[str, float] = {}
        if planning.conflicts.expected_duration == "observed":
            steps = {step.task_id for ws in document.workstreams for step in ws.steps}
            pooled = [
                pl.task.id
                for pl in planned
                if pl.task.id in deployed and _shares_a_slot(pl.task, tenants, steps)
            ]
            for task_id in pooled[:OBSERVED_AT_MOST]:
                median = self._observed(task_id)
                if median is not None:
                    observed[task_id] = median
        policies = self.deps.policies
        waits: dict[str, float] = {}

        def max_wait(task: Task) -> float:
            """Its policy's ``max_wait``, read once per task for the whole prediction (a collision
            asks for it each time it meets the task)."""
            if task.id not in waits:
                waits[task.id] = float(policies.for_task_or_default(task)[0].max_wait)
            return waits[task.id]

        report = preflight(
            planned, document, now, now + window, planning.conflicts, tenants, max_wait, observed
        )
        if not self.deps.flags.enabled(TASK_SCHEDULER_V3):
            # task-scheduler-v3 off: the fires and quotas are predicted, no warning is given
            return replace(report, warnings=[])
        return report

    def _observed(self, task_id: str) -> float | None:
        """The median duration of the task's last attempts that ended (one page of ``by_task_keys``)."""
        runs = self.store.runs_for_task(task_id, newest_first=True, limit=OBSERVED_ATTEMPTS)
        seconds = [a.duration_ms / 1000.0 for r in runs for a in r.attempts if a.duration_ms is not None]
        return statistics.median(seconds) if seconds else None


def _shares_a_slot(task: Task, tenants: Mapping[str, TenantSettings | None], steps: set[str]) -> bool:
    settings = tenants.get(task.tenant)
    return bool(
        task.mutex_group
        or task.overlap is not OverlapPolicy.ALLOW_ALL
        or (settings is not None and settings.max_concurrent_runs)
        or task.id in steps
    )
