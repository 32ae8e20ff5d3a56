"""Cron and schedule expressions: Unix cron (what users write) and EventBridge Scheduler (what AWS runs).

Rebound lets users write ordinary Unix 5-field cron (``schedule.cron``) and deploys it as one or more
EventBridge Scheduler ``cron(...)`` expressions evaluated in the task's IANA time zone. This module is the
single place that knows both dialects:

* :func:`validate_unix_cron` - checks a Unix expression (croniter semantics) and names the bad field.
* :func:`unix_to_aws` - the EventBridge Scheduler expressions whose fire times, together, are exactly the Unix
  expression's fire times (as local wall-clock times in the same zone).
* :class:`AwsCron` / :func:`parse_schedule_expression` - an evaluator for ``cron(...)``, ``rate(...)`` and
  ``at(...)`` written from the AWS documentation, independent of croniter, so that the two cross-check each
  other.
* :func:`next_fire` - when EventBridge Scheduler itself fires, with its documented DST behaviour.
* :func:`unix_fire_times` / :func:`fire_times_between` - when *Rebound* promises to fire a Unix expression,
  with a :class:`DstPolicy` saying what happens to wall-clock matches that a DST change removes or repeats,
  and :func:`scheduler_delivers` telling which of those fires EventBridge Scheduler delivers by itself (the
  rest are delivered by Rebound through its run ledger).

EventBridge Scheduler semantics, from the EventBridge Scheduler User Guide, "Schedule types on EventBridge
Scheduler" (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html):

* cron: evaluated on the local wall clock of ``ScheduleExpressionTimezone``. Spring forward: "if a cron
  expression falls on a non-existent date and time, your schedule invocation is skipped". Fall back: "your
  schedule runs only once and does not repeat its invocation"; the worked example says it runs "only once at
  2:30 a.m. *before* the shift occurs" - i.e. at the **first** occurrence of the repeated wall-clock time (the
  earlier UTC instant).
* rate: "you use the StartDate property to set the **first occurrence** of the schedule. If you do not provide
  a StartDate ... your schedule starts invoking the target immediately" - so fires are at ``start``,
  ``start + interval``, ``start + 2*interval``... (the first fire is ``start`` itself, not
  ``start + interval``). Intervals are absolute durations: "``days`` represents a 24-hour duration on the
  clock ... EventBridge Scheduler still evaluates the rate expression 24 hours after the schedule's last
  invocation", so DST never bends a rate.
* at: fires once at that local date and time; StartDate and EndDate are ignored.
* cron syntax (same page): six fields ``minutes hours day-of-month month day-of-week year`` (the year is
  documented as optional); day-of-week is ``1-7`` or ``SUN-SAT`` (1 = Sunday); ``? L W`` in day-of-month,
  ``? L #`` in day-of-week (no ``/`` there); only one ``#`` expression; ``*`` cannot be used in both day
  fields - one of them must be ``?``; year ``1970-2199``. A schedule expression is at most 256 characters
  (CreateSchedule API).

Unix semantics are croniter's (the field sets come from ``croniter.expand``): ``*``, ``n``, ``a-b``, ``*/n``,
``a-b/n``, ``n/step`` (= ``n-max/step``), lists, ``JAN-DEC`` / ``SUN-SAT`` names (any case), day-of-week
``0-7`` with both 0 and 7 meaning Sunday, ranges that wrap (``FRI-MON``, ``22-2``), and the day rule: when
day-of-month and day-of-week are both restricted a day matches if **either** matches; when only one is
restricted only that one counts. A field counts as unrestricted when croniter expands it to ``*`` (so ``1-31``
beside a restricted day-of-week is *restricted* and ``0 0 1-31 * MON`` fires every day, as croniter does).

Deliberate refusals in :func:`validate_unix_cron` (each with an error naming the field):

* 6/7-field expressions (seconds, year) and AWS-only syntax (``?``, ``L``, ``W``, ``#``) - use
  ``schedule.aws``;
* croniter's hash/random extensions (``H``, ``R``) and ``@reboot``;
* ranges with equal bounds (``5-5``, ``MON-MON``, ``7-0``): croniter reads them as the *whole* field, which is
  almost never what was meant;
* expressions that can never fire (``0 0 30 2 *``).

The standard macros ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight`` and
``@hourly`` are accepted and expanded: :func:`validate_unix_cron` returns the 5-field form (``@daily`` ->
``0 0 * * *``).

What AWS cannot express: nothing a valid Unix expression can say, within Scheduler's year range. The OR rule
needs two schedules (one per day field); on a day matched by both, both schedules fire in the same minute, so
the consumer must deduplicate by scheduled minute (Rebound's run ledger does). Expressions longer than 256
characters are split by minute into several disjoint schedules. EventBridge Scheduler has no years after 2199.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

__all__ = [
    "AtExpression",
    "AwsCron",
    "CronError",
    "DstPolicy",
    "FireTime",
    "RateExpression",
    "fire_times_between",
    "next_fire",
    "parse_schedule_expression",
    "scheduler_delivers",
    "unix_fire_times",
    "unix_to_aws",
    "validate_unix_cron",
]

AWS_MAX_EXPRESSION_LENGTH = 256
"""CreateSchedule's ``ScheduleExpression`` length limit."""

AWS_MIN_YEAR = 1970
AWS_MAX_YEAR = 2199

NOTE_SHIFTED = "dst-shifted"
"""A wall-clock match inside a spring-forward gap, delivered at the first valid instant after the gap."""
NOTE_REPEAT = "dst-repeat"
"""The second occurrence of a wall-clock match inside a repeated (fall-back) hour."""


class CronError(ValueError):
    """A schedule expression is invalid or cannot be translated.

    The message names the expression, the field (minute, hour, day-of-month, month, day-of-week, year) when
    one is to blame, and what was wrong. ``expression``, ``field`` and ``problem`` are available as
    attributes.
    """

    def __init__(
        self, expression: str, problem: str, *, field: str | None = None, what: str = "cron expression"
    ) -> None:
        self.expression = expression
        self.field = field
        self.problem = problem
        where = f" ({field} field)" if field else ""
        super().__init__(f"invalid {what} {expression!r}{where}: {problem}")


# ----------------------------------------------------------------------------------------------------------
# Fields
# ----------------------------------------------------------------------------------------------------------

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True)
class _Field:
    name: str
    lo: int
    hi: int
    names: dict[str, int]


_UNIX_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, {name: i + 1 for i, name in enumerate(_MONTH_NAMES)}),
    _Field("day-of-week", 0, 7, {name: i for i, name in enumerate(_DAY_NAMES)}),
)
_AWS_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, {name: i + 1 for i, name in enumerate(_MONTH_NAMES)}),
    _Field("day-of-week", 1, 7, {name: i + 1 for i, name in enumerate(_DAY_NAMES)}),
    _Field("year", AWS_MIN_YEAR, AWS_MAX_YEAR, {}),
)
_MINUTE, _HOUR, _DOM, _MONTH, _DOW, _YEAR = range(6)

_TOKEN = re.compile(
    r"(?:(?P<star>\*)|(?P<lo>[0-9]+|[A-Za-z]+)(?:-(?P<hi>[0-9]+|[A-Za-z]+))?)(?:/(?P<step>[0-9]+))?"
)
_AWS_ONLY_UNIX = re.compile(r"\?|#|[0-9]*L[0-9]*|LW|L-[0-9]+|[0-9]*W[0-9]*", re.IGNORECASE)
_LONE_L_OR_W = re.compile(r"(?<![A-Za-z])[LW](?![A-Za-z])", re.IGNORECASE)
_HASHED = re.compile(r"[HR](\(.*\))?(/.*)?", re.IGNORECASE)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _value(expr: str, field: _Field, text: str, *, what: str) -> int:
    """One value of a field: a number in range or (month, day-of-week) a three-letter name."""
    if text.isdigit():
        value = int(text)
        if not field.lo <= value <= field.hi:
            raise CronError(
                expr, f"{value} is out of range {field.lo}-{field.hi}", field=field.name, what=what
            )
        return value
    if not field.names:
        raise CronError(expr, f"{text!r} is not a number", field=field.name, what=what)
    try:
        return field.names[text.upper()]
    except KeyError:
        allowed = ", ".join(field.names)
        raise CronError(
            expr, f"unknown name {text!r} (expected one of {allowed})", field=field.name, what=what
        ) from None


def _step(expr: str, field: _Field, text: str | None, *, what: str) -> int:
    if text is None:
        return 1
    step = int(text)
    span = 7 if field.name == "day-of-week" else field.hi - field.lo + 1
    if not 1 <= step <= span:
        raise CronError(expr, f"step /{text} must be between 1 and {span}", field=field.name, what=what)
    return step


# ----------------------------------------------------------------------------------------------------------
# Unix cron
# ----------------------------------------------------------------------------------------------------------


def _check_unix_field(expr: str, field: _Field, text: str) -> None:
    what = "cron expression"
    items = text.split(",")
    if len(items) > 1 and "*" in items:
        raise CronError(expr, f"'*' cannot be combined with other values in {text!r}", field=field.name)
    for part in items:
        if not part:
            raise CronError(expr, f"empty item in list {text!r}", field=field.name)
        if _AWS_ONLY_UNIX.fullmatch(part) or _LONE_L_OR_W.search(part) or "#" in part or "?" in part:
            raise CronError(
                expr,
                f"{part!r} is AWS cron syntax (?, L, W and # are not Unix cron); "
                "write AWS expressions under `schedule.aws`",
                field=field.name,
            )
        if _HASHED.fullmatch(part):
            raise CronError(expr, f"hashed/random values ({part!r}) are not supported", field=field.name)
        match = _TOKEN.fullmatch(part)
        if match is None:
            raise CronError(expr, f"cannot read {part!r}", field=field.name)
        _step(expr, field, match["step"], what=what)
        if match["star"]:
            continue
        lo = _value(expr, field, match["lo"], what=what)
        if match["hi"] is not None:
            hi = _value(expr, field, match["hi"], what=what)
            same_day = field is _UNIX_FIELDS[_DOW] and lo % 7 == hi % 7 and lo > hi
            if lo == hi or same_day:
                raise CronError(
                    expr,
                    f"range {part!r} has equal bounds, which croniter reads as the whole field; "
                    "write the single value or '*'",
                    field=field.name,
                )


@dataclass(frozen=True)
class _UnixSets:
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int] | None  # None = unrestricted
    months: frozenset[int]
    dows: frozenset[int] | None  # 0 = Sunday .. 6 = Saturday; None = unrestricted


def _expanded(values: list[Any], field: _Field) -> frozenset[int] | None:
    if values == ["*"]:
        return None
    out = frozenset(int(v) for v in values)
    if field is _UNIX_FIELDS[_DOW]:
        out = frozenset(v % 7 for v in out)
    return out


@lru_cache(maxsize=2048)
def _parse_unix(expr: str) -> tuple[str, _UnixSets]:
    if not isinstance(expr, str):
        raise CronError(repr(expr), "a cron expression must be a string")
    text = " ".join(expr.split())
    if not text:
        raise CronError(expr, "the expression is empty")
    if text.startswith("@"):
        macro = text.lower()
        if macro == "@reboot":
            raise CronError(expr, "@reboot has no meaning for a scheduler")
        if macro not in _MACROS:
            raise CronError(expr, f"unknown macro (expected one of {', '.join(_MACROS)})")
        text = _MACROS[macro]
    if text.lower().startswith(("cron(", "rate(", "at(")):
        raise CronError(expr, "this is an AWS schedule expression; write it under `schedule.aws`")
    parts = text.split(" ")
    if len(parts) != 5:
        extra = " (seconds and year fields are not supported)" if len(parts) in (6, 7) else ""
        raise CronError(
            expr,
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}{extra}; "
            "AWS expressions belong under `schedule.aws`",
        )
    for field, part in zip(_UNIX_FIELDS, parts, strict=True):
        _check_unix_field(expr, field, part)
    try:
        expanded, nth = croniter.expand(text)
    except CroniterError as exc:  # pragma: no cover - the checks above are meant to catch everything first
        raise CronError(expr, f"croniter refused it: {exc}") from exc
    if nth:  # pragma: no cover - '#' is refused above
        raise CronError(expr, "nth-weekday syntax is AWS-only", field="day-of-week")
    fields = cast(list[list[Any]], expanded)
    sets = _UnixSets(
        minutes=_expanded(fields[_MINUTE], _UNIX_FIELDS[_MINUTE]) or frozenset(range(60)),
        hours=_expanded(fields[_HOUR], _UNIX_FIELDS[_HOUR]) or frozenset(range(24)),
        doms=_expanded(fields[_DOM], _UNIX_FIELDS[_DOM]),
        months=_expanded(fields[_MONTH], _UNIX_FIELDS[_MONTH]) or frozenset(range(1, 13)),
        dows=_expanded(fields[_DOW], _UNIX_FIELDS[_DOW]),
    )
    if sets.doms is not None and sets.dows is None:
        longest = max(29 if m == 2 else calendar.monthrange(2001, m)[1] for m in sets.months)
        if min(sets.doms) > longest:
            months = ",".join(_MONTH_NAMES[m - 1] for m in sorted(sets.months))
            raise CronError(
                expr,
                f"day(s) {','.join(map(str, sorted(sets.doms)))} never occur in {months}, so it never fires",
                field="day-of-month",
            )
    return text, sets


def validate_unix_cron(expr: str) -> str:
    """Check a Unix 5-field cron expression (croniter semantics) and return it normalized to single spaces.

    Standard macros are expanded (``@daily`` -> ``0 0 * * *``); ``@reboot``, 6/7-field expressions, AWS-only
    syntax (``?``, ``L``, ``W``, ``#``), hashed values, equal-bound ranges and never-firing expressions raise
    :class:`CronError` naming the field.
    """
    return _parse_unix(expr)[0]


# ----------------------------------------------------------------------------------------------------------
# Calendars: something that can list its matching days of a month and minutes of a day
# ----------------------------------------------------------------------------------------------------------


class _Calendar:
    """Wall-clock matcher: minutes of the day, months, optional years, and matching days per month
    (cached)."""

    minutes_of_day: tuple[int, ...]
    months: tuple[int, ...]
    years: frozenset[int] | None
    last_year: int | None

    def _init_calendar(
        self,
        minutes: Iterable[int],
        hours: Iterable[int],
        months: Iterable[int],
        years: frozenset[int] | None,
    ) -> None:
        mins = sorted(minutes)
        self.minutes_of_day = tuple(h * 60 + m for h in sorted(hours) for m in mins)
        self.months = tuple(sorted(months))
        self.years = years
        self.last_year = max(years) if years is not None else None
        self._minute_set = frozenset(mins)
        self._hour_set = frozenset(hours)
        self._day_cache: dict[tuple[int, int], tuple[int, ...]] = {}

    def _compute_days(self, year: int, month: int) -> tuple[int, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def days(self, year: int, month: int) -> tuple[int, ...]:
        key = (year, month)
        cached = self._day_cache.get(key)
        if cached is None:
            if len(self._day_cache) > 8192:
                self._day_cache.clear()
            cached = self._day_cache[key] = self._compute_days(year, month)
        return cached

    def _matches_wall(self, local: datetime) -> bool:
        if self.years is not None and local.year not in self.years:
            return False
        return (
            local.minute in self._minute_set
            and local.hour in self._hour_set
            and local.month in self.months
            and local.day in self.days(local.year, local.month)
        )


class _UnixCalendar(_Calendar):
    def __init__(self, sets: _UnixSets) -> None:
        self._init_calendar(sets.minutes, sets.hours, sets.months, None)
        self._doms = sets.doms
        self._dows = sets.dows

    def _compute_days(self, year: int, month: int) -> tuple[int, ...]:
        first_weekday, last = calendar.monthrange(year, month)  # Monday = 0
        doms, dows = self._doms, self._dows
        out = []
        for day in range(1, last + 1):
            cron_dow = (first_weekday + day) % 7  # Sunday = 0
            if doms is not None and dows is not None:
                hit = day in doms or cron_dow in dows
            elif doms is not None:
                hit = day in doms
            elif dows is not None:
                hit = cron_dow in dows
            else:
                hit = True
            if hit:
                out.append(day)
        return tuple(out)


@lru_cache(maxsize=2048)
def _unix_calendar(expr: str) -> _UnixCalendar:
    return _UnixCalendar(_parse_unix(expr)[1])


# ----------------------------------------------------------------------------------------------------------
# EventBridge Scheduler cron(...)
# ----------------------------------------------------------------------------------------------------------

_AWS_WHAT = "AWS cron expression"
_CRON_BODY = re.compile(r"\s*cron\((?P<body>.*)\)\s*", re.DOTALL)


def _aws_values(expr: str, field: _Field, text: str, *, allow_step: bool) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(expr, f"empty item in list {text!r}", field=field.name, what=_AWS_WHAT)
        match = _TOKEN.fullmatch(part)
        if match is None:
            raise CronError(expr, f"cannot read {part!r}", field=field.name, what=_AWS_WHAT)
        if match["step"] is not None and not allow_step:
            raise CronError(expr, f"'/' is not allowed here ({part!r})", field=field.name, what=_AWS_WHAT)
        step = _step(expr, field, match["step"], what=_AWS_WHAT)
        if match["star"]:
            lo, hi = field.lo, field.hi
        else:
            lo = _value(expr, field, match["lo"], what=_AWS_WHAT)
            if match["hi"] is not None:
                hi = _value(expr, field, match["hi"], what=_AWS_WHAT)
                if hi < lo:
                    raise CronError(expr, f"range {part!r} runs backwards", field=field.name, what=_AWS_WHAT)
            else:
                hi = field.hi if match["step"] is not None else lo
        out.update(range(lo, hi + 1, step))
    return frozenset(out)


_DomKind = Literal["any", "set", "last", "last-weekday", "nearest-weekday"]
_DowKind = Literal["any", "set", "last-of", "nth"]


class AwsCron(_Calendar):
    """An EventBridge Scheduler ``cron(minutes hours day-of-month month day-of-week year)`` expression.

    Written from the AWS documentation, independently of croniter. Supports ``*``, values, names, ranges,
    lists, steps (``0/15``, ``*/15``, ``10-40/10``; not in day-of-week), ``L`` (last day of month; alone in
    day-of-week = Saturday; ``6L`` = last Friday), ``W`` (``15W`` = weekday nearest the 15th without leaving
    the month, ``LW`` = last weekday), ``#`` (``2#1`` = first Monday; only one ``#`` expression), and the year
    field (1970-2199; optional, ``*`` when omitted). Exactly one of day-of-month and day-of-week must be
    ``?``.
    """

    expression: str
    fields: tuple[str, ...]

    def __init__(self, expression: str, fields: Sequence[str]) -> None:
        self.expression = expression
        self.fields = tuple(fields)
        minute, hour, dom, month, dow, year = self.fields
        self._dom_kind: _DomKind = "any"
        self._dow_kind: _DowKind = "any"
        self._dom_values: frozenset[int] = frozenset()
        self._dow_values: frozenset[int] = frozenset()
        self._dom_n = 0
        self._dow_n = 0
        self._dow_day = 0
        if (dom == "?") == (dow == "?"):
            problem = (
                "day-of-month and day-of-week are both '?'; exactly one of them must be '?'"
                if dom == "?"
                else "one of day-of-month and day-of-week must be '?' (AWS cannot restrict both, "
                "and '*' in both is not allowed)"
            )
            raise CronError(expression, problem, what=_AWS_WHAT)
        if dom != "?":
            self._parse_dom(dom)
        if dow != "?":
            self._parse_dow(dow)
        years = _aws_values(expression, _AWS_FIELDS[_YEAR], year, allow_step=True)
        self._init_calendar(
            _aws_values(expression, _AWS_FIELDS[_MINUTE], minute, allow_step=True),
            _aws_values(expression, _AWS_FIELDS[_HOUR], hour, allow_step=True),
            _aws_values(expression, _AWS_FIELDS[_MONTH], month, allow_step=True),
            years,
        )

    def _parse_dom(self, text: str) -> None:
        field = _AWS_FIELDS[_DOM]
        upper = text.upper()
        if upper == "L":
            self._dom_kind = "last"
        elif upper == "LW":
            self._dom_kind = "last-weekday"
        elif re.fullmatch(r"[0-9]+W", upper):
            self._dom_kind = "nearest-weekday"
            self._dom_n = _value(self.expression, field, upper[:-1], what=_AWS_WHAT)
        elif re.search(r"[LW]", upper):
            raise CronError(
                self.expression,
                f"{text!r}: L, LW and nW must stand alone (no lists, ranges or offsets)",
                field=field.name,
                what=_AWS_WHAT,
            )
        else:
            self._dom_kind = "set"
            self._dom_values = _aws_values(self.expression, field, text, allow_step=True)

    def _parse_dow(self, text: str) -> None:
        field = _AWS_FIELDS[_DOW]
        upper = text.upper()
        if "#" in upper:
            match = re.fullmatch(r"([0-9]+|[A-Z]+)#([0-9]+)", upper)
            if match is None:
                raise CronError(
                    self.expression,
                    f"{text!r}: '#' takes one day and an occurrence, e.g. 2#1, and only one '#' expression "
                    "is allowed",
                    field=field.name,
                    what=_AWS_WHAT,
                )
            self._dow_kind = "nth"
            self._dow_day = _value(self.expression, field, match[1], what=_AWS_WHAT)
            self._dow_n = int(match[2])
            if not 1 <= self._dow_n <= 5:
                raise CronError(
                    self.expression,
                    f"{text!r}: the occurrence after '#' must be 1-5",
                    field=field.name,
                    what=_AWS_WHAT,
                )
        elif upper == "L":
            self._dow_kind = "set"
            self._dow_values = frozenset({7})  # 'L' alone = the last day of the week, Saturday
        elif upper.endswith("L"):
            self._dow_kind = "last-of"
            day_text = upper[:-1]
            if not re.fullmatch(r"[0-9]+|[A-Z]+", day_text):
                raise CronError(
                    self.expression,
                    f"{text!r}: 'nL' takes a single day, e.g. 6L (last Friday)",
                    field=field.name,
                    what=_AWS_WHAT,
                )
            self._dow_day = _value(self.expression, field, day_text, what=_AWS_WHAT)
        else:
            self._dow_kind = "set"
            self._dow_values = _aws_values(self.expression, field, text, allow_step=False)

    @classmethod
    def parse(cls, expr: str) -> AwsCron:
        """Parse ``cron(...)``; raises :class:`CronError` naming the field on bad input."""
        return _parse_aws_cron(expr)

    def matches(self, local: datetime) -> bool:
        """Whether the naive local wall-clock ``local`` (minute resolution) is a fire time."""
        return self._matches_wall(local)

    def _compute_days(self, year: int, month: int) -> tuple[int, ...]:
        first_weekday, last = calendar.monthrange(year, month)  # Monday = 0
        if self._dom_kind != "any":
            return self._dom_days(year, month, first_weekday, last)
        return self._dow_days(first_weekday, last)

    def _dom_days(self, year: int, month: int, first_weekday: int, last: int) -> tuple[int, ...]:
        kind = self._dom_kind
        if kind == "set":
            return tuple(d for d in sorted(self._dom_values) if d <= last)
        if kind == "last":
            return (last,)
        target = last if kind == "last-weekday" else self._dom_n
        if target > last:
            return ()
        weekday = (first_weekday + target - 1) % 7
        if weekday == 5:  # Saturday: the Friday before, unless that leaves the month
            return (target - 1,) if target > 1 else (target + 2,)
        if weekday == 6:  # Sunday: the Monday after, unless that leaves the month
            return (target + 1,) if target < last else (target - 2,)
        return (target,)

    def _dow_days(self, first_weekday: int, last: int) -> tuple[int, ...]:
        def aws_dow(day: int) -> int:  # 1 = Sunday .. 7 = Saturday
            return (first_weekday + day) % 7 + 1

        kind = self._dow_kind
        if kind == "set":
            return tuple(d for d in range(1, last + 1) if aws_dow(d) in self._dow_values)
        first = 1 + (self._dow_day - aws_dow(1)) % 7
        if kind == "nth":
            day = first + 7 * (self._dow_n - 1)
            return (day,) if day <= last else ()
        return (first + 7 * ((last - first) // 7),)  # last-of

    def __str__(self) -> str:
        return self.expression

    def __repr__(self) -> str:
        return f"AwsCron({self.expression!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AwsCron) and other.fields == self.fields

    def __hash__(self) -> int:
        return hash(self.fields)


@lru_cache(maxsize=2048)
def _parse_aws_cron(expr: str) -> AwsCron:
    match = _CRON_BODY.fullmatch(expr) if isinstance(expr, str) else None
    if match is None:
        raise CronError(
            str(expr), "expected cron(minutes hours day-of-month month day-of-week year)", what=_AWS_WHAT
        )
    fields = match["body"].split()
    if len(fields) == 5:
        fields.append("*")
    if len(fields) != 6:
        raise CronError(
            expr,
            f"expected 6 fields (minutes hours day-of-month month day-of-week year), got {len(fields)}",
            what=_AWS_WHAT,
        )
    return AwsCron(f"cron({' '.join(fields)})", fields)


# ----------------------------------------------------------------------------------------------------------
# rate(...) and at(...)
# ----------------------------------------------------------------------------------------------------------

_RATE = re.compile(r"\s*rate\((?P<value>[^ ]*) (?P<unit>[^ ]*)\)\s*")
_AT = re.compile(r"\s*at\((?P<when>[^)]*)\)\s*")
_RATE_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class RateExpression:
    """``rate(value unit)``: every ``interval``, counted from the schedule's StartDate (the first fire)."""

    expression: str
    value: int
    unit: Literal["minutes", "hours", "days"]

    @property
    def interval(self) -> timedelta:
        return timedelta(seconds=self.value * _RATE_SECONDS[self.unit[:-1]])

    def next_after(self, after: datetime, start: datetime) -> datetime:
        """First of ``start``, ``start + interval``, ... strictly after ``after`` (absolute time, no DST)."""
        if after < start:
            return start
        periods = (after - start) // self.interval + 1
        return start + periods * self.interval


@dataclass(frozen=True)
class AtExpression:
    """``at(yyyy-mm-ddThh:mm:ss)``: once, at that local wall-clock time (no zone) in the schedule's zone."""

    expression: str
    local: datetime  # naive


@lru_cache(maxsize=2048)
def parse_schedule_expression(expr: str) -> AwsCron | RateExpression | AtExpression:
    """Parse an EventBridge Scheduler expression: ``cron(...)``, ``rate(...)`` or ``at(...)``."""
    what = "schedule expression"
    if not isinstance(expr, str):
        raise CronError(repr(expr), "a schedule expression must be a string", what=what)
    head = expr.strip()
    if head.startswith("cron("):
        return _parse_aws_cron(expr)
    if head.startswith("rate("):
        match = _RATE.fullmatch(expr)
        if match is None:
            raise CronError(expr, "expected rate(value unit), e.g. rate(5 minutes)", what=what)
        value_text, unit = match["value"], match["unit"]
        if not value_text.isdigit() or int(value_text) < 1:
            raise CronError(expr, f"the value {value_text!r} must be a positive integer", what=what)
        value = int(value_text)
        base = unit[:-1] if unit.endswith("s") else unit
        if base not in _RATE_SECONDS:
            raise CronError(expr, f"unknown unit {unit!r} (expected minute(s), hour(s) or day(s))", what=what)
        if value == 1 and unit != base:
            raise CronError(expr, f"a value of 1 takes the singular unit {base!r}", what=what)
        if value > 1 and unit == base:
            raise CronError(expr, f"a value above 1 takes the plural unit {base + 's'!r}", what=what)
        plural = cast(Literal["minutes", "hours", "days"], base + "s")
        return RateExpression(expression=f"rate({value} {unit})", value=value, unit=plural)
    if head.startswith("at("):
        match = _AT.fullmatch(expr)
        try:
            if match is None or not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", match["when"]):
                raise ValueError("bad format")
            when = datetime.strptime(match["when"], "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            raise CronError(
                expr, "expected at(yyyy-mm-ddThh:mm:ss) - a local date and time without a zone", what=what
            ) from None
        return AtExpression(expression=f"at({match['when']})", local=when)
    raise CronError(expr, "expected cron(...), rate(...) or at(...)", what=what)


# ----------------------------------------------------------------------------------------------------------
# Unix -> AWS translation
# ----------------------------------------------------------------------------------------------------------


def _aws_field_text(
    values: Iterable[int], lo: int, hi: int, *, steps: bool, names: Sequence[str] = ()
) -> str:
    """The plain AWS text for exactly ``values``: ``*``, ``a/n``, or a list of values and ranges."""
    vals = sorted(set(values))
    if vals == list(range(lo, hi + 1)):
        return "*"

    def show(v: int) -> str:
        return names[v - lo] if names else str(v)

    if steps and len(vals) >= 3:
        step = vals[1] - vals[0]
        if step > 1 and vals == list(range(vals[0], hi + 1, step)):
            return f"{vals[0]}/{step}"
    items: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        if j - i >= 2:
            items.append(f"{show(vals[i])}-{show(vals[j])}")
        else:
            items.extend(show(v) for v in vals[i : j + 1])
        i = j + 1
    return ",".join(items)


def _assemble(minutes: Sequence[int], rest: str) -> list[str]:
    """``cron(minutes rest)``, split by minute into disjoint expressions while too long for AWS."""
    text = f"cron({_aws_field_text(minutes, 0, 59, steps=True)} {rest})"
    if len(text) <= AWS_MAX_EXPRESSION_LENGTH:
        return [text]
    if len(minutes) == 1:  # pragma: no cover - the other fields are far shorter than the limit
        raise CronError(text, "too long for EventBridge Scheduler", what="translated expression")
    half = len(minutes) // 2
    return _assemble(minutes[:half], rest) + _assemble(minutes[half:], rest)


def unix_to_aws(expr: str) -> list[str]:
    """EventBridge Scheduler expressions whose fire times, together, are exactly those of the Unix ``expr``.

    Fire times are compared as local wall-clock times in the same zone. Usually one expression; two when both
    day-of-month and day-of-week are restricted (croniter's OR rule): ``cron(.. DOM .. ? *)`` and
    ``cron(.. ? .. DOW *)``. On a day matched by both, both schedules fire in the same minute - deduplicate by
    scheduled minute. Day-of-week is rendered with names (``MON-FRI``), other fields with numbers. Raises
    :class:`CronError` for invalid input (see :func:`validate_unix_cron`); a valid expression is always
    translatable (very long field lists are split by minute into several disjoint expressions).
    """
    sets = _parse_unix(expr)[1]
    minutes = sorted(sets.minutes)
    hours = _aws_field_text(sets.hours, 0, 23, steps=True)
    months = _aws_field_text(sets.months, 1, 12, steps=True)
    doms, dows = sets.doms, sets.dows
    if doms is not None and dows is not None and (len(doms) == 31 or len(dows) == 7):
        doms = dows = None  # one side matches every day, so their union does too
    day_fields: list[tuple[str, str]] = []
    if doms is not None:
        day_fields.append((_aws_field_text(doms, 1, 31, steps=True), "?"))
    if dows is not None:
        day_fields.append(("?", _aws_field_text((d + 1 for d in dows), 1, 7, steps=False, names=_DAY_NAMES)))
    if not day_fields:
        day_fields.append(("*", "?"))
    out: list[str] = []
    for dom_text, dow_text in day_fields:
        out.extend(_assemble(minutes, f"{hours} {dom_text} {months} {dow_text} *"))
    return out


# ----------------------------------------------------------------------------------------------------------
# Fire times
# ----------------------------------------------------------------------------------------------------------


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
    """All fires of the Unix ``expr`` in ``(start, end]`` (aware), same rules as :func:`unix_fire_times`."""
    cal = _unix_calendar(expr)
    zone = _zone(tz)
    stop = _utc_naive(end, "end")
    out: list[FireTime] = []
    for instant, note in _stream(cal, zone, _utc_naive(start, "start"), dst):
        if instant > stop:
            break
        out.append(_fire(instant, zone, note))
    return out


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
