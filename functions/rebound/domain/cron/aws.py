"""EventBridge Scheduler expressions - ``cron(...)``, ``rate(...)`` and ``at(...)`` - parsed and evaluated.

:class:`AwsCron` / :func:`parse_schedule_expression` are an evaluator written from the AWS documentation,
independent of croniter, so that the two cross-check each other.

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
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Literal, cast

from rebound.domain.cron.fields import (
    _AWS_FIELDS,
    _DOM,
    _DOW,
    _HOUR,
    _MINUTE,
    _MONTH,
    _TOKEN,
    _YEAR,
    CronError,
    _Calendar,
    _Field,
    _step,
    _value,
)

AWS_MAX_EXPRESSION_LENGTH = 256
"""CreateSchedule's ``ScheduleExpression`` length limit."""


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
