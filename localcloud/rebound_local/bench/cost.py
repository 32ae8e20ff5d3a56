"""The bill per run class and of an idle month (see docs/cost.md for the method)."""

from __future__ import annotations

from typing import Any

from rebound.domain.retention import Retention
from rebound_local import pricing
from rebound_local.bench.common import COST_SCENARIOS
from rebound_local.bench.scenarios import bench_scenario


def bench_cost() -> dict[str, Any]:
    """The bill per run class and of an idle month (see docs/cost.md for the method)."""

    sections: dict[str, dict[str, Any]] = {}
    held: dict[str, bool] = {}
    for name, path in COST_SCENARIOS.items():
        figures = bench_scenario(path, aws_sized=True, call_sites=True)
        sections[name] = figures["billing"]
        held[name] = bool(figures["invariants_held"])
    idle = sections["idle"]
    idle_rate = {line: amount / idle["seconds"] for line, amount in idle["units"].items()}
    idle_monthly = pricing.fixed_monthly(idle)
    per_class: dict[str, Any] = {}
    for name in ("clean", "clean_low_volume", "one_retry", "dead_letter"):
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
"""The tables whose items a run leaves (the outbox's and the control records' expire anyway)."""
MONTH_DAYS = 30.4
YEAR = 12


def storage_per_million(section: dict[str, Any]) -> dict[str, Any]:
    """What a million runs of a class leave: in DynamoDB (their tables' and indexes' bytes, each
    item and index entry with DynamoDB's 100-byte overhead, at the standard table class's $0.25
    per GB-month) and in the audit archive (S3), without retention and with the defaults'.

    - ``dollars_per_month``: without retention, what a million runs add to every later month;
    - ``retained``: at a million runs a month with ``Retention()``'s days, what DynamoDB holds
      once steady (a finished run's item and index entries for ``runs_days``, a run's records for
      ``audit_days``), what the archive adds each month (S3 Standard for 30 days, then Glacier
      Instant Retrieval), and the month after a year, with retention and without; and the idle
      month after that year: the archive alone, DynamoDB emptied by TTL."""
    runs = max(1, section["runs"])
    stored = section.get("stored_bytes") or {}
    kept = sum(size for name, size in stored.items() if name.split(".")[0] in KEPT)
    per_run = kept / runs
    gb = per_run * 1e6 / 1024**3
    price_gb = pricing.MONTHLY["dynamodb_storage_gb"]
    days = Retention()
    run_bytes = sum(size for name, size in stored.items() if name.split(".")[0] == "runs") / runs
    audit_bytes = stored.get("audit", 0) / runs
    other_bytes = per_run - run_bytes - audit_bytes  # work orders, DLQ records: kept
    archive_bytes = section.get("archived_bytes", 0) / runs

    def held_gb(horizon_days: float) -> float:
        """What DynamoDB holds at a million runs a month once ``horizon_days`` of them have run."""
        held = run_bytes * min(days.runs_days, horizon_days) + audit_bytes * min(
            days.audit_days, horizon_days
        )
        return float(held) / MONTH_DAYS * 1e6 / 1024**3

    steady_gb = held_gb(float("inf"))
    year_gb = held_gb(YEAR * MONTH_DAYS)
    archive_gb = archive_bytes * 1e6 / 1024**3
    archive_month = archive_gb * pricing.MONTHLY["s3_standard_gb"]
    archive_year_gb = archive_gb * YEAR
    year_archive = archive_year_gb * pricing.MONTHLY["s3_glacier_ir_gb"] + archive_month
    kept_gb_year = other_bytes * 1e6 / 1024**3 * YEAR
    return {
        "bytes_per_run": round(per_run, 1),
        "gb": round(gb, 3),
        "dollars_per_month": round(gb * price_gb, 3),
        "retained": {
            "runs_days": days.runs_days,
            "audit_days": days.audit_days,
            "bytes_per_run": {
                "runs": round(run_bytes, 1),
                "audit": round(audit_bytes, 1),
                "kept": round(other_bytes, 1),
                "archive": round(archive_bytes, 1),
            },
            "steady_dynamodb_gb": round(steady_gb, 3),
            "steady_dynamodb_dollars_per_month": round(steady_gb * price_gb, 3),
            "archive_gb_added_per_month": round(archive_gb, 4),
            "month_after_a_year_dollars": {
                "without_retention": round(gb * YEAR * price_gb, 3),
                "with_retention": round((year_gb + kept_gb_year) * price_gb + year_archive, 3),
            },
            "idle_month_after_a_year_dollars": round(kept_gb_year * price_gb + year_archive, 3),
        },
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
