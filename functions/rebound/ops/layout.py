"""One-time passes over the runs table that change how items written by an earlier version are
stored, never what they say: ``rebound migrate retention`` (``rebound.ops.retention``),
``rebound migrate state-index`` and ``rebound migrate relist-running`` (here).

**The sparse ``by_state`` index.** Since 2026-11-29 a run that succeeded at the first attempt of
its budget is stored without the ``by_state`` index's keys (``rebound.domain.run.in_state_index``),
so the index holds only the runs an operator or the sweeper looks for, and a clean run costs one
index write less. Runs that succeeded before keep their entry until they expire (retention) or
``migrate_state_index`` moves them: one conditional update each moves the index's keys into the
item's document, guarded by the revision the scan read (no read of its own). No audit record is
written, and a reader sees no change except that ``runs list --status succeeded`` and the recovery
counts stop listing them. The old layout reads as it always did, so the pass is optional and may
run at any time after the deploy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rebound.domain.run import (
    Run,
    RunState,
    found_by_fire,
    in_state_index,
    running_unlisted_since,
    unlisted_running,
)
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.engine.ports import Store

AUDIT_SEGMENTS = 4
"""Parallel scan segments of the audit table ``unwritten_claims`` reads, one after another."""

PAGE = 100


@dataclass
class RunsPass:
    """What a pass did: runs examined, those it applies to (``matched``), those it changed (or
    would, in a dry run) and those it skipped (done already, or changed since they were read).
    ``matched_as`` and ``changed_as`` name the two counts in the pass's JSON."""

    matched_as: str
    changed_as: str
    dry_run: bool = False
    examined: int = 0
    matched: int = 0
    changed: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            self.matched_as: self.matched,
            self.changed_as: self.changed,
            "skipped": self.skipped,
            "dry_run": self.dry_run,
        }


def run_pass(
    deps: Deps,
    report: RunsPass,
    applies: Callable[[Run], bool],
    write: Callable[[Run], bool],
    progress: Callable[[int], None] | None = None,
) -> RunsPass:
    """Every run of the table, a page at a time (``progress`` hears each page's size): ``write``
    each run ``applies`` to (True: changed), unless the pass is a dry run. Idempotent when
    ``write`` is."""
    after: str | None = None
    while True:
        runs, after = deps.store.scan_runs_page(limit=PAGE, after=after)
        for run in runs:
            report.examined += 1
            if not applies(run):
                continue
            report.matched += 1
            if report.dry_run or write(run):
                report.changed += 1
            else:
                report.skipped += 1
        if progress:
            progress(len(runs))
        if after is None:
            return report


def migrate_state_index(
    deps: Deps, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
) -> RunsPass:
    """Every clean success of the table out of ``by_state`` (``clean_successes``, ``moved``). A dry
    run counts the clean successes: it cannot tell which are out already without a read each."""
    return run_pass(
        deps,
        RunsPass("clean_successes", "moved", dry_run=dry_run),
        lambda run: run.state is RunState.SUCCEEDED and not in_state_index(run.model_dump(mode="json")),
        deps.store.unlist_clean_success,
        progress,
    )


def relist_by_fire(
    deps: Deps, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
) -> RunsPass:
    """Every clean success found by its fire back in ``by_task_keys`` (``found_by_fire``,
    ``relisted``): before a rollback to an earlier version, which lists a task's runs from the
    index alone, and once more after it (a run that succeeded meanwhile)."""
    return run_pass(
        deps,
        RunsPass("found_by_fire", "relisted", dry_run=dry_run),
        lambda run: found_by_fire(run.model_dump(mode="json")),
        deps.store.relist_by_fire,
        progress,
    )


def relist_running(deps: Deps, *, dry_run: bool = False) -> RunsPass:
    """Every run running a clean attempt back in ``by_state`` (``running_unlisted``, ``relisted``):
    before a rollback to an earlier version, whose sweeper and executor find a running run through
    the index alone, and once more after it (a run claimed meanwhile). Reads only the runs that can
    be such (``unlisted``), not the table."""
    report = RunsPass("running_unlisted", "relisted", dry_run=dry_run)
    runs = unlisted(deps.store, deps.clock.now())
    report.examined = report.matched = len(runs)
    for run in runs:
        if dry_run or deps.store.relist_running(run):
            report.changed += 1
        else:
            report.skipped += 1
    return report


def unlisted(store: Store, now: datetime) -> list[Run]:
    """The runs running a clean attempt that ``by_state`` does not list: each task's runs
    scheduled since ``running_unlisted_since`` (a query of ``by_task_keys`` and a ``BatchGetItem``
    of what it names), and those whose claim committed its record alone (``unwritten_claims``)."""
    since = running_unlisted_since(now)
    found = {
        run.run_id: run
        for stored in store.list_tasks()
        for run in store.runs_for_task(stored.task.id, since=since)
        if unlisted_running(run)
    }
    for run in unwritten_claims(store, since):
        found.setdefault(run.run_id, run)
    return [run for run in found.values() if unlisted_running(run)]


def unwritten_claims(store: Store, since: datetime) -> list[Run]:
    """The new runs whose claim committed its audit record alone, since ``since``, whose item is
    not written yet (``rebound.domain.run.item_may_wait``): a scan of the audit table for run
    trails of one record that started an attempt, each then read with ``get_run``, which writes
    its item from the record."""
    low = iso(since)
    candidates = [
        subject.removeprefix("run#")
        for segment in range(AUDIT_SEGMENTS)
        for part in store.audit_segment_parts(segment, AUDIT_SEGMENTS)
        for subject, trail in part.items()
        if subject.startswith("run#")
        and len(trail) == 1
        and trail[0].get("to_state") == RunState.RUNNING.value
        and str(trail[0].get("at")) >= low
    ]
    stored = store.existing_runs(candidates, consistent=False) if candidates else set()
    runs = [store.get_run(run_id) for run_id in candidates if run_id not in stored]
    return [run for run in runs if run is not None]
