"""The bill per run class and of an idle month (see docs/cost.md for the method)."""

from __future__ import annotations

from typing import Any

from rebound_local import pricing
from rebound_local.bench.common import COST_SCENARIOS
from rebound_local.bench.scenarios import bench_scenario


def bench_cost() -> dict[str, Any]:
    """The bill per run class and of an idle month (see docs/cost.md for the method)."""

    sections: dict[str, dict[str, Any]] = {}
    held: dict[str, bool] = {}
    for name, path in COST_SCENARIOS.items():
        figures = bench_scenario(path, aws_sized=True)
        sections[name] = figures["billing"]
        held[name] = bool(figures["invariants_held"])
    idle = sections["idle"]
    idle_rate = {line: amount / idle["seconds"] for line, amount in idle["units"].items()}
    idle_monthly = pricing.fixed_monthly(idle)
    per_class: dict[str, Any] = {}
    for name in ("clean", "one_retry", "dead_letter"):
        section = sections[name]
        runs = max(1, section["runs"])
        marginal = {
            line: (amount - idle_rate.get(line, 0.0) * section["seconds"]) / runs
            for line, amount in section["units"].items()
            if line != "metrics.distinct"
        }
        dollars = pricing.price(marginal)
        provisioned = pricing.provisioned_price(marginal)
        per_class[name] = {
            "runs": section["runs"],
            "storage": storage_per_million(section),
            "dollars": round(sum(dollars.values()) * 1e6, 4),
            "dollars_provisioned": round(sum(provisioned.values()) * 1e6, 4),
            "dollars_by_line": {line: round(v * 1e6, 4) for line, v in dollars.items()},
            "units_per_run": {line: round(v, 4) for line, v in sorted(marginal.items())},
        }
    naive = _naive_per_million()
    # A month with runs also publishes the run metrics: each distinct one bills by the month.
    distinct = max(int(sections[name]["units"].get("metrics.distinct", 0)) for name in per_class)
    return {
        "prices_as_of": pricing.PRICES_AS_OF,
        "per_million_runs": per_class,
        "idle_monthly": idle_monthly,
        "idle_monthly_provisioned": pricing.provisioned_idle_monthly(idle_monthly),
        "provisioned_model": {
            "utilization": pricing.PROVISIONED_UTILIZATION,
            "unit_hour": pricing.PROVISIONED_UNIT_HOUR,
            "capacities": pricing.PROVISIONED_CAPACITIES,
        },
        "custom_metrics_in_a_month_with_runs": {
            "metrics": distinct,
            "dollars": round(distinct * pricing.MONTHLY["custom_metric"], 2),
        },
        "comparison_per_million_clean_runs": naive,
        "invariants_held": held,
        "sections": sections,
    }


KEPT = ("runs", "audit", "workorders", "dlq_messages")
"""The tables whose items never expire today (the outbox's and the control records' have a TTL)."""


def storage_per_million(section: dict[str, Any]) -> dict[str, float]:
    """What a million runs of a class leave in DynamoDB, kept for ever today: their tables' and
    indexes' bytes (each item and index entry with DynamoDB's 100-byte overhead), per run, and its
    price every month after, at the standard table class's $0.25 per GB-month."""
    stored = section.get("stored_bytes") or {}
    kept = sum(size for name, size in stored.items() if name.split(".")[0] in KEPT)
    per_run = kept / max(1, section["runs"])
    gb = per_run * 1e6 / 1024**3
    return {
        "bytes_per_run": round(per_run, 1),
        "gb": round(gb, 3),
        "dollars_per_month": round(gb * pricing.MONTHLY["dynamodb_storage_gb"], 3),
    }


def _naive_per_million() -> dict[str, float]:
    """What other designs cost per million clean runs, by their published prices (docs/cost.md)."""

    p = pricing.PRICES
    # Step Functions Standard: Scheduler starts it; start, claim, invoke, record, succeed: 5 transitions.
    step_functions = 5 * pricing.STEP_FUNCTIONS_STANDARD_PER_TRANSITION + p["scheduler.invocations"]
    # Scheduler invokes the target's Lambda directly: no queue, no ledger, no audit.
    naive = p["scheduler.invocations"]
    return {
        "scheduler_to_target_directly": round(naive * 1e6, 2),
        "step_functions_standard_5_transitions": round(step_functions * 1e6, 2),
    }
