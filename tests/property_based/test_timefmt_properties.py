"""The timestamp forms answer as their plain definitions do: ``iso`` takes a short way for a UTC
datetime and every form remembers its latest answers, so any datetime, in any offset, asked
once or again, gives what the definition gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebound.domain.timefmt import compact, iso, parse_utc

pytestmark = pytest.mark.property_based

offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
aware = st.datetimes(
    min_value=datetime(1971, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.one_of(st.just(UTC), offsets),
)


def iso_by_definition(value: datetime) -> str:
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


@given(aware)
def test_iso_and_compact_are_their_definitions_asked_once_or_again(value: datetime) -> None:
    for _ in range(2):
        assert iso(value) == iso_by_definition(value)
        assert compact(value) == value.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


@given(aware)
def test_the_same_instant_in_another_offset_gives_the_same_forms(value: datetime) -> None:
    elsewhere = value.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert iso(elsewhere) == iso(value)
    assert compact(elsewhere) == compact(value)


@given(aware)
def test_parsing_a_form_gives_the_instant_in_utc_asked_once_or_again(value: datetime) -> None:
    text = value.isoformat()
    for _ in range(2):
        parsed = parse_utc(text)
        assert parsed == value and parsed.tzinfo is UTC
    assert parse_utc(iso(value)) == value.replace(microsecond=value.microsecond // 1000 * 1000)


@given(st.integers(min_value=0, max_value=4_000_000_000))
def test_an_epoch_number_and_a_bool_are_told_apart(seconds: int) -> None:
    assert parse_utc(seconds) == datetime.fromtimestamp(seconds, tz=UTC)
    if seconds in (0, 1):
        with pytest.raises(ValueError, match="timestamp"):
            parse_utc(bool(seconds))  # remembered for the number, still refused as a bool
