"""``make bench``: every figure of issue 17's table, measured, written to a file, printed as a table.

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
  tables, the ceiling (``rebound_local.bench_verify``).
- ``imports``: each handler module's cold import against ``import boto3``, each in fresh
  interpreters (the best of ``--import-runs``); and the module together with what its first
  invocation imports (``first_call_modules``), which a lazy import defers but does not remove.
- ``console``: the console's first screen with 100,000 runs in the tables
  (``rebound_local.bench_console``): cold and warm, against a 1 s target.
- ``conflicts``: ``scenarios/conflicts-day.yaml``, the pre-flight's conflict warnings against
  the collisions of a simulated day (``rebound_local.conflicts``): the hit rate, against 90 %.

The command prints figure, target, measured and pass or fail for each row, writes everything to
``--out`` and exits 0 either way: benchmarks measure, they do not gate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = {
    "day": REPO / "scenarios" / "day-100-tasks.yaml",
    "stress": REPO / "scenarios" / "stress-10k.yaml",
    "hostile": REPO / "scenarios" / "hostile-day.yaml",
    "conflicts": REPO / "scenarios" / "conflicts-day.yaml",
    "races": REPO / "scenarios" / "workstreams-races.yaml",
}
COST_SCENARIOS = {
    "idle": REPO / "scenarios" / "cost-idle.yaml",
    "clean": REPO / "scenarios" / "cost-clean.yaml",
    "one_retry": REPO / "scenarios" / "cost-one-retry.yaml",
    "dead_letter": REPO / "scenarios" / "cost-dead-letter.yaml",
}
OUTAGE_SCENARIO = REPO / "scenarios" / "target-outage.yaml"
GROUPS = (
    "cost",
    "day",
    "stress",
    "hostile",
    "races",
    "outage",
    "ops",
    "verify",
    "imports",
    "console",
    "conflicts",
)
HANDLERS = (
    "rebound.handlers.executor",
    "rebound.handlers.retry_scheduler",
    "rebound.handlers.escalation",
    "rebound.handlers.outbox_relay",
    "rebound.handlers.sweeper",
    "rebound.handlers.ops_api",
)
APPLY_TARGET_TASKS = 10_000


@dataclass(frozen=True)
class Target:
    figure: str
    target: str
    measured: Callable[[dict[str, Any]], Any]
    """The measured value from the results (raises KeyError when its group did not run)."""
    passes: Callable[[Any], bool]
    show: Callable[[Any], str] = str


def _redrive_floor(ops: dict[str, Any]) -> float:
    moved = max(1, int(ops["redrive"]["moved"]))
    return (3 * -(-moved // 10) + 2) / moved


def _at(*keys: str) -> Callable[[dict[str, Any]], Any]:
    def read(results: dict[str, Any]) -> Any:
        value: Any = results
        for key in keys:
            value = value[key]
        return value

    return read


def _limit(figure: str, keys: tuple[str, ...], op: str, bound: float | None, fmt: str = "{:.2f}") -> Target:
    """A row whose value must be at most (``<=``) or at least (``>=``) ``bound`` (None: just measured)."""
    if bound is None:
        return Target(figure, "(measured)", _at(*keys), lambda v: True, fmt.format)
    passes = (lambda v: v <= bound) if op == "<=" else (lambda v: v >= bound)
    return Target(figure, f"{op} {bound:g}", _at(*keys), passes, fmt.format)


PER_MILLION = ("cost", "per_million_runs")
TARGETS = (
    _limit(
        "$ per 1M clean runs (all AWS services, no target compute)",
        (*PER_MILLION, "clean", "dollars"),
        "<=",
        4.0,
    ),
    _limit("$ per 1M runs with one retry", (*PER_MILLION, "one_retry", "dollars"), "<=", None),
    _limit(
        "$ per 1M dead-lettered runs with a work order", (*PER_MILLION, "dead_letter", "dollars"), "<=", None
    ),
    _limit("idle environment, $ per month", ("cost", "idle_monthly", "total"), "<=", 10.0),
    _limit(
        "$ per 1M clean runs, tables provisioned at 70 % (model)",
        (*PER_MILLION, "clean", "dollars_provisioned"),
        "<=",
        None,
    ),
    _limit(
        "idle environment, tables provisioned at 1 unit (model), $ per month",
        ("cost", "idle_monthly_provisioned", "total"),
        "<=",
        None,
    ),
    _limit(
        "simulate day-100-tasks (28,900 runs), wall s",
        ("day", "seconds", "total_with_load"),
        "<=",
        45,
        "{:.1f}",
    ),
    _limit(
        "stress-10k: share started within 60 s, %", ("stress", "dispatch_latency", "on_time_pct"), ">=", 100
    ),
    _limit("stress-10k: p99 start delay, s", ("stress", "dispatch_latency", "p99_s"), "<=", 25, "{:.1f}"),
    Target("hostile day: every invariant", "held", _at("hostile", "invariants_held"), bool, "held {}".format),
    Target(
        "operators racing workstreams: every invariant",
        "held",
        _at("races", "invariants_held"),
        bool,
        "held {}".format,
    ),
    Target(
        "target outage with budgets: work orders, dead letters",
        "1, 0",
        lambda r: (
            r["outage"]["with_budgets"]["target_work_orders"],
            r["outage"]["with_budgets"]["dead_letters"],
        ),
        lambda v: v == (1, 0),
        lambda v: f"{v[0]}, {v[1]}",
    ),
    _limit(
        "target outage without budgets: dead letters",
        ("outage", "without_budgets", "dead_letters"),
        "<=",
        None,
        "{:.0f}",
    ),
    _limit(
        "target outage: every held run succeeded, s after the last failed call",
        ("outage", "with_budgets", "recovery_s"),
        "<=",
        None,
        "{:.0f}",
    ),
    _limit(
        "target outage: held runs released per minute, peak",
        ("outage", "with_budgets", "released_peak_per_minute"),
        "<=",
        10,
        "{:.0f}",
    ),
    _limit(
        "tasks apply of 10,000 unchanged tasks, s",
        ("ops", "tasks_apply", "seconds_for_10000"),
        "<=",
        60,
        "{:.0f}",
    ),
    _limit("audit verify --all, chains per s", ("verify", "chains_per_s"), ">=", 5000, "{:.0f}"),
    _limit(
        "audit verify --all, chains per s of CPU (client and local cloud)",
        ("verify", "chains_per_cpu_s"),
        ">=",
        None,
        "{:.0f}",
    ),
    _limit(
        "moto's scan of the same tables, chains per s",
        ("verify", "moto_scan", "chains_per_s"),
        ">=",
        None,
        "{:.0f}",
    ),
    _limit("cold import of a handler / import boto3 (worst)", ("imports", "worst_ratio"), "<=", 1.3),
    _limit(
        "handler import + its first call's imports / import boto3 (worst)",
        ("imports", "worst_with_first_call_ratio"),
        "<=",
        None,
    ),
    Target(
        "redrive: SQS requests per moved message",
        "<= (3 per 10 + 2) / moved",
        lambda r: (r["ops"]["redrive"]["sqs_requests_per_message"], _redrive_floor(r["ops"])),
        lambda v: v[0] <= v[1] + 1e-9,
        lambda v: f"{v[0]:.3f} (floor {v[1]:.3f})",
    ),
    _limit(
        "console first screen, 100,000 runs, cold s",
        ("console", "first_screen_seconds", "cold"),
        "<=",
        1.0,
        "{:.2f}",
    ),
    _limit(
        "console first screen, 100,000 runs, warm median s",
        ("console", "first_screen_seconds", "warm_median"),
        "<=",
        1.0,
        "{:.2f}",
    ),
    _limit(
        "pre-flight conflict-warning hit rate on a simulated day, %",
        ("conflicts", "hit_rate_pct"),
        ">=",
        90,
        "{:.1f}",
    ),
)


# --------------------------------------------------------------------------- scenarios
def bench_scenario(path: Path, transport: str = "direct", *, aws_sized: bool = False) -> dict[str, Any]:
    """``aws_sized``: resources named as CloudFormation names them and the audit key by its ARN,
    so every item has its size on AWS (the cost figures)."""
    from rebound_local.scenario import load_scenario
    from rebound_local.simulate import Simulation

    wall = time.monotonic()
    cpu = time.process_time()
    loaded = load_scenario(path)
    load_s = time.monotonic() - wall
    result = Simulation(loaded, transport=transport, aws_sized=aws_sized).run()
    return _figures(path, transport, result, wall, cpu, load_s)


def _figures(
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


# --------------------------------------------------------------------------- cost
def bench_cost() -> dict[str, Any]:
    """The bill per run class and of an idle month (see docs/cost.md for the method)."""
    from rebound_local import billing

    sections: dict[str, dict[str, Any]] = {}
    held: dict[str, bool] = {}
    for name, path in COST_SCENARIOS.items():
        figures = bench_scenario(path, aws_sized=True)
        sections[name] = figures["billing"]
        held[name] = bool(figures["invariants_held"])
    idle = sections["idle"]
    idle_rate = {line: amount / idle["seconds"] for line, amount in idle["units"].items()}
    idle_monthly = billing.fixed_monthly(idle)
    per_class: dict[str, Any] = {}
    for name in ("clean", "one_retry", "dead_letter"):
        section = sections[name]
        runs = max(1, section["runs"])
        marginal = {
            line: (amount - idle_rate.get(line, 0.0) * section["seconds"]) / runs
            for line, amount in section["units"].items()
            if line != "metrics.distinct"
        }
        dollars = billing.price(marginal)
        provisioned = billing.provisioned_price(marginal)
        per_class[name] = {
            "runs": section["runs"],
            "dollars": round(sum(dollars.values()) * 1e6, 4),
            "dollars_provisioned": round(sum(provisioned.values()) * 1e6, 4),
            "dollars_by_line": {line: round(v * 1e6, 4) for line, v in dollars.items()},
            "units_per_run": {line: round(v, 4) for line, v in sorted(marginal.items())},
        }
    naive = _naive_per_million()
    # A month with runs also publishes the run metrics: each distinct one bills by the month.
    distinct = max(int(sections[name]["units"].get("metrics.distinct", 0)) for name in per_class)
    return {
        "prices_as_of": billing.PRICES_AS_OF,
        "per_million_runs": per_class,
        "idle_monthly": idle_monthly,
        "idle_monthly_provisioned": billing.provisioned_idle_monthly(idle_monthly),
        "provisioned_model": {
            "utilization": billing.PROVISIONED_UTILIZATION,
            "unit_hour": billing.PROVISIONED_UNIT_HOUR,
            "capacities": billing.PROVISIONED_CAPACITIES,
        },
        "custom_metrics_in_a_month_with_runs": {
            "metrics": distinct,
            "dollars": round(distinct * billing.MONTHLY["custom_metric"], 2),
        },
        "comparison_per_million_clean_runs": naive,
        "invariants_held": held,
        "sections": sections,
    }


def _naive_per_million() -> dict[str, float]:
    """What other designs cost per million clean runs, by their published prices (docs/cost.md)."""
    from rebound_local import billing

    p = billing.PRICES
    # Step Functions Standard: Scheduler starts it; start, claim, invoke, record, succeed: 5 transitions.
    step_functions = 5 * billing.STEP_FUNCTIONS_STANDARD_PER_TRANSITION + p["scheduler.invocations"]
    # Scheduler invokes the target's Lambda directly: no queue, no ledger, no audit.
    naive = p["scheduler.invocations"]
    return {
        "scheduler_to_target_directly": round(naive * 1e6, 2),
        "step_functions_standard_5_transitions": round(step_functions * 1e6, 2),
    }


# --------------------------------------------------------------------------- the CLI's paths
def bench_ops(apply_tasks: int) -> dict[str, Any]:
    """A redrive and ``tasks apply`` against the local cloud over HTTP.

    ``scenarios/cost-dead-letter.yaml`` makes the dead letters (on the direct transport, fast); at
    its end, before the stack stops, the operations run with their own clients over HTTP, as
    ``rebound`` reaches ``rebound local up``.
    """
    from rebound_local.scenario import load_scenario
    from rebound_local.simulate import Simulation

    measured: dict[str, Any] = {}

    class Measured(Simulation):
        def _report(self, stack: Any, clock: Any, settled_at: Any, hung: Any = None) -> dict[str, Any]:
            out = super()._report(stack, clock, settled_at, hung)
            mark = time.monotonic()
            measured.update(_measure_ops(stack, apply_tasks))  # after the invariants were judged
            measured["operations_s"] = time.monotonic() - mark
            return out

    path = COST_SCENARIOS["dead_letter"]
    wall, cpu = time.monotonic(), time.process_time()
    result = Measured(load_scenario(path)).run()
    figures = _figures(path, "direct", result, wall, cpu, 0.0)
    # The operations ran inside the report's phase, while the stack was up: their time is theirs.
    operations_s = measured.pop("operations_s", 0.0)
    seconds = {**figures["seconds"], "operations_s": round(operations_s, 3)}
    seconds["report_s"] = round(seconds["report_s"] - operations_s, 3)
    return {
        **measured,
        "scenario": {
            **{k: figures[k] for k in ("scenario", "runs", "invariants_held")},
            "seconds": seconds,
            "note": "report_s leaves out operations_s: the redrive and applies, run before the stack stops",
        },
    }


def _measure_ops(stack: Any, apply_tasks: int) -> dict[str, Any]:
    from rebound.config.loader import parse_task_file
    from rebound.ops.dlq import DlqFilter, DlqOps
    from rebound.ops.tasks import SCHEDULER_RATE, TaskOps
    from rebound.ops.throttle import RateLimiter
    from rebound.wiring import build_deps
    from rebound_local.instrument import AwsCalls, RecordingMetrics

    session = stack.cloud.session()
    aws_calls = AwsCalls()
    aws_calls.attach(session)
    deps = build_deps(
        stack.settings,
        session=session,
        clock=stack.clock,
        metrics=RecordingMetrics(),
        client_kwargs={"endpoint_url": stack.cloud.endpoint_url},
    )
    dlq = DlqOps(deps, "bench", wait_s=0)
    mark = time.perf_counter()
    report = dlq.redrive(DlqFilter())
    redrive_s = time.perf_counter() - mark

    tasks = parse_task_file(
        {
            "tasks": [
                {
                    "id": f"apply-{n:05d}",
                    "tenant": "acme",
                    "schedule": {"cron": "0 3 * * *", "timezone": "UTC"},
                    "target": {"type": "sim"},
                }
                for n in range(apply_tasks)
            ]
        },
        "bench",
    )
    ops = TaskOps(deps, actor="bench")
    ops.apply(ops.plan(tasks))  # registered once: what is measured is the second, unchanged apply
    before = aws_calls.snapshot()
    mark = time.perf_counter()
    applied = ops.apply(ops.plan(tasks))
    apply_s = time.perf_counter() - mark
    after = aws_calls.snapshot()
    # As `rebound tasks apply` runs by default: Scheduler requests paced at --rate 50 (an unchanged
    # bulk apply makes one request per 100 schedules, so the same tasks, all of them).
    paced_tasks = tasks
    paced = TaskOps(deps, actor="bench", limiter=RateLimiter(SCHEDULER_RATE))
    mark = time.perf_counter()
    paced.apply(paced.plan(paced_tasks))
    paced_s = time.perf_counter() - mark
    calls = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    return {
        "redrive": {
            "moved": report.moved,
            "failed": report.failed,
            "sqs_requests": report.sqs_requests,
            "sqs_requests_per_message": round(report.sqs_requests / max(1, report.moved), 4),
            "seconds": round(redrive_s, 3),
        },
        "tasks_apply": {
            "tasks": apply_tasks,
            "unchanged": len(applied.unchanged),
            "schedules_written": applied.schedules_written,
            "seconds": round(apply_s, 3),
            "unpaced_seconds_for_10000": round(apply_s * APPLY_TARGET_TASKS / max(1, apply_tasks), 1),
            "aws_calls": calls,
            "paced": {
                "rate": SCHEDULER_RATE,
                "tasks": len(paced_tasks),
                "seconds": round(paced_s, 3),
            },
            "seconds_for_10000": round(paced_s * APPLY_TARGET_TASKS / max(1, len(paced_tasks)), 1),
            "note": (
                f"unpaced: {apply_tasks} tasks with no rate limit; paced: {len(paced_tasks)} tasks at the "
                f"CLI's default --rate {SCHEDULER_RATE:g}; each scaled linearly to {APPLY_TARGET_TASKS}"
            ),
        },
    }


# --------------------------------------------------------------------------- cold imports
FIRST_CALL_FUNCTIONS = ("rebound.wiring", ("deps", "build_deps"))
"""Where a container's first invocation builds its dependencies: their imports are the first call's."""


def first_call_modules(module: str) -> list[str]:
    """The modules a handler's first invocation imports: those imported inside the handler
    module's functions and inside ``rebound.wiring``'s builders (read from their source)."""
    import ast
    import importlib.util

    def imported(name: str, functions: tuple[str, ...] | None) -> list[str]:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(name)
        tree = ast.parse(Path(spec.origin).read_text())
        found: list[str] = []
        for top in tree.body:
            if not isinstance(top, ast.FunctionDef) or (functions and top.name not in functions):
                continue
            for node in ast.walk(top):
                if isinstance(node, ast.ImportFrom) and node.module:
                    found.append(node.module)
                elif isinstance(node, ast.Import):
                    found.extend(alias.name for alias in node.names)
        return found

    wiring, builders = FIRST_CALL_FUNCTIONS
    return list(dict.fromkeys([*imported(module, None), *imported(wiring, builders)]))


def _import_seconds(module: str, then: list[str] | None = None) -> float:
    """Seconds to import ``module`` (and then ``then``) in a fresh interpreter."""
    imports = "; ".join(f"import {name}" for name in [module, *(then or [])])
    code = f"import time; t = time.perf_counter(); {imports}; print(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def bench_imports(runs: int) -> dict[str, Any]:
    """Best of ``runs`` fresh interpreters for ``import boto3`` and each handler module; and,
    measured the same way, the module with everything its first invocation imports."""
    boto3_s = min(_import_seconds("boto3") for _ in range(runs))
    handlers = {}
    for module in HANDLERS:
        seconds = min(_import_seconds(module) for _ in range(runs))
        first = first_call_modules(module)
        with_first = min(_import_seconds(module, first) for _ in range(runs))
        handlers[module] = {
            "seconds": round(seconds, 4),
            "ratio": round(seconds / boto3_s, 3),
            "with_first_call_imports_seconds": round(with_first, 4),
            "with_first_call_imports_ratio": round(with_first / boto3_s, 3),
        }
    return {
        "runs": runs,
        "boto3_seconds": round(boto3_s, 4),
        "handlers": handlers,
        "worst_ratio": max(h["ratio"] for h in handlers.values()),
        "worst_with_first_call_ratio": max(h["with_first_call_imports_ratio"] for h in handlers.values()),
    }


# --------------------------------------------------------------------------- the table
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
            from rebound_local.bench_verify import bench_verify

            results[name] = bench_verify(args.verify_chains)
        elif name == "imports":
            results[name] = bench_imports(args.import_runs)
        elif name == "outage":
            results[name] = bench_outage(args.transport)
        elif name == "console":
            from rebound_local.bench_console import bench_console

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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
