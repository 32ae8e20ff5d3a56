"""``make bench``: the simulator's figures, written to a file (never asserted in a test).

Two scenarios, both through ``rebound local simulate``'s engine with the ``direct`` transport:

- ``day``: ``scenarios/day-100-tasks.yaml``, 24 h of 100 tasks on 5-minute schedules (28,900
  runs). Wall time per phase (startup, run, settle, report and invariants), CPU time and the
  machine's load. The target is a total under 120 s on a 2-core machine.
- ``stress``: ``scenarios/stress-10k.yaml``, 10,000 tasks due in the same minute with AWS-like
  latency and scaling modelled in virtual time. Dispatch latency p50/p99/max and the share of
  runs started within 60 s of their scheduled time (the scenario expects at least 99 %).
- ``hostile``: ``scenarios/hostile-day.yaml``, 24 h of 100 tasks under every fault of the hostile
  local cloud. Its wall time, what was injected, and the invariants: 0 lost, 0 doubled, 0 stuck,
  0 leaked slots, at most one live message per run.
- ``console``: the console's first screen with 100,000 runs in the tables
  (``rebound_local.bench_console``): cold and warm, against a 1 s target.

Each scenario's invariants must hold; the exit code is non-zero if any failed.
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
SCENARIOS = {
    "day": REPO / "scenarios" / "day-100-tasks.yaml",
    "stress": REPO / "scenarios" / "stress-10k.yaml",
    "hostile": REPO / "scenarios" / "hostile-day.yaml",
}
DAY_TARGET_S = 120.0


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
        "dispatch_latency": report["dispatch_latency"],
        "peak_concurrency": report["runtime"]["peak_concurrency"],
        "faults": {k: v for k, v in report["faults"].items() if k != "sabotage"},
        "live_messages_per_run_peak": report["messages"]["live_per_run_peak"],
        "invariants": {name: inv["detail"] for name, inv in report["invariants"].items()},
        "invariants_held": result.ok,
        "failed_invariants": result.failed,
        "seconds": {
            "load_scenario": round(load_s, 3),
            **report["timing"],
            "total_with_load": round(total, 3),
        },
        "cpu_seconds": round(time.process_time() - cpu, 3),
    }


def _verdict(figures: dict[str, Any]) -> str:
    return "held" if figures["invariants_held"] else "FAILED: " + ", ".join(figures["failed_invariants"])


def describe(name: str, figures: dict[str, Any]) -> str:
    s = figures["seconds"]
    head = f"{name}: {figures['tasks']} tasks, {figures['runs']} runs, wall {s['total_with_load']:.1f} s"
    if name == "day":
        met = "met" if figures["within_target"] else "MISSED"
        return (
            f"{head} (startup {s['startup_s']:.1f}, run {s['run_s']:.1f}, settle {s['settle_s']:.1f}, "
            f"report {s['report_s']:.1f}); target {DAY_TARGET_S:.0f} s {met}; invariants {_verdict(figures)}"
        )
    if name == "hostile":
        faults = figures["faults"]
        crashes = sum((faults.get("crashes") or {}).values())
        return (
            f"{head}; {crashes} crashes, {sum((faults.get('transaction_conflicts') or {}).values())} "
            f"transaction conflicts injected; live messages per run peak "
            f"{figures['live_messages_per_run_peak']}; invariants {_verdict(figures)}"
        )
    latency = figures["dispatch_latency"]
    return (
        f"{head}; dispatch latency p50 {latency.get('p50_s', 0):.1f} s, p99 {latency.get('p99_s', 0):.1f} s, "
        f"max {latency.get('max_s', 0):.1f} s, on time {latency.get('on_time_pct', 0):.2f} %; "
        f"invariants {_verdict(figures)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path("bench/results.json"))
    parser.add_argument(
        "--only", choices=sorted([*SCENARIOS, "console"]), help="run one scenario (default: all)"
    )
    parser.add_argument("--transport", choices=["direct", "inproc", "http"], default="direct")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    results: dict[str, Any] = {
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_before": [round(x, 2) for x in load_before],
        },
    }
    ok = True
    for name, path in SCENARIOS.items():
        if args.only and name != args.only:
            continue
        print(f"{name}: running {path.relative_to(REPO)} ...", flush=True)
        figures = bench_scenario(path, args.transport)
        if name == "day":
            figures["target_seconds"] = DAY_TARGET_S
            figures["within_target"] = figures["seconds"]["total_with_load"] < DAY_TARGET_S
        results[name] = figures
        ok &= bool(figures["invariants_held"])
        print(describe(name, figures), flush=True)
    if not args.only or args.only == "console":
        from rebound_local.bench_console import bench_console
        from rebound_local.bench_console import describe as describe_console

        print("console: seeding 100,000 runs and timing the first screen ...", flush=True)
        results["console"] = bench_console()
        print(describe_console(results["console"]), flush=True)
    results["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"figures -> {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
