"""Where a task's scheduled runs are found by their fires, not by an index entry.

A scheduled run's id is its task and its fire time (``rebound.domain.ids.scheduled_run_id``), so
the runs a schedule made can be read by key from the fires it owes. A task keeps the spans its
schedule was in force (``FireSegment``: since, until, the schedule and its rate origin); a run
whose fire one of them owes needs no ``by_task_keys`` entry to be listed with its task
(``Run.by_fire``, ``rebound.adapters.dynamo.codec``). The run that claims its fire decides this
once, with the segments it read (``lists_by_fire``); a listing enumerates the same segments
(``fire_windows``). Segments only close, and a closed one is enumerated a little past its end
(``CLOSE_SLACK``), so a listing always owes at least what any writer relied on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebound.domain.fires import expected_fires
from rebound.domain.ids import scheduled_run_id
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.domain.timefmt import iso, parse_utc

CLOSE_SLACK = timedelta(minutes=15)
"""How far past a closed segment's end a listing still looks: a run that read the segment open
(a moment before a pause or an edit) may commit after it closed."""
LISTING_CHUNK = timedelta(days=1)
"""A listing enumerates fires a day at a time, so a page of a frequent schedule stops early."""
FUTURE_SLACK = timedelta(minutes=5)
"""How far past ``now`` an open segment is enumerated (no run exists for a later fire)."""


@dataclass(frozen=True)
class FireSegment:
    """A span in which a schedule was in force and its fires' runs are found by key."""

    since: datetime
    until: datetime | None
    """``None``: in force now."""
    origin: datetime
    """A rate schedule's first fire (the task's ``active_since`` when the segment opened)."""
    schedule: ScheduleSpec

    def owes(self, task_id: str, at: datetime) -> bool:
        """Whether ``at`` is a fire of this segment of ``task_id``'s schedule (the writer's test)."""
        if at < self.since or (self.until is not None and at > self.until):
            return False
        fires = expected_fires(task_id, self.schedule, at - timedelta(microseconds=1), at, origin=self.origin)
        return any(f.at == at for f in fires)

    def to_record(self) -> dict[str, Any]:
        return {
            "since": iso(self.since),
            "until": iso(self.until) if self.until else None,
            "origin": iso(self.origin),
            "schedule": self.schedule.model_dump(mode="json", exclude_defaults=True),
        }

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> FireSegment:
        return cls(
            since=parse_utc(data["since"]),
            until=parse_utc(data["until"]) if data.get("until") else None,
            origin=parse_utc(data["origin"]),
            schedule=ScheduleSpec.model_validate(data["schedule"]),
        )


def advance(
    segments: tuple[FireSegment, ...],
    schedule: ScheduleSpec | None,
    active: bool,
    origin: datetime,
    at: datetime,
    *,
    forget_before: datetime | None = None,
) -> tuple[FireSegment, ...]:
    """The segments after a task's save at ``at``: the open one closes if the task is paused, its
    schedule changed or is gone, or its rate origin moved; a new one opens if the task is active
    with a schedule and none is open. Closed segments that ended before ``forget_before`` (their
    runs have expired) are dropped."""
    kept = list(segments)
    current = kept[-1] if kept and kept[-1].until is None else None
    lists = active and schedule is not None
    if current is not None and (not lists or current.schedule != schedule or current.origin != origin):
        kept[-1] = FireSegment(current.since, at, current.origin, current.schedule)
        current = None
    if lists and current is None and schedule is not None:
        kept.append(FireSegment(at, None, origin, schedule))
    if forget_before is not None:
        kept = [s for s in kept if s.until is None or s.until >= forget_before]
    return tuple(kept)


def lists_by_fire(segments: tuple[FireSegment, ...], task_id: str, run_id: str, at: datetime) -> bool:
    """Whether a run is found by its fire: its id is its task's scheduled id for ``at``, and a
    segment owes that fire."""
    return run_id == scheduled_run_id(task_id, at) and any(s.owes(task_id, at) for s in segments)


def fire_windows(
    segments: tuple[FireSegment, ...],
    task_id: str,
    since: datetime | None,
    until: datetime | None,
    now: datetime,
    *,
    newest_first: bool,
) -> Iterator[list[tuple[datetime, str]]]:
    """The fires the segments owe within ``[since, until]``, as ``(fire, run id)``, a day at a time
    in the listing's order (so a reader that has enough stops enumerating)."""
    spans: list[tuple[datetime, datetime, FireSegment]] = []
    for seg in segments:
        lo = seg.since if since is None else max(since, seg.since)
        end = now + FUTURE_SLACK if seg.until is None else min(seg.until + CLOSE_SLACK, now + FUTURE_SLACK)
        hi = end if until is None else min(until, end)
        if lo <= hi:
            spans.append((lo, hi, seg))
    if not spans:
        return
    lo_all = min(s[0] for s in spans)
    hi_all = max(s[1] for s in spans)
    edges: list[tuple[datetime, datetime]] = []
    start = lo_all
    while start <= hi_all:
        edges.append((start, min(start + LISTING_CHUNK, hi_all)))
        start += LISTING_CHUNK + timedelta(microseconds=1)
    if newest_first:
        edges.reverse()
    for a, b in edges:
        found: set[datetime] = set()
        for lo, hi, seg in spans:
            x, y = max(a, lo), min(b, hi)
            if x <= y:
                found.update(
                    f.at
                    for f in expected_fires(
                        task_id, seg.schedule, x - timedelta(microseconds=1), y, origin=seg.origin
                    )
                )
        if found:
            ordered = sorted(found, reverse=newest_first)
            yield [(f, scheduled_run_id(task_id, f)) for f in ordered]
