"""A task's runs, mixed into ``DynamoStore``: its ``by_task_keys`` entries, and the clean
successes found by their fires (``rebound.domain.fire_segments``), merged in time order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rebound.adapters.dynamo.codec import to_item
from rebound.domain.fire_segments import fire_windows
from rebound.domain.retention import Retention, forgotten_runs_before
from rebound.domain.run import Run
from rebound.domain.stored import StoredTask
from rebound.domain.timefmt import iso

BATCH = 100
"""Keys a ``BatchGetItem`` reads at most."""


@dataclass(frozen=True)
class _Page:
    """The part of a task's runs a listing asks for (``runs_for_task``'s arguments)."""

    since: datetime | None
    until: datetime | None
    newest_first: bool
    limit: int | None


class DynamoTaskRuns:
    """``runs_for_task`` (``rebound.engine.ports.Store``)."""

    if TYPE_CHECKING:  # what it uses of ``DynamoStore``
        runs_by_task: str
        _by_task_keys_only: bool
        now: Callable[[], datetime]
        retention: Retention | None
        _query: Callable[..., Iterator[dict[str, Any]]]

        def get_runs(self, run_ids: list[str]) -> dict[str, Run]: ...
        def get_task(self, task_id: str) -> StoredTask | None: ...

    def runs_for_task(
        self,
        task_id: str,
        since: datetime | None = None,
        until: datetime | None = None,
        newest_first: bool = True,
        limit: int | None = None,
    ) -> list[Run]:
        """The task's runs by ``scheduled_for`` (both bounds included): those ``by_task_keys``
        lists, and those found by the fires of its schedule's segments, at most ``limit``."""
        page = _Page(since, until, newest_first, limit)
        listed = self._listed(task_id, page)
        fired = self._fired(task_id, page)
        if not fired:
            return listed
        merged = {run.run_id: run for run in (*listed, *fired)}
        ordered = sorted(
            merged.values(), key=lambda run: (run.scheduled_for, run.run_id), reverse=newest_first
        )
        return ordered[:limit] if limit is not None else ordered

    def _listed(self, task_id: str, page: _Page) -> list[Run]:
        since, until = page.since, page.until
        cond = "task_id = :t"
        values: dict[str, Any] = {":t": task_id}
        if since and until:
            cond += " AND scheduled_for BETWEEN :a AND :b"
            values.update({":a": iso(since), ":b": iso(until)})
        elif since:
            cond += " AND scheduled_for >= :a"
            values[":a"] = iso(since)
        elif until:
            cond += " AND scheduled_for <= :b"
            values[":b"] = iso(until)
        items = self._query(
            "runs",
            f"list runs of {task_id}",
            IndexName=self.runs_by_task,
            KeyConditionExpression=cond,
            ExpressionAttributeValues=to_item(values),
            ScanIndexForward=not page.newest_first,
            max_items=page.limit,
        )
        if not self._by_task_keys_only:
            return [Run.model_validate(d) for d in items]
        # Keys alone: the runs themselves, read in the index's order (a run the index still lists
        # but that is gone by now is left out).
        run_ids = [str(d["run_id"]) for d in items]
        found = self.get_runs(run_ids)
        return [found[i] for i in run_ids if i in found]

    def _fired(self, task_id: str, page: _Page) -> list[Run]:
        """The runs of the fires the task's segments owe in the window, in order, read by key a
        day of fires at a time (``BatchGetItem``, 100 keys a call) until ``limit`` are found."""
        stored = self.get_task(task_id)
        if stored is None or not stored.fire_segments:
            return []
        now, since, limit = self.now(), page.since, page.limit
        expired = forgotten_runs_before(self.retention, now)  # a clean success is gone by then
        if expired is not None:
            since = expired if since is None else max(since, expired)
        runs: list[Run] = []
        windows = fire_windows(
            stored.fire_segments, task_id, since, page.until, now, newest_first=page.newest_first
        )
        for window in windows:
            for start in range(0, len(window), BATCH):
                ids = [run_id for _, run_id in window[start : start + BATCH]]
                found = self.get_runs(ids)
                runs.extend(found[i] for i in ids if i in found)
                if limit is not None and len(runs) >= limit:
                    return runs[:limit]
        return runs
