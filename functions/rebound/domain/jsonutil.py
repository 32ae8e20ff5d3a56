"""Canonical JSON: the one byte form used for hashing and for size limits."""

from __future__ import annotations

import json
from decimal import Decimal
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
        return _PLAIN_DECODER.decode(text)  # ``json.loads`` would build this decoder every call
    return json.loads(text, parse_float=_number)


def canonical_bytes_of_plain(value: Any) -> bytes:
    """``canonical_bytes`` of a value that is JSON already with integral numbers as ints (what
    ``plain_loads`` reads): one serialization instead of three."""
    return _CANONICAL_ENCODER.encode(value).encode()


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=_default)
