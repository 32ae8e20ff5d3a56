"""What the cron dialects share: :class:`CronError`, field descriptions and values, and calendars.

A :class:`_Field` describes one field of an expression (its name, range and names); ``_UNIX_FIELDS``
and ``_AWS_FIELDS`` are the two dialects' fields, in order (indexed by ``_MINUTE`` .. ``_YEAR``);
:func:`_value` and :func:`_step` read one value or step of a field, naming the field when it is wrong. A
:class:`_Calendar` is a wall-clock matcher that lists the matching minutes of a day and days of a month; the
Unix calendar (``unix.py``) and :class:`~rebound.domain.cron.aws.AwsCron` (``aws.py``) are calendars, and
the fire-time streams (``fires.py``) walk any calendar.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


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


AWS_MIN_YEAR = 1970
AWS_MAX_YEAR = 2199
"""EventBridge Scheduler's year range."""

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True)
class _Field:
    name: str
    lo: int
    hi: int
    names: dict[str, int]


_MINUTE, _HOUR, _DOM, _MONTH, _DOW, _YEAR = range(6)

_SHARED_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, {name: i + 1 for i, name in enumerate(_MONTH_NAMES)}),
)
"""The first four fields, the same in both dialects; day-of-week (and AWS's year) follow."""

_UNIX_FIELDS = (
    *_SHARED_FIELDS,
    _Field("day-of-week", 0, 7, {name: i for i, name in enumerate(_DAY_NAMES)}),
)
"""Unix: day-of-week 0-7, 0 and 7 = Sunday."""

_AWS_FIELDS = (
    *_SHARED_FIELDS,
    _Field("day-of-week", 1, 7, {name: i + 1 for i, name in enumerate(_DAY_NAMES)}),
    _Field("year", AWS_MIN_YEAR, AWS_MAX_YEAR, {}),
)
"""EventBridge Scheduler: day-of-week 1-7, 1 = Sunday, and a year field."""

_TOKEN = re.compile(
    r"(?:(?P<star>\*)|(?P<lo>[0-9]+|[A-Za-z]+)(?:-(?P<hi>[0-9]+|[A-Za-z]+))?)(?:/(?P<step>[0-9]+))?"
)


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
