"""Canonical JSON: the one byte form used for hashing and for size limits."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "isoformat"):
        from rebound.domain.timefmt import iso

        return iso(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _normalize(value: Any) -> Any:
    """Integral floats become ints: DynamoDB stores 60.0 and gives back 60, and hashes must agree."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Decimal):
        return _default(value)
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


def canonical_bytes(value: Any) -> bytes:
    """Sorted keys, no spaces, integral numbers as integers: the form hashes are computed over."""
    return json.dumps(
        _normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
    ).encode()


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=_default)
