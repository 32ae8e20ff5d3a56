"""An oracle for the Unix -> EventBridge Scheduler translation, independent of Rebound's own evaluators.

The Unix side is croniter's ``get_next``; the AWS side is the ``aws-croniter`` package's ``get_next``, an
evaluator of AWS cron written by others from the AWS documentation. Neither touches ``rebound.domain.cron``.

A cron expression (either dialect, without ``L``, ``W`` or ``#``) fires at minute ``m`` of hour ``h`` on
day ``d`` exactly when ``m``, ``h`` and ``d`` each match: its fires are days x hours x minutes. So the fires
over a window are found by stepping each evaluator through the *days* of the window (the expression with
minute and hour set to ``0``), the hours of a day and the minutes of an hour. That is exact, and fast enough
to compare years of an every-minute expression.

croniter 7 reads a range with equal bounds (``5-5``, ``59-59/15``, ``JAN-JAN``, day-of-week ``7-0``) as the
whole field, and a list holding one as ``*``. Vixie cron and POSIX read it as its one value, and so does
Rebound; :func:`posix_text` rewrites such ranges before croniter sees the expression, so that the oracle
checks that meaning and a schedule is never silently widened.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from aws_croniter import AwsCroniter
from croniter import croniter

Fires = dict[date, frozenset[tuple[int, int]]]
"""Fires over a window: for each day that fires, its (hour, minute) pairs."""

_MONTHS = {name.upper(): number for number, name in enumerate(calendar.month_abbr) if name}
_DAYS = {n: i for i, n in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
_RANGE = re.compile(r"(?P<a>\w+)-(?P<b>\w+)(?:/\d+)?")


def posix_text(expr: str) -> str:
    """``expr`` with each equal-bound range written as its value (see the module's note on croniter)."""
    fields = expr.split()
    names: list[dict[str, int]] = [{}, {}, {}, _MONTHS, _DAYS]
    for index, names_of_field in enumerate(names):
        items = fields[index].split(",")
        for k, item in enumerate(items):
            found = _RANGE.fullmatch(item)
            if found is None:
                continue
            a, b = (int(names_of_field.get(x.upper(), x)) for x in (found["a"], found["b"]))
            if a == b or (index == 4 and a > b and a % 7 == b % 7):
                items[k] = found["a"]
        fields[index] = ",".join(items)
    return " ".join(fields)


def _croniter_walk(expr: str, start: datetime, end: datetime) -> list[datetime]:
    it = croniter(expr, start - timedelta(minutes=1))
    out: list[datetime] = []
    while (nxt := it.get_next(datetime)) < end:
        out.append(nxt)
    return out


def _aws_walk(expr: str, start: datetime, end: datetime) -> list[datetime]:
    walk = AwsCroniter(expr).get_all_schedule_bw_dates(start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))
    return [t.replace(tzinfo=None) for t in walk if t < end.replace(tzinfo=UTC)]


def _times(walk: Iterable[datetime], base: datetime) -> set[int]:
    return {(t - base) // timedelta(minutes=1) for t in walk}


def croniter_fires(expr: str, first: date, last: date) -> Fires:
    """croniter's fires of the Unix ``expr`` (read as POSIX, see :func:`posix_text`) on days first..last."""
    minute, hour, *days = posix_text(expr).split()
    start, end = datetime.combine(first, datetime.min.time()), datetime.combine(last, datetime.min.time())
    end += timedelta(days=1)
    fire_days = {t.date() for t in _croniter_walk(" ".join(["0", "0", *days]), start, end)}
    day0 = datetime(2001, 1, 1)
    hours = _times(_croniter_walk(f"0 {hour} * * *", day0, day0 + timedelta(days=1)), day0)
    minutes = _times(_croniter_walk(f"{minute} 0 * * *", day0, day0 + timedelta(hours=1)), day0)
    times = frozenset((h // 60, m) for h in hours for m in minutes)
    return dict.fromkeys(sorted(fire_days), times) if times else {}


def aws_fires(expressions: Iterable[str], first: date, last: date) -> Fires:
    """The union of the fires of EventBridge Scheduler ``cron(...)`` expressions on days first..last, by
    aws-croniter."""
    start, end = datetime.combine(first, datetime.min.time()), datetime.combine(last, datetime.min.time())
    end += timedelta(days=1)
    union: dict[date, set[tuple[int, int]]] = {}
    day0 = datetime(2001, 1, 1)
    for text in expressions:
        assert text.startswith("cron(") and text.endswith(")"), text
        minute, hour, dom, month, dow, year = text[len("cron(") : -1].split(" ")
        days = {t.date() for t in _aws_walk(f"0 0 {dom} {month} {dow} {year}", start, end)}
        hours = _times(_aws_walk(f"0 {hour} * * ? *", day0, day0 + timedelta(days=1)), day0)
        minutes = _times(_aws_walk(f"{minute} 0 * * ? *", day0, day0 + timedelta(hours=1)), day0)
        times = {(h // 60, m) for h in hours for m in minutes}
        for day in days:
            union.setdefault(day, set()).update(times)
    return {day: frozenset(times) for day, times in sorted(union.items()) if times}


def differences(unix: Fires, aws: Fires, limit: int = 5) -> list[str]:
    """Up to ``limit`` days on which the two disagree, each saying how, for an assertion message."""
    out = []
    for day in sorted(set(unix) | set(aws)):
        want, got = unix.get(day, frozenset()), aws.get(day, frozenset())
        if want != got:
            out.append(f"{day}: croniter only {sorted(want - got)[:4]}, AWS only {sorted(got - want)[:4]}")
        if len(out) >= limit:
            break
    return out
