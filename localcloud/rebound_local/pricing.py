"""What the units cost: us-east-1 list prices (dated; sources in ``docs/cost.md``), on demand and
with provisioned tables, the fixed monthly cost of an environment, and the report's ``billing``
section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rebound.resources import SPEC
from rebound_local.bill_units import ESM_POLLERS, ESM_WAIT_S, PLATFORM_LOG_BYTES, esm_empty_receives

SECONDS_PER_MONTH = 730 * 3600

PRICES_AS_OF = "2026-11-22"
PRICES: dict[str, float] = {
    # dollars per unit, us-east-1, on-demand, no free tier (sources: docs/cost.md)
    "sqs.requests": 0.40 / 1e6,
    "dynamodb.write_units": 0.625 / 1e6,
    "dynamodb.read_units": 0.125 / 1e6,
    "scheduler.invocations": 1.00 / 1e6,
    "scheduler.one_time_created": 0.0,
    "events.published": 1.00 / 1e6,
    "lambda.requests": 0.20 / 1e6,
    "lambda.gb_seconds": 0.0000133334,  # arm64, as the stack deploys every function
    "logs.bytes_ingested": 0.50 / 1024**3,
    "s3.put_requests": 0.005 / 1000,  # S3 Standard PUT (the audit archive's batches)
    "metrics.emf_documents": 0.0,  # their bytes are in logs.bytes_ingested
}
MONTHLY: dict[str, float] = {
    # dollars per resource-month
    "alarm": 0.10,
    "composite_alarm": 0.50,
    "dashboard": 3.00,
    "custom_metric": 0.30,
    "dynamodb_storage_gb": 0.25,  # standard table class, per GB-month (aws.amazon.com/dynamodb/pricing)
    "s3_standard_gb": 0.023,  # the audit archive's first 30 days
    "s3_glacier_ir_gb": 0.004,  # after (objects of 128 KB or more)
}
ITEM_OVERHEAD_BYTES = 100
"""What DynamoDB adds to each item, and to each index entry, when it bills storage."""
PROVISIONED_UNIT_HOUR: dict[str, float] = {
    # dollars per capacity unit-hour, us-east-1, provisioned (sources: docs/cost.md)
    "dynamodb.write_units": 0.00065,
    "dynamodb.read_units": 0.00013,
}
PROVISIONED_UTILIZATION = 0.70
"""The auto scaling target an environment with ``capacity.mode: provisioned`` keeps by default."""
PROVISIONED_CAPACITIES = sum(1 + len(spec.indexes) for spec in SPEC.tables)
"""Tables plus indexes, each provisioned with read and write units of its own (16:
``tests/infra/test_infra_capacity.py`` checks the stack scales twice as many)."""
PROVISIONED_ALARMS = len(SPEC.tables)
"""One throttling alarm per table in an environment with provisioned capacity."""
STEP_FUNCTIONS_STANDARD_PER_TRANSITION = 0.025 / 1000
IDLE_RESOURCES = {"alarms": 30, "composite_alarms": 3, "dashboards": 1}
"""What the stack creates that bills by the month whatever it does (``tests/infra`` checks the counts)."""


BILLED = (
    "sqs.requests",
    "dynamodb.write_units",
    "dynamodb.read_units",
    "scheduler.invocations",
    "scheduler.one_time_created",
    "events.published",
    "lambda.requests",
    "lambda.gb_seconds",
    "logs.bytes_ingested",
    "s3.put_requests",
)


def price(units: Mapping[str, float]) -> dict[str, float]:
    """Dollars per billed unit line, at ``PRICES``."""
    return {unit: units.get(unit, 0.0) * PRICES[unit] for unit in BILLED}


def provisioned_price(
    units: Mapping[str, float], utilization: float = PROVISIONED_UTILIZATION
) -> dict[str, float]:
    """``price`` with the tables provisioned and scaled to ``utilization``: a capacity unit-hour
    serves 3,600 units at full use, so a unit costs its unit-hour price over 3,600 times ``utilization``.
    A model of a steady load: auto scaling holds the consumed capacity near its target only when
    the load changes more slowly than scaling follows (docs/cost.md)."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], not {utilization}")
    out = price(units)
    for unit, hourly in PROVISIONED_UNIT_HOUR.items():
        out[unit] = units.get(unit, 0.0) * hourly / (3600 * utilization)
    return out


def provisioned_idle_monthly(
    idle_monthly: Mapping[str, float], min_read_units: int = 1, min_write_units: int = 1
) -> dict[str, float]:
    """An idle month (``fixed_monthly``) with the tables provisioned at their minimum units: the
    capacity is billed by the hour whatever is used (and covers an idle month's few requests, so
    their on-demand lines go), and each table has its throttling alarm."""
    hours = SECONDS_PER_MONTH / 3600
    out = {k: v for k, v in idle_monthly.items() if k != "total" and not k.startswith("usage.dynamodb.")}
    capacity = (
        PROVISIONED_CAPACITIES
        * hours
        * (
            min_read_units * PROVISIONED_UNIT_HOUR["dynamodb.read_units"]
            + min_write_units * PROVISIONED_UNIT_HOUR["dynamodb.write_units"]
        )
    )
    out["provisioned_capacity"] = round(capacity, 4)
    out["alarms"] = round(out.get("alarms", 0.0) + PROVISIONED_ALARMS * MONTHLY["alarm"], 4)
    out["total"] = round(sum(out.values()), 4)
    return out


def difference(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 6) for k, v in after.items()}


def section(
    units: Mapping[str, float],
    *,
    seconds: float,
    runs: int,
    other_sqs_sends: int = 0,
    esm_queues: int = 0,
) -> dict[str, Any]:
    """The ``billing`` section of a simulation report, from the units metered over ``seconds``.

    ``other_sqs_sends``: messages queues accepted from neither a metered client nor Scheduler
    (bus rules' deliveries); each is one ``SendMessage``. ``esm_queues``: queues a Lambda event
    source mapping polls, for the empty receives of ``esm_empty_receives``.
    """
    counted = dict(units)
    busy = int(counted.get("sqs.requests.esm_receive", 0))
    empty = esm_empty_receives(seconds, esm_queues, busy)
    for line, amount in (
        ("sqs.requests.rule_delivery", max(0, other_sqs_sends)),
        ("sqs.requests.esm_empty_receive", empty),
    ):
        counted[line] = counted.get(line, 0) + amount
        counted["sqs.requests"] = counted.get("sqs.requests", 0) + amount
    dollars = price(counted)
    total = sum(dollars.values())
    return {
        "prices_as_of": PRICES_AS_OF,
        "seconds": round(seconds, 3),
        "runs": runs,
        "units": {k: round(v, 6) for k, v in sorted(counted.items())},
        "dollars": {k: round(v, 8) for k, v in dollars.items()},
        "dollars_total": round(total, 8),
        "dollars_per_million_runs": round(total / runs * 1e6, 4) if runs else None,
        "model": {
            "esm_pollers": ESM_POLLERS,
            "esm_wait_s": ESM_WAIT_S,
            "esm_queues": esm_queues,
            "platform_log_bytes_per_invocation": PLATFORM_LOG_BYTES,
            "lambda_time": "measured handler wall time on this machine, rounded up to 1 ms",
        },
    }


def fixed_monthly(idle: Mapping[str, Any]) -> dict[str, float]:
    """An idle environment's monthly bill: the usage of an idle simulation (``section`` of a
    scenario with no runs) scaled to a month, and what bills by the resource-month."""
    scale = SECONDS_PER_MONTH / float(idle["seconds"]) if idle["seconds"] else 0.0
    usage = {line: round(amount * scale, 4) for line, amount in idle["dollars"].items()}
    distinct = float(idle["units"].get("metrics.distinct", 0))
    out: dict[str, float] = {
        "alarms": IDLE_RESOURCES["alarms"] * MONTHLY["alarm"]
        + IDLE_RESOURCES["composite_alarms"] * MONTHLY["composite_alarm"],
        "dashboards": IDLE_RESOURCES["dashboards"] * MONTHLY["dashboard"],
        "custom_metrics": round(distinct * MONTHLY["custom_metric"], 4),
        **{f"usage.{line}": amount for line, amount in usage.items() if amount},
    }
    out["total"] = round(sum(out.values()), 4)
    return out
