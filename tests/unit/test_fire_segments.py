"""A task's fire segments: how saves open and close them, and that a listing enumerates every fire
a writer relied on (``rebound.domain.fire_segments``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rebound.domain.fire_segments import CLOSE_SLACK, FireSegment, advance, fire_windows, lists_by_fire
from rebound.domain.schedule_spec import ScheduleSpec

T0 = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)
EVERY_5 = ScheduleSpec(cron="*/5 * * * *")
EVERY_10 = ScheduleSpec(cron="*/10 * * * *")
RATE_7 = ScheduleSpec(rate="7 minutes")


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def listed(segments: tuple[FireSegment, ...], now: datetime, **kwargs: object) -> list[datetime]:
    newest_first = bool(kwargs.pop("newest_first", False))
    since = kwargs.pop("since", None)
    until = kwargs.pop("until", None)
    return [
        at
        for window in fire_windows(segments, "job", since, until, now, newest_first=newest_first)  # type: ignore[arg-type]
        for at, _ in window
    ]


def test_a_pause_an_edit_and_a_removed_schedule_close_the_open_segment_and_activity_opens_one() -> None:
    one = advance((), EVERY_5, True, T0, T0)
    assert one == (FireSegment(T0, None, T0, EVERY_5),)
    assert advance(one, EVERY_5, True, T0, minutes(3)) == one  # a save that changes no schedule
    paused = advance(one, EVERY_5, False, T0, minutes(7))
    assert paused == (FireSegment(T0, minutes(7), T0, EVERY_5),)
    resumed = advance(paused, EVERY_5, True, minutes(9), minutes(9))
    assert resumed[-1] == FireSegment(minutes(9), None, minutes(9), EVERY_5)
    edited = advance(resumed, EVERY_10, True, minutes(9), minutes(11))
    assert [(s.since, s.until, s.schedule) for s in edited[-2:]] == [
        (minutes(9), minutes(11), EVERY_5),
        (minutes(11), None, EVERY_10),
    ]
    assert advance(edited, None, True, minutes(9), minutes(12))[-1].until == minutes(12)


def test_segments_that_ended_before_the_runs_expired_are_forgotten_the_open_one_never() -> None:
    segments = advance(advance((), EVERY_5, True, T0, T0), EVERY_5, False, T0, minutes(5))
    segments = advance(segments, EVERY_10, True, minutes(6), minutes(6))
    assert len(advance(segments, EVERY_10, True, minutes(6), minutes(8), forget_before=minutes(5))) == 2
    kept = advance(segments, EVERY_10, True, minutes(6), minutes(8), forget_before=minutes(5.5))
    assert kept == (FireSegment(minutes(6), None, minutes(6), EVERY_10),)


def test_a_writer_relies_only_on_a_fire_its_segment_owes_and_only_for_its_own_scheduled_id() -> None:
    segments = advance((), EVERY_5, True, T0, T0)
    assert lists_by_fire(segments, "job", "job:20260307T091000Z", minutes(10))
    assert not lists_by_fire(segments, "job", "job:20260307T091100Z", minutes(11))  # not a fire
    assert not lists_by_fire(segments, "job", "job:evt-abc", minutes(10))  # not its scheduled id
    assert not lists_by_fire(segments, "job", "job:20260307T085500Z", minutes(-5))  # before the segment


def test_every_fire_any_writer_relied_on_is_enumerated_in_order_within_the_bounds() -> None:
    segments = advance((), EVERY_5, True, T0, T0)
    segments = advance(segments, EVERY_5, False, T0, minutes(32))
    segments = advance(segments, RATE_7, True, minutes(40), minutes(40))
    segments = advance(segments, EVERY_10, True, minutes(40), minutes(61))
    now = minutes(24 * 60 * 3)  # three days later: the listing walks back a day at a time
    relied = [minutes(m) for m in range(3 * 24 * 60) if any(s.owes("job", minutes(m)) for s in segments)]
    assert relied[:3] == [minutes(0), minutes(5), minutes(10)] and minutes(47) in relied
    enumerated = listed(segments, now)
    assert set(relied) <= set(enumerated)
    assert enumerated == sorted(enumerated)
    assert listed(segments, now, newest_first=True) == enumerated[::-1]
    assert minutes(35) in enumerated  # a closed segment is read past its end (CLOSE_SLACK)
    assert minutes(32) + CLOSE_SLACK == minutes(47)
    assert minutes(50) not in enumerated  # a */5 fire, but past the closed segment and its slack
    window = listed(segments, now, since=minutes(10), until=minutes(20))
    assert window == [minutes(10), minutes(15), minutes(20)]
