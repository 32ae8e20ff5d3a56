"""Sections of the ``rebound local simulate`` report that describe the run rather than judge it.

``simulate`` judges (the invariants, the dispatch latency); this module shapes what was run
(``scenario_section``), what was injected (``faults_section``: per kind and per operation or
crash point), what the runtime did (``runtime_section``: invocations, crashes, timeouts,
abandoned invocations, peak concurrency per function, outbox stream failure records), the
per-run and per-work-order entries, and writes the report.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebound.domain.ids import RUN_PREFIX
from rebound.domain.timefmt import iso

if TYPE_CHECKING:
    from rebound_local.scenario import LoadedScenario, Scenario
    from rebound_local.stack import LocalStack


def scenario_section(loaded: LoadedScenario, seed: int, transport: str) -> dict[str, Any]:
    scenario = loaded.scenario
    return {
        "file": loaded.file,
        "description": scenario.description,
        "start": iso(scenario.start),
        "duration_s": scenario.duration,
        "settle_s": scenario.settle,
        "tasks": len(loaded.tasks),
        "seed": seed,
        "transport": transport,
    }


def faults_section(
    scenario: Scenario,
    stack: LocalStack,
    dropped: list[dict[str, str]],
    tampered: list[str],
    sabotaged: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Everything injected, per kind and per operation or crash point."""
    faults = scenario.faults
    return {
        "duplicate_delivery": faults.duplicate_delivery,
        "crashes": dict(stack.crashes.crashes),
        "crash_limit": faults.crash.limit if faults.crash else None,
        "throttled": dict(stack.throttler.injected),
        **stack.moto_faults.snapshot(),
        "handler_timeouts": faults.handler_timeouts,
        "stream_retries": faults.stream_retries,
        "sabotage": {"dropped_messages": dropped, "tampered_audit_records": tampered, **(sabotaged or {})},
    }


def runtime_section(stack: LocalStack) -> dict[str, Any]:
    runtime = stack.runtime
    stats = runtime.stats
    return {
        "invocations": dict(stats.invocations),
        "errors": dict(stats.errors),
        "crashes": dict(stats.crashes),
        "timeouts": dict(stats.timeouts),
        "abandoned_at_close": dict(stats.abandoned_at_close),
        "batch_item_failures": dict(stats.batch_item_failures),
        "messages_delivered": dict(stats.messages_delivered),
        "peak_concurrency": dict(stats.peak_concurrency),
        "max_concurrency": {m.spec.logical: m.max_concurrency for m in runtime.mappings},
        "concurrency": runtime.concurrency,
        "cold_starts": dict(stats.cold_starts),
        "schedule_quota_per_s": runtime.scheduler.invocations_per_s,
        "events_relayed": stats.events_relayed,
        "stream_failure_records": runtime.stream.failure_records,
        "stream_records_expired": runtime.stream.expired,
        "schedules_fired": stats.schedules_fired,
        "sweeps": stats.sweeps,
    }


def run_entry(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": run["run_id"],
        "task_id": run["task_id"],
        "tenant": run.get("tenant"),
        "scheduled_for": run.get("scheduled_for"),
        "final_state": run["state"],
        "attempts": [
            {
                "n": a.get("n"),
                "started_at": a.get("started_at"),
                "ended_at": a.get("ended_at"),
                "outcome": a.get("outcome"),
                "error_code": a.get("error_code"),
            }
            for a in run.get("attempts") or []
        ],
        "work_order_id": run.get("work_order_id"),
        "sla_breaches": list(run.get("sla_breaches") or []),
    }


def work_order_entry(order: dict[str, Any]) -> dict[str, Any]:
    keys = ("work_order_id", "subject", "run_id", "task_id", "tenant", "state", "severity", "reason")
    out = {key: order.get(key) for key in keys}
    out.update(
        error_code=order.get("error_code"),
        attempts=order.get("attempts"),
        opened_at=order.get("opened_at"),
        deliveries=[
            {"channel": d.get("channel"), "status": d.get("status"), "attempts": d.get("attempts")}
            for d in order.get("deliveries") or []
        ],
    )
    return out


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(report, handle, separators=(",", ":"), default=str)
    tmp.replace(path)


def async_section(stack: LocalStack, chains: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """What simulated asynchronous work reported (``rebound_local.sim_workers``) and what was
    refused, by reason, from the runs' reports chains."""
    workers = stack.runtime.sim_workers
    refused: Counter[str] = Counter()
    for subject, chain in chains.items():
        if subject.startswith("reports#"):
            refused.update(str(r.get("evidence", {}).get("reason")) for r in chain)
    return {
        "started": workers.stats.started if workers else 0,
        "sent": dict(sorted(workers.stats.by_type.items())) if workers else {},
        "resent": workers.stats.resent if workers else 0,
        "refused": dict(sorted(refused.items())),
    }


COLLISION_WAITS = ("overlap", "mutex_busy", "tenant_quota")


def collisions_section(chains: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Every run that met a busy slot, from its audit chain: a wait episode (``waiting``, with the
    reason: ``overlap``, ``mutex_busy``, ``tenant_quota``), a skip by ``overlap: skip``, or a cancel
    by another run's ``overlap: cancel_other``. One entry per run (its first collision); what the
    pre-flight's hit rate is judged against (``make bench``, group ``conflicts``)."""
    found: dict[str, dict[str, str]] = {}
    for subject, chain in chains.items():
        if not subject.startswith(RUN_PREFIX):
            continue
        for record in chain:
            evidence = record.get("evidence") or {}
            reason = str(evidence.get("reason") or "")
            action = record.get("action")
            hit = (
                (action == "waiting" and reason in COLLISION_WAITS)
                or (action == "skipped" and reason == "overlap")
                or (action == "cancelled" and "overlap: cancel_other" in reason)
            )
            if hit:
                run_id = subject.removeprefix(RUN_PREFIX)
                kind = reason if action == "waiting" else f"overlap_{action}"
                found.setdefault(run_id, {"run_id": run_id, "reason": kind, "at": str(record.get("at"))})
                break
    entries = sorted(found.values(), key=lambda c: (c["at"], c["run_id"]))
    return {
        "total": len(entries),
        "by_reason": dict(sorted(Counter(c["reason"] for c in entries).items())),
        "runs": entries,
    }
