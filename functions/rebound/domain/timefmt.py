"""UTC timestamps, serialized one way everywhere so that they sort as strings (DynamoDB range keys)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

# A run's timestamps are formatted and parsed many times over (every dump of a run formats each
# of its datetimes, every read parses them), mostly the same few values: each function remembers
# its latest answers. Datetimes and strings are immutable, so a remembered answer is the answer.
_REMEMBERED = 4096


@functools.lru_cache(maxsize=_REMEMBERED)
def iso(value: datetime) -> str:
    """``2026-03-07T02:00:00.000Z``: fixed width, millisecond precision, always UTC."""
    if value.tzinfo is UTC:
        return value.isoformat(timespec="milliseconds")[:-6] + "Z"  # less its "+00:00"
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


@functools.lru_cache(maxsize=_REMEMBERED)
def compact(value: datetime) -> str:
    """``20260307T020000Z``: for identifiers."""
    return value.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def parse_utc(value: Any) -> datetime:
    """An aware UTC datetime from an ISO string, an epoch number or a datetime."""
    try:
        return _remembered_parse(value)
    except TypeError:  # unhashable, so not a timestamp: said as for any other wrong value
        return _parse_utc(value)


@functools.lru_cache(maxsize=_REMEMBERED, typed=True)  # typed: ``True`` is not the epoch's 1
def _remembered_parse(value: Any) -> datetime:
    return _parse_utc(value)


def _parse_utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            parsed = datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise ValueError(f"epoch seconds {value!r} are out of range") from exc
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"expected an ISO 8601 timestamp, got {value!r}") from exc
    else:
        raise ValueError(f"expected a timestamp, got {value!r}")
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no time zone; add 'Z' or an offset")
    return parsed.astimezone(UTC)


UtcDatetime = Annotated[datetime, BeforeValidator(parse_utc), PlainSerializer(iso, return_type=str)]
