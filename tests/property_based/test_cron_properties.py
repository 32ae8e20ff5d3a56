"""Properties of the Unix -> EventBridge translation and of the fire-time engines, on generated input."""

from __future__ import annotations

import contextlib
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import CroniterBadDateError, croniter
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from cron_oracle import aws_fires, croniter_fires, differences
from rebound.domain.cron import (
    AwsCron,
    CronError,
    DstPolicy,
    next_fire,
    scheduler_delivers,
    translate,
    unix_fire_times,
    unix_to_aws,
    validate_unix_cron,
)
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.domain.schedules import scheduler_expressions

pytestmark = pytest.mark.property_based

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
ZONES = [
    "UTC",
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
]
AWS_END = datetime(2199, 12, 1)

PROPERTY = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def value(lo: int, hi: int, names: list[str] | None, name_base: int) -> st.SearchStrategy[tuple[int, str]]:
    """A field value as (number, text); month/day-of-week values are sometimes written as names, any case."""
    numbers = st.integers(lo, hi).map(lambda v: (v, str(v)))
    if not names:
        return numbers
    spelled = st.tuples(
        st.integers(0, len(names) - 1), st.sampled_from([str.upper, str.lower, str.capitalize])
    ).map(lambda p: (p[0] + name_base, p[1](names[p[0]])))
    return st.one_of(numbers, spelled)


def field(
    lo: int, hi: int, names: list[str] | None = None, name_base: int = 0, *, posix: bool = False
) -> st.SearchStrategy[str]:
    """One Unix cron field from croniter's grammar: ``*``, or a list of */n, n, a-b, a-b/n and n/step.

    croniter reads a range with equal bounds as the whole field, where POSIX (and Rebound) read its one
    value, and a list holding ``*`` as ``*``. Only with ``posix`` are those generated (equal bounds more
    often than by chance), for tests whose oracle reads them as POSIX does (``tests/cron_oracle.py``).
    """
    span = hi - lo + 1 if hi != 7 else 7
    val = value(lo, hi, names, name_base)
    step = st.integers(1, span)

    def ranged(pair: tuple[tuple[int, str], tuple[int, str]]) -> bool:
        (a, _), (b, _) = pair
        return posix or (a != b and not (hi == 7 and a % 7 == b % 7 and a > b))

    rng = st.tuples(val, val).filter(ranged)
    if posix:
        rng = st.one_of(rng, val.map(lambda v: (v, v)))
    atoms = [
        step.map(lambda s: f"*/{s}"),
        val.map(lambda v: v[1]),
        rng.map(lambda r: f"{r[0][1]}-{r[1][1]}"),
        st.tuples(rng, step).map(lambda r: f"{r[0][0][1]}-{r[0][1][1]}/{r[1]}"),
        st.tuples(val, step).map(lambda r: f"{r[0][1]}/{r[1]}"),
    ]
    if posix:
        atoms.append(st.just("*"))
    return st.one_of(st.just("*"), st.lists(st.one_of(atoms), min_size=1, max_size=3).map(",".join))


def expressions(*, posix: bool = False) -> st.SearchStrategy[str]:
    return st.tuples(
        field(0, 59, posix=posix),
        field(0, 23, posix=posix),
        field(1, 31, posix=posix),
        field(1, 12, MONTHS, 1, posix=posix),
        field(0, 7, DAYS, 0, posix=posix),
    ).map(" ".join)


unix_expressions = expressions()


def valid(expr: str) -> str:
    try:
        return validate_unix_cron(expr)
    except CronError:
        assume(False)
        raise


def croniter_walls(expr: str, start: datetime, count: int) -> list[datetime]:
    it = croniter(expr, start)
    out: list[datetime] = []
    while len(out) < count:
        nxt = it.get_next(datetime)
        if nxt >= AWS_END:
            break
        out.append(nxt)
    return out


def aws_instants(exprs: list[str], tz: str, after: datetime, count: int) -> list[datetime]:
    heads = {e: next_fire(e, tz, after) for e in exprs}
    out: list[datetime] = []
    while len(out) < count:
        live = [h for h in heads.values() if h is not None]
        if not live:
            break
        first = min(live)
        out.append(first)
        heads = {e: (next_fire(e, tz, h) if h == first else h) for e, h in heads.items()}
    return out


starts = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2150, 12, 31)).map(
    lambda d: d.replace(second=0, microsecond=0)
)


@PROPERTY
@given(unix_expressions, starts)
def test_translation_equals_croniter(expr: str, start: datetime) -> None:
    expr = valid(expr)
    translated = unix_to_aws(expr)
    assert 1 <= len(translated) <= 2
    assert all(len(text) <= 256 and text.startswith("cron(") for text in translated)
    expected = croniter_walls(expr, start, 60)
    got = [
        t.replace(tzinfo=None)
        for t in aws_instants(translated, "UTC", start.replace(tzinfo=UTC), len(expected))
        if t.replace(tzinfo=None) < AWS_END
    ]
    assert got == expected


@PROPERTY
@given(unix_expressions, st.lists(starts, min_size=20, max_size=20))
def test_aws_matches_agrees_with_croniter_match(expr: str, moments: list[datetime]) -> None:
    expr = valid(expr)
    parsed = [AwsCron.parse(text) for text in unix_to_aws(expr)]
    for moment in moments:
        assert any(p.matches(moment) for p in parsed) == croniter.match(expr, moment), moment


@PROPERTY
@given(unix_expressions, starts, st.sampled_from(ZONES))
def test_next_fire_strictly_increases_and_hits_real_first_occurrences(
    expr: str, start: datetime, tz: str
) -> None:
    expr = valid(expr)
    zone = ZoneInfo(tz)
    for text in unix_to_aws(expr):
        parsed = AwsCron.parse(text)
        t: datetime | None = start.replace(tzinfo=UTC)
        previous = t
        for _ in range(25):
            t = next_fire(text, tz, previous)  # type: ignore[arg-type]
            if t is None:
                break
            assert previous is not None and t > previous
            assert t.tzinfo is UTC
            local = t.astimezone(zone)
            assert local.fold == 0 or local.utcoffset() == local.replace(fold=0).utcoffset()
            assert parsed.matches(local.replace(tzinfo=None))
            previous = t


@PROPERTY
@given(
    unix_expressions,
    starts,
    st.sampled_from(ZONES),
    st.sampled_from(["once", "twice"]),
    st.sampled_from(["skip", "shift"]),
)
def test_unix_fire_times_are_strictly_increasing_and_consistent(
    expr: str, start: datetime, tz: str, repeated: str, missing: str
) -> None:
    expr = valid(expr)
    policy = DstPolicy(repeated=repeated, missing=missing)  # type: ignore[arg-type]
    after = start.replace(tzinfo=UTC) + timedelta(seconds=17)
    got = unix_fire_times(expr, tz, after, 40, policy)
    instants = [f.at for f in got]
    assert instants == sorted(set(instants))
    assert all(t > after for t in instants)
    for fire in got:
        # Not ``fire.local == fire.at``: PEP 495 makes a wall time in a repeated hour compare
        # unequal to every instant in another zone, whatever its fold. Convert, then compare.
        assert fire.local.astimezone(UTC) == fire.at and str(fire.local.tzinfo) == tz
        if fire.note is None:
            assert croniter.match(expr, fire.local.replace(tzinfo=None, fold=0))
        assert scheduler_delivers(fire, tz) == (fire.note is None)


@PROPERTY
@given(unix_expressions, starts, st.sampled_from(ZONES))
def test_default_policy_is_exactly_what_eventbridge_delivers(expr: str, start: datetime, tz: str) -> None:
    expr = valid(expr)
    after = start.replace(tzinfo=UTC)
    expected = [f.at for f in unix_fire_times(expr, tz, after, 30)]
    got = [t for t in aws_instants(unix_to_aws(expr), tz, after, 30) if t.year < 2199]
    assert got == expected[: len(got)]
    assert len(got) == len(expected) or got[-1:] == [] or got[-1].year >= 2198


# ----------------------------------------------------------------------------------------------------------
# Every Unix expression is deployed as EventBridge Scheduler schedules that fire exactly when croniter says
# it does (equal-bound ranges read as POSIX does), or refused because it never fires. The oracle
# (tests/cron_oracle.py) runs croniter on the Unix expression and the aws-croniter package on the deployed
# cron(...) expressions, over a year and a day: neither is Rebound's code. Scheduler evaluates cron(...) on
# the wall clock of the schedule's zone, so these wall-clock fires are the same in every zone (what DST does
# to them is the fire engine's, tested above); the zone is drawn so the schedules are planned as a task's.
# ----------------------------------------------------------------------------------------------------------

WINDOW = timedelta(days=366)
firsts = st.dates(min_value=date(2001, 1, 1), max_value=date(2090, 1, 1))


@settings(PROPERTY, max_examples=100)
@given(expressions(posix=True), firsts, st.sampled_from(ZONES))
@example("0 0 31 2 0", date(2027, 1, 1), "UTC")
@example("5-5 * * * *", date(2027, 1, 1), "Europe/London")
@example("59-59/15 * * * *", date(2027, 1, 1), "UTC")
@example("1-1,59/15,55-59/2 * * * *", date(2027, 1, 1), "UTC")
@example("0 0 * JAN-JAN *", date(2027, 1, 1), "America/New_York")
@example("* * * 1-1,12/6,11-12/1 *", date(2027, 1, 1), "UTC")
@example("* * * * *,0", date(2027, 1, 1), "UTC")
@example("0 0 29 2 7-0", date(2027, 6, 1), "UTC")
@example("* * 31 2 *", date(2027, 1, 1), "UTC")
def test_deployed_schedules_fire_exactly_as_croniter_or_it_is_refused(
    expr: str, first: date, zone: str
) -> None:
    last = first + WINDOW
    try:
        validate_unix_cron(expr)
    except CronError as refused:
        # Only an expression that never fires is refused: croniter finds no fire in four years either.
        assert refused.field == "day-of-month" and "never fires" in str(refused), refused
        with contextlib.suppress(CroniterBadDateError):
            assert croniter_fires(expr, first, first + timedelta(days=4 * 366)) == {}
        return
    translation = translate(expr)
    deployed = scheduler_expressions(ScheduleSpec(cron=expr, timezone=zone))
    assert deployed == translation.expressions
    assert all(len(text) <= 256 for text in deployed)
    assert (len(deployed) > 1) <= bool(translation.notes)  # a split is always explained
    unix, aws = croniter_fires(expr, first, last), aws_fires(deployed, first, last)
    assert unix == aws, differences(unix, aws)
