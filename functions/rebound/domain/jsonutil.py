"""Canonical JSON: the one byte form used for hashing and for size limits."""

from __future__ import annotations

import json
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


def canonical_bytes(value: Any) -> bytes:
    """Sorted keys, no spaces, integral numbers as integers: the form hashes are computed over.

    The float normalization runs inside the JSON parser (C) rather than a Python walk of the
    value: this sits on the path of every state change.
    """
    return canonical_bytes_of_plain(plain_loads(json.dumps(value, default=_default)))


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
