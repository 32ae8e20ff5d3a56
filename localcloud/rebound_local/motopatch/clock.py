"""Patch 1, the clock: moto reads time from the local runtime's clock.

moto reads time through ``moto.core.utils.utcnow``. Routing it through the local runtime's clock
makes ``DelaySeconds``, visibility timeouts, retention and timestamps follow virtual time, so hours
of schedule time pass in seconds with SQS semantics intact. Owns the clock moto reads
(``set_clock``) and the fast ``unix_time`` readers SQS and the local cloud use.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

_state: dict[str, Any] = {"clock": None}


def set_clock(now: Callable[[], datetime] | None) -> None:
    """Make moto read time from ``now`` (an aware datetime); ``None`` restores the wall clock."""
    _state["clock"] = now


def _utcnow() -> datetime:
    clock = _state["clock"]
    if clock is None:
        return datetime.now(UTC).replace(tzinfo=None)
    value: datetime = clock()
    return value.astimezone(UTC).replace(tzinfo=None)


_last_now: list[Any] = [None, 0.0]


def _unix_time(dt: datetime | None = None) -> float:
    if dt is not None:
        return (dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt).timestamp()
    clock = _state["clock"]
    if clock is None:
        return datetime.now(UTC).timestamp()
    now = clock()
    # SQS asks for every message it looks at; a virtual clock hands out the same object
    # until it moves, so convert each instant once.
    last = _last_now
    if now is not last[0]:
        last[1] = now.timestamp()
        last[0] = now
    return float(last[1])


def _unix_time_millis(dt: datetime | None = None) -> float:
    return _unix_time(dt) * 1000.0


def _patch_clock() -> None:
    import moto.core.utils as utils
    import moto.sqs.models as sqs_models

    utils.utcnow = _utcnow
    # SQS asks for the time for every message it looks at; answer without datetime round trips.
    for module in (utils, sqs_models):
        module.unix_time = _unix_time  # type: ignore[attr-defined]
        module.unix_time_millis = _unix_time_millis  # type: ignore[attr-defined]
