"""Canonical JSON: the one byte form used for hashing and for size limits."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from decimal import Decimal
from json.scanner import make_scanner
from typing import Any

from rebound.domain.timefmt import iso


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "isoformat"):
        return iso(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _number(text: str) -> int | float:
    number = float(text)
    return int(number) if number.is_integer() else number


_PLAIN_DECODER = json.JSONDecoder(parse_float=_number)
"""What ``json.loads(text, parse_float=_number)`` builds for each call, built once (it keeps no
state between calls)."""
Scan = Callable[[str, int], tuple[Any, int]]
"""A decoder's scanner: text and where to start -> the value there and where it ends."""


def _scanner(decoder: json.JSONDecoder) -> Scan:
    """A scanner made as ``decoder`` makes its own (``JSONDecoder.scan_once``, which typeshed leaves
    out; it also types ``make_scanner``'s argument as the scanner class itself)."""
    return make_scanner(decoder)  # type: ignore[arg-type]


_PLAIN_SCAN, _SCAN = _scanner(_PLAIN_DECODER), _scanner(json.JSONDecoder())
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""What ``json.dumps`` builds for each call with these options, built once."""


_CANONICAL_DIRECT = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
)
"""``_CANONICAL_ENCODER`` that also writes what ``_default`` converts."""
_KEY_NOT_STR = re.compile(r'[{,]"(?:-?\d|true"|false"|Infinity"|-Infinity"|NaN")')
"""A key that may have been a number or a boolean before it was written as a string (such keys are
sorted as themselves, not as the strings they become); a string key that looks so matches too."""


def _maybe_integral_float(text: str) -> bool:
    """``repr`` writes every integral float as ``60.0`` or ``1e+16``; text inside strings may look
    so too."""
    return ".0," in text or ".0}" in text or ".0]" in text or text.endswith(".0") or "e+" in text


def canonical_bytes(value: Any) -> bytes:
    """Sorted keys, no spaces, integral numbers as integers: the form hashes are computed over.

    A value is encoded once, sorted, unless its encoding may hold an integral float or a key that
    was not a string; such a value goes the long way: encoded, read back with the float
    normalization inside the JSON parser (C) rather than a Python walk of the value, and encoded
    sorted. Both ways give the same bytes or raise the same error
    (``tests/property_based/test_jsonutil_decode_properties.py``); this sits on the path of every
    state change.
    """
    try:
        text: str | None = _CANONICAL_DIRECT.encode(value)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted: the long way says why
        text = None
    if text is None or _maybe_integral_float(text) or _KEY_NOT_STR.search(text):
        return canonical_bytes_of_plain(plain_loads(json.dumps(value, default=_default)))
    return text.encode()


def plain_loads(text: str | bytes) -> Any:
    """JSON text as a value whose integral numbers are ints (``60.0`` reads as ``60``), as
    ``canonical_bytes`` normalizes them."""
    if isinstance(text, str):
        return _decoded(_PLAIN_SCAN, _PLAIN_DECODER.decode, text)  # not ``json.loads``: built once
    return json.loads(text, parse_float=_number)


def loads(text: str) -> Any:
    """``json.loads(text)`` of a ``str``."""
    return _decoded(_SCAN, json.loads, text)


def _decoded(scan: Scan, decode: Callable[[str], Any], text: str) -> Any:
    """``decode(text)``, where ``scan`` is its decoder's scanner. A document that starts at its
    first character and ends at its last (as every one Rebound writes does) is read by the scanner
    alone, without the whitespace searches and the Python calls around it (``audit verify --all``
    decodes one document per item it reads); anything else, an error included, goes through
    ``decode``, which answers or raises as it always did
    (``tests/property_based/test_jsonutil_decode_properties.py``)."""
    try:
        value, end = scan(text, 0)
    except (StopIteration, ValueError):
        return decode(text)
    if end != len(text):
        return decode(text)
    return value


def canonical_bytes_of_plain(value: Any) -> bytes:
    """``canonical_bytes`` of a value that is JSON already with integral numbers as ints (what
    ``plain_loads`` reads): one serialization instead of three."""
    return _CANONICAL_ENCODER.encode(value).encode()


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=_default)
