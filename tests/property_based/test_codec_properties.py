"""The item codec writes every attribute as ``TypeSerializer`` does: its short way for the common
JSON types (``codec._attribute``) gives the serializer's own answer for any value a record holds,
and the serializer's own error where it has one."""

from __future__ import annotations

import enum
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.adapters.dynamo.codec import _dynamo_value, from_item, to_item

pytestmark = pytest.mark.property_based
SERIALIZER = TypeSerializer()


class Colour(enum.StrEnum):
    RED = "red"


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond DynamoDB's 38 digits too: the serializer's error, both ways
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.sets(st.text(min_size=1, max_size=3), min_size=1, max_size=3),
    st.sets(st.integers(-1000, 1000), min_size=1, max_size=3),
    st.just(Colour.RED),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)
records = st.dictionaries(st.sampled_from(["run_id", "state", "rev", "note", "a", "b"]), values, max_size=5)


def outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:  # the same error type, both ways
        return "error", type(exc)


@settings(max_examples=400, deadline=None)
@given(records)
def test_every_attribute_is_written_as_type_serializer_writes_it(data: dict[str, Any]) -> None:
    expected = outcome(
        lambda: {k: SERIALIZER.serialize(_dynamo_value(v)) for k, v in data.items() if v is not None}
    )
    assert outcome(lambda: to_item(data)) == expected


def test_the_short_way_and_the_serializer_agree_on_the_edges() -> None:
    edges: dict[str, Any] = {
        "big": 10**38 - 1,
        "negative": -(10**38) + 1,
        "true": True,
        "zero": 0,
        "nested": {"l": [None, 1, "x", (2, 3.5)], "m": {"d": Decimal("1.50")}},
        "enum": Colour.RED,
    }
    assert to_item(edges) == {k: SERIALIZER.serialize(_dynamo_value(v)) for k, v in edges.items()}
    with pytest.raises(Exception) as short:
        to_item({"n": 10**38})
    with pytest.raises(Exception) as boto:
        SERIALIZER.serialize(10**38)
    assert type(short.value) is type(boto.value)


def test_a_record_with_a_document_reads_back_as_written() -> None:
    record = {"run_id": "r1", "state": "running", "rev": 3, "attempts": [{"n": 1, "ok": True}], "x": None}
    item = to_item(record, "runs")
    assert item["run_id"] == {"S": "r1"} and item["rev"] == {"N": "3"}
    assert set(item) == {"run_id", "state", "rev", "doc"}
    assert from_item(item) == {k: v for k, v in record.items() if v is not None}
