"""``make bench``: how long a day of schedule time takes, written to a file (never asserted in a test).

Runs ``scenarios/day-100-tasks.yaml`` (24 h, 100 tasks on 5-minute schedules: 28,900 runs)
through ``rebound local simulate``'s engine with the ``direct`` transport and records wall time
per phase (startup, run, settle, report and invariants), CPU time, the machine's load, and
whether every invariant held. The target is a total under 120 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DAY_SCENARIO = REPO / "scenarios" / "day-100-tasks.yaml"
TARGET_S = 120.0


def bench_scenario(path: Path, transport: str = "direct") -> dict[str, Any]:
    from rebound_local.scenario import load_scenario
    from rebound_local.simulate import Simulation

    wall = time.monotonic()
    cpu = time.process_time()
    loaded = load_scenario(path)
    load_s = time.monotonic() - wall
    result = Simulation(loaded, transport=transport).run()
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
        "invariants_held": result.ok,
        "failed_invariants": result.failed,
        "seconds": {
            "load_scenario": round(load_s, 3),
            **report["timing"],
            "total_with_load": round(total, 3),
        },
        "cpu_seconds": round(time.process_time() - cpu, 3),
        "target_seconds": TARGET_S,
        "within_target": total < TARGET_S,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path("bench/results.json"))
    parser.add_argument("--scenario", type=Path, default=DAY_SCENARIO)
    parser.add_argument("--transport", choices=["direct", "inproc", "http"], default="direct")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    figures = bench_scenario(args.scenario, args.transport)
    results = {
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "simulate_day": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    s = figures["seconds"]
    verdict = "held" if figures["invariants_held"] else "FAILED: " + ", ".join(figures["failed_invariants"])
    print(
        f"{figures['schedule_hours']:g} h of schedule time, {figures['tasks']} tasks, "
        f"{figures['runs']} runs: "
        f"total {s['total_with_load']:.1f} s (startup {s['startup_s']:.1f}, run {s['run_s']:.1f}, "
        f"settle {s['settle_s']:.1f}, report+invariants {s['report_s']:.1f}); "
        f"invariants {verdict}; target {TARGET_S:.0f} s {'met' if figures['within_target'] else 'MISSED'}"
        f" -> {args.out}"
    )
    return 0 if figures["invariants_held"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
