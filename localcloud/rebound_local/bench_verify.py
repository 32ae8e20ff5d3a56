"""``make bench`` group ``verify``: ``rebound audit verify --all`` against the local cloud over HTTP.

The local cloud (moto in server mode, this process) is provisioned as ``rebound local up`` does, and
its audit and runs tables are filled with ``chains`` runs, each with a keyed chain of three records
(created, attempt started, succeeded) made by the store's own unit of work and signed with the
local cloud's KMS audit key; they are written straight into moto's tables (the writing is not what
is measured). Then, with a client of its own as the CLI has:

- ``verify_all``: ``AuditOps.verify_all`` as ``rebound audit verify --all`` runs it: chains per
  second of wall time, and per second of this process's CPU (the client and moto share it, so the
  second figure is the one the machine's load does not move much);
- ``moto_scan``: the ceiling, a scan of both tables that only reads: every page of the audit
  and runs tables, in the same parallel segments, each answer's JSON parsed and nothing else done
  with it. No client can verify faster than moto answers these scans.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

START = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def seed_chains(deps: Any, put: Any, chains: int) -> int:
    """``chains`` runs with their chains through ``deps.store``'s unit of work; each staged item is
    handed to ``put(table_name, item)`` instead of a transaction. The number of records."""
    from rebound.domain.models import Attempt, AttemptOutcome, Run, RunState, Trigger

    records = 0
    for n in range(chains):
        at = START + timedelta(seconds=n)
        run = Run(
            run_id=f"bench-{n:06d}:20261123T0300Z",
            task_id=f"bench-task-{n % 100:03d}",
            tenant="acme",
            trigger=Trigger.SCHEDULE,
            scheduled_for=at,
            created_at=at,
            updated_at=at,
        )
        uow = deps.store.unit_of_work("executor", at)
        created = uow.save_run(None, run, action="created")
        started = uow.save_run(
            created,
            created.model_copy(
                update={"state": RunState.RUNNING, "attempt": 1, "attempts": [Attempt(n=1, started_at=at)]}
            ),
            action="attempt-started",
        )
        done = Attempt(n=1, started_at=at, ended_at=at, outcome=AttemptOutcome.SUCCEEDED, duration_ms=12)
        uow.save_run(
            started,
            started.model_copy(update={"state": RunState.SUCCEEDED, "attempts": [done]}),
            action="succeeded",
        )
        for op in uow.items:
            if "Put" in op:
                put(op["Put"]["TableName"], op["Put"]["Item"])
        records += len(uow.audit_records)
    return records


def _raw_scan(client: Any, table: str, segment: int, segments: int) -> int:
    """Items of every page of a segment of ``table``, each answer parsed as JSON and nothing more."""
    from rebound.adapters.dynamo import raw_answers

    raw_answers.install(client)
    items = 0
    kwargs: dict[str, Any] = {
        "TableName": table,
        "ConsistentRead": True,
        "Segment": segment,
        "TotalSegments": segments,
    }
    with raw_answers.raw():
        while True:
            answer = client.scan(**kwargs)
            items += len(answer["Items"])
            if "LastEvaluatedKey" not in answer:
                return items
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def bench_verify(chains: int) -> dict[str, Any]:
    from rebound.ops.audit import AUDIT_SEGMENTS, AuditOps
    from rebound.wiring import build_deps
    from rebound_local.cloud import LocalCloud
    from rebound_local.provision import provision

    cloud = LocalCloud()
    endpoint = cloud.start()
    try:
        settings = provision(cloud.session(), endpoint, "bench")
        deps = build_deps(settings, session=cloud.session(), client_kwargs={"endpoint_url": endpoint})
        backend = cloud.dynamodb_backend()
        mark = time.perf_counter()
        records = seed_chains(deps, lambda table, item: backend.put_item(table, item, overwrite=True), chains)
        seeded_s = time.perf_counter() - mark

        # As the CLI: a client of its own, its keys derived on first use (one KMS call a day).
        cli_deps = build_deps(settings, session=cloud.session(), client_kwargs={"endpoint_url": endpoint})
        load = os.getloadavg()
        wall, cpu = time.perf_counter(), time.process_time()
        results = AuditOps(cli_deps).verify_all()
        verify_s, verify_cpu = time.perf_counter() - wall, time.process_time() - cpu

        client = cloud.session().client("dynamodb", endpoint_url=endpoint)
        parts = [
            (t, n) for t in (settings.table("audit"), settings.table("runs")) for n in range(AUDIT_SEGMENTS)
        ]
        wall, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(max_workers=AUDIT_SEGMENTS) as pool:
            scanned = sum(pool.map(lambda part: _raw_scan(client, part[0], part[1], AUDIT_SEGMENTS), parts))
        scan_s, scan_cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        cloud.stop()
    return {
        "chains": len(results),
        "records": records,
        "intact": sum(1 for r in results if r.ok),
        "segments": AUDIT_SEGMENTS,
        "seconds": round(verify_s, 3),
        "cpu_seconds": round(verify_cpu, 3),
        "chains_per_s": round(len(results) / verify_s, 1) if verify_s else None,
        "chains_per_cpu_s": round(len(results) / verify_cpu, 1) if verify_cpu else None,
        "load_average_at_start": [round(x, 2) for x in load],
        "seeded_in_seconds": round(seeded_s, 1),
        "moto_scan": {
            "items": scanned,
            "seconds": round(scan_s, 3),
            "cpu_seconds": round(scan_cpu, 3),
            "items_per_s": round(scanned / scan_s, 1) if scan_s else None,
            "chains_per_s": round(len(results) / scan_s, 1) if scan_s else None,
            "note": "audit and runs tables scanned once in the same parallel segments, answers parsed "
            "as JSON only: the most any verifier can get from moto here",
        },
    }
