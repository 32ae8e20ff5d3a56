"""Timestamps as every message and file gives them: refused with a ValueError naming the value."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import TypeAdapter, ValidationError

from rebound.domain.timefmt import UtcDatetime, iso, parse_utc


def test_epoch_seconds_iso_strings_and_offsets_all_come_back_in_utc() -> None:
    want = datetime(2026, 3, 7, 2, 0, tzinfo=UTC)
    assert parse_utc(want.timestamp()) == want
    assert parse_utc("2026-03-07T02:00:00Z") == want
    assert parse_utc("2026-03-07T03:00:00+01:00") == want
    assert iso(want) == "2026-03-07T02:00:00.000Z"


@pytest.mark.parametrize("value", [10**30, -(10**30), 1e300])
def test_an_epoch_out_of_range_is_a_value_error_not_an_overflow(value: float) -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_utc(value)
    with pytest.raises(ValidationError, match="out of range"):
        TypeAdapter(UtcDatetime).validate_python(value)


@pytest.mark.parametrize("value", ["yesterday", "2026-03-07T02:00:00", True, None, [1]])
def test_a_value_that_is_not_a_utc_timestamp_is_refused_by_name(value: object) -> None:
    with pytest.raises(ValueError, match="timestamp"):
        parse_utc(value)
