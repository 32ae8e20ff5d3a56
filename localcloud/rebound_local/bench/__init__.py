"""``make bench``: every figure with a target, measured, written to files, printed as a table.

The figures (``python -m rebound_local.bench --only NAME`` runs one group):

- ``cost``: the bill of ``scenarios/cost-*.yaml`` (``rebound_local.billing``). The idle scenario
  gives the fixed monthly cost of an environment and the idle rate; each run class (clean, one
  retry, dead-lettered with a work order) costs its scenario's bill less the idle rate over the
  same schedule time, divided by its runs. Per million runs.
- ``day``: ``scenarios/day-100-tasks.yaml``, 24 h of 100 tasks (28,900 runs): wall time per phase.
- ``stress``: ``scenarios/stress-10k.yaml``, 10,000 tasks due in one minute with AWS-like latency
  and scaling in virtual time: the share started within 60 s and the p99 start delay.
- ``hostile``: ``scenarios/hostile-day.yaml``, 24 h under every hostile fault: invariants.
- ``races``: ``scenarios/workstreams-races.yaml``, operator actions fired the instant workstream
  steps end, under the hostile faults: invariants (each one's detail is recorded).
- ``ops``: against the local cloud over HTTP, as the CLI reaches it: ``scenarios/cost-dead-letter.yaml``
  run to its end, then a redrive of every dead letter (SQS requests per moved message), and
  ``tasks apply`` of ``--apply-tasks`` unchanged tasks (seconds, and seconds scaled to 10,000).
- ``verify``: ``audit verify --all`` against the local cloud over HTTP, on ``--verify-chains``
  runs with their chains, the local cloud in a process of its own as ``rebound local up`` runs it:
  chains per second (wall, and per CPU-second of both processes), and moto's own scan of the same
  tables, the ceiling (``rebound_local.bench.verify``).
- ``imports``: each handler module's cold import against ``import boto3``, each in fresh
  interpreters (the best of ``--import-runs``); and the module together with what its first
  invocation imports (``first_call_modules``), which a lazy import defers but does not remove.
- ``console``: the console's first screen with 100,000 runs in the tables
  (``rebound_local.bench.console``): cold and warm, against a 1 s target.
- ``conflicts``: ``scenarios/conflicts-day.yaml``, the pre-flight's conflict warnings against
  the collisions of a simulated day (``rebound_local.conflicts``): the hit rate, against 90 %.

The command prints figure, target, measured and pass or fail for each row, writes everything to
``--out``, appends the rows it measured to ``--history`` and writes today's table into ``--page``
(``rebound_local.bench.history``), and exits 0 either way: benchmarks measure, they do not gate.
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

from rebound_local.bench import cost_page, history
from rebound_local.bench.common import COST_SCENARIOS, GROUPS, OUTAGE_SCENARIO, REPO, SCENARIOS
from rebound_local.bench.cost import bench_cost
from rebound_local.bench.imports import HANDLERS, bench_imports, first_call_modules
from rebound_local.bench.ops import bench_ops
from rebound_local.bench.scenarios import bench_outage, bench_scenario
from rebound_local.bench.targets import TARGETS

__all__ = [
    "COST_SCENARIOS",
    "GROUPS",
    "HANDLERS",
    "OUTAGE_SCENARIO",
    "REPO",
    "SCENARIOS",
    "first_call_modules",
    "forget_group",
    "main",
]


def table(results: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for target in TARGETS:
        try:
            value = target.measured(results)
        except (KeyError, TypeError):
            rows.append(
                {"figure": target.figure, "target": target.target, "measured": "not run", "result": "-"}
            )
            continue
        verdict = "-" if target.target == "(measured)" else "pass" if target.passes(value) else "FAIL"
        rows.append(
            {
                "figure": target.figure,
                "target": target.target,
                "measured": target.show(value),
                "result": verdict,
            }
        )
    return rows


def print_table(rows: list[dict[str, str]]) -> None:
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in ("figure", "target", "measured", "result")}
    line = "  ".join(k.ljust(w) for k, w in widths.items())
    print(line)
    print("  ".join("-" * w for w in widths.values()))
    for row in rows:
        print("  ".join(row[k].ljust(w) for k, w in widths.items()))


def forget_group() -> None:
    """Drop what a group left in this process before the next one is measured.

    Every group runs in this process, and a simulation's local cloud is moto's backends in it: after
    the hostile day they hold hundreds of thousands of items, and every full collection of the next
    group walked them (the verify group's client parsed moto's scan at 1,756 chains a second after
    the hostile day, 12,736 on its own)."""
    import gc

    from rebound_local.cloud import reset_moto

    reset_moto()
    gc.collect()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path("bench/results.json"))
    parser.add_argument(
        "--history",
        type=Path,
        default=history.HISTORY,
        help="append this run's rows here, and write today's table into --page from it",
    )
    parser.add_argument("--page", type=Path, default=history.PAGE)
    parser.add_argument(
        "--cost-page", type=Path, default=cost_page.PAGE, help="where the cost group's tables go"
    )
    parser.add_argument(
        "--only",
        choices=GROUPS,
        action="append",
        help="run these groups (default: all); the other groups' figures in --out are kept",
    )
    parser.add_argument("--transport", choices=["direct", "inproc", "http"], default="direct")
    parser.add_argument("--apply-tasks", type=int, default=2000, help="tasks for the tasks-apply figure")
    parser.add_argument("--import-runs", type=int, default=3)
    parser.add_argument("--verify-chains", type=int, default=10000, help="runs with chains for audit verify")
    args = parser.parse_args(argv)
    wanted = args.only or list(GROUPS)

    load_before = os.getloadavg()
    earlier: dict[str, Any] = {}
    if args.only and args.out.exists():  # one group again: keep the others' figures
        earlier = {k: v for k, v in json.loads(args.out.read_text()).items() if k in GROUPS}
    results: dict[str, Any] = {
        **earlier,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_before": [round(x, 2) for x in load_before],
        },
    }
    for name in GROUPS:
        if name not in wanted:
            continue
        print(f"{name}: running ...", flush=True)
        mark = time.monotonic()
        if name == "cost":
            results[name] = bench_cost()
        elif name == "ops":
            results[name] = bench_ops(args.apply_tasks)
        elif name == "verify":
            from rebound_local.bench.verify import bench_verify

            results[name] = bench_verify(args.verify_chains)
        elif name == "imports":
            results[name] = bench_imports(args.import_runs)
        elif name == "outage":
            results[name] = bench_outage(args.transport)
        elif name == "console":
            from rebound_local.bench.console import bench_console

            results[name] = bench_console()
        elif name == "conflicts":
            from rebound_local.conflicts import measure

            results[name] = measure(SCENARIOS[name], args.transport)
        else:
            results[name] = bench_scenario(SCENARIOS[name], args.transport)
        results[name]["measured_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(f"{name}: done in {time.monotonic() - mark:.0f} s", flush=True)
        forget_group()
    results["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    results["table"] = table(results)
    print()
    print_table(results["table"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nfigures -> {args.out}")
    line = history.entry(results, wanted, history.commit_of())
    if "cost" in wanted:
        line["call_sites"] = cost_page.figures(results["cost"])
    history.append(args.history, line)
    history.write_page(args.page, history.read(args.history))
    print(f"history -> {args.history}; today's table -> {args.page}")
    if "cost" in wanted:
        cost_page.write_page(args.cost_page, line["call_sites"])
        print(f"units by call site -> {args.cost_page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
