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


def canonical_bytes(value: Any) -> bytes:
    """Sorted keys, no spaces, integral numbers as integers: the form hashes are computed over.

    The float normalization runs inside the JSON parser (C) rather than a Python walk of the
    value: this sits on the path of every state change.
    """
    plain = json.loads(json.dumps(value, default=_default), parse_float=_number)
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=_default)
