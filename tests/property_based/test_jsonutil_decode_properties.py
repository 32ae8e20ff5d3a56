"""``jsonutil.loads`` and ``plain_loads`` read a document with the decoder's scanner alone when it
fills the text (``audit verify --all`` decodes every item's document so): on any text, well formed
or not, padded, preceded by a byte-order mark or followed by more, they answer what they answered
before (``json.loads``; ``plain_loads``: its decoder's ``decode``), or raise the same error."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebound.domain.jsonutil import loads, plain_loads

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
