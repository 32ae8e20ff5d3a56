"""Scenario groups: a simulation's figures (day, stress, hostile, races), the outage with and without
budgets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rebound_local.bench.common import OUTAGE_SCENARIO, REPO


def bench_scenario(
    path: Path, transport: str = "direct", *, aws_sized: bool = False, call_sites: bool = False
) -> dict[str, Any]:
    """``aws_sized``: resources named as CloudFormation names them and the audit key by its ARN,
    so every item has its size on AWS (the cost figures); ``call_sites``: the bill's DynamoDB units
    by call site too."""
    from rebound_local.scenario import load_scenario
    from rebound_local.simulate import Simulation

    wall = time.monotonic()
    cpu = time.process_time()
    loaded = load_scenario(path)
    load_s = time.monotonic() - wall
    result = Simulation(loaded, transport=transport, aws_sized=aws_sized, call_sites=call_sites).run()
    return scenario_figures(path, transport, result, wall, cpu, load_s)


def scenario_figures(
    path: Path, transport: str, result: Any, wall: float, cpu: float, load_s: float
) -> dict[str, Any]:
    report = result.report
    total = time.monotonic() - wall
    return {
        "scenario": str(path.relative_to(REPO) if path.is_relative_to(REPO) else path),
        "transport": transport,
        "tasks": report["scenario"]["tasks"],
        "schedule_hours": report["scenario"]["duration_s"] / 3600,
        "runs": report["summary"]["runs"],
        "runs_by_state": report["summary"]["runs_by_state"],
        "aws_calls": sum(report["aws_calls"].values()),
        "dispatch_latency": report["dispatch_latency"],
        "peak_concurrency": report["runtime"]["peak_concurrency"],
        "faults": {k: v for k, v in report["faults"].items() if k != "sabotage"},
        "live_messages_per_run_peak": report["messages"]["live_per_run_peak"],
        "invariants": {name: inv["detail"] for name, inv in report["invariants"].items()},
        "invariants_held": result.ok,
        "failed_invariants": result.failed,
        "billing": report.get("billing"),
        "seconds": {
            "load_scenario": round(load_s, 3),
            **report["timing"],
            "total_with_load": round(total, 3),
        },
        "cpu_seconds": round(time.process_time() - cpu, 3),
    }


def bench_outage(transport: str = "direct") -> dict[str, Any]:
    """The shared-target outage with retry budgets (as the scenario says) and without."""
    from rebound_local import budgets
    from rebound_local.scenario import load_scenario
    from rebound_local.simulate import Simulation

    wall = time.monotonic()
    loaded = load_scenario(OUTAGE_SCENARIO)
    on = Simulation(loaded, transport=transport).run()
    off = Simulation(budgets.without_budgets(loaded), transport=transport).run()
    return {
        "scenario": str(OUTAGE_SCENARIO.relative_to(REPO)),
        "runs": on.report["summary"]["runs"],
        "invariants_held": on.ok and off.ok,
        "failed_invariants": on.failed + off.failed,
        **budgets.comparison(on.report["target_budgets"], off.report["target_budgets"]),
        "seconds": round(time.monotonic() - wall, 3),
    }
