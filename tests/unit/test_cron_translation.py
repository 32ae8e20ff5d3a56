"""Unix cron -> EventBridge Scheduler translation, cross-checked against croniter.

Each Unix expression runs through croniter; its translation runs through Rebound's own AWS evaluator
(``AwsCron`` + ``next_fire``, which never touches croniter). The two fire-time sequences must be identical.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from rebound.domain import cron
from rebound.domain.cron import AwsCron, CronError, next_fire, unix_to_aws, validate_unix_cron

pytestmark = pytest.mark.unit

FIRES = 200


def croniter_walls(expr: str, start: datetime, count: int, until: datetime | None = None) -> list[datetime]:
    """The next ``count`` naive wall-clock fire times of a Unix expression, by croniter."""
    it = croniter(expr, start)
    out: list[datetime] = []
    while len(out) < count:
        nxt = it.get_next(datetime)
        if until is not None and nxt >= until:
            break
        out.append(nxt)
    return out


def aws_walls(
    exprs: list[str], start: datetime, count: int, tz: str = "UTC", until: datetime | None = None
) -> list[datetime]:
    """The union of several AWS expressions' fires after naive local ``start``, as naive local walls."""
    zone = ZoneInfo(tz)
    after = start.replace(tzinfo=zone).astimezone(UTC)
    heads = {expr: next_fire(expr, tz, after) for expr in exprs}
    out: list[datetime] = []
    while len(out) < count:
        live = [t for t in heads.values() if t is not None]
        if not live:
            break
        first = min(live)
        wall = first.astimezone(zone).replace(tzinfo=None)
        if until is not None and wall >= until:
            break
        out.append(wall)
        for expr, head in heads.items():
            if head == first:
                heads[expr] = next_fire(expr, tz, first)
    return out


def exists(wall: datetime, zone: ZoneInfo) -> bool:
    """Whether a naive wall-clock time exists in ``zone`` (is not inside a spring-forward gap)."""
    aware = wall.replace(tzinfo=zone)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


# Every dialect difference the translation has to get right, each checked over 200 successive fires.
CASES = [
    # day-of-week: 0 and 7 are Sunday, ranges through 7, wrapping ranges, names, steps
    "0 0 * * 0",
    "0 0 * * 7",
    "0 0 * * 0,7",
    "0 0 * * 5-7",
    "0 0 * * 0-3",
    "0 0 * * 0-7",
    "0 0 * * 4-7",
    "0 6 * * SUN,SAT",
    "0 9 * * MON-FRI",
    "0 9 * * mon-fri",
    "0 9 * * FRI-MON",
    "0 9 * * SAT-SUN",
    "0 0 * * */2",
    "0 0 * * */3",
    "0 0 * * 1-5/2",
    "0 0 * * 1-7/2",
    "0 0 * * 0-7/3",
    "0 0 * * 2/2",
    # day-of-month OR day-of-week (croniter: either restricted field may match)
    "0 12 1,15 * MON",
    "30 8 13 * FRI",
    "0 0 */10 * SUN",
    "0 0 31 2 MON",
    "0 0 1-7 * MON",
    "0 0 1-31 * MON",
    "0 0 1 * 0-6",
    # only day-of-month
    "0 0 1,15,31 * *",
    "0 0 31 * *",
    "0 0 28-31 * *",
    "0 0 */2 * *",
    "0 0 */10 * *",
    "0 0 5/7 * *",
    "0 0 25-5 * *",
    # steps on minute / hour
    "*/7 * * * *",
    "5/15 */3 * * *",
    "*/20 9-17 * * MON-FRI",
    "0-10/4,30,50-59/3 */5 * * *",
    "0 22-2 * * *",
    "59/15 0 * * *",
    # months: ranges, names, steps, wrapping
    "0 0 1 JAN-MAR,OCT *",
    "0 0 1 */2 *",
    "0 0 1 2/3 *",
    "0 0 1 NOV-FEB *",
    "0 9 * 6 *",
    "0 9 15 feb,Aug *",
    # macros
    "@hourly",
    "@weekly",
    "@monthly",
]


@pytest.mark.parametrize("expr", CASES)
def test_translation_fires_exactly_when_croniter_does(expr: str) -> None:
    start = datetime(2026, 1, 1, 0, 0)
    expected = croniter_walls(expr, start, FIRES)
    translated = unix_to_aws(expr)
    assert aws_walls(translated, start, FIRES) == expected

    # And minute by minute around each fire: AwsCron matches exactly croniter's times, no extra ones.
    parsed = [AwsCron.parse(text) for text in translated]
    for earlier, later in pairwise(expected):
        assert any(p.matches(later) for p in parsed)
        gap = (later - earlier) // 2
        if gap.total_seconds() >= 60:
            probe = (earlier + gap).replace(second=0)
            assert probe not in (earlier, later)
            assert not any(p.matches(probe) for p in parsed), probe


def test_leap_day_over_the_whole_aws_year_range() -> None:
    start = datetime(1970, 1, 1)
    until = datetime(2200, 1, 1)  # EventBridge Scheduler's year field ends at 2199
    expected = croniter_walls("0 0 29 2 *", start, 1000, until=until)
    got = aws_walls(unix_to_aws("0 0 29 2 *"), start, 1000, until=until)
    assert got == expected
    assert len(got) == 56  # 1972..2196, without 2100
    assert datetime(2096, 2, 29) in got
    assert all(wall.year != 2100 for wall in got)


DST_CASES = [
    ("*/30 * * * *", "America/New_York", datetime(2026, 3, 6)),
    ("*/30 * * * *", "America/New_York", datetime(2026, 10, 30)),
    ("*/15 1-3 * * *", "America/New_York", datetime(2026, 3, 1)),
    ("*/15 1-3 * * *", "America/New_York", datetime(2026, 10, 25)),
    ("30 2 * * *", "America/New_York", datetime(2026, 2, 1)),
    ("30 1 * * *", "America/New_York", datetime(2026, 2, 1)),
    ("*/30 * * * *", "Europe/London", datetime(2026, 3, 27)),
    ("*/30 * * * *", "Europe/London", datetime(2026, 10, 23)),
    ("*/20 0-2 * * SUN", "Europe/London", datetime(2026, 2, 1)),
    ("30 1 * * *", "Europe/London", datetime(2026, 2, 1)),
    ("*/10 * * * *", "Australia/Lord_Howe", datetime(2026, 4, 4)),
    ("*/10 * * * *", "Australia/Lord_Howe", datetime(2026, 10, 3)),
    ("15 2 * * *", "Australia/Lord_Howe", datetime(2026, 2, 1)),
    ("45 1 * * *", "Australia/Lord_Howe", datetime(2026, 2, 1)),
    ("0,15,30,45 1,2 1-7 * SUN", "Australia/Lord_Howe", datetime(2026, 1, 1)),
]


@pytest.mark.parametrize(("expr", "tz", "start"), DST_CASES)
def test_translation_matches_croniter_wall_clock_in_dst_zones(expr: str, tz: str, start: datetime) -> None:
    """Same local wall-clock matches; EventBridge skips the ones a spring-forward removes."""
    zone = ZoneInfo(tz)
    raw = croniter_walls(expr, start, FIRES + 100)
    expected = [wall for wall in raw if exists(wall, zone)][:FIRES]
    assert len(expected) == FIRES
    got = aws_walls(unix_to_aws(expr), start, FIRES, tz)
    assert got == expected
    assert got == sorted(set(got))  # the repeated fall-back hour fires once


def test_dst_windows_really_cross_transitions() -> None:
    """Guard for the test above: each window spans a change of UTC offset."""
    for expr, tz, start in DST_CASES:
        zone = ZoneInfo(tz)
        walls = croniter_walls(expr, start, FIRES + 100)
        assert len({wall.replace(tzinfo=zone).utcoffset() for wall in walls}) > 1, (expr, tz)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 12 1,15 * MON", ["cron(0 12 1,15 * ? *)", "cron(0 12 ? * MON *)"]),
        ("0 0 * * 5-7", ["cron(0 0 ? * SUN,FRI,SAT *)"]),
        ("0 0 * * 0", ["cron(0 0 ? * SUN *)"]),
        ("0 0 * * 7", ["cron(0 0 ? * SUN *)"]),
        ("0 0 * * */2", ["cron(0 0 ? * SUN,TUE,THU,SAT *)"]),
        ("0 0 * * 1-5/2", ["cron(0 0 ? * MON,WED,FRI *)"]),
        ("*/15 9-17 * * MON-FRI", ["cron(0/15 9-17 ? * MON-FRI *)"]),
        ("5/15 */2 */10 JAN-MAR,OCT *", ["cron(5/15 0/2 1/10 1-3,10 ? *)"]),
        ("0 0 1-31 * MON", ["cron(0 0 * * ? *)"]),  # croniter: "every day OR Monday" = every day
        ("0 0 * * *", ["cron(0 0 * * ? *)"]),
        ("* * * * *", ["cron(* * * * ? *)"]),
        ("  0   9 *  * MON-FRI ", ["cron(0 9 ? * MON-FRI *)"]),
        ("@hourly", ["cron(0 * * * ? *)"]),
        # issue 38: Unix cron that was refused or changed; a range of one value is that value (POSIX)
        ("0 0 31 2 0", ["cron(0 0 ? 2 SUN *)"]),  # February 31 never comes: the Sundays of February
        ("0 0 30,31 2 MON", ["cron(0 0 ? 2 MON *)"]),
        ("0 0 30,31 2,3 MON", ["cron(0 0 30,31 2,3 ? *)", "cron(0 0 ? 2,3 MON *)"]),
        ("5-5 * * * *", ["cron(5 * * * ? *)"]),
        ("59-59/15 * * * *", ["cron(59 * * * ? *)"]),
        ("1-1,59/15,55-59/2 * * * *", ["cron(1,55,57,59 * * * ? *)"]),
        ("0 0 * JAN-JAN *", ["cron(0 0 * 1 ? *)"]),
        ("* * * 1-1,12/6,11-12/1 *", ["cron(* * * 1,11,12 ? *)"]),
        ("* * * * *,0", ["cron(* * * * ? *)"]),  # '*' in a list: the whole field, as croniter reads it
        ("0 0 5 * *,0", ["cron(0 0 5 * ? *)"]),  # ... so day-of-week is unrestricted: the 5th only
        ("*,5 0 * * *", ["cron(* 0 * * ? *)"]),
        ("0 0 * * SUN-SUN", ["cron(0 0 ? * SUN *)"]),
        ("0 0 * * 7-0", ["cron(0 0 ? * SUN *)"]),
        ("0 0 * * 7-7/2", ["cron(0 0 ? * SUN *)"]),
        ("0 0 5 * 0-0", ["cron(0 0 5 * ? *)", "cron(0 0 ? * SUN *)"]),  # restricted: the 5th or Sundays
        ("0 0 * jan-JAN,3-MAR *", ["cron(0 0 * 1,3 ? *)"]),
    ],
)
def test_translation_text(expr: str, expected: list[str]) -> None:
    assert unix_to_aws(expr) == expected
    for text in expected:
        AwsCron.parse(text)


def test_naive_day_of_week_copy_would_be_caught() -> None:
    """The harness can fail: copying Unix day numbers into AWS (where 1 = SUN) shifts every day by one."""
    start = datetime(2026, 1, 1)
    assert aws_walls(["cron(0 0 ? * 5-7 *)"], start, 20) != croniter_walls("0 0 * * 5-7", start, 20)
    # ... and so would AND-ing day-of-month with day-of-week, which AWS cannot even state.
    assert aws_walls(["cron(0 12 1,15 * ? *)"], start, 20) != croniter_walls("0 12 1,15 * MON", start, 20)


def test_over_long_expressions_are_split_by_minute_into_disjoint_ones() -> None:
    minutes = [m for m in range(60) if m % 3 != 2]
    rest = "0 1 1 ? " + "x" * 200
    parts = cron._assemble(minutes, rest)
    assert len(parts) > 1
    assert all(len(part) <= cron.AWS_MAX_EXPRESSION_LENGTH for part in parts)
    seen: list[int] = []
    for part in parts:
        seen.extend(sorted(AwsCron.parse(part.replace("x" * 200, "*")).minutes_of_day))
    assert sorted(seen) == minutes and len(seen) == len(set(seen))


def test_widest_real_expressions_fit_in_one_aws_expression() -> None:
    # the longest lists a Unix expression can produce without runs or steps
    minutes = ",".join(str(m) for m in range(60) if m % 3 != 2)
    hours = ",".join(str(h) for h in range(24) if h % 3 != 2)
    days = ",".join(str(d) for d in range(1, 32) if d % 3 != 0)
    expr = f"{minutes} {hours} {days} 1,2,4,5,7,8,10,11 SUN,MON,WED,THU,SAT"
    translated = unix_to_aws(expr)
    assert all(len(text) <= cron.AWS_MAX_EXPRESSION_LENGTH for text in translated)
    start = datetime(2026, 1, 1)
    assert aws_walls(translated, start, FIRES) == croniter_walls(expr, start, FIRES)


# ----------------------------------------------------------------------------------------------------------
# validate_unix_cron
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "normalized"),
    [
        ("  0   9 *  * MON-FRI ", "0 9 * * MON-FRI"),
        ("0\t9 * *\tmon", "0 9 * * mon"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("0 0 31 2 MON", "0 0 31 2 MON"),  # OR: Mondays in February still fire
        ("0 0 29 2 *", "0 0 29 2 *"),
    ],
)
def test_validate_normalizes(expr: str, normalized: str) -> None:
    assert validate_unix_cron(expr) == normalized


@pytest.mark.parametrize(
    ("expr", "field", "fragment"),
    [
        ("60 * * * *", "minute", "60 is out of range 0-59"),
        ("0 24 * * *", "hour", "24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month", "0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month", "out of range 1-31"),
        ("0 0 * 13 *", "month", "13 is out of range 1-12"),
        ("0 0 * 0 *", "month", "out of range 1-12"),
        ("0 0 * * 8", "day-of-week", "8 is out of range 0-7"),
        ("0 0 * FOO *", "month", "unknown name 'FOO'"),
        ("0 0 * * FUN", "day-of-week", "unknown name 'FUN'"),
        ("0 0 * JAN-FUN *", "month", "unknown name 'FUN'"),
        ("0 MON * * *", "hour", "'MON' is not a number"),
        ("*/0 * * * *", "minute", "step /0"),
        ("*/61 * * * *", "minute", "step /61"),
        ("0 0 * * */8", "day-of-week", "step /8"),
        ("0 0 ? * *", "day-of-month", "schedule.aws"),
        ("0 0 * * ?", "day-of-week", "schedule.aws"),
        ("0 0 L * *", "day-of-month", "schedule.aws"),
        ("0 0 1-L * *", "day-of-month", "schedule.aws"),
        ("0 0 15W * *", "day-of-month", "schedule.aws"),
        ("0 0 LW * *", "day-of-month", "schedule.aws"),
        ("0 0 * * 5L", "day-of-week", "schedule.aws"),
        ("0 0 * * 1#2", "day-of-week", "schedule.aws"),
        ("0 0 * * MON#2", "day-of-week", "schedule.aws"),
        ("H 0 * * *", "minute", "hashed"),
        ("0 R * * *", "hour", "hashed"),
        ("0 0 30 2 *", "day-of-month", "never"),
        ("* * 31 2 *", "day-of-month", "day(s) 31 never occur in FEB, so it never fires"),
        ("0 0 30-31 2 *,*", "day-of-month", "day(s) 30,31 never occur in FEB"),
        ("0 0 31 4,6,9,11 *", "day-of-month", "never"),
        ("0 0 1,,2 * *", "day-of-month", "empty item"),
        ("0 0 1-2-3 * *", "day-of-month", "cannot read"),
        ("0 0 * * 1/", "day-of-week", "cannot read"),
        ("0 0 -1 * *", "day-of-month", "cannot read"),
    ],
)
def test_bad_fields_are_named(expr: str, field: str, fragment: str) -> None:
    with pytest.raises(CronError) as caught:
        validate_unix_cron(expr)
    err = caught.value
    assert isinstance(err, ValueError)
    assert err.field == field
    assert f"({field} field)" in str(err)
    assert repr(expr) in str(err)
    assert fragment in str(err)
    with pytest.raises(CronError):
        unix_to_aws(expr)


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("0 0 * *", "expected 5 fields"),
        ("0 0 0 * * *", "seconds and year fields are not supported"),
        ("0 0 0 * * * 2026", "seconds and year fields are not supported"),
        ("@reboot", "@reboot"),
        ("@fortnightly", "unknown macro"),
        ("cron(0 9 ? * MON-FRI *)", "schedule.aws"),
        ("rate(5 minutes)", "schedule.aws"),
    ],
)
def test_bad_expressions_are_explained(expr: str, fragment: str) -> None:
    with pytest.raises(CronError, match="invalid cron expression") as caught:
        validate_unix_cron(expr)
    assert caught.value.field is None
    assert fragment in str(caught.value)


def test_non_string_is_refused() -> None:
    with pytest.raises(CronError):
        validate_unix_cron(5)  # type: ignore[arg-type]
