"""Small pieces every operation shares: reading operator input about time, and JSON-ready values."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.dynamo import DynamoStore, from_item, to_item
from rebound.adapters.errors import translate
from rebound.domain.durations import parse_duration
from rebound.domain.errors import ValidationFailed
from rebound.domain.models import Run
from rebound.domain.timefmt import iso, parse_utc

BATCH_GET = 100
"""The most keys one ``BatchGetItem`` takes."""


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


def load_runs(store: DynamoStore, run_ids: Iterable[str]) -> dict[str, Run]:
    """Runs by id, read a hundred per ``BatchGetItem`` (strongly consistent); missing ids are absent.

    Bulk operations read every run they look at; one request per hundred instead of one each.
    """
    ids = sorted(set(run_ids))
    table = store.tables["runs"]
    found: dict[str, Run] = {}
    for start in range(0, len(ids), BATCH_GET):
        request: dict[str, Any] = {
            table: {
                "Keys": [to_item({"run_id": i}) for i in ids[start : start + BATCH_GET]],
                "ConsistentRead": True,
            }
        }
        for attempt in range(8):
            try:
                resp = store.client.batch_get_item(RequestItems=request)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, "read runs") from exc
            for item in resp.get("Responses", {}).get(table, []):
                run = Run.model_validate(from_item(item))
                found[run.run_id] = run
            request = dict(resp.get("UnprocessedKeys") or {})
            if not request:
                break
            time.sleep(min(0.05 * 2**attempt, 2.0))  # DynamoDB asked us to slow down
        else:
            raise translate(RuntimeError("runs left unprocessed after retries"), "read runs")
    return found
