"""The provisioned-capacity model of the bill (``pricing.provisioned_price``,
``pricing.provisioned_idle_monthly``): DynamoDB's units repriced by the capacity unit-hour at a
utilization, every other line as on-demand."""

from __future__ import annotations

import pytest

from rebound import resources as r
from rebound_local import pricing

pytestmark = pytest.mark.unit


def test_a_unit_costs_its_unit_hour_over_the_units_an_hour_serves_at_the_utilization() -> None:
    units = {"dynamodb.write_units": 3600 * 0.5, "dynamodb.read_units": 7200 * 0.5, "sqs.requests": 10}
    priced = pricing.provisioned_price(units, utilization=0.5)
    # 1,800 write units at 50 %: one write unit-hour; 3,600 read units: two read unit-hours
    assert priced["dynamodb.write_units"] == pytest.approx(
        pricing.PROVISIONED_UNIT_HOUR["dynamodb.write_units"]
    )
    assert priced["dynamodb.read_units"] == pytest.approx(
        2 * pricing.PROVISIONED_UNIT_HOUR["dynamodb.read_units"]
    )
    assert priced["sqs.requests"] == pytest.approx(pricing.price(units)["sqs.requests"])
    assert set(priced) == set(pricing.price(units))


def test_at_70_percent_a_write_costs_about_40_percent_of_on_demand() -> None:
    units = {"dynamodb.write_units": 1e6, "dynamodb.read_units": 1e6}
    on_demand, provisioned = pricing.price(units), pricing.provisioned_price(units)
    assert provisioned["dynamodb.write_units"] / on_demand["dynamodb.write_units"] == pytest.approx(
        0.413, abs=0.001
    )
    assert provisioned["dynamodb.read_units"] / on_demand["dynamodb.read_units"] == pytest.approx(
        0.413, abs=0.001
    )


@pytest.mark.parametrize("utilization", [0, -0.1, 1.5])
def test_a_utilization_outside_0_to_1_is_refused_with_its_value(utilization: float) -> None:
    with pytest.raises(ValueError, match=str(utilization)):
        pricing.provisioned_price({}, utilization=utilization)


def test_an_idle_month_pays_every_table_and_index_at_its_minimum_and_a_throttling_alarm_each() -> None:
    idle = {
        "alarms": 4.3,
        "dashboards": 3.0,
        "usage.sqs.requests": 0.86,
        "usage.dynamodb.write_units": 0.06,
        "usage.dynamodb.read_units": 0.06,
        "total": 8.28,
    }
    month = pricing.provisioned_idle_monthly(idle, min_read_units=2, min_write_units=1)
    capacities = sum(1 + len(spec.indexes) for spec in r.SPEC.tables)
    assert capacities == pricing.PROVISIONED_CAPACITIES == 16
    hours = 730
    assert month["provisioned_capacity"] == pytest.approx(
        capacities * hours * (2 * 0.00013 + 0.00065), abs=1e-3
    )
    assert month["alarms"] == pytest.approx(4.3 + 0.10 * len(r.SPEC.tables))
    assert "usage.dynamodb.write_units" not in month and "usage.dynamodb.read_units" not in month
    assert month["usage.sqs.requests"] == 0.86
    assert month["total"] == pytest.approx(sum(v for k, v in month.items() if k != "total"), abs=1e-3)
