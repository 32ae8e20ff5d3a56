"""Durations in config files: a number of seconds, or a string such as ``90s``, ``2m``, ``1h30m``, ``7d``."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_RATE = re.compile(r"^\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*$")
_RATE_UNITS = {"minute": 60, "hour": 3600, "day": 86400}


def parse_duration(value: Any) -> float:
    """Seconds from ``value``; raises ``ValueError`` naming what was wrong."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a duration such as 90, '90s', '2m' or '1h30m', got {value!r}")
    text = value.strip().replace(" ", "")
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"expected a duration such as 90, '90s', '2m' or '1h30m', got {value!r}")
    return total


def parse_rate(value: str) -> int:
    """Seconds between fires for an EventBridge-style rate such as ``5 minutes``."""
    match = _RATE.match(value)
    if not match:
        raise ValueError(f"expected a rate such as '5 minutes', '1 hour' or '2 days', got {value!r}")
    amount, unit = int(match.group(1)), match.group(2).rstrip("s")
    if amount <= 0:
        raise ValueError(f"a rate must be positive, got {value!r}")
    if amount == 1 and match.group(2).endswith("s"):
        raise ValueError(f"write '1 {unit}', not {value!r} (EventBridge Scheduler refuses the plural)")
    if amount > 1 and not match.group(2).endswith("s"):
        raise ValueError(f"write '{amount} {unit}s', not {value!r} (EventBridge Scheduler needs the plural)")
    return amount * _RATE_UNITS[unit]


Seconds = Annotated[float, BeforeValidator(parse_duration)]


def format_duration(seconds: float, written: Any = None) -> str:
    """``seconds`` as a config file writes it: ``written`` itself when it is that duration (the
    file's ``120s`` stays ``120s``), else in the largest unit that divides it (``1d``, ``5m``,
    ``90s``, ``0.5s``)."""
    if written is not None and not isinstance(written, bool):
        try:
            if parse_duration(written) == float(seconds):
                return str(written).strip()
        except ValueError:
            pass
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds and float(seconds) % size == 0:
            return f"{int(float(seconds) // size)}{unit}"
    return f"{float(seconds):g}s"
