"""The DLQ's depth over time, from its record's arrivals and departures (``rebound.ops.dlq.history``):
what was there before the window, what arrived and left in each bucket, messages the queue's
retention dropped, and a read that stops at its limit saying so."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from rebound.adapters.memory import MemoryStore
from rebound.domain.errors import ValidationFailed
from rebound.domain.timefmt import iso
from rebound.engine.dlq_record import dlq_entry, millis
from rebound.engine.ports import DlqEntry, DlqStatus
from rebound.ops.dlq import history as history_module
from rebound.ops.dlq.history import depth_history, depth_points
from rebound.resources import DLQ_RETENTION_S
from support import START

NOW = START + timedelta(days=20)


def arrived(
    store: MemoryStore, message_id: str, ago: timedelta, *, sent: timedelta | None = None
) -> DlqEntry:
    """A message dead-lettered ``ago`` before NOW (the queue took it ``sent`` before NOW)."""
    when = NOW - ago
    entry = dlq_entry(
        message_id=message_id,
        body="{}",
        attributes={"run_id": f"run-{message_id}", "dead_lettered_at": iso(when)},
        sent_at_ms=millis(NOW - (sent or ago)),
        actor="test",
    )
    assert store.add_dlq_entry(entry)
    return entry


def left(store: MemoryStore, message_id: str, ago: timedelta, status: DlqStatus = DlqStatus.REDRIVEN) -> None:
    store.mark_dlq_entries([message_id], status, at=NOW - ago, actor="alice")


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def test_the_depth_of_each_minute_comes_from_arrivals_and_departures() -> None:
    store = MemoryStore()
    arrived(store, "before", timedelta(hours=3))  # there all hour
    arrived(store, "gone-before", timedelta(hours=5))
    left(store, "gone-before", timedelta(hours=2))  # left before the window: never counted
    arrived(store, "a", minutes(50))
    arrived(store, "b", minutes(50))
    left(store, "a", minutes(20))
    arrived(store, "c", minutes(5))
    left(store, "before", minutes(5), DlqStatus.ARCHIVED)
    arrived(store, "d", minutes(30.5))
    left(store, "d", minutes(30.5) - timedelta(seconds=10), DlqStatus.DELETED)  # a second copy, removed

    history = depth_history(store, NOW, "1h")

    assert (history.since, history.until, history.bucket_s) == (NOW - minutes(60), NOW, 60)
    assert len(history.points) == 60 and history.points[-1].at == NOW
    assert history.start_depth == 1
    depth = {round((NOW - p.at) / minutes(1)): p.depth for p in history.points}
    assert depth[55] == 1 and depth[49] == 3 and depth[19] == 2 and depth[0] == 2
    d_came_and_went = history.points[29]  # the minute up to 30 minutes ago
    assert d_came_and_went.at == NOW - minutes(30)
    assert (d_came_and_went.arrived, d_came_and_went.left) == (1, 1)
    assert (d_came_and_went.peak, d_came_and_went.depth) == (4, 3)
    data = history.as_dict()
    assert (data["arrived"], data["left"], data["complete"], data["read"]) == (4, 3, True, 5)
    assert data["points"][-1] == {"at": iso(NOW), "depth": 2, "peak": 2, "arrived": 0, "left": 0}
    five_ago = history.points[54]  # "before" left as c arrived
    assert (five_ago.arrived, five_ago.left, five_ago.depth) == (1, 1, 2)


def test_a_day_in_quarter_hours_counts_what_retention_dropped_as_gone() -> None:
    store = MemoryStore()
    retention = timedelta(seconds=DLQ_RETENTION_S)
    # dead-lettered 20 h ago; its retention counts from when it was first sent: dropped 2 h ago
    arrived(store, "old", timedelta(hours=20), sent=retention + timedelta(hours=2))
    arrived(store, "new", timedelta(hours=1))

    history = depth_history(store, NOW, "24h")

    assert len(history.points) == 96 and history.bucket_s == 900
    assert history.start_depth == 0
    assert history.points[-1].depth == 1
    assert max(p.depth for p in history.points) == 1
    assert history.points[80].depth == 1 and history.points[88].depth == 0  # 4 h and 2 h ago


def test_reading_stops_at_its_limit_and_says_the_history_is_incomplete(monkeypatch: Any) -> None:
    monkeypatch.setattr(history_module, "PAGE", 100)
    store = MemoryStore()
    for n in range(250):
        arrived(store, f"m{n:03d}", minutes(30))
    history = depth_history(store, NOW, "1h", at_most=150)
    assert history.complete is False and 150 <= history.read < 250
    assert depth_history(store, NOW, "1h").points[-1].depth == 250


def test_an_unknown_window_names_the_field() -> None:
    with pytest.raises(ValidationFailed, match="window") as raised:
        depth_history(MemoryStore(), NOW, "7d")
    assert raised.value.details["key_path"] == "window"


def test_a_message_leaving_as_another_arrives_is_not_counted_in_the_peak() -> None:
    t0 = datetime(2026, 3, 7, 9, 0)
    since, until = t0, t0 + minutes(2)
    spans: list[tuple[datetime, datetime | None]] = [
        (t0 - minutes(1), t0 + minutes(1)),
        (t0 + minutes(1), None),
    ]
    start, points = depth_points(spans, since, until, 2)
    assert start == 1
    assert [(p.depth, p.peak, p.arrived, p.left) for p in points] == [(1, 1, 1, 1), (1, 1, 0, 0)]
