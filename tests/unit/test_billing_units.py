"""The billing model's unit arithmetic (rebound_local.billing): item sizes, write and read units,
transactions, index writes, the event source mappings' polling model, prices."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from rebound_local import bill_units as u
from rebound_local import billing as b
from rebound_local import pricing


def s(text: str) -> dict[str, str]:
    return {"S": text}


def test_item_size_counts_attribute_names_and_values_in_utf8() -> None:
    assert u.item_size({"pk": s("abc")}) == 2 + 3
    assert u.item_size({"név": s("é")}) == 4 + 2  # both in UTF-8 bytes
    assert u.item_size(None) == 0


def test_an_item_of_every_type_is_the_sum_of_its_names_and_values() -> None:
    item = {
        "pk": s("run#é"),
        "n": {"N": "12.50"},
        "ok": {"BOOL": False},
        "m": {"M": {"k": s("v")}},
        "l": {"L": [s("ab")]},
        "ss": {"SS": ["a"]},
    }
    assert u.item_size(item) == sum(len(k.encode()) + u.value_size(v) for k, v in item.items())
    assert u.item_size(item) == (2 + 6) + (1 + 3) + (2 + 1) + (1 + 6) + (1 + 6) + (2 + 1)


def test_numbers_cost_one_byte_per_two_significant_digits_plus_one() -> None:
    assert u.value_size({"N": "7"}) == 2
    assert u.value_size({"N": "12345"}) == 4
    assert u.value_size({"N": "-0.00120"}) == 2  # leading and trailing zeros are not significant
    assert u.value_size({"N": "1000000"}) == 2


def test_lists_and_maps_carry_three_bytes_plus_one_per_element() -> None:
    assert u.value_size({"L": [s("ab"), {"BOOL": True}]}) == 3 + (2 + 1) + (1 + 1)
    assert u.value_size({"M": {"k": s("v")}}) == 3 + (1 + 1 + 1)
    assert u.value_size({"SS": ["a", "bc"]}) == 3
    assert u.value_size({"NULL": True}) == 1


def test_an_unknown_type_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'X'"):
        u.value_size({"X": "1"})


def test_writes_bill_one_unit_per_started_kilobyte() -> None:
    assert u.write_units(0) == 1
    assert u.write_units(1024) == 1
    assert u.write_units(1126) == 2  # a 1.1 KB item
    assert u.write_units(3 * 1024 + 1) == 4


def test_reads_bill_one_unit_per_started_4_kb_and_half_when_eventually_consistent() -> None:
    assert u.read_units(100, consistent=True) == 1.0
    assert u.read_units(100) == 0.5
    assert u.read_units(4097, consistent=True) == 2.0
    assert u.read_units(0) == 0.5  # a miss still reads


def test_a_transaction_bills_each_item_twice() -> None:
    assert u.transaction_write_units([200, 300, 400]) == 6  # three small items
    assert u.transaction_write_units([1126, 10]) == 2 * 2 + 2


INDEX = (["state", "updated_at"], ["run_id"], "ALL", [])


def test_an_index_write_costs_nothing_when_the_item_is_not_in_the_index() -> None:
    assert b.index_write_units(INDEX, None, {"run_id": s("r")}) == 0


def test_changing_the_index_key_deletes_the_old_entry_and_writes_the_new() -> None:
    old = {"run_id": s("r"), "state": s("running"), "updated_at": s("1")}
    new = {**old, "state": s("succeeded")}
    assert b.index_write_units(INDEX, old, new) == 2
    assert b.index_write_units(INDEX, None, new) == 1
    assert b.index_write_units(INDEX, old, None) == 1


def test_an_index_entry_is_rewritten_only_if_a_projected_attribute_changed() -> None:
    old = {"run_id": s("r"), "state": s("running"), "updated_at": s("1"), "note": s("a")}
    assert b.index_write_units(INDEX, old, dict(old)) == 0
    assert b.index_write_units(INDEX, old, {**old, "note": s("b")}) == 1
    keys_only = (["state", "updated_at"], ["run_id"], "KEYS_ONLY", [])
    assert b.index_write_units(keys_only, old, {**old, "note": s("b")}) == 0


def test_the_event_source_mappings_poll_five_long_polls_each_every_20_seconds() -> None:
    assert u.esm_empty_receives(3600, queues=1) == 5 * 180
    assert u.esm_empty_receives(3600, queues=3, busy_receives=100) == 3 * 5 * 180 - 100
    assert u.esm_empty_receives(10, queues=1, busy_receives=100) == 0


def test_lambda_gb_seconds_follow_the_configured_memory() -> None:
    assert u.lambda_gb_seconds(1000, 512) == 0.5
    assert u.lambda_gb_seconds(250, 1024) == 0.25


def test_the_section_prices_every_line_and_adds_the_polling_model() -> None:
    units = {"sqs.requests": 10.0, "dynamodb.write_units": 1e6, "lambda.requests": 2.0}
    section = pricing.section(units, seconds=20, runs=4, other_sqs_sends=3, esm_queues=1)
    assert section["units"]["sqs.requests"] == 10 + 3 + 5
    assert section["units"]["sqs.requests.esm_empty_receive"] == 5
    assert section["dollars"]["dynamodb.write_units"] == pytest.approx(0.625)
    assert section["dollars_total"] == pytest.approx(0.625 + 18 * 0.4e-6 + 2 * 0.2e-6)
    assert section["dollars_per_million_runs"] == pytest.approx(section["dollars_total"] / 4 * 1e6, rel=1e-6)


def test_an_idle_environment_scales_to_a_month_and_adds_what_bills_by_the_month() -> None:
    idle = pricing.section({"lambda.requests": 60.0, "metrics.distinct": 2}, seconds=3600, runs=0)
    monthly = pricing.fixed_monthly(idle)
    assert monthly["usage.lambda.requests"] == pytest.approx(60 * 730 * 0.2e-6, abs=1e-4)
    assert monthly["custom_metrics"] == pytest.approx(0.6)
    alarms = pricing.IDLE_RESOURCES["alarms"] * 0.10 + pricing.IDLE_RESOURCES["composite_alarms"] * 0.50
    assert monthly["alarms"] == pytest.approx(alarms)
    assert monthly["total"] == pytest.approx(sum(v for k, v in monthly.items() if k != "total"), abs=1e-3)


def _stored(attributes: dict[str, Any]) -> Any:
    """An item as moto stores it."""
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    return Item(hash_key=DynamoType(attributes["run_id"]), range_key=None, attrs=attributes)


class _Backend:
    """moto's DynamoDB backend as the meter reads it: one table keyed by ``run_id``."""

    hash_key_attr, range_key_attr = "run_id", None

    def __init__(self, items: dict[str, dict[str, Any]]) -> None:
        self.items = items

    def get_table(self, name: str) -> _Backend:
        return self

    def get_item(self, table: str, key: dict[str, Any]) -> Any:
        found = self.items.get(key["run_id"]["S"])
        return _stored(found) if found is not None else None


def test_a_batch_read_with_a_projection_bills_the_whole_stored_item() -> None:
    big = {"run_id": {"S": "r1"}, "doc": {"S": "x" * 5000}}  # 5 KB: two 4 KB read units
    meter = b.Meter(lambda: _Backend({"r1": big}))
    projected = {"RequestItems": {"runs": {"Keys": [{"run_id": {"S": "r1"}}], "ProjectionExpression": "#k"}}}
    meter.after(
        "dynamodb", "BatchGetItem", projected, {"Responses": {"runs": [{"run_id": {"S": "r1"}}]}}, None
    )
    assert meter.units["dynamodb.read_units"] == u.read_units(u.item_size(big)) == 1.0
    whole = {"RequestItems": {"runs": {"Keys": [{"run_id": {"S": "r1"}}]}}}
    meter.after("dynamodb", "BatchGetItem", whole, {"Responses": {"runs": [big]}}, None)
    assert meter.units["dynamodb.read_units"] == 2.0  # the same as reading it whole


def test_an_item_with_a_binary_value_anywhere_is_read_back_after_a_put() -> None:
    assert b._without_binary({"a": s("x"), "n": {"N": "1"}, "m": {"M": {"l": {"L": [{"BOOL": True}]}}}})
    assert b._without_binary({"t": {"SS": ["a"]}, "z": {"NULL": True}})
    assert not b._without_binary({"a": s("x"), "b": {"B": b"\x00"}})
    assert not b._without_binary({"m": {"M": {"l": {"L": [s("x"), {"BS": [b"\x01"]}]}}}})


def test_a_batch_read_is_consistent_or_not_table_by_table() -> None:
    item = {"run_id": {"S": "r1"}, "doc": {"S": "x" * 100}}
    meter = b.Meter(lambda: _Backend({"r1": item}))
    keys = {"Keys": [{"run_id": {"S": "r1"}}]}
    meter.after(
        "dynamodb",
        "BatchGetItem",
        {"RequestItems": {"runs": {**keys, "ConsistentRead": True}}},
        {"Responses": {"runs": [item]}},
        None,
    )
    assert meter.units["dynamodb.read_units"] == 1.0  # a strongly consistent read: a whole unit
    meter.after(
        "dynamodb",
        "BatchGetItem",
        {"RequestItems": {"runs": keys}, "ConsistentRead": True},  # not where BatchGetItem reads it
        {"Responses": {"runs": [item]}},
        None,
    )
    assert meter.units["dynamodb.read_units"] == 1.5  # eventually consistent: half a unit
    assert meter.units["dynamodb.read_units.BatchGetItem"] == 1.5  # its own line too


STORED_ITEMS = [
    {"run_id": s("r1"), "doc": s("x" * 5000)},
    {"run_id": s("r2"), "state": s("pending"), "n": {"N": "1200"}, "é": s("naïve")},
    {"run_id": s("r3"), "seq": {"N": "-0.0120"}, "flag": {"BOOL": True}},
    {"run_id": s("r4"), "m": {"M": {"a": {"L": [s("x"), {"N": "1"}]}}}, "t": {"SS": ["a", "bc"]}},
    {"run_id": s("r5"), "b": {"B": b"\x00\x01"}, "z": {"NULL": True}},
]


@pytest.mark.parametrize("stored", STORED_ITEMS, ids=lambda item: item["run_id"]["S"])
def test_a_stored_item_is_sized_as_its_json_form(stored: dict[str, Any]) -> None:
    """The meter sizes a stored item for a read without its JSON form when it can: the same size."""
    meter = b.Meter(lambda: _Backend({stored["run_id"]["S"]: stored}))
    key = {"run_id": stored["run_id"]}
    assert meter._stored_size("runs", key) == u.item_size(meter._stored("runs", key)) == u.item_size(stored)
    assert meter._stored_size("runs", {"run_id": s("missing")}) == 0
    meter.after("dynamodb", "GetItem", {"TableName": "runs", "Key": key}, {"Item": stored}, None)
    assert meter.units["dynamodb.read_units"] == u.read_units(u.item_size(stored))


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("rebound", logging.INFO, __file__, 1, "attempt finished", None, None)
    record.created, record.msecs = created, (created - int(created)) * 1000
    return record


def test_log_lines_measure_as_many_bytes_as_their_formatter_writes() -> None:
    own = LambdaPowertoolsFormatter(service="executor")
    view = b.measuring(own)
    own.append_keys(cold_start=True)
    own.clear_state()  # each invocation starts afresh: the formatter's keys are a new dict
    own.append_keys(function_request_id="req-1")  # a key appended later is in the view's lines too
    second = 1_700_000_000
    first, later = _record(second + 0.001), _record(second + 0.999)
    next_second = _record(second + 1.5)

    assert view.format(first) == own.format(first)  # a second's first line: formatted as it is
    # Later in the same second the time is reused: other digits, the same bytes.
    assert view.format(later) != own.format(later)
    assert len(view.format(later).encode()) == len(own.format(later).encode())
    assert view.format(next_second) == own.format(next_second)
    assert '"function_request_id":"req-1"' in view.format(next_second)
    assert "cold_start" not in view.format(next_second)


def test_a_log_line_is_counted_with_its_newline() -> None:
    counted: list[int] = []

    class Meter:
        def logged(self, nbytes: int) -> None:
            counted.append(nbytes)

    own = LambdaPowertoolsFormatter(service="executor")
    handler = b.LogBytes(Meter(), own)  # type: ignore[arg-type]
    record = _record(1_700_000_000.5)
    handler.handle(record)
    assert counted == [len(own.format(record).encode()) + 1]
