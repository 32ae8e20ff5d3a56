"""Small pieces every operation shares: reading operator input about time, validating requests, and
JSON-ready values."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rebound.config.loader import key_path, problem
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


M = TypeVar("M", bound=BaseModel)


def validation_failed(exc: ValidationError, *, as_option: bool = False) -> ValidationFailed:
    """A request model's errors as one ``ValidationFailed`` naming every field.

    The message reads ``retry_policy.max_retry_attempts: Input should be ...`` (with ``as_option``,
    the CLI option instead: ``--max-retry-attempts: ...``); ``key_path`` is the first field, and
    ``errors`` lists each as ``{"field", "message"}`` for an API to answer with.
    """
    errors: list[dict[str, str]] = []
    names: list[str] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = key_path(loc) or "(body)"
        errors.append({"field": field, "message": problem(err, "field")})
        names.append("--" + str(loc[-1]).replace("_", "-") if as_option and loc else field)
    text = "; ".join(f"{name}: {e['message']}" for name, e in zip(names, errors, strict=True))
    return ValidationFailed(text, key_path=errors[0]["field"] if errors else "", errors=errors)


def validated(model: type[M], data: Any) -> M:
    """``data`` (a JSON body, or options) as ``model``, or a ``ValidationFailed`` naming each bad field."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_failed(exc) from None


def when(value: datetime | None) -> str | None:
    """A timestamp as it appears in JSON output (``None`` stays ``None``)."""
    return iso(value) if value is not None else None


def age_s(now: datetime, then: datetime | None) -> float | None:
    return round((now - then).total_seconds(), 3) if then is not None else None


def compact(mapping: dict[str, Any]) -> dict[str, Any]:
    """Drop ``None`` values, for short human-readable details (never for JSON output)."""
    return {key: value for key, value in mapping.items() if value is not None}
