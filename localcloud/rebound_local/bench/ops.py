"""The CLI's paths against the local cloud over HTTP: a redrive of every dead letter, tasks apply."""

from __future__ import annotations

import time
from typing import Any

from rebound_local.bench.common import APPLY_TARGET_TASKS, COST_SCENARIOS
from rebound_local.bench.scenarios import scenario_figures


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
    figures = scenario_figures(path, "direct", result, wall, cpu, 0.0)
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
