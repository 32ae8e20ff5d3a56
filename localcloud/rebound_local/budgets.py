"""Retry budgets per target in a simulation: the report's section, and the side-by-side comparison.

``section`` reads what a finished simulation left (runs, work orders, audit chains, target calls):
the targets' work orders, the dead letters, the runs held and released, the pace of the release
and how long after the last failed call every held run had succeeded. ``without_budgets`` is the
same scenario with every task's budget turned off, which ``rebound local simulate
--compare-budgets`` runs second; ``print_comparison`` shows both side by side.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from rebound.domain.retry_policy import PolicyOverride, TargetBudget
from rebound.domain.task import Task
from rebound.domain.timefmt import iso, parse_utc

if TYPE_CHECKING:
    from rich.console import Console

    from rebound_local.instrument import TargetCall
    from rebound_local.scenario import LoadedScenario

TARGET_ORDER_PREFIX = "target#"


def section(
    runs: list[dict[str, Any]],
    orders: list[dict[str, Any]],
    chains: dict[str, list[dict[str, Any]]],
    calls: list[TargetCall],
) -> dict[str, Any]:
    """What retry budgets did in one simulation."""
    held_runs: set[str] = set()
    holds = 0
    released_by_minute: Counter[str] = Counter()
    probes = 0
    for subject, chain in chains.items():
        if not subject.startswith("run#"):
            continue
        for record in chain:
            reason = (record.get("evidence") or {}).get("reason")
            if record["action"] == "held" and reason == "target-unhealthy":
                held_runs.add(subject.removeprefix("run#"))
                holds += 1
            elif record["action"] == "released":
                if reason == "probe":
                    probes += 1
                else:
                    released_by_minute[str(record["at"])[:16]] += 1
    target_orders = [o for o in orders if str(o.get("subject", "")).startswith(TARGET_ORDER_PREFIX)]
    dead = [r for r in runs if r["state"] == "dead_lettered"]
    failed_calls = [c for c in calls if not c.ok]
    last_failure = max((c.at for c in failed_calls), default=None)
    recovered_at = None
    for run in runs:
        if run["run_id"] in held_runs and run["state"] == "succeeded":
            ended = (run.get("attempts") or [{}])[-1].get("ended_at")
            if ended and (recovered_at is None or parse_utc(str(ended)) > recovered_at):
                recovered_at = parse_utc(str(ended))
    return {
        "target_work_orders": len(target_orders),
        "target_work_orders_resolved": sum(1 for o in target_orders if o.get("state") == "resolved"),
        "work_orders": len(orders),
        "dead_letters": len(dead),
        "runs_held": len(held_runs),
        "holds": holds,
        "probes": probes,
        "released": sum(released_by_minute.values()),
        "released_peak_per_minute": max(released_by_minute.values(), default=0),
        "target_calls": len(calls),
        "failed_target_calls": len(failed_calls),
        "last_failed_call": iso(last_failure) if last_failure else None,
        "held_runs_recovered_at": iso(recovered_at) if recovered_at else None,
        "recovery_s": round((recovered_at - last_failure).total_seconds(), 3)
        if recovered_at and last_failure and recovered_at > last_failure
        else None,
        "runs_succeeded": sum(1 for r in runs if r["state"] == "succeeded"),
    }


def _off(task: Task) -> Task:
    spec = task.retry_policy
    off = TargetBudget(enabled=False)
    if isinstance(spec, str):
        override = PolicyOverride(extends=spec, target_budget=off)
    else:
        budget = (spec.target_budget or TargetBudget()).model_copy(update={"enabled": False})
        override = spec.model_copy(update={"target_budget": budget})
    return task.model_copy(update={"retry_policy": override})


def without_budgets(loaded: LoadedScenario) -> LoadedScenario:
    """The same scenario with every task's retry budget turned off."""
    return loaded.model_copy(update={"tasks": [_off(t) for t in loaded.tasks]})


ROWS = (
    ("target work orders", "target_work_orders"),
    ("work orders (all)", "work_orders"),
    ("dead letters", "dead_letters"),
    ("runs held", "runs_held"),
    ("probes", "probes"),
    ("released (peak per minute)", "released_peak_per_minute"),
    ("target calls", "target_calls"),
    ("failed target calls", "failed_target_calls"),
    ("runs succeeded", "runs_succeeded"),
    ("recovery after the last failed call (s)", "recovery_s"),
)


def comparison(with_budgets: dict[str, Any], without: dict[str, Any]) -> dict[str, Any]:
    return {"with_budgets": with_budgets, "without_budgets": without}


def print_comparison(console: Console, compared: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="Retry budgets per target: with and without")
    table.add_column("")
    table.add_column("with budgets", justify="right")
    table.add_column("without", justify="right")
    for label, key in ROWS:
        on, off = compared["with_budgets"].get(key), compared["without_budgets"].get(key)
        table.add_row(label, "-" if on is None else str(on), "-" if off is None else str(off))
    console.print(table)
