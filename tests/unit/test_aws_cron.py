"""EventBridge Scheduler expressions: cron(...) parsing and matching, rate(...), at(...) and next_fire."""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from rebound.domain.cron import (
    AtExpression,
    AwsCron,
    CronError,
    RateExpression,
    next_fire,
    parse_schedule_expression,
)

pytestmark = pytest.mark.unit

NY = "America/New_York"


def fire_dates(expr: str, year: int) -> list[date]:
    """Every date in ``year`` on which ``expr`` fires (evaluated in UTC, so walls are instants)."""
    out: list[date] = []
    t: datetime | None = datetime(year, 1, 1, tzinfo=UTC) - timedelta(minutes=1)
    while True:
        t = next_fire(expr, "UTC", t)  # type: ignore[arg-type]
        if t is None or t.year != year:
            return out
        out.append(t.date())


def days_of(year: int, pick: object) -> list[date]:
    """Reference implementation for the tests: one date per month chosen by ``pick(year, month)``."""
    out = []
    for month in range(1, 13):
        day = pick(year, month)  # type: ignore[operator]
        if day is not None:
            out.append(date(year, month, day))
    return out


def weekdays_in(year: int, month: int, weekday: int) -> list[int]:
    """Days of the month falling on a Python weekday (Monday = 0)."""
    last = calendar.monthrange(year, month)[1]
    return [d for d in range(1, last + 1) if date(year, month, d).weekday() == weekday]


# ----------------------------------------------------------------------------------------------------------
# cron(...)
# ----------------------------------------------------------------------------------------------------------


def test_weekday_schedule_matches() -> None:
    cron = AwsCron.parse("cron(0 9 ? * MON-FRI *)")
    assert cron.matches(datetime(2026, 3, 9, 9, 0))  # Monday
    assert cron.matches(datetime(2026, 3, 13, 9, 0, 59))  # Friday, seconds ignored
    assert not cron.matches(datetime(2026, 3, 14, 9, 0))  # Saturday
    assert not cron.matches(datetime(2026, 3, 8, 9, 0))  # Sunday
    assert not cron.matches(datetime(2026, 3, 9, 9, 1))
    assert not cron.matches(datetime(2026, 3, 9, 10, 0))


def test_day_of_week_numbers_start_at_sunday() -> None:
    assert fire_dates("cron(0 0 ? * 1 *)", 2026)[:2] == [date(2026, 1, 4), date(2026, 1, 11)]  # Sundays
    assert fire_dates("cron(0 0 ? * 7 *)", 2026)[:2] == [date(2026, 1, 3), date(2026, 1, 10)]  # Saturdays
    assert fire_dates("cron(0 0 ? * 2-6 *)", 2026) == fire_dates("cron(0 0 ? * MON-FRI *)", 2026)
    assert fire_dates("cron(0 0 ? * sun,sat *)", 2026) == fire_dates("cron(0 0 ? * 1,7 *)", 2026)


def test_parse_normalizes_and_compares() -> None:
    a = AwsCron.parse("cron(0  9 ? * MON-FRI *)")
    b = AwsCron.parse(" cron(0 9 ? * MON-FRI *) ")
    assert a == b and hash(a) == hash(b)
    assert str(a) == "cron(0 9 ? * MON-FRI *)"
    assert repr(a) == "AwsCron('cron(0 9 ? * MON-FRI *)')"
    assert a != AwsCron.parse("cron(0 9 ? * MON-SAT *)")
    assert parse_schedule_expression("cron(0 9 ? * MON-FRI *)") == a


def test_year_is_optional() -> None:
    assert AwsCron.parse("cron(0 9 ? * MON-FRI)") == AwsCron.parse("cron(0 9 ? * MON-FRI *)")


@pytest.mark.parametrize(
    ("expr", "minutes"),
    [
        ("cron(0/15 0 * * ? *)", [0, 15, 30, 45]),
        ("cron(*/15 0 * * ? *)", [0, 15, 30, 45]),
        ("cron(1/10 0 * * ? *)", [1, 11, 21, 31, 41, 51]),
        ("cron(10-40/10 0 * * ? *)", [10, 20, 30, 40]),
        ("cron(5,7,50-52 0 * * ? *)", [5, 7, 50, 51, 52]),
        ("cron(59 0 * * ? *)", [59]),
    ],
)
def test_minute_steps_lists_and_ranges(expr: str, minutes: list[int]) -> None:
    assert list(AwsCron.parse(expr).minutes_of_day) == minutes


def test_last_day_of_month() -> None:
    expected = days_of(2028, lambda y, m: calendar.monthrange(y, m)[1])
    assert fire_dates("cron(0 0 L * ? *)", 2028) == expected
    assert date(2028, 2, 29) in expected and date(2028, 4, 30) in expected


def test_last_weekday_of_month() -> None:
    got = fire_dates("cron(0 0 ? * 6L *)", 2026)  # last Friday
    assert got == days_of(2026, lambda y, m: weekdays_in(y, m, 4)[-1])
    assert got[:3] == [date(2026, 1, 30), date(2026, 2, 27), date(2026, 3, 27)]
    assert fire_dates("cron(0 0 ? * FRIL *)", 2026) == got
    assert fire_dates("cron(0 0 ? * 1L *)", 2026) == days_of(2026, lambda y, m: weekdays_in(y, m, 6)[-1])


def test_l_alone_in_day_of_week_is_saturday() -> None:
    assert fire_dates("cron(0 0 ? * L *)", 2026) == fire_dates("cron(0 0 ? * SAT *)", 2026)


def test_nearest_weekday() -> None:
    got = fire_dates("cron(0 0 15W * ? *)", 2026)
    assert date(2026, 8, 14) in got  # the 15th is a Saturday: the Friday before
    assert date(2026, 3, 16) in got  # the 15th is a Sunday: the Monday after
    assert date(2026, 11, 16) in got
    assert date(2026, 4, 15) in got  # a Wednesday: itself
    assert len(got) == 12
    assert all(day.weekday() < 5 for day in got)


def test_nearest_weekday_does_not_leave_the_month() -> None:
    first = fire_dates("cron(0 0 1W * ? *)", 2026)
    assert date(2026, 8, 3) in first  # Aug 1 is a Saturday: Monday the 3rd, not Friday July 31
    assert date(2026, 3, 2) in first  # Mar 1 is a Sunday: Monday the 2nd
    assert date(2026, 7, 31) not in first
    last = fire_dates("cron(0 0 31W * ? *)", 2026)
    assert date(2026, 5, 29) in last  # May 31 is a Sunday: Friday the 29th, not Monday June 1
    assert all(day.month not in (2, 4, 6, 9, 11) for day in last)  # no 31st, no fire
    assert len(last) == 7


def test_last_weekday() -> None:
    got = fire_dates("cron(0 0 LW * ? *)", 2026)
    assert got[:5] == [
        date(2026, 1, 30),
        date(2026, 2, 27),
        date(2026, 3, 31),
        date(2026, 4, 30),
        date(2026, 5, 29),
    ]
    assert len(got) == 12 and all(day.weekday() < 5 for day in got)


def test_nth_weekday() -> None:
    got = fire_dates("cron(0 0 ? * 2#1 *)", 2026)  # first Monday
    assert got == days_of(2026, lambda y, m: weekdays_in(y, m, 0)[0])
    assert got[:3] == [date(2026, 1, 5), date(2026, 2, 2), date(2026, 3, 2)]
    assert fire_dates("cron(0 0 ? * MON#1 *)", 2026) == got
    fifth_fridays = fire_dates("cron(0 0 ? * 6#5 *)", 2026)
    assert fifth_fridays == [date(2026, 1, 30), date(2026, 5, 29), date(2026, 7, 31), date(2026, 10, 30)]


def test_year_field() -> None:
    expr = "cron(0 0 1 1 ? 2027-2028)"
    after = datetime(2026, 6, 1, tzinfo=UTC)
    assert next_fire(expr, "UTC", after) == datetime(2027, 1, 1, tzinfo=UTC)
    assert next_fire(expr, "UTC", datetime(2027, 1, 1, tzinfo=UTC)) == datetime(2028, 1, 1, tzinfo=UTC)
    assert next_fire(expr, "UTC", datetime(2028, 1, 1, tzinfo=UTC)) is None
    assert next_fire("cron(0 0 1 1 ? 2030/5)", "UTC", after) == datetime(2030, 1, 1, tzinfo=UTC)
    assert next_fire("cron(0 0 1 1 ? 2030/5)", "UTC", datetime(2030, 6, 1, tzinfo=UTC)) == datetime(
        2035, 1, 1, tzinfo=UTC
    )
    assert next_fire("cron(0 0 1 1 ? 2020,2024)", "UTC", after) is None
    assert next_fire("cron(0 0 31 12 ? *)", "UTC", datetime(2199, 12, 31, 0, 0, tzinfo=UTC)) is None


def test_a_day_that_never_comes() -> None:
    assert next_fire("cron(0 0 30 2 ? *)", "UTC", datetime(2026, 1, 1, tzinfo=UTC)) is None
    assert next_fire("cron(0 0 31W 4 ? *)", "UTC", datetime(2026, 1, 1, tzinfo=UTC)) is None


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("cron(0 9 ? * ? *)", "both '?'"),
        ("cron(0 9 * * * *)", "must be '?'"),
        ("cron(0 9 1 * MON *)", "must be '?'"),
        ("cron(0 9 15 * 2#1 *)", "must be '?'"),
    ],
)
def test_exactly_one_question_mark(expr: str, fragment: str) -> None:
    with pytest.raises(CronError, match="day-of-month and day-of-week") as caught:
        AwsCron.parse(expr)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("expr", "field", "fragment"),
    [
        ("cron(60 0 * * ? *)", "minute", "out of range 0-59"),
        ("cron(0 24 * * ? *)", "hour", "out of range 0-23"),
        ("cron(0 0 0 * ? *)", "day-of-month", "out of range 1-31"),
        ("cron(0 0 32W * ? *)", "day-of-month", "out of range 1-31"),
        ("cron(0 0 L-2 * ? *)", "day-of-month", "must stand alone"),
        ("cron(0 0 1,L * ? *)", "day-of-month", "must stand alone"),
        ("cron(0 0 1W-5 * ? *)", "day-of-month", "must stand alone"),
        ("cron(0 0 5-1 * ? *)", "day-of-month", "runs backwards"),
        ("cron(0 0 * 13 ? *)", "month", "out of range 1-12"),
        ("cron(0 0 * FOO ? *)", "month", "unknown name"),
        ("cron(0 0 ? * 0 *)", "day-of-week", "out of range 1-7"),
        ("cron(0 0 ? * 8 *)", "day-of-week", "out of range 1-7"),
        ("cron(0 0 ? * FUN *)", "day-of-week", "unknown name"),
        ("cron(0 0 ? * 1/2 *)", "day-of-week", "'/' is not allowed"),
        ("cron(0 0 ? * */2 *)", "day-of-week", "'/' is not allowed"),
        ("cron(0 0 ? * 2#6 *)", "day-of-week", "must be 1-5"),
        ("cron(0 0 ? * 2#0 *)", "day-of-week", "must be 1-5"),
        ("cron(0 0 ? * 2#1,3#1 *)", "day-of-week", "only one '#'"),
        ("cron(0 0 ? * 9#1 *)", "day-of-week", "out of range 1-7"),
        ("cron(0 0 ? * 1-2L *)", "day-of-week", "'nL' takes a single day"),
        ("cron(0 0 ? * MON-SUN *)", "day-of-week", "runs backwards"),
        ("cron(0 0 * * ? 1969)", "year", "out of range 1970-2199"),
        ("cron(0 0 * * ? 2200)", "year", "out of range 1970-2199"),
        ("cron(0/0 0 * * ? *)", "minute", "step /0"),
        ("cron(0,,1 0 * * ? *)", "minute", "empty item"),
        ("cron(a 0 * * ? *)", "minute", "not a number"),
    ],
)
def test_bad_fields_are_named(expr: str, field: str, fragment: str) -> None:
    with pytest.raises(CronError) as caught:
        AwsCron.parse(expr)
    assert caught.value.field == field
    assert f"({field} field)" in str(caught.value)
    assert fragment in str(caught.value)
    assert repr(expr) in str(caught.value)


@pytest.mark.parametrize(
    "expr", ["cron(0 9 * *)", "cron(0 9 * * ? * *)", "cron 0 9 * * ? *", "0 9 * * ? *", "cron()"]
)
def test_bad_shape(expr: str) -> None:
    with pytest.raises(CronError, match="AWS cron expression"):
        AwsCron.parse(expr)


# ----------------------------------------------------------------------------------------------------------
# rate(...) and at(...)
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "interval"),
    [
        ("rate(1 minute)", timedelta(minutes=1)),
        ("rate(5 minutes)", timedelta(minutes=5)),
        ("rate(1 hour)", timedelta(hours=1)),
        ("rate(12 hours)", timedelta(hours=12)),
        ("rate(1 day)", timedelta(days=1)),
        ("rate(7 days)", timedelta(days=7)),
    ],
)
def test_rate_parsing(expr: str, interval: timedelta) -> None:
    parsed = parse_schedule_expression(expr)
    assert isinstance(parsed, RateExpression)
    assert parsed.interval == interval
    assert parsed.expression == expr


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("rate(0 minutes)", "positive integer"),
        ("rate(-5 minutes)", "positive integer"),
        ("rate(five minutes)", "positive integer"),
        ("rate(1.5 hours)", "positive integer"),
        ("rate(1 minutes)", "singular unit 'minute'"),
        ("rate(5 minute)", "plural unit 'minutes'"),
        ("rate(2 day)", "plural unit 'days'"),
        ("rate(5 weeks)", "unknown unit 'weeks'"),
        ("rate(5 seconds)", "unknown unit"),
        ("rate(5  minutes)", "expected rate(value unit)"),
        ("rate(5)", "expected rate(value unit)"),
    ],
)
def test_bad_rates(expr: str, fragment: str) -> None:
    with pytest.raises(CronError, match="invalid schedule expression") as caught:
        parse_schedule_expression(expr)
    assert fragment in str(caught.value)


def test_at_parsing() -> None:
    parsed = parse_schedule_expression("at(2026-03-07T10:00:00)")
    assert parsed == AtExpression(expression="at(2026-03-07T10:00:00)", local=datetime(2026, 3, 7, 10, 0))


@pytest.mark.parametrize(
    "expr",
    [
        "at(2026-03-07 10:00:00)",
        "at(2026-03-07T10:00)",
        "at(2026-02-30T10:00:00)",
        "at(2026-03-07T10:00:00Z)",
        "at(2026-03-07T25:00:00)",
        "at()",
    ],
)
def test_bad_at(expr: str) -> None:
    with pytest.raises(CronError, match="yyyy-mm-ddThh:mm:ss"):
        parse_schedule_expression(expr)


@pytest.mark.parametrize("expr", ["every 5 minutes", "", "cron", "0 9 * * *", "RATE(5 minutes)"])
def test_unknown_expressions(expr: str) -> None:
    with pytest.raises(CronError, match=r"expected cron\(\.\.\.\), rate\(\.\.\.\) or at\(\.\.\.\)"):
        parse_schedule_expression(expr)


# ----------------------------------------------------------------------------------------------------------
# next_fire
# ----------------------------------------------------------------------------------------------------------


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def test_rate_first_fire_is_the_start_date() -> None:
    start = utc(2026, 3, 7, 10, 0)
    assert next_fire("rate(5 minutes)", NY, utc(2026, 3, 7, 9, 0), start=start) == start
    assert next_fire("rate(5 minutes)", NY, start - timedelta(microseconds=1), start=start) == start
    assert next_fire("rate(5 minutes)", NY, start, start=start) == utc(2026, 3, 7, 10, 5)
    mid_period = utc(2026, 3, 7, 10, 7) + timedelta(seconds=30)
    assert next_fire("rate(5 minutes)", NY, mid_period, start=start) == utc(2026, 3, 7, 10, 10)
    assert next_fire("rate(1 hour)", NY, utc(2026, 3, 8, 0, 0), start=start) == utc(2026, 3, 8, 1, 0)


def test_rate_days_are_24_hours_across_dst() -> None:
    start = datetime(2026, 3, 7, 12, 0, tzinfo=ZoneInfo(NY))  # 17:00Z, EST
    fire = next_fire("rate(1 day)", NY, start, start=start)
    assert fire == utc(2026, 3, 8, 17, 0)
    assert fire is not None and fire.astimezone(ZoneInfo(NY)).hour == 13  # EDT now: 24 h, not "same time"


def test_rate_needs_a_start() -> None:
    with pytest.raises(ValueError, match="needs start"):
        next_fire("rate(5 minutes)", NY, utc(2026, 1, 1))


def test_at_fires_once_in_the_zone() -> None:
    expr = "at(2026-03-07T10:00:00)"
    assert next_fire(expr, NY, utc(2026, 1, 1)) == utc(2026, 3, 7, 15, 0)
    assert next_fire(expr, "UTC", utc(2026, 1, 1)) == utc(2026, 3, 7, 10, 0)
    assert next_fire(expr, NY, utc(2026, 3, 7, 15, 0)) is None
    assert next_fire(expr, NY, utc(2026, 1, 1), start=utc(2027, 1, 1)) == utc(
        2026, 3, 7, 15, 0
    )  # start ignored


def test_at_around_dst() -> None:
    # a repeated local time: the first occurrence (EDT)
    assert next_fire("at(2026-11-01T01:30:00)", NY, utc(2026, 1, 1)) == utc(2026, 11, 1, 5, 30)
    # a nonexistent local time: read with the pre-gap offset, i.e. 03:30 EDT
    assert next_fire("at(2026-03-08T02:30:00)", NY, utc(2026, 1, 1)) == utc(2026, 3, 8, 7, 30)


def test_cron_in_a_zone() -> None:
    expr = "cron(0 9 ? * MON-FRI *)"
    friday_evening = utc(2026, 3, 6, 23, 0)
    assert next_fire(expr, NY, friday_evening) == utc(2026, 3, 9, 13, 0)  # Monday 09:00 EDT
    assert next_fire(expr, NY, utc(2026, 3, 2, 14, 0)) == utc(2026, 3, 2, 14, 0) + timedelta(days=1)
    assert next_fire(expr, "Asia/Kolkata", friday_evening) == utc(2026, 3, 9, 3, 30)
    fire = next_fire(expr, NY, utc(2026, 3, 9, 13, 0))
    assert fire == utc(2026, 3, 10, 13, 0)
    assert fire is not None and fire.tzinfo is UTC


def test_cron_respects_the_start_date() -> None:
    expr = "cron(0 9 ? * MON-FRI *)"
    start = utc(2026, 3, 11, 13, 0)
    assert next_fire(expr, NY, utc(2026, 3, 1), start=start) == start
    assert next_fire(expr, NY, utc(2026, 3, 1), start=start + timedelta(seconds=1)) == utc(2026, 3, 12, 13, 0)


@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected"),
    [
        # spring forward: the 02:30 that does not exist is skipped
        ("cron(30 2 * * ? *)", NY, utc(2026, 3, 7, 12, 0), utc(2026, 3, 9, 6, 30)),
        ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 3, 28, 12, 0), utc(2026, 3, 30, 0, 30)),
        ("cron(15 2 * * ? *)", "Australia/Lord_Howe", utc(2026, 10, 3, 0, 0), utc(2026, 10, 4, 15, 15)),
        # fall back: once, at the first occurrence ...
        ("cron(30 1 * * ? *)", NY, utc(2026, 10, 31, 12, 0), utc(2026, 11, 1, 5, 30)),
        ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 10, 24, 12, 0), utc(2026, 10, 25, 0, 30)),
        ("cron(45 1 * * ? *)", "Australia/Lord_Howe", utc(2026, 4, 4, 0, 0), utc(2026, 4, 4, 14, 45)),
        # ... and not again at the second
        ("cron(30 1 * * ? *)", NY, utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
        ("cron(30 1 * * ? *)", "Europe/London", utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)),
        ("cron(45 1 * * ? *)", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)),
        # asking from inside the repeated hour (after the first 01:30, before the second)
        ("cron(30 1 * * ? *)", NY, utc(2026, 11, 1, 6, 0), utc(2026, 11, 2, 6, 30)),
        # an ordinary time on the change day
        ("cron(30 2 * * ? *)", NY, utc(2026, 10, 31, 12, 0), utc(2026, 11, 1, 7, 30)),
    ],
)
def test_cron_across_dst(expr: str, tz: str, after: datetime, expected: datetime) -> None:
    assert next_fire(expr, tz, after) == expected


def test_every_minute_across_fall_back_fires_each_wall_time_once() -> None:
    fires = []
    t: datetime | None = utc(2026, 11, 1, 4, 58)  # 00:58 EDT
    for _ in range(130):
        t = next_fire("cron(* * * * ? *)", NY, t)  # type: ignore[arg-type]
        assert t is not None
        fires.append(t)
    walls = [f.astimezone(ZoneInfo(NY)).replace(tzinfo=None) for f in fires]
    assert walls == sorted(set(walls))
    # 01:59 EDT (05:59Z) is followed by 02:00 EST (07:00Z): the repeated hour is not fired again
    assert utc(2026, 11, 1, 5, 59) in fires and utc(2026, 11, 1, 6, 30) not in fires
    assert fires[fires.index(utc(2026, 11, 1, 5, 59)) + 1] == utc(2026, 11, 1, 7, 0)


def test_next_fire_argument_errors() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire("cron(0 9 * * ? *)", NY, datetime(2026, 1, 1))
    with pytest.raises(CronError, match="unknown IANA time zone"):
        next_fire("cron(0 9 * * ? *)", "Mars/Olympus_Mons", utc(2026, 1, 1))
    with pytest.raises(CronError):
        next_fire("0 9 * * *", NY, utc(2026, 1, 1))
