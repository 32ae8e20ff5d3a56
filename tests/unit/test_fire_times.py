"""When Rebound fires a Unix cron: DST policies around real transitions, and what EventBridge delivers itself.

2026 transitions used below (UTC instants):
* America/New_York: 2026-03-08 07:00Z (02:00 EST -> 03:00 EDT), 2026-11-01 06:00Z (02:00 EDT -> 01:00 EST).
* Europe/London: 2026-03-29 01:00Z (01:00 GMT -> 02:00 BST), 2026-10-25 01:00Z (02:00 BST -> 01:00 GMT).
* Australia/Lord_Howe (30-minute DST): 2026-04-04 15:00Z (02:00 +11 -> 01:30 +10:30) and
  2026-10-03 15:30Z (02:00 +10:30 -> 02:30 +11).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from rebound.domain.cron import (
    DstPolicy,
    FireTime,
    fire_times_between,
    next_fire,
    scheduler_delivers,
    unix_fire_times,
    unix_to_aws,
)

pytestmark = pytest.mark.unit

NY, LONDON, LORD_HOWE = "America/New_York", "Europe/London", "Australia/Lord_Howe"
SKIP_ONCE = DstPolicy()
SHIFT = DstPolicy(missing="shift")
TWICE = DstPolicy(repeated="twice")
SHIFT_TWICE = DstPolicy(repeated="twice", missing="shift")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def fires(
    expr: str, tz: str, after: datetime, count: int, dst: DstPolicy
) -> list[tuple[datetime, str | None]]:
    return [(f.at, f.note) for f in unix_fire_times(expr, tz, after, count, dst)]


def test_transition_instants_are_what_the_tests_assume() -> None:
    for tz, instant, before, after in [
        (NY, utc(2026, 3, 8, 7), -5, -4),
        (NY, utc(2026, 11, 1, 6), -4, -5),
        (LONDON, utc(2026, 3, 29, 1), 0, 1),
        (LONDON, utc(2026, 10, 25, 1), 1, 0),
        (LORD_HOWE, utc(2026, 4, 4, 15), 11, 10.5),
        (LORD_HOWE, utc(2026, 10, 3, 15, 30), 10.5, 11),
    ]:
        zone = ZoneInfo(tz)
        assert (instant - timedelta(seconds=1)).astimezone(zone).utcoffset() == timedelta(hours=before)
        assert instant.astimezone(zone).utcoffset() == timedelta(hours=after)


# ----------------------------------------------------------------------------------------------------------
# Spring forward
# ----------------------------------------------------------------------------------------------------------


def test_new_york_0230_on_the_march_change_date() -> None:
    after = utc(2026, 3, 7, 0)
    assert fires("30 2 * * *", NY, after, 2, SKIP_ONCE) == [
        (utc(2026, 3, 7, 7, 30), None),  # 02:30 EST
        (utc(2026, 3, 9, 6, 30), None),  # 02:30 EDT; 2026-03-08 02:30 does not exist
    ]
    shifted = unix_fire_times("30 2 * * *", NY, after, 3, SHIFT)
    assert [(f.at, f.note) for f in shifted] == [
        (utc(2026, 3, 7, 7, 30), None),
        (utc(2026, 3, 8, 7, 0), "dst-shifted"),  # 03:00 EDT, the first instant after the gap
        (utc(2026, 3, 9, 6, 30), None),
    ]
    assert shifted[1].local == datetime(2026, 3, 8, 3, 0, tzinfo=ZoneInfo(NY))
    assert shifted[1].local.replace(tzinfo=None) == datetime(2026, 3, 8, 3, 0)


def test_new_york_0230_on_the_november_change_date_is_ordinary() -> None:
    # 02:30 is after the repeated hour (01:00-01:59), so it happens once whatever the policy
    for policy in (SKIP_ONCE, SHIFT, TWICE, SHIFT_TWICE):
        assert fires("30 2 * * *", NY, utc(2026, 10, 31, 0), 3, policy) == [
            (utc(2026, 10, 31, 6, 30), None),  # EDT
            (utc(2026, 11, 1, 7, 30), None),  # EST
            (utc(2026, 11, 2, 7, 30), None),
        ]


def test_london_gap() -> None:
    after = utc(2026, 3, 28, 0)
    assert fires("30 1 * * *", LONDON, after, 2, SKIP_ONCE) == [
        (utc(2026, 3, 28, 1, 30), None),
        (utc(2026, 3, 30, 0, 30), None),
    ]
    assert fires("30 1 * * *", LONDON, after, 3, SHIFT) == [
        (utc(2026, 3, 28, 1, 30), None),
        (utc(2026, 3, 29, 1, 0), "dst-shifted"),  # 02:00 BST
        (utc(2026, 3, 30, 0, 30), None),
    ]


def test_lord_howe_half_hour_gap() -> None:
    after = utc(2026, 10, 2, 0)
    assert fires("15 2 * * *", LORD_HOWE, after, 2, SKIP_ONCE) == [
        (utc(2026, 10, 2, 15, 45), None),  # 02:15 +10:30
        (utc(2026, 10, 4, 15, 15), None),  # 02:15 +11; 2026-10-04 02:15 does not exist
    ]
    got = unix_fire_times("15 2 * * *", LORD_HOWE, after, 3, SHIFT)
    assert [(f.at, f.note) for f in got] == [
        (utc(2026, 10, 2, 15, 45), None),
        (utc(2026, 10, 3, 15, 30), "dst-shifted"),
        (utc(2026, 10, 4, 15, 15), None),
    ]
    assert got[1].local.replace(tzinfo=None) == datetime(2026, 10, 4, 2, 30)


def test_several_matches_in_one_gap_collapse_into_one_shifted_fire() -> None:
    after = utc(2026, 10, 3, 15, 0)  # 01:30 +10:30 on the change day
    assert fires("5,15,25 2 * * *", LORD_HOWE, after, 2, SHIFT) == [
        (utc(2026, 10, 3, 15, 30), "dst-shifted"),
        (utc(2026, 10, 4, 15, 5), None),
    ]
    assert fires("0,30 2 * * *", NY, utc(2026, 3, 8, 0), 2, SHIFT) == [
        (utc(2026, 3, 8, 7, 0), "dst-shifted"),
        (utc(2026, 3, 9, 6, 0), None),
    ]


def test_a_shifted_fire_merges_into_a_regular_fire_at_the_same_instant() -> None:
    # 02:00, 02:10, 02:20 fall in the gap; 02:30 (the first valid instant) is itself a match
    got = unix_fire_times("*/10 2 * * *", LORD_HOWE, utc(2026, 10, 3, 15, 0), 4, SHIFT)
    assert [(f.at, f.note) for f in got] == [
        (utc(2026, 10, 3, 15, 30), None),
        (utc(2026, 10, 3, 15, 40), None),
        (utc(2026, 10, 3, 15, 50), None),
        (utc(2026, 10, 4, 15, 0), None),
    ]
    assert all(scheduler_delivers(f, LORD_HOWE) for f in got)


# ----------------------------------------------------------------------------------------------------------
# Fall back
# ----------------------------------------------------------------------------------------------------------


def test_new_york_repeated_hour() -> None:
    after = utc(2026, 10, 31, 12)
    assert fires("30 1 * * *", NY, after, 2, SKIP_ONCE) == [
        (utc(2026, 11, 1, 5, 30), None),  # 01:30 EDT, the first occurrence
        (utc(2026, 11, 2, 6, 30), None),
    ]
    got = unix_fire_times("30 1 * * *", NY, after, 3, TWICE)
    assert [(f.at, f.note) for f in got] == [
        (utc(2026, 11, 1, 5, 30), None),
        (utc(2026, 11, 1, 6, 30), "dst-repeat"),  # 01:30 EST
        (utc(2026, 11, 2, 6, 30), None),
    ]
    assert got[1].local.fold == 1 and got[1].local.replace(tzinfo=None, fold=0) == datetime(
        2026, 11, 1, 1, 30
    )


def test_london_repeated_hour() -> None:
    after = utc(2026, 10, 24, 12)
    assert fires("30 1 * * *", LONDON, after, 2, SKIP_ONCE) == [
        (utc(2026, 10, 25, 0, 30), None),
        (utc(2026, 10, 26, 1, 30), None),
    ]
    assert fires("30 1 * * *", LONDON, after, 2, TWICE) == [
        (utc(2026, 10, 25, 0, 30), None),
        (utc(2026, 10, 25, 1, 30), "dst-repeat"),
    ]


def test_lord_howe_half_hour_repeat() -> None:
    after = utc(2026, 4, 4, 0)
    assert fires("45 1 * * *", LORD_HOWE, after, 2, SKIP_ONCE) == [
        (utc(2026, 4, 4, 14, 45), None),  # 01:45 +11
        (utc(2026, 4, 5, 15, 15), None),
    ]
    assert fires("45 1 * * *", LORD_HOWE, after, 3, TWICE) == [
        (utc(2026, 4, 4, 14, 45), None),
        (utc(2026, 4, 4, 15, 15), "dst-repeat"),  # 01:45 +10:30
        (utc(2026, 4, 5, 15, 15), None),
    ]
    # 01:15 is before the repeated half hour (01:30-01:59): once, whatever the policy
    assert fires("15 1 * * *", LORD_HOWE, after, 1, TWICE) == [(utc(2026, 4, 4, 14, 15), None)]


def test_repeats_interleave_in_instant_order() -> None:
    expected_once = [utc(2026, 11, 1, 5, m) for m in (0, 20, 40)] + [utc(2026, 11, 1, 7, 0)]
    assert [f.at for f in unix_fire_times("*/20 * * * *", NY, utc(2026, 11, 1, 4, 59), 4)] == expected_once
    got = fires("*/20 * * * *", NY, utc(2026, 11, 1, 4, 59), 7, TWICE)
    assert got == [
        (utc(2026, 11, 1, 5, 0), None),
        (utc(2026, 11, 1, 5, 20), None),
        (utc(2026, 11, 1, 5, 40), None),
        (utc(2026, 11, 1, 6, 0), "dst-repeat"),
        (utc(2026, 11, 1, 6, 20), "dst-repeat"),
        (utc(2026, 11, 1, 6, 40), "dst-repeat"),
        (utc(2026, 11, 1, 7, 0), None),
    ]


def test_asking_from_inside_the_repeated_hour() -> None:
    # after the first 01:40 (05:40Z), before the second occurrences
    assert fires("*/20 * * * *", NY, utc(2026, 11, 1, 5, 50), 3, TWICE) == [
        (utc(2026, 11, 1, 6, 0), "dst-repeat"),
        (utc(2026, 11, 1, 6, 20), "dst-repeat"),
        (utc(2026, 11, 1, 6, 40), "dst-repeat"),
    ]
    assert fires("*/20 * * * *", NY, utc(2026, 11, 1, 5, 50), 1, SKIP_ONCE) == [
        (utc(2026, 11, 1, 7, 0), None)
    ]


# ----------------------------------------------------------------------------------------------------------
# Reference checks and EventBridge delivery
# ----------------------------------------------------------------------------------------------------------


def brute_force(expr: str, tz: str, start: datetime, end: datetime) -> dict[bool, list[datetime]]:
    """Every UTC minute in (start, end] whose local wall clock croniter matches, by ``twice``: the
    'twice' + 'skip' policy (``True``) and, without a repeated hour's second pass, 'skip' (``False``).
    Each minute is matched once for both (croniter's match is the slow part)."""
    zone = ZoneInfo(tz)
    out: dict[bool, list[datetime]] = {True: [], False: []}
    t = start + timedelta(minutes=1)
    while t <= end:
        local = t.astimezone(zone)
        if croniter.match(expr, local.replace(tzinfo=None, fold=0)):
            out[True].append(t)
            if local.fold == 0:
                out[False].append(t)
        t += timedelta(minutes=1)
    return out


@pytest.mark.parametrize(
    ("expr", "tz", "start"),
    [
        ("*/15 * * * *", NY, utc(2026, 3, 7, 12)),
        ("*/15 * * * *", NY, utc(2026, 10, 31, 12)),
        ("*/10 0-3 * * *", LONDON, utc(2026, 3, 28, 12)),
        ("*/10 0-3 * * *", LONDON, utc(2026, 10, 24, 12)),
        ("*/5 1,2 * * *", LORD_HOWE, utc(2026, 4, 3, 12)),
        ("*/5 1,2 * * *", LORD_HOWE, utc(2026, 10, 2, 12)),
        ("7,37 * 1 * SUN", LORD_HOWE, utc(2026, 10, 2, 12)),
    ],
)
def test_policies_against_a_minute_by_minute_reference(expr: str, tz: str, start: datetime) -> None:
    end = start + timedelta(days=2)
    reference = brute_force(expr, tz, start, end)
    for twice, policy in ((True, TWICE), (False, SKIP_ONCE)):
        got = fire_times_between(expr, tz, start, end, policy)
        assert [f.at for f in got] == reference[twice]


def test_unix_fire_times_agree_with_eventbridge_on_the_translated_expressions() -> None:
    """Rebound's Unix engine (croniter's field sets) vs. the AWS evaluator, instant by instant."""
    for expr in ("30 2 * * *", "30 1 * * *", "*/30 0-3 * * *", "0 12 1,15 * MON", "15 1,2 * * SAT-MON"):
        for tz in (NY, LONDON, LORD_HOWE):
            after = utc(2026, 1, 1)
            expected = [f.at for f in unix_fire_times(expr, tz, after, 200)]
            translated = unix_to_aws(expr)
            got: list[datetime] = []
            heads = {e: next_fire(e, tz, after) for e in translated}
            while len(got) < 200:
                first = min(h for h in heads.values() if h is not None)
                got.append(first)
                heads = {e: (next_fire(e, tz, h) if h == first else h) for e, h in heads.items()}
            assert got == expected, (expr, tz)


def test_scheduler_delivers_ordinary_fires_only() -> None:
    shifted = unix_fire_times("30 2 * * *", NY, utc(2026, 3, 7, 0), 3, SHIFT_TWICE)
    repeated = unix_fire_times("30 1 * * *", NY, utc(2026, 10, 31, 12), 3, SHIFT_TWICE)
    assert [scheduler_delivers(f, NY) for f in shifted] == [True, False, True]
    assert [scheduler_delivers(f, NY) for f in repeated] == [True, False, True]
    # a FireTime put together by hand at a second occurrence is still recognized as not delivered by AWS
    second = utc(2026, 11, 1, 6, 30)
    assert not scheduler_delivers(FireTime(at=second, local=second.astimezone(ZoneInfo(NY)), note=None), NY)


def test_fire_times_between_bounds_and_a_whole_day_of_minutes() -> None:
    start, end = utc(2026, 11, 1, 0), utc(2026, 11, 2, 0)
    day = fire_times_between("* * * * *", NY, start, end, TWICE)
    assert len(day) == 1440
    assert day[0].at == start + timedelta(minutes=1) and day[-1].at == end  # (start, end]
    assert sum(f.note == "dst-repeat" for f in day) == 60
    assert len(fire_times_between("* * * * *", NY, start, end)) == 1380  # once: 60 repeats dropped
    assert fire_times_between("0 9 * * *", NY, end, start) == []


def test_results_strictly_increase_under_every_policy() -> None:
    for policy in (SKIP_ONCE, SHIFT, TWICE, SHIFT_TWICE):
        for tz in (NY, LONDON, LORD_HOWE):
            got = unix_fire_times("*/7 0-3 * * *", tz, utc(2026, 1, 1), 3000, policy)
            instants = [f.at for f in got]
            assert instants == sorted(set(instants))
            assert all(f.local == f.at and f.local.tzinfo == ZoneInfo(tz) for f in got)


def test_next_fire_walks_each_expression_forward_for_500_fires() -> None:
    """Each fire is after the one before (their speed is measured by the bench, not asserted)."""
    exprs = [
        "cron(*/5 9-17 ? * MON-FRI *)",
        "cron(0 12 1,15 * ? *)",
        "cron(0 0 29 2 ? *)",
        "cron(30 2 L * ? *)",
    ]
    for expr in exprs:
        t: datetime | None = utc(2026, 1, 1)
        fires: list[datetime] = []
        for _ in range(500):
            t = next_fire(expr, NY, t)  # type: ignore[arg-type]
            if t is None:
                break
            fires.append(t)
        assert fires and all(a < b for a, b in itertools.pairwise(fires)), expr
    for i in range(0, 500, 7):
        start = utc(2026, 1, 1) + timedelta(hours=i)
        [fire] = unix_fire_times("*/15 9-17 * * 1-5", LONDON, start, 1)
        assert fire.at > start and fire.local.weekday() < 5 and 9 <= fire.local.hour <= 17


def test_arguments() -> None:
    assert unix_fire_times("* * * * *", NY, utc(2026, 1, 1), 0) == []
    with pytest.raises(ValueError, match="timezone-aware"):
        unix_fire_times("* * * * *", NY, datetime(2026, 1, 1), 1)
    with pytest.raises(ValueError, match="repeated"):
        DstPolicy(repeated="thrice")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="missing"):
        DstPolicy(missing="drop")  # type: ignore[arg-type]


def test_a_remembered_window_answers_the_same_in_a_new_list_each_time() -> None:
    start, end = utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)  # the repeated hour in New York
    first = fire_times_between("*/5 * * * *", NY, start, end, TWICE)
    first.clear()  # a caller changing its list changes nobody else's
    again = fire_times_between("*/5 * * * *", NY, start, end, TWICE)
    longer = fire_times_between("*/5 * * * *", NY, start, end + timedelta(hours=2), TWICE)  # not remembered
    assert again == longer[: len(again)]
    assert len(again) == 12 and any(f.note == "dst-repeat" for f in again)
    assert fire_times_between("*/5 * * * *", NY, start, end) != again  # the policy is part of the key
    with pytest.raises(ValueError, match="end"):
        fire_times_between("*/5 * * * *", NY, start, end.replace(tzinfo=None))
