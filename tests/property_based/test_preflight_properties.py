"""The pre-flight's collision sweep (``rebound.ops.preflight.contention``) on random run windows:
it warns exactly when more runs overlap than the slot holds, and every instant where they do is
covered by a warning that names one of those runs."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebound.domain.prediction.preflight import RunWindow, contention
from support import START

pytestmark = pytest.mark.property_based

windows = st.lists(st.tuples(st.integers(0, 900), st.integers(1, 400)), min_size=1, max_size=25)


def runs_of(spec: list[tuple[int, int]]) -> list[RunWindow]:
    at = [START + timedelta(seconds=s) for s, _ in spec]
    return [
        RunWindow(f"r{i}", f"t{i % 4}", "acme", at[i], at[i], at[i] + timedelta(seconds=d))
        for i, (_, d) in enumerate(spec)
    ]


def active(runs: list[RunWindow], instant: datetime) -> list[RunWindow]:
    return [r for r in runs if r.start <= instant < r.end]


@given(spec=windows, cap=st.integers(1, 3), on_full=st.sampled_from(["wait", "skip", "cancel"]))
def test_there_is_a_warning_exactly_when_more_runs_overlap_than_the_slot_holds(
    spec: list[tuple[int, int]], cap: int, on_full: str
) -> None:
    runs = runs_of(spec)
    peak = max(len(active(runs, r.start)) for r in runs)
    spans = contention(runs, cap, on_full)
    assert bool(spans) == (peak > cap)
    for span in spans:
        assert span.found_full >= 1 and span.start <= span.end
        assert span.start in {r.start for r in span.runs}


@given(spec=windows, cap=st.integers(1, 3))
def test_every_instant_with_too_many_runs_is_covered_by_a_warning_naming_one_of_them(
    spec: list[tuple[int, int]], cap: int
) -> None:
    runs = runs_of(spec)
    spans = contention(runs, cap)
    for run in runs:
        crowd = active(runs, run.start)
        if len(crowd) > cap:
            named = {r.run_id for s in spans if s.start <= run.start <= s.end for r in s.runs}
            assert named & {r.run_id for r in crowd}, (run.run_id, [r.run_id for r in crowd])
