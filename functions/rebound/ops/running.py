"""Listing runs by state, running runs included: the ``by_state`` index does not list them all.

A run running a clean attempt is stored without the index's keys
(``rebound.domain.run.in_state_index``): a clean run then never enters the index, two write units
fewer a run. Such a run started within ``UNLISTED_CLAIM_WINDOW`` of its ``scheduled_for`` and is
running for at most ``UNLISTED_RUNNING_FOR``, so each task's runs scheduled since
``running_unlisted_since`` (a query of ``by_task_keys`` and a ``BatchGetItem`` of what it names)
hold every one of them. The listings and counts of the operations layer read ``running`` as
both; the sweeper reads only the index (it watches the runs the index lists; the others' own
messages watch them).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from rebound.domain.run import Run, RunState, running_unlisted_since, unlisted_running
from rebound.domain.timefmt import iso
from rebound.engine.ports import RunPage, Store
from rebound.engine.ports.store import parse_run_cursor, run_cursor

READERS = 8
"""Tasks read at once (one query of ``by_task_keys`` each)."""


def unlisted(store: Store, now: datetime) -> list[Run]:
    """The runs running a clean attempt, which ``by_state`` does not list."""
    since = running_unlisted_since(now)
    task_ids = [stored.task.id for stored in store.list_tasks()]

    def of(task_id: str) -> list[Run]:
        return [r for r in store.runs_for_task(task_id, since=since) if unlisted_running(r)]

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return [run for runs in pool.map(of, task_ids) for run in runs]


def running(store: Store, now: datetime) -> list[Run]:
    """Every running run, latest change first: those ``by_state`` lists and the others."""
    found = {r.run_id: r for r in store.runs_in_state(RunState.RUNNING)}
    for run in unlisted(store, now):
        if run.run_id not in found or found[run.run_id].rev < run.rev:
            found[run.run_id] = run
    runs = [r for r in found.values() if r.state is RunState.RUNNING]
    return sorted(runs, key=lambda r: (r.updated_at, r.run_id), reverse=True)


def in_state(store: Store, state: RunState, now: datetime) -> list[Run]:
    """Runs in ``state``: the ``by_state`` index, and for ``running`` the runs it leaves out."""
    return running(store, now) if state is RunState.RUNNING else store.runs_in_state(state)


def page(
    store: Store,
    state: RunState,
    now: datetime,
    *,
    since: datetime | None = None,
    limit: int = 100,
    after: str | None = None,
) -> RunPage:
    """``Store.runs_in_state_page``, with every running run for ``running``."""
    if state is not RunState.RUNNING:
        return store.runs_in_state_page(state, since=since, limit=limit, after=after)
    runs = [r for r in running(store, now) if since is None or r.updated_at >= since]
    if after is not None:
        bound = parse_run_cursor(after)
        runs = [r for r in runs if (iso(r.updated_at), r.run_id) < bound]
    shown = runs[:limit]
    return RunPage(shown, run_cursor(shown[-1]) if len(runs) > limit else None)
