"""Unix cron -> EventBridge Scheduler: :func:`unix_to_aws` and the field rendering it needs.

What AWS cannot express: nothing a valid Unix expression can say, within Scheduler's year range. The OR rule
needs two schedules (one per day field); on a day matched by both, both schedules fire in the same minute, so
the consumer must deduplicate by scheduled minute (Rebound's run ledger does). A day-of-month part that never
occurs in the chosen months (``31`` in ``FEB``) gets no schedule. Expressions longer than 256 characters are
split by minute into several disjoint schedules. EventBridge Scheduler has no years after 2199.
:func:`translate` also says, in :attr:`Translation.notes`, why the day fields became two schedules or one
was left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rebound.domain.cron.aws import AWS_MAX_EXPRESSION_LENGTH
from rebound.domain.cron.fields import _DAY_NAMES, CronError
from rebound.domain.cron.unix import _day_of_month_occurs, _days_never_text, _parse_unix


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


@dataclass(frozen=True)
class Translation:
    """The Scheduler expressions of one Unix expression, and why there are not exactly one (empty if so)."""

    expressions: list[str]
    notes: list[str]


def unix_to_aws(expr: str) -> list[str]:
    """EventBridge Scheduler expressions whose fire times, together, are exactly those of the Unix ``expr``.

    Fire times are compared as local wall-clock times in the same zone. Usually one expression; two when both
    day-of-month and day-of-week are restricted (croniter's OR rule): ``cron(.. DOM .. ? *)`` and
    ``cron(.. ? .. DOW *)``, unless the day-of-month part never occurs (``31`` in ``FEB``) and is left out.
    On a day matched by both, both schedules fire in the same minute - deduplicate by scheduled minute.
    Day-of-week is rendered with names (``MON-FRI``), other fields with numbers. Raises :class:`CronError`
    for invalid input (see :func:`validate_unix_cron`); a valid expression is always translatable (very long
    field lists are split by minute into several disjoint expressions).
    """
    return translate(expr).expressions


def translate(expr: str) -> Translation:
    """:func:`unix_to_aws`, with a note when the day fields became two schedules or one was left out."""
    sets = _parse_unix(expr)[1]
    minutes = sorted(sets.minutes)
    hours = _aws_field_text(sets.hours, 0, 23, steps=True)
    months = _aws_field_text(sets.months, 1, 12, steps=True)
    doms, dows = sets.doms, sets.dows
    notes: list[str] = []
    if doms is not None and dows is not None and (len(doms) == 31 or len(dows) == 7):
        doms = dows = None  # one side matches every day, so their union does too
    if doms is not None and dows is not None and not _day_of_month_occurs(sets):
        notes.append(
            f"day-of-month and day-of-week are both restricted, so Unix cron fires on a day matching either; "
            f"{_days_never_text(sets)}, so only the day-of-week part is scheduled"
        )
        doms = None
    elif doms is not None and dows is not None:
        notes.append(
            "day-of-month and day-of-week are both restricted, so Unix cron fires on a day matching either; "
            "EventBridge Scheduler takes one of them per schedule, so there is one schedule for each, and a "
            "minute both match runs once"
        )
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
    return Translation(out, notes)
