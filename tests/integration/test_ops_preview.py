"""Fire-time previews in the task's time zone, with DST changes marked, for every schedule kind."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rebound.domain.errors import ValidationFailed
from rebound.domain.schedule_spec import ScheduleSpec
from rebound.ops.preview import NOT_REPEATED, REPEATED, SHIFTED, SKIPPED, preview_fires

pytestmark = pytest.mark.unit


def rows(spec: dict[str, object], after: str, count: int) -> list[tuple[str, bool, str | None, str | None]]:
    fires = preview_fires(ScheduleSpec.model_validate(spec), datetime.fromisoformat(after), count)
    return [(f.local.isoformat(), f.fires, f.note, f.dst_change) for f in fires]


def test_new_york_spring_forward_skips_the_missing_hour() -> None:
    assert rows({"cron": "30 2 * * *", "timezone": "America/New_York"}, "2026-03-07T12:00:00+00:00", 2) == [
        ("2026-03-08T03:00:00-04:00", False, SKIPPED, "UTC-05:00 -> UTC-04:00"),
        ("2026-03-09T02:30:00-04:00", True, None, None),
        ("2026-03-10T02:30:00-04:00", True, None, None),
    ]


def test_fall_back_fires_the_repeated_time_once() -> None:
    assert rows({"cron": "30 1 * * *", "timezone": "America/New_York"}, "2026-10-31T12:00:00+00:00", 2) == [
        ("2026-11-01T01:30:00-04:00", True, None, None),
        ("2026-11-01T01:30:00-05:00", False, NOT_REPEATED, "UTC-04:00 -> UTC-05:00"),
        ("2026-11-02T01:30:00-05:00", True, None, None),
    ]


def test_hourly_fires_mark_the_change_once() -> None:
    fires = rows({"cron": "0 * * * *", "timezone": "Europe/Berlin"}, "2026-03-29T00:30:00+00:00", 3)
    assert fires == [
        ("2026-03-29T03:00:00+02:00", True, None, "UTC+01:00 -> UTC+02:00"),
        ("2026-03-29T04:00:00+02:00", True, None, None),
        ("2026-03-29T05:00:00+02:00", True, None, None),
    ]


def test_aws_rate_and_at_expressions_preview_too() -> None:
    aws = rows(
        {"aws": "cron(0 9 ? * MON-FRI *)", "timezone": "Europe/London"}, "2026-03-27T12:00:00+00:00", 2
    )
    assert aws == [
        ("2026-03-30T09:00:00+01:00", True, None, "UTC+00:00 -> UTC+01:00"),
        ("2026-03-31T09:00:00+01:00", True, None, None),
    ]
    rate = preview_fires(
        ScheduleSpec(rate="5 minutes"), datetime(2026, 3, 7, 9, 1, tzinfo=UTC), 2,
        rate_start=datetime(2026, 3, 7, 9, 0, tzinfo=UTC),
    )  # fmt: skip
    assert [f.at.isoformat() for f in rate] == ["2026-03-07T09:05:00+00:00", "2026-03-07T09:10:00+00:00"]
    once = rows({"at": "2026-04-01T10:00:00Z"}, "2026-03-07T09:00:00+00:00", 5)
    assert once == [("2026-04-01T10:00:00+00:00", True, None, None)]


def test_count_is_bounded() -> None:
    with pytest.raises(ValidationFailed):
        preview_fires(ScheduleSpec(cron="* * * * *"), datetime(2026, 1, 1, tzinfo=UTC), 0)


def test_a_shift_policy_previews_the_gap_fire_at_the_first_valid_instant() -> None:
    spec = {"cron": "30 2 * * *", "timezone": "America/New_York", "dst": {"missing": "shift"}}
    assert rows(spec, "2026-03-07T12:00:00+00:00", 2) == [
        ("2026-03-08T03:00:00-04:00", True, SHIFTED, "UTC-05:00 -> UTC-04:00"),
        ("2026-03-09T02:30:00-04:00", True, None, None),
    ]


def test_a_twice_policy_previews_both_occurrences_of_the_repeated_time() -> None:
    spec = {"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"repeated": "twice"}}
    assert rows(spec, "2026-10-31T12:00:00+00:00", 3) == [
        ("2026-11-01T01:30:00-04:00", True, None, None),
        ("2026-11-01T01:30:00-05:00", True, REPEATED, "UTC-04:00 -> UTC-05:00"),
        ("2026-11-02T01:30:00-05:00", True, None, None),
    ]


def test_the_preview_fires_exactly_what_the_ledger_expects() -> None:
    from rebound.domain.fires import expected_fires

    for dst in ({}, {"missing": "shift"}, {"repeated": "twice"}, {"missing": "shift", "repeated": "twice"}):
        for after in ("2026-03-07T12:00:00+00:00", "2026-10-31T12:00:00+00:00"):
            spec = ScheduleSpec.model_validate(
                {"cron": "30 1,2 * * *", "timezone": "America/New_York", "dst": dst}
            )
            start = datetime.fromisoformat(after)
            firing = [f.at for f in preview_fires(spec, start, 6) if f.fires]
            ledger = [f.at for f in expected_fires("t", spec, start, firing[-1])]
            assert firing == ledger, (dst, after)
