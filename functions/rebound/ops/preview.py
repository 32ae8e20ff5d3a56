"""When a task fires next, in its own time zone, with daylight-saving changes called out.

A Unix cron task follows its DST policy (``schedule.dst``, see ``rebound.domain.cron``). By default
that is EventBridge Scheduler's own behaviour: a local time that does not exist (spring forward) is
skipped, and a local time that happens twice (fall back) fires once, the first time. With
``missing: shift`` the skipped time runs at the first valid instant after the gap, and with
``repeated: twice`` the repeated time runs a second time; Scheduler does not send those fires,
Rebound's run ledger does, and the preview marks them (``dst-shifted``, ``dst-repeated``).

The preview lists the fires and, between them, the wall-clock matches that will *not* fire under
the task's policy (``fires: false``), and marks the first fire after each offset change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from rebound.domain import cron
from rebound.domain.errors import ValidationFailed
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.domain.schedules import scheduler_expressions
from rebound.domain.timefmt import iso

SKIPPED = "dst-skipped"
"""The local time falls in the hour that a spring-forward change removes: Scheduler skips it."""
NOT_REPEATED = "dst-not-repeated"
"""The local time happens twice at a fall-back change: Scheduler fires the first one only."""
SHIFTED = "dst-shifted"
"""Policy ``missing: shift``: the local time does not exist; it fires at the first valid instant
after the gap, delivered by the run ledger."""
REPEATED = "dst-repeated"
"""Policy ``repeated: twice``: the second occurrence of a repeated local time, delivered by the
run ledger."""
MAX_PREVIEW = 1000


@dataclass(frozen=True)
class PreviewFire:
    at: datetime
    local: datetime
    fires: bool = True
    note: str | None = None
    dst_change: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "local": self.local.isoformat(),
            "utc_offset": _offset_text(self.local),
            "fires": self.fires,
            "note": self.note,
            "dst_change": self.dst_change,
        }


def _offset_text(local: datetime) -> str:
    offset = local.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _mark_offset_changes(rows: list[PreviewFire], after: datetime, zone: ZoneInfo) -> list[PreviewFire]:
    previous = _offset_text(after.astimezone(zone))
    marked: list[PreviewFire] = []
    for row in rows:
        current = _offset_text(row.local)
        change = f"{previous} -> {current}" if current != previous else None
        marked.append(PreviewFire(row.at, row.local, row.fires, row.note, change) if change else row)
        previous = current
    return marked


def preview_fires(
    spec: ScheduleSpec, after: datetime, count: int, *, rate_start: datetime | None = None
) -> list[PreviewFire]:
    """The next ``count`` fires strictly after ``after``, plus the matches DST keeps from firing."""
    if not 1 <= count <= MAX_PREVIEW:
        raise ValidationFailed(f"--count must be between 1 and {MAX_PREVIEW}", key_path="count")
    zone = ZoneInfo(spec.timezone)
    if spec.cron is not None:
        policy = cron.DstPolicy(repeated=spec.dst.repeated, missing=spec.dst.missing)
        rows = _unix_rows(spec.cron, spec.timezone, after, count, policy)
    else:
        rows = _scheduler_rows(scheduler_expressions(spec)[0], spec.timezone, after, count, rate_start)
    rows = [row for row in rows if spec.fires_at(row.at)]  # nothing after the schedule's end
    return _mark_offset_changes(rows, after, zone)


def _unix_rows(expr: str, tz: str, after: datetime, count: int, policy: cron.DstPolicy) -> list[PreviewFire]:
    fires = cron.unix_fire_times(expr, tz, after, count, policy)
    fired = {cron.NOTE_SHIFTED: SHIFTED, cron.NOTE_REPEAT: REPEATED}
    rows = [PreviewFire(f.at, f.local, note=fired.get(f.note) if f.note else None) for f in fires]
    if not fires:
        return rows
    # Every wall-clock match, repeated and missing ones included, over the same span: those the
    # policy does not fire are listed as not firing.
    everything = cron.fire_times_between(
        expr, tz, after, fires[-1].at, cron.DstPolicy(repeated="twice", missing="shift")
    )
    dropped = {cron.NOTE_SHIFTED: SKIPPED, cron.NOTE_REPEAT: NOT_REPEATED}
    firing = {r.at for r in rows}
    rows += [
        PreviewFire(f.at, f.local, fires=False, note=dropped[f.note])
        for f in everything
        if f.note in dropped and f.at not in firing
    ]
    return sorted(rows, key=lambda r: (r.at, r.fires))


def _scheduler_rows(
    expression: str, tz: str, after: datetime, count: int, rate_start: datetime | None
) -> list[PreviewFire]:
    zone = ZoneInfo(tz)
    rows: list[PreviewFire] = []
    cursor = after
    start = rate_start or after
    while len(rows) < count:
        nxt = cron.next_fire(expression, tz, cursor, start=start)
        if nxt is None:
            break
        rows.append(PreviewFire(nxt, nxt.astimezone(zone)))
        cursor = nxt
    return rows
