"""The recovery view: runs by state over the last hour and day, and the retry success rate
(``GET /runs/recovery``, the console's first screen)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from rebound.domain.run import RunState
from rebound.domain.timefmt import iso
from rebound.engine.ports import Store

RETRY_SUCCESS_TARGET = 0.9
"""The share of retried runs that should end up succeeding."""
COUNT_AT_MOST = 1000
"""Recovery counts stop here (the console says "more than")."""
RATE_SAMPLE = 200
"""The retry success rate reads at most this many of the day's latest finished runs per outcome."""
COUNTED_AS = {RunState.SUCCEEDED: "succeeded_after_retry"}
"""What ``recovery`` names a state's count when the sparse ``by_state`` index counts only some of
its runs (``rebound.domain.run.in_state_index``)."""


def recovery(
    store: Store, now: datetime, *, at_most: int = COUNT_AT_MOST, sample: int = RATE_SAMPLE
) -> dict[str, Any]:
    """Runs by state changed within the last hour and day (counting queries on the ``by_state``
    index, each stopping just past ``at_most``; a clean success is not in the index, so
    ``succeeded_after_retry`` counts only the others: the dashboard's execution success
    metric counts every success), and the retry success rate against
    ``RETRY_SUCCESS_TARGET``: of the runs that finished within the day after a retry (more
    than one attempt in their budget), the share that succeeded rather than being
    dead-lettered, over the latest ``sample`` finished runs of each, also hour by hour (``by_hour``,
    the last 24 hours, oldest first). Never a scan."""
    windows = {"hour": now - timedelta(hours=1), "day": now - timedelta(days=1)}
    counts = {
        name: {
            COUNTED_AS.get(s, s.value): store.count_runs_in_state(s, since=since, at_most=at_most)
            for s in RunState
        }
        for name, since in windows.items()
    }
    retried: dict[str, int] = {}
    complete = True
    hour0 = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    tally: list[dict[str, int]] = [{"succeeded": 0, "dead_lettered": 0} for _ in range(24)]
    for state in (RunState.SUCCEEDED, RunState.DEAD_LETTERED):
        page = store.runs_in_state_page(state, since=windows["day"], limit=sample)
        runs = [r for r in page.runs if r.attempt > r.budget_start + 1]
        retried[state.value] = len(runs)
        complete = complete and page.cursor is None
        for r in runs:
            slot = int((r.updated_at - hour0).total_seconds() // 3600)
            if 0 <= slot < len(tally):
                tally[slot][state.value] += 1
    finished = sum(retried.values())
    rate = retried[RunState.SUCCEEDED.value] / finished if finished else None
    return {
        "at": iso(now),
        "at_most": at_most,
        "windows": counts,
        "retry_success": {
            "window": "day",
            "succeeded": retried[RunState.SUCCEEDED.value],
            "dead_lettered": retried[RunState.DEAD_LETTERED.value],
            "rate": None if rate is None else round(rate, 4),
            "target": RETRY_SUCCESS_TARGET,
            "meets_target": None if rate is None else rate >= RETRY_SUCCESS_TARGET,
            "sampled": not complete,
            "by_hour": [
                {"hour": iso(hour0 + timedelta(hours=n)), **counted} for n, counted in enumerate(tally)
            ],
        },
    }
