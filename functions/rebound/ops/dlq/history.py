"""The DLQ's depth over time, from its record: nothing received, the queue never scanned.

Every message in the execution DLQ has a record (``rebound.engine.dlq_record``) saying when it
arrived (``DlqEntry.at``) and, once it left, when and how (``changed_at``, status ``redriven``,
``deleted`` or ``archived``). So the depth at any instant of a window is the number of records
that had arrived and not yet left by then; a message still ``in_dlq`` leaves when the queue's
retention drops it.

What is read, all queries on the ``by_status`` index (never a scan), and of each item only its
arrival, status, departure and expiry (``Store.dlq_spans``):

- the ``in_dlq`` partition up to now (what is in the DLQ, however old);
- the partition of each way of leaving, for arrivals no older than the window's start less the
  queue's retention (nothing older can still have been there), keeping those that left at or after
  the window's start (``DlqQuery.changed_since``). A left message's record is kept
  ``KEEP_AFTER_LEAVING`` (14 days), so these partitions hold two weeks of departures at most.

Reading stops past ``AT_MOST`` records; the answer then says ``complete: false``. The depth is
the record's: a message SQS moved to the DLQ by itself (the crash path) counts once the sweeper's
DLQ check has recorded it (within minutes), and the last point can differ from the queue's
approximate attributes by what is in flight between the two.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from rebound.domain.errors import ValidationFailed
from rebound.domain.timefmt import iso
from rebound.engine.ports import DlqQuery, DlqSpan, DlqStatus, Store
from rebound.resources import DLQ_RETENTION_S

WINDOWS: dict[str, tuple[timedelta, int]] = {
    "1h": (timedelta(hours=1), 60),
    "24h": (timedelta(hours=24), 96),
}
"""Each window the history is asked for: its length and how many buckets it is cut into
(one minute each over an hour, a quarter of an hour each over a day)."""
AT_MOST = 20_000
"""Records read at most for one history (past it the answer says it is incomplete)."""
PAGE = 1_000
"""Records per query: only their arrival, status and departure are read (``Store.dlq_spans``)."""
RETENTION = timedelta(seconds=DLQ_RETENTION_S)
LEFT = (DlqStatus.REDRIVEN, DlqStatus.DELETED, DlqStatus.ARCHIVED)


@dataclass(frozen=True)
class DepthPoint:
    at: datetime
    """The end of the bucket."""
    depth: int
    """Messages in the DLQ at ``at``."""
    peak: int
    """The highest depth within the bucket."""
    arrived: int
    left: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "depth": self.depth,
            "peak": self.peak,
            "arrived": self.arrived,
            "left": self.left,
        }


@dataclass(frozen=True)
class DepthHistory:
    window: str
    since: datetime
    until: datetime
    bucket_s: int
    start_depth: int
    """Messages in the DLQ at ``since``."""
    points: list[DepthPoint]
    read: int
    """Records read."""
    complete: bool
    """False when reading stopped at ``AT_MOST`` records: the figures may be short."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "since": iso(self.since),
            "until": iso(self.until),
            "bucket_s": self.bucket_s,
            "start_depth": self.start_depth,
            "points": [p.as_dict() for p in self.points],
            "arrived": sum(p.arrived for p in self.points),
            "left": sum(p.left for p in self.points),
            "read": self.read,
            "complete": self.complete,
            "source": "dlq record",
        }


def span(recorded: DlqSpan, now: datetime) -> tuple[datetime, datetime | None]:
    """When a recorded message arrived in the DLQ and when it left it (``None``: it is still
    there); one still recorded ``in_dlq`` left when the queue's retention dropped it, if that was
    before ``now``."""
    arrived = recorded.arrived
    if recorded.status is DlqStatus.IN_DLQ:
        left = recorded.expires_at if recorded.expires_at <= now else None
    else:
        left = recorded.changed_at or arrived
    return arrived, (max(left, arrived) if left is not None else None)


def depth_points(
    spans: list[tuple[datetime, datetime | None]], since: datetime, until: datetime, buckets: int
) -> tuple[int, list[DepthPoint]]:
    """The depth at ``since`` and, for each of ``buckets`` equal buckets up to ``until``, the depth at
    its end, its peak, and what arrived and left in it. A message is in the DLQ from its arrival
    (included) to its departure (excluded)."""
    step = (until - since) / buckets
    # (time, change): a departure sorts before an arrival at the same instant, so a peak is never
    # counted from a message that had already gone.
    events = sorted(
        [(arrived, 1) for arrived, _ in spans] + [(left, -1) for _, left in spans if left is not None]
    )
    times = [t for t, _ in events]
    first = bisect_right(times, since)
    depth = sum(change for _, change in events[:first])
    start_depth = depth
    points: list[DepthPoint] = []
    i = first
    for n in range(1, buckets + 1):
        end = until if n == buckets else since + step * n
        peak, arrived, left = depth, 0, 0
        while i < len(events) and events[i][0] <= end:
            change = events[i][1]
            depth += change
            if change > 0:
                arrived += 1
                peak = max(peak, depth)
            else:
                left += 1
            i += 1
        points.append(DepthPoint(end, depth, peak, arrived, left))
    return start_depth, points


def depth_history(store: Store, now: datetime, window: str, *, at_most: int = AT_MOST) -> DepthHistory:
    """The DLQ's depth over ``window`` (a key of ``WINDOWS``) up to ``now``, from its record."""
    if window not in WINDOWS:
        raise ValidationFailed(
            f"window: {window!r} is not a window; one of {', '.join(WINDOWS)}", key_path="window"
        )
    length, buckets = WINDOWS[window]
    since = now - length
    queries = [DlqQuery(until=now, limit=PAGE)] + [
        DlqQuery(status=status, since=since - RETENTION, until=now, changed_since=since, limit=PAGE)
        for status in LEFT
    ]
    spans: list[tuple[datetime, datetime | None]] = []
    complete = True
    for query in queries:
        after: str | None = None
        while True:
            page = store.dlq_spans(replace(query, after=after))
            spans += [span(recorded, now) for recorded in page.spans]
            if page.cursor is None:
                break
            if len(spans) >= at_most:
                complete = False
                break
            after = page.cursor
        if not complete:
            break
    start_depth, points = depth_points(spans, since, now, buckets)
    return DepthHistory(
        window=window,
        since=since,
        until=now,
        bucket_s=int(length.total_seconds()) // buckets,
        start_depth=start_depth,
        points=points,
        read=len(spans),
        complete=complete,
    )
