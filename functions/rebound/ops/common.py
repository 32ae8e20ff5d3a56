"""Small pieces every operation shares: reading operator input about time, and JSON-ready values."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from rebound.domain.durations import parse_duration
from rebound.domain.errors import ValidationFailed
from rebound.domain.timefmt import iso, parse_utc


def parse_when(text: str, now: datetime, *, option: str = "--since") -> datetime:
    """An instant from operator input: an ISO 8601 timestamp, or a duration ago (``90m``, ``2h``, ``7d``)."""
    value = text.strip()
    try:
        return now - timedelta(seconds=parse_duration(value))
    except ValueError:
        pass
    try:
        return parse_utc(value)
    except ValueError:
        raise ValidationFailed(
            f"{option}: expected a timestamp such as 2026-03-07T09:00:00Z or a duration ago such as 2h, "
            f"got {text!r}",
            key_path=option,
        ) from None


def parse_seconds(text: str, *, option: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValidationFailed(f"{option}: {exc}", key_path=option) from None


def when(value: datetime | None) -> str | None:
    """A timestamp as it appears in JSON output (``None`` stays ``None``)."""
    return iso(value) if value is not None else None


def age_s(now: datetime, then: datetime | None) -> float | None:
    return round((now - then).total_seconds(), 3) if then is not None else None


def compact(mapping: dict[str, Any]) -> dict[str, Any]:
    """Drop ``None`` values, for short human-readable details (never for JSON output)."""
    return {key: value for key, value in mapping.items() if value is not None}
