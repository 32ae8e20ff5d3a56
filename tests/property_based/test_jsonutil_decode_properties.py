"""``jsonutil.loads`` and ``plain_loads`` read a document with the decoder's scanner alone when it
fills the text (``audit verify --all`` decodes every item's document so): on any text, well formed
or not, padded, preceded by a byte-order mark or followed by more, they answer what they answered
before (``json.loads``; ``plain_loads``: its decoder's ``decode``), or raise the same error.

``canonical_bytes`` encodes most values once, sorted; on any value (keys of every type JSON
writes, integral and special floats, decimals, times, text that looks like either) it gives the
bytes of the long way (encode, read back with integral numbers as ints, encode sorted) or raises
the same error."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.domain.jsonutil import _default, canonical_bytes, canonical_bytes_of_plain, loads, plain_loads

pytestmark = pytest.mark.property_based


def _integral(text: str) -> int | float:
    number = float(text)
    return int(number) if number.is_integer() else number


values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
documents = st.one_of(
    st.builds(
        lambda value, before, after: before + json.dumps(value, ensure_ascii=False) + after,
        values,
        st.sampled_from(["", "", " ", "\n", "x"]),
        st.sampled_from(["", "", " ", "\n\t", "x", "}", ",1"]),
    ),
    st.builds(lambda value, cut: json.dumps(value)[:cut], values, st.integers(min_value=0, max_value=12)),
    st.text(max_size=12),
    st.sampled_from(
        ['"\\ud800"', "NaN", "-Infinity", '{"a":1,"a":2}', "1.0", "60.0", "[1e400]", "\ufeff{}", "\ufeff"]
    ),
)


def _answer(read: Callable[[str], Any], text: str) -> tuple[str, Any]:
    try:
        return "value", repr(read(text))
    except ValueError as exc:  # json.JSONDecodeError
        return type(exc).__name__, str(exc)


@settings(max_examples=800, deadline=None)
@given(documents)
def test_loads_answers_as_json_loads(text: str) -> None:
    assert _answer(loads, text) == _answer(json.loads, text)


@settings(max_examples=800, deadline=None)
@given(documents)
def test_plain_loads_answers_as_json_loads_with_integral_numbers_as_ints(text: str) -> None:
    assert _answer(plain_loads, text) == _answer(json.JSONDecoder(parse_float=_integral).decode, text)


keys = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["1", "-2", "10", "9", "true", "null", "NaN", "Infinity", "a.0", "e+"]),
    st.integers(min_value=-20, max_value=20),
    st.floats(allow_nan=False, width=16),
    st.booleans(),
    st.none(),
)
canonical_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([60.0, -0.0, 1e16, 1e300, 0.5, 1e-7, "v1.0,", "x.0}", "e+3", ',"9":']),
        st.decimals(allow_nan=False, allow_infinity=False, places=2),
        st.datetimes(timezones=st.just(UTC), min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=10,
)


def _long_way(value: Any) -> bytes:
    return canonical_bytes_of_plain(plain_loads(json.dumps(value, default=_default)))


def _bytes_or_error(encode: Callable[[Any], bytes], value: Any) -> tuple[str, Any]:
    try:
        return "bytes", encode(value)
    except (TypeError, ValueError) as exc:  # unsortable keys, unencodable text
        return "error", type(exc).__name__


@settings(max_examples=1500, deadline=None)
@given(canonical_values)
def test_canonical_bytes_gives_the_long_ways_bytes(value: Any) -> None:
    assert _bytes_or_error(canonical_bytes, value) == _bytes_or_error(_long_way, value)


def test_canonical_bytes_sorts_numeric_keys_as_the_strings_they_become() -> None:
    assert canonical_bytes({10: 60.0, 9: [1e16, Decimal("2.50")], True: None}) == (
        b'{"10":60,"9":[10000000000000000,2.5],"true":null}'
    )
