"""Fire times: when EventBridge Scheduler fires an expression, and when Rebound promises to fire Unix cron.

* :func:`next_fire` - when EventBridge Scheduler itself fires, with its documented DST behaviour (see
  ``aws.py`` for the semantics of each expression type).
* :func:`unix_fire_times` / :func:`fire_times_between` - when *Rebound* promises to fire a Unix expression,
  with a :class:`DstPolicy` saying what happens to wall-clock matches that a DST change removes or repeats,
  and :func:`scheduler_delivers` telling which of those fires EventBridge Scheduler delivers by itself (the
  rest are delivered by Rebound through its run ledger).

Both walk a calendar's matching wall-clock minutes (``_walls``) and map them to instants in the zone
(``_stream``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rebound.domain.cron.aws import AtExpression, RateExpression, parse_schedule_expression
from rebound.domain.cron.fields import CronError, _Calendar
from rebound.domain.cron.unix import _unix_calendar

NOTE_SHIFTED = "dst-shifted"
"""A wall-clock match inside a spring-forward gap, delivered at the first valid instant after the gap."""
NOTE_REPEAT = "dst-repeat"
"""The second occurrence of a wall-clock match inside a repeated (fall-back) hour."""


@dataclass(frozen=True)
class DstPolicy:
    """How Rebound maps Unix wall-clock matches to instants around DST changes.

    ``repeated``: a match in the repeated hour at fall-back fires ``"once"`` (first occurrence, like
    EventBridge Scheduler) or ``"twice"`` (both; the second carries note ``"dst-repeat"``).
    ``missing``: a match in the nonexistent hour at spring-forward is skipped (``"skip"``, like EventBridge
    Scheduler) or ``"shift"``-ed to the first valid instant after the gap (note ``"dst-shifted"``; several
    matches in one gap collapse into one fire, and into the regular fire if the first instant after the gap
    matches too).
    """

    repeated: Literal["once", "twice"] = "once"
    missing: Literal["skip", "shift"] = "skip"

    def __post_init__(self) -> None:
        if self.repeated not in ("once", "twice"):
            raise ValueError(f"DstPolicy.repeated must be 'once' or 'twice', got {self.repeated!r}")
        if self.missing not in ("skip", "shift"):
            raise ValueError(f"DstPolicy.missing must be 'skip' or 'shift', got {self.missing!r}")


@dataclass(frozen=True)
class FireTime:
    """One fire: the UTC instant, the same instant on the local clock, and why it is special (or ``None``).

    ``note`` is ``None`` for an ordinary fire, ``"dst-shifted"`` for a fire moved out of a spring-forward gap
    and ``"dst-repeat"`` for the second occurrence at fall-back. Skipped matches produce no FireTime at all.
    """

    at: datetime
    local: datetime
    note: str | None


_DAY = timedelta(days=1)


@lru_cache(maxsize=512)
def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise CronError(str(tz), "unknown IANA time zone", what="time zone") from None


def _utc_naive(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {value!r}")
    return value.astimezone(UTC).replace(tzinfo=None)


def _offset(value: datetime) -> timedelta:
    offset = value.utcoffset()
    assert offset is not None
    return offset


def _walls(cal: _Calendar, start: datetime) -> Iterator[datetime]:
    """Matching naive wall-clock minutes ``>= start`` (seconds ignored), in increasing order."""
    mods = cal.minutes_of_day
    if not mods:  # pragma: no cover - every field has at least one value
        return
    sy, sm, sd = start.year, start.month, start.day
    first_mod = start.hour * 60 + start.minute
    last_year = cal.last_year if cal.last_year is not None else sy + 400
    years = cal.years
    for year in range(sy, last_year + 1):
        if years is not None and year not in years:
            continue
        for month in cal.months:
            if year == sy and month < sm:
                continue
            first_month = year == sy and month == sm
            for day in cal.days(year, month):
                if first_month and day <= sd:
                    if day < sd:
                        continue
                    todo: Sequence[int] = mods[bisect_left(mods, first_mod) :]
                else:
                    todo = mods
                for mod in todo:
                    yield datetime(year, month, day, mod // 60, mod % 60)


def _gap_end(wall: datetime, zone: ZoneInfo, before: timedelta, after: timedelta) -> datetime:
    """The transition instant (naive UTC) of the spring-forward gap that ``wall`` falls in."""
    low = wall - after  # still before the transition
    lo, hi = 0, int((after - before).total_seconds())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probe = (low + timedelta(seconds=mid)).replace(tzinfo=UTC).astimezone(zone)
        if _offset(probe) == before:
            lo = mid
        else:
            hi = mid
    return low + timedelta(seconds=hi)


def _stream(
    cal: _Calendar, zone: ZoneInfo, after: datetime, policy: DstPolicy
) -> Iterator[tuple[datetime, str | None]]:
    """Fire instants (naive UTC) strictly after ``after`` (naive UTC), strictly increasing, with their notes.

    Walks matching wall-clock minutes in order and maps each to instants: an unambiguous wall has one; a
    repeated wall (fall-back) has a first and a second occurrence; a wall in a spring-forward gap has none (it
    may be shifted to the transition instant). Instant order equals wall order except for second occurrences,
    so candidates are buffered and released at each wall after which nothing earlier can appear.
    """
    aware_after = after.replace(tzinfo=UTC)
    lowest_offset = min(_offset(aware_after.astimezone(zone)), _offset((aware_after + _DAY).astimezone(zone)))
    start = (after + lowest_offset).replace(second=0, microsecond=0)
    twice = policy.repeated == "twice"
    shift = policy.missing == "shift"
    pending: dict[datetime, str | None] = {}
    for wall in _walls(cal, start):
        first = _offset(wall.replace(tzinfo=zone))
        second = _offset(wall.replace(tzinfo=zone, fold=1))
        if first == second:
            instant = wall - first
            if instant > after:
                pending[instant] = None
            if pending:
                yield from sorted(pending.items())
                pending.clear()
        elif first > second:  # repeated wall time (fall-back): fold=0 is the earlier instant
            instant = wall - first
            if instant > after:
                pending[instant] = None
            if twice:
                repeat = wall - second
                if repeat > after and repeat not in pending:
                    pending[repeat] = NOTE_REPEAT
            elif pending:
                yield from sorted(pending.items())
                pending.clear()
        elif shift:  # nonexistent wall time (spring-forward)
            instant = _gap_end(wall, zone, first, second)
            if instant > after and instant not in pending:
                pending[instant] = NOTE_SHIFTED
    if pending:
        yield from sorted(pending.items())


def _fire(instant: datetime, zone: ZoneInfo, note: str | None) -> FireTime:
    at = instant.replace(tzinfo=UTC)
    return FireTime(at=at, local=at.astimezone(zone), note=note)


def unix_fire_times(
    expr: str, tz: str, after: datetime, count: int, dst: DstPolicy = DstPolicy()
) -> list[FireTime]:
    """The next ``count`` fires strictly after ``after`` (aware) of the Unix ``expr`` in zone ``tz``.

    Which wall-clock times match follows croniter; ``dst`` decides how matches map to instants (see
    :class:`DstPolicy`). Results are strictly increasing with no duplicates.
    """
    cal = _unix_calendar(expr)
    zone = _zone(tz)
    out: list[FireTime] = []
    if count <= 0:
        return out
    for instant, note in _stream(cal, zone, _utc_naive(after, "after"), dst):
        out.append(_fire(instant, zone, note))
        if len(out) >= count:
            break
    return out


def fire_times_between(
    expr: str, tz: str, start: datetime, end: datetime, dst: DstPolicy = DstPolicy()
) -> list[FireTime]:
    """All fires of the Unix ``expr`` in ``(start, end]`` (aware), same rules as :func:`unix_fire_times`.

    A pure function of its arguments; the latest windows of up to an hour are remembered: every
    minute the run ledger asks the same window for each task that shares a schedule. Each call
    gets a new list."""
    try:
        remembered = end - start <= _REMEMBERED_WINDOW
    except TypeError:  # one of them naive: _fire_times says which
        remembered = False
    if remembered:
        return list(_remembered_fire_times(expr, tz, start, end, dst))
    return list(_fire_times(expr, tz, start, end, dst))


_REMEMBERED_WINDOW = timedelta(hours=1)


@lru_cache(maxsize=256)
def _remembered_fire_times(
    expr: str, tz: str, start: datetime, end: datetime, dst: DstPolicy
) -> tuple[FireTime, ...]:
    return _fire_times(expr, tz, start, end, dst)


def _fire_times(expr: str, tz: str, start: datetime, end: datetime, dst: DstPolicy) -> tuple[FireTime, ...]:
    cal = _unix_calendar(expr)
    zone = _zone(tz)
    stop = _utc_naive(end, "end")
    out: list[FireTime] = []
    for instant, note in _stream(cal, zone, _utc_naive(start, "start"), dst):
        if instant > stop:
            break
        out.append(_fire(instant, zone, note))
    return tuple(out)


_SCHEDULER = DstPolicy(repeated="once", missing="skip")
"""EventBridge Scheduler's own behaviour: a repeated local time fires once (first); a missing one, never."""


def next_fire(expr: str, tz: str, after: datetime, *, start: datetime | None = None) -> datetime | None:
    """Next fire strictly after ``after`` (aware) of an EventBridge Scheduler expression in zone ``tz``.

    EventBridge Scheduler semantics (User Guide, "Schedule types on EventBridge Scheduler",
    https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html):

    * ``cron(...)`` matches the local wall clock of ``tz``. At spring-forward, matches at nonexistent local
      times are skipped. At fall-back, a repeated local time fires once, at its **first** occurrence (the
      guide: it "runs the schedule only once at 2:30 a.m. before the shift occurs"). With ``start``
      (StartDate), nothing fires before ``start``.
    * ``rate(...)`` fires at ``start``, ``start + interval``, ... - StartDate is "the first occurrence of the
      schedule" (no StartDate: the creation time, and it fires immediately). Intervals are absolute (a day is
      24 hours even across DST); ``tz`` is irrelevant. ``start`` is required.
    * ``at(...)`` fires once at that local time in ``tz`` (StartDate is ignored) and never again. A repeated
      local time is read as its first occurrence; a nonexistent one (undocumented by AWS) is read with the
      offset in force before the gap, i.e. moved forward by the gap's length (02:30 in a 02:00->03:00 gap
      fires at 03:30).

    Returns an aware UTC datetime, or ``None`` when the schedule never fires again.
    """
    parsed = parse_schedule_expression(expr)
    zone = _zone(tz)
    after_utc = _utc_naive(after, "after")
    if isinstance(parsed, RateExpression):
        if start is None:
            raise ValueError(
                f"{expr}: a rate expression needs start (the schedule's StartDate or creation time)"
            )
        first = _utc_naive(start, "start").replace(tzinfo=UTC)
        return parsed.next_after(after_utc.replace(tzinfo=UTC), first)
    if isinstance(parsed, AtExpression):
        instant = parsed.local.replace(tzinfo=zone).astimezone(UTC)
        return instant if instant.replace(tzinfo=None) > after_utc else None
    if start is not None:
        after_utc = max(after_utc, _utc_naive(start, "start") - timedelta(microseconds=1))
    for instant, _note in _stream(parsed, zone, after_utc, _SCHEDULER):
        return instant.replace(tzinfo=UTC)
    return None


def scheduler_delivers(fire: FireTime, tz: str) -> bool:
    """Whether EventBridge Scheduler itself fires at ``fire`` for the translated expressions.

    True for ordinary fires (including the first occurrence of a repeated local time). False for
    ``"dst-shifted"`` and ``"dst-repeat"`` fires, which Rebound must deliver itself through its run ledger.
    """
    if fire.note is not None:
        return False
    zone = _zone(tz)
    wall = fire.at.astimezone(zone).replace(tzinfo=None, fold=0)
    return wall.replace(tzinfo=zone).astimezone(UTC) == fire.at.astimezone(UTC)
