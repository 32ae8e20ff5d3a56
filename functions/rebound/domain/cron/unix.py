"""Unix 5-field cron, what users write under ``schedule.cron``: parsing, validation and its calendar.

Unix semantics are croniter's (the field sets come from ``croniter.expand``): ``*``, ``n``, ``a-b``, ``*/n``,
``a-b/n``, ``n/step`` (= ``n-max/step``), lists, ``JAN-DEC`` / ``SUN-SAT`` names (any case), day-of-week
``0-7`` with both 0 and 7 meaning Sunday, ranges that wrap (``FRI-MON``, ``22-2``), and the day rule: when
day-of-month and day-of-week are both restricted a day matches if **either** matches; when only one is
restricted only that one counts. A field counts as unrestricted when croniter expands it to ``*`` (so ``1-31``
beside a restricted day-of-week is *restricted* and ``0 0 1-31 * MON`` fires every day, as croniter does), and
so does a list with ``*`` in it (``*,0``), which croniter also reads as unrestricted.

One departure from croniter: a range with equal bounds (``5-5``, ``59-59/15``, ``JAN-JAN``, day-of-week
``7-0``) is its one value, as in Vixie cron and POSIX. croniter 7 reads it as the *whole* field (and a list
holding one as ``*``), which would widen the schedule; Rebound rewrites such ranges to the single value
before croniter expands the field.

Deliberate refusals in :func:`validate_unix_cron` (each with an error naming the field):

* 6/7-field expressions (seconds, year) and AWS-only syntax (``?``, ``L``, ``W``, ``#``) - use
  ``schedule.aws``;
* croniter's hash/random extensions (``H``, ``R``) and ``@reboot``;
* expressions that can never fire (``0 0 30 2 *``).

The standard macros ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight`` and
``@hourly`` are accepted and expanded: :func:`validate_unix_cron` returns the 5-field form (``@daily`` ->
``0 0 * * *``).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from croniter import CroniterError, croniter

from rebound.domain.cron.fields import (
    _DOM,
    _DOW,
    _HOUR,
    _MINUTE,
    _MONTH,
    _MONTH_NAMES,
    _TOKEN,
    _UNIX_FIELDS,
    CronError,
    _Calendar,
    _Field,
    _step,
    _value,
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


def _unix_field_text(expr: str, field: _Field, text: str) -> str:
    """Check one field and return it as croniter is to read it: equal-bound ranges become their value."""
    what = "cron expression"
    items: list[str] = []
    for part in text.split(","):
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
        items.append(part)
        if match["star"]:
            continue
        lo = _value(expr, field, match["lo"], what=what)
        if match["hi"] is not None:
            hi = _value(expr, field, match["hi"], what=what)
            sunday_to_sunday = field is _UNIX_FIELDS[_DOW] and lo % 7 == hi % 7 and lo > hi
            if lo == hi or sunday_to_sunday:
                items[-1] = match["lo"]  # a range of one value, whatever its step
    return ",".join(items)


@dataclass(frozen=True)
class _UnixSets:
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int] | None  # None = unrestricted
    months: frozenset[int]
    dows: frozenset[int] | None  # 0 = Sunday .. 6 = Saturday; None = unrestricted


def _expanded(values: list[Any], field: _Field) -> frozenset[int] | None:
    if "*" in values:  # croniter keeps '*' in a list (``*,0``) and reads the field as unrestricted
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
    read = " ".join(_unix_field_text(expr, f, part) for f, part in zip(_UNIX_FIELDS, parts, strict=True))
    try:
        expanded, nth = croniter.expand(read)
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
    if sets.doms is not None and sets.dows is None and not _day_of_month_occurs(sets):
        raise CronError(expr, f"{_days_never_text(sets)}, so it never fires", field="day-of-month")
    return text, sets


def _day_of_month_occurs(sets: _UnixSets) -> bool:
    """Whether some restricted day of the month occurs in some chosen month (February 29 counts)."""
    assert sets.doms is not None
    longest = max(29 if m == 2 else calendar.monthrange(2001, m)[1] for m in sets.months)
    return min(sets.doms) <= longest


def _days_never_text(sets: _UnixSets) -> str:
    """``day(s) 31 never occur in FEB``: why the day-of-month part of ``sets`` never matches."""
    assert sets.doms is not None
    months = ",".join(_MONTH_NAMES[m - 1] for m in sorted(sets.months))
    return f"day(s) {','.join(map(str, sorted(sets.doms)))} never occur in {months}"


def validate_unix_cron(expr: str) -> str:
    """Check a Unix 5-field cron expression (croniter semantics) and return it normalized to single spaces.

    Standard macros are expanded (``@daily`` -> ``0 0 * * *``); ``@reboot``, 6/7-field expressions, AWS-only
    syntax (``?``, ``L``, ``W``, ``#``), hashed values and never-firing expressions raise
    :class:`CronError` naming the field.
    """
    return _parse_unix(expr)[0]


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
