"""The simulate report's ``billing`` section: billable units for every service a run touches,
counted the same on the direct transport and through botocore."""

from __future__ import annotations

from typing import Any

import pytest

from rebound_local.pricing import BILLED
from rebound_local.scenario import parse_scenario
from rebound_local.simulate import Simulation

SCENARIO: dict[str, Any] = {
    "description": "billing: clean and retried runs",
    "start": "2026-03-07T00:00:00Z",
    "duration": "30m",
    "settle": "1h",
    "seed": 3,
    "tasks": [
        {"id": "clean", "tenant": "acme", "schedule": {"cron": "*/5 * * * *"}, "target": {"type": "sim"}},
        {
            "id": "retried",
            "tenant": "acme",
            "schedule": {"cron": "*/10 * * * *"},
            "target": {"type": "sim", "behavior": {"fail_first": 1}},
            "retry_policy": {"extends": "quick", "base_delay": "20s"},
        },
        {  # a retry beyond SQS's 15-minute delay waits in a one-time schedule
            "id": "late-retry",
            "tenant": "acme",
            "schedule": {"cron": "*/15 * * * *"},
            "target": {"type": "sim", "behavior": {"fail_first": 1}},
            "retry_policy": {"extends": "quick", "base_delay": "16m", "max_delay": "1h", "jitter": "none"},
        },
    ],
}


def simulate(transport: str) -> dict[str, Any]:
    result = Simulation(parse_scenario(SCENARIO, "billing.yaml"), transport=transport, call_sites=True).run()
    assert result.ok, result.failed
    billing: dict[str, Any] = result.report["billing"]
    return billing


@pytest.fixture(scope="module")
def direct() -> dict[str, Any]:
    return simulate("direct")


def test_every_service_a_run_touches_has_billable_units(direct: dict[str, Any]) -> None:
    units = direct["units"]
    for line in (
        *BILLED,  # every billed line, one-time schedules too (the late retry)
        "sqs.requests.scheduler_delivery",
        "sqs.requests.esm_receive",
        "sqs.requests.esm_delete_batch",
        "sqs.requests.esm_empty_receive",
        "metrics.emf_documents",
    ):
        assert units.get(line, 0) > 0, line
    assert all(
        direct["dollars"][line] > 0 for line in ("sqs.requests", "dynamodb.write_units", "lambda.requests")
    )
    assert direct["runs"] > 0
    assert direct["dollars_per_million_runs"] == pytest.approx(
        direct["dollars_total"] / direct["runs"] * 1e6, rel=1e-3
    )


def test_transactions_bill_each_item_they_carry_twice(direct: dict[str, Any]) -> None:
    units = direct["units"]
    assert units["dynamodb.transaction_items"] > units["dynamodb.transactions"]
    assert units["dynamodb.write_units.table"] >= 2 * units["dynamodb.transaction_items"]


def test_scheduler_deliveries_are_sqs_requests_and_scheduler_invocations(direct: dict[str, Any]) -> None:
    units = direct["units"]
    assert units["sqs.requests.scheduler_delivery"] == units["scheduler.invocations"]
    # every scheduled fire and every retry is one delivery
    assert units["scheduler.invocations"] >= direct["runs"] + units["scheduler.one_time_created"]


def test_every_unit_is_attributed_to_the_call_site_that_spent_it(direct: dict[str, Any]) -> None:
    """Write and read units by call site (``rebound_local.call_sites``) add up to the totals, and
    name the engine's functions, never the store adapters every caller goes through."""
    units = direct["units"]
    for kind in ("write_units", "read_units"):
        sites = {k: v for k, v in units.items() if k.startswith(f"dynamodb.{kind}.site.")}
        assert sum(sites.values()) == pytest.approx(units[f"dynamodb.{kind}"]), kind
        assert not any("adapters/" in k for k in sites), sites
    writes = {k.removeprefix("dynamodb.write_units.site.") for k in units if ".write_units.site." in k}
    # the claim and the outcome of every run, and the retry scheduler's decision
    assert {"engine/executor/attempt.py:Attempts._claim_and_run"} <= writes, writes
    assert any(site.startswith("engine/retry_scheduler") for site in writes), writes


def test_call_sites_are_counted_only_when_asked() -> None:
    """The attribution walks the stack on every DynamoDB call: a simulation does it only when asked
    (the cost bench asks)."""
    short = {**SCENARIO, "duration": "5m", "settle": "10m", "tasks": SCENARIO["tasks"][:1]}
    result = Simulation(parse_scenario(short, "billing-short.yaml")).run()
    units = result.report["billing"]["units"]
    assert units["dynamodb.write_units"] > 0
    assert not [line for line in units if ".site." in line]


def test_botocore_clients_are_metered_as_the_direct_transport_meters(direct: dict[str, Any]) -> None:
    inproc = simulate("inproc")
    # Read units are left out: how often the handlers read tenant settings again varies with the
    # transport's speed, so the reads made differ; every write, message and event is the same.
    for line in (
        "dynamodb.write_units",
        "dynamodb.transaction_items",
        "events.published",
        "scheduler.invocations",
        "scheduler.one_time_created",
        "sqs.requests",
        "lambda.requests",
    ):
        assert inproc["units"].get(line) == direct["units"].get(line), line
    # The same log lines, formatted alike (their timings and durations differ in a few digits).
    handler_bytes = direct["units"]["logs.handler_bytes"]
    assert inproc["units"]["logs.handler_bytes"] == pytest.approx(handler_bytes, rel=0.02)


ODD_ITEMS: list[dict[str, Any]] = [
    {"run_id": {"S": "p1"}, "rev": {"N": "1.50"}, "state": {"S": "running"}, "updated_at": {"S": "t1"}},
    {
        "run_id": {"S": "p1"},
        "rev": {"N": "-0"},
        "note": {"S": "é" * 700},
        "task_id": {"S": "t"},
        "scheduled_for": {"S": "s"},
    },
    {"run_id": {"S": "p2"}, "state": {"S": "ok"}, "doc": {"M": {"l": {"L": [{"N": "1e3"}, {"NULL": True}]}}}},
    {"run_id": {"S": "p2"}, "tags": {"SS": ["a", "b"]}, "nums": {"NS": ["1", "2.0"]}},
    {"run_id": {"S": "p3"}, "blob": {"B": b"\x01" * 1012}},  # binary, near a KB: read back
    {"run_id": {"S": "p3"}, "deep": {"L": [{"M": {"b": {"B": b"\x00\xff"}}}]}},
]


def test_a_put_is_billed_as_if_its_item_were_read_back(aws: Any, settings: Any) -> None:
    """The meter bills a successful put by the item it sent, not a read of what was stored: the
    units are those of reading it back, for every kind of value, plain and in transactions."""
    from moto.dynamodb.models import dynamodb_backends

    from rebound_local.billing import Meter

    ddb = aws.client("dynamodb")
    runs = settings.table("runs")
    backend = dynamodb_backends["123456789012"]["us-east-1"]
    sent, read_back = Meter(lambda: backend), Meter(lambda: backend)
    for n, item in enumerate(ODD_ITEMS):
        if n % 2:
            operation, params = (
                "TransactWriteItems",
                {"TransactItems": [{"Put": {"TableName": runs, "Item": item}}]},
            )
        else:
            operation, params = "PutItem", {"TableName": runs, "Item": item}
        tokens = sent.before("dynamodb", operation, params), read_back.before("dynamodb", operation, params)
        getattr(ddb, "put_item" if operation == "PutItem" else "transact_write_items")(**params)
        sent.after("dynamodb", operation, params, {}, tokens[0])
        read_back.after("dynamodb", operation, params, None, tokens[1])  # as after a failed call
    assert sent.units == read_back.units
    assert sent.units["dynamodb.write_units.indexes"] > 0  # the runs table's indexes were priced
