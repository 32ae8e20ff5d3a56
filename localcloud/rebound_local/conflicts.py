"""The pre-flight's conflict-warning hit rate on a simulated day (``make bench``, group ``conflicts``).

1. **Predict.** The pre-flight (``rebound.domain.prediction.preflight``, what ``rebound tasks dryrun``
   runs) judges the scenario's tasks and tenants over the scenario's window, as a dry run before
   they were applied would: nothing deployed, durations as the task file gives them, the shipped
   ``conflicts:`` defaults.
2. **Simulate.** The scenario runs on the local cloud (``rebound_local.simulate``); its report's
   ``collisions`` lists every run that met a busy slot (a wait for a mutex, a tenant's quota or an
   overlap slot, an ``overlap: skip``, an ``overlap: cancel_other``), from the runs' audit chains.
3. **Score.** ``rebound.domain.prediction.hit_rate``: the collisions whose run a conflict warning named
   (among the runs it said meet at that instant), over every collision.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from rebound.config.loader import load_policy_book, resolve_policy
from rebound.domain.prediction.hit_rate import Collision, hit_rate
from rebound.domain.prediction.preflight import Planned, PreflightReport, preflight
from rebound.domain.task import Task
from rebound.domain.workstreams import TaskDocument
from rebound.settings import default_config_dir
from rebound_local.scenario import LoadedScenario, load_scenario
from rebound_local.simulate import Simulation, ending_with

BEFORE = timedelta(seconds=1)


def scenario_preflight(loaded: LoadedScenario) -> PreflightReport:
    """The pre-flight of a scenario's tasks over its window, with nothing deployed."""
    sc = loaded.scenario
    book = load_policy_book(default_config_dir())
    tasks = ending_with(loaded.tasks, sc.end)

    def max_wait(task: Task) -> float:
        return float(resolve_policy(task, book).max_wait)

    document = TaskDocument(tasks=tasks, workstreams=loaded.workstreams, resources=loaded.resources)
    return preflight(
        [Planned(t, "file") for t in tasks],
        document,
        sc.start - BEFORE,  # the window's first fires are due at its start: look from just before
        sc.end,
        book.planning.conflicts,
        dict(sc.tenants),
        max_wait,
    )


def measure(path: Path, transport: str = "direct") -> dict[str, Any]:
    """Predict, simulate and score one scenario; the figures ``make bench`` records."""
    loaded = load_scenario(path)
    predicted = scenario_preflight(loaded)
    result = Simulation(loaded, transport=transport).run()
    recorded = result.report["collisions"]
    collisions = [Collision(c["run_id"], c["reason"]) for c in recorded["runs"]]
    score = hit_rate(predicted.warnings, collisions)
    kinds: dict[str, int] = {}
    for warning in predicted.warnings:
        kinds[warning.kind] = kinds.get(warning.kind, 0) + 1
    return {
        "scenario": path.name,
        "fires_predicted": sum(t.fires for t in predicted.tasks),
        "warnings_by_kind": dict(sorted(kinds.items())),
        "collisions_by_reason": recorded["by_reason"],
        **score.as_dict(),
        "invariants_held": result.ok,
        "failed_invariants": result.failed,
    }
