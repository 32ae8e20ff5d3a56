"""``make bench`` group ``verify``: ``rebound audit verify --all`` against the local cloud over HTTP.

Measured in the shape a user runs it: the local cloud in one process (``rebound local up``) and
the CLI in another, so the two sides run on two cores and do not share a GIL. The local cloud is
a child process (``python -m rebound_local.bench.verify --serve CHAINS``): moto in server mode,
provisioned as ``rebound local up`` provisions (its runtime, which plays Scheduler and the event
source mappings, is not started: nothing in verifying needs it), its audit and runs tables filled
with ``chains`` runs, each with a keyed chain of three records (created, attempt started,
succeeded) made by the store's own unit of work and signed with the local cloud's KMS audit key;
they are written straight into moto's tables (the writing is not what is measured). The bench's
process then reads the environment's resources from SSM as the CLI does and, with a client of
its own:

- ``verify_all``: ``AuditOps.verify_all`` as ``rebound audit verify --all`` runs it: chains per
  second of wall time, and the CPU seconds of each process over the same interval (the client's,
  this process; the local cloud's, the child's, which it reports on request);
- ``moto_scan``: the ceiling, a scan of both tables that only reads: every page of the audit
  and runs tables, in the same parallel segments, each answer's JSON parsed and nothing else done
  with it. No client can verify faster than the local cloud answers these scans.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from rebound import resources as r

ENV = "bench"
REPLY = "bench-verify: "
"""How each line ``serve`` answers with starts."""
START = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def seed_chains(deps: Any, put: Any, chains: int) -> int:
    """``chains`` runs with their chains through ``deps.store``'s unit of work; each staged item is
    handed to ``put(table_name, item)`` instead of a transaction. The number of records."""
    from rebound.domain.run import Attempt, AttemptOutcome, Run, RunState, Trigger

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


def serve(chains: int, env: str = ENV) -> None:
    """The local cloud's side, in a process of its own: moto in server mode provisioned as
    ``rebound local up`` does, its tables seeded with ``chains`` runs and their chains. Writes one
    JSON line (``endpoint``, ``records``, ``seeded_in_seconds``) to stdout, then answers each line
    read from stdin with this process's CPU seconds so far, and stops at end of input. Each reply
    starts with ``REPLY``."""
    from rebound.wiring import build_deps
    from rebound_local.cloud import LocalCloud
    from rebound_local.heap import HeapKeeper
    from rebound_local.provision import provision

    cloud = LocalCloud()
    endpoint = cloud.start()
    heap = HeapKeeper().start()  # as ``rebound local up`` keeps its process's heap
    try:
        settings = provision(cloud.session(), endpoint, env)
        deps = build_deps(settings, session=cloud.session(), client_kwargs={"endpoint_url": endpoint})
        backend = cloud.dynamodb_backend()
        mark = time.perf_counter()
        records = seed_chains(deps, lambda table, item: backend.put_item(table, item, overwrite=True), chains)
        ready = {"endpoint": endpoint, "records": records, "seeded_in_seconds": time.perf_counter() - mark}
        print(REPLY + json.dumps(ready), flush=True)
        for _ in sys.stdin:
            print(REPLY + json.dumps({"cpu_seconds": time.process_time()}), flush=True)
    finally:
        heap.stop()
        cloud.stop()


class _Server:
    """``serve`` in a child process: its endpoint, and its CPU seconds on request."""

    def __init__(self, chains: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rebound_local.bench.verify", "--serve", str(chains)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self._line()
        ready = json.loads(line)
        self.endpoint: str = ready["endpoint"]
        self.records: int = ready["records"]
        self.seeded_s: float = ready["seeded_in_seconds"]

    def _line(self) -> str:
        """The next reply of ``serve`` (anything else it printed, a log line say, is skipped)."""
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the local cloud's process ended (exit code {self.process.wait()})")
            if line.startswith(REPLY):
                return line.removeprefix(REPLY)

    def cpu(self) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write("cpu\n")
        self.process.stdin.flush()
        return float(json.loads(self._line())["cpu_seconds"])

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _timed(server: _Server, work: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """``work()``, its wall seconds, this process's CPU seconds and the local cloud's."""
    server_cpu = server.cpu()
    wall, cpu = time.perf_counter(), time.process_time()
    value = work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return value, wall, cpu, server.cpu() - server_cpu


def bench_verify(chains: int) -> dict[str, Any]:
    import boto3

    from rebound.ops.audit import AUDIT_SEGMENTS, AuditOps
    from rebound.settings import settings_from_document
    from rebound.wiring import build_deps
    from rebound_local.cloud import LOCAL_CREDENTIALS
    from rebound_local.provision import REGION

    server = _Server(chains)
    try:
        # As the CLI: its own session, the environment's resources read from SSM, its keys
        # derived on first use (one KMS call a day).
        session = boto3.session.Session(
            aws_access_key_id=LOCAL_CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=LOCAL_CREDENTIALS["aws_secret_access_key"],
            region_name=REGION,
        )
        kw = {"endpoint_url": server.endpoint}
        ssm = session.client("ssm", endpoint_url=server.endpoint)
        document = ssm.get_parameter(Name=r.resources_parameter(ENV))
        settings = settings_from_document(json.loads(document["Parameter"]["Value"]))
        cli_deps = build_deps(settings, session=session, client_kwargs=kw)
        load = os.getloadavg()
        results, verify_s, verify_cpu, verify_server_cpu = _timed(server, AuditOps(cli_deps).verify_all)

        client = session.client("dynamodb", endpoint_url=server.endpoint)
        parts = [
            (t, n) for t in (settings.table("audit"), settings.table("runs")) for n in range(AUDIT_SEGMENTS)
        ]

        def scan_all() -> int:
            with ThreadPoolExecutor(max_workers=AUDIT_SEGMENTS) as pool:
                return sum(pool.map(lambda part: _raw_scan(client, part[0], part[1], AUDIT_SEGMENTS), parts))

        scanned, scan_s, scan_cpu, scan_server_cpu = _timed(server, scan_all)
    finally:
        server.stop()
    chains_done = len(results)
    verify_total_cpu = verify_cpu + verify_server_cpu
    return {
        "chains": chains_done,
        "records": server.records,
        "intact": sum(1 for r in results if r.ok),
        "segments": AUDIT_SEGMENTS,
        "seconds": round(verify_s, 3),
        "client_cpu_seconds": round(verify_cpu, 3),
        "local_cloud_cpu_seconds": round(verify_server_cpu, 3),
        "cpu_seconds": round(verify_total_cpu, 3),
        "chains_per_s": _rate(chains_done, verify_s),
        "chains_per_cpu_s": _rate(chains_done, verify_total_cpu),
        "chains_per_client_cpu_s": _rate(chains_done, verify_cpu),
        "chains_per_local_cloud_cpu_s": _rate(chains_done, verify_server_cpu),
        "load_average_at_start": [round(x, 2) for x in load],
        "seeded_in_seconds": round(server.seeded_s, 1),
        "moto_scan": {
            "items": scanned,
            "seconds": round(scan_s, 3),
            "client_cpu_seconds": round(scan_cpu, 3),
            "local_cloud_cpu_seconds": round(scan_server_cpu, 3),
            "items_per_s": _rate(scanned, scan_s),
            "chains_per_s": _rate(chains_done, scan_s),
            "chains_per_local_cloud_cpu_s": _rate(chains_done, scan_server_cpu),
            "note": "audit and runs tables scanned once in the same parallel segments, answers parsed "
            "as JSON only: the most any verifier can get from this local cloud",
        },
        "note": "the local cloud (moto in server mode, provisioned and seeded as rebound local up "
        "provisions) runs in a process of its own and the client in the bench's, as a user runs "
        "rebound local up and rebound audit verify --all; CPU seconds are each process's own",
    }


def _rate(count: int, seconds: float) -> float | None:
    return round(count / seconds, 1) if seconds else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the local cloud's side of the verify benchmark")
    parser.add_argument("--serve", type=int, required=True, metavar="CHAINS", help="runs with chains to seed")
    serve(parser.parse_args(argv).serve)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
