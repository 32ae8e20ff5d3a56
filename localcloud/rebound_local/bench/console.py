"""``make bench``'s console figure: the first screen with 100,000 runs in the tables.

The local cloud is started as ``rebound local up`` starts it (moto over HTTP on loopback, the
local runtime), 100,000 runs are written straight into its ``runs`` table (moto's backend in
this process: seeding goes around the engine, which would take hours to make that many), spread
over 30 days and over every state, and a console is served over it. The first screen is what the
overview's tables ask for when it opens, one request after another as the page does:
``GET /api/queues``, ``GET /api/runs/recovery`` and ``GET /api/workorders``, through the console's
HTTP server. The figure is the wall time of those three, first (cold) and the median of the next
few (warm, what every 4 s poll costs); the target is under 1 s.

After them the page reads the DLQ chart's history (``GET /api/dlq/history?window=1h``; again only
once a minute). It is timed on its own: its cost follows the DLQ's record, not the runs, and the
record is seeded for it with 1,000 messages in the DLQ and 3,000 that left it over the last two
weeks (redriven, deleted, archived). Nothing asserts either figure: they are measurements.
"""

from __future__ import annotations

import random
import statistics
import time
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from rebound.adapters.dynamo.codec import to_item
from rebound.domain.run import Run, RunState, Trigger
from rebound.domain.timefmt import iso

RUNS = 100_000
DAYS = 30
TARGET_S = 1.0
WARM_ROUNDS = 5
DLQ_IN = 1_000
DLQ_LEFT = 3_000
FIRST_SCREEN = ("/api/queues", "/api/runs/recovery?at_most=200", "/api/workorders")
CHART_HISTORY = "/api/dlq/history?window=1h"
# Most runs succeed; a few percent fail, retry or end in the DLQ (roughly a busy week's mix).
MIX = (
    (RunState.SUCCEEDED, 0.9),
    (RunState.DEAD_LETTERED, 0.02),
    (RunState.FAILED, 0.01),
    (RunState.RETRY_SCHEDULED, 0.01),
    (RunState.REPLAYED, 0.01),
    (RunState.SKIPPED, 0.02),
    (RunState.CANCELLED, 0.01),
    (RunState.PENDING, 0.01),
    (RunState.RUNNING, 0.01),
)


def seed_runs(put: Any, table: str, now: datetime, count: int = RUNS, seed: int = 13) -> float:
    """Write ``count`` runs into ``table`` with ``put(table, item)``; the seconds it took."""
    rng = random.Random(seed)
    states = [s for s, _ in MIX]
    weights = [w for _, w in MIX]
    started = time.monotonic()
    for n in range(count):
        at = now - timedelta(seconds=rng.uniform(0, DAYS * 86400))
        state = rng.choices(states, weights)[0]
        attempt = 1 if rng.random() < 0.85 else rng.randint(2, 4)
        run = Run(
            run_id=f"bench-{n % 500}:{iso(at)}#{n}",
            task_id=f"bench-{n % 500}",
            tenant=f"tenant-{n % 7}",
            trigger=Trigger.SCHEDULE,
            scheduled_for=at,
            created_at=at,
            updated_at=at,
            state=state,
            attempt=0 if state is RunState.PENDING else attempt,
        )
        put(table, to_item(run.model_dump(mode="json"), table="runs"))
    return time.monotonic() - started


def seed_dlq(put: Any, table: str, now: datetime, seed: int = 13) -> float:
    """Write the DLQ's record: ``DLQ_IN`` messages still in it (arrived over the last 3 days) and
    ``DLQ_LEFT`` that left it over the last 14 days, a few hours after they arrived."""
    from rebound.adapters import dlq_items
    from rebound.engine.dlq_record import dlq_entry, millis
    from rebound.engine.ports import DlqStatus

    rng = random.Random(seed)
    left = (DlqStatus.REDRIVEN, DlqStatus.REDRIVEN, DlqStatus.DELETED, DlqStatus.ARCHIVED)
    started = time.monotonic()
    for n in range(DLQ_IN + DLQ_LEFT):
        gone = n >= DLQ_IN
        at = now - timedelta(seconds=rng.uniform(0, (14 if gone else 3) * 86400))
        entry = dlq_entry(
            message_id=f"bench-dlq-{n}",
            body='{"v": 1, "kind": "replay"}',
            attributes={
                "run_id": f"bench-{n % 500}:dlq-{n}",
                "task_id": f"bench-{n % 500}",
                "tenant": f"tenant-{n % 7}",
                "error_code": "BENCH",
                "dead_lettered_at": iso(at),
            },
            sent_at_ms=millis(at),
            actor="bench",
        )
        if gone:
            changed = min(at + timedelta(hours=rng.uniform(0.1, 12)), now)
            entry = replace(entry, status=rng.choice(left), changed_at=changed, changed_by="bench")
        put(table, to_item(dlq_items.to_record(entry), table=dlq_items.TABLE))
    return time.monotonic() - started


def first_screen(base: str, token: str, paths: tuple[str, ...] = FIRST_SCREEN) -> dict[str, float]:
    """Seconds for each of the overview's requests, one after another, as the page makes them."""
    took: dict[str, float] = {}
    for path in paths:
        started = time.monotonic()
        request = urllib.request.Request(base + path, headers={"X-Console-Token": token})
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
        took[path] = time.monotonic() - started
    return took


def bench_console(runs: int = RUNS) -> dict[str, Any]:
    from rebound_cli.console import ConsoleServer
    from rebound_local.clock import ScaledClock
    from rebound_local.cloud import LocalCloud
    from rebound_local.stack import start_local

    clock = ScaledClock(datetime.now(UTC))
    stack = start_local(clock)
    try:
        deps = stack.deps
        # Straight into the local cloud's table (moto's backend, in this process): an hour's
        # worth of BatchWriteItem calls over HTTP would measure the seeding, not the console.
        backend = LocalCloud.dynamodb_backend()
        # As in ``rebound local up``, where the sweeper queries by state every minute, the local
        # cloud's partition index exists before the runs arrive (built by a first query).
        deps.store.count_runs_in_state(RunState.RUNNING)
        seeding_s = seed_runs(backend.put_item, stack.settings.tables["runs"], clock.now(), runs)
        dlq_seeding_s = seed_dlq(backend.put_item, stack.settings.tables["dlq_messages"], clock.now())
        server = ConsoleServer(lambda: deps, "arn:aws:sts::000000000000:assumed-role/bench/console", port=0)
        server.start()
        try:
            paths = (*FIRST_SCREEN, CHART_HISTORY)
            cold_by_request = first_screen(server.origin, server.token, paths)
            warm_by_request = [first_screen(server.origin, server.token, paths) for _ in range(WARM_ROUNDS)]
        finally:
            server.stop()
    finally:
        stack.stop()
    cold = sum(cold_by_request[path] for path in FIRST_SCREEN)
    warm = [sum(w[path] for path in FIRST_SCREEN) for w in warm_by_request]
    median = statistics.median(warm)
    return {
        "runs_in_table": runs,
        "dlq_record": {"in_dlq": DLQ_IN, "left": DLQ_LEFT, "seeding_seconds": round(dlq_seeding_s, 2)},
        "seeding_seconds": round(seeding_s, 2),
        "requests": list(FIRST_SCREEN),
        "first_screen_seconds": {
            "cold": round(cold, 3),
            "warm_median": round(median, 3),
            "warm": [round(w, 3) for w in warm],
        },
        "request_seconds": {
            path: {
                "cold": round(cold_by_request[path], 3),
                "warm_median": round(statistics.median(w[path] for w in warm_by_request), 3),
            }
            for path in paths
        },
        "dlq_chart_history_seconds": {
            "cold": round(cold_by_request[CHART_HISTORY], 3),
            "warm_median": round(statistics.median(w[CHART_HISTORY] for w in warm_by_request), 3),
        },
        "target_seconds": TARGET_S,
        "within_target": max(cold, median) < TARGET_S,
    }


def describe(figures: dict[str, Any]) -> str:
    s = figures["first_screen_seconds"]
    met = "met" if figures["within_target"] else "MISSED"
    seeded = f"{figures['runs_in_table']} runs seeded in {figures['seeding_seconds']:.1f} s"
    screen = f"cold {s['cold']:.3f} s, warm median {s['warm_median']:.3f} s"
    chart = figures["dlq_chart_history_seconds"]
    history = f"DLQ chart history cold {chart['cold']:.3f} s, warm median {chart['warm_median']:.3f} s"
    target = f"target {figures['target_seconds']:.0f} s {met}"
    return f"console: {seeded}; first screen {screen}; {target}; then the {history}"
