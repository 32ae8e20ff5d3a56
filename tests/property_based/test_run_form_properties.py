"""``run_form.json_form`` (the rebuilt run's JSON form without a model, in ``audit verify --all``)
answers exactly what ``Run.model_validate(fields).model_dump(mode="json")`` answers whenever it
answers at all, on random fields: valid values, values pydantic would coerce or refuse
(timestamps written another way or on days that do not exist, numbers as floats or flags, out of
bounds, unknown keys, attempts missing a field or carrying an extra one), and the fields a trail
really rebuilds. It must also answer for the runs Rebound writes, or it would save nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rebound.domain.audit import _rebuilt_fields, next_record, run_changes
from rebound.domain.run import Attempt, AttemptOutcome, Run, RunState, Trigger
from rebound.domain.run_form import json_form
from rebound.domain.timefmt import iso

pytestmark = pytest.mark.property_based
T0 = datetime(2026, 3, 7, 9, tzinfo=UTC)

canonical = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)).map(
    lambda d: iso(d.replace(tzinfo=UTC))
)
odd_timestamps = st.one_of(
    st.sampled_from(
        [
            "2026-02-30T00:00:00.000Z",  # no such day
            "2026-03-07T09:00:00Z",  # no milliseconds
            "2026-03-07T09:00:00.000+00:00",
            "2026-03-07T10:00:00.000+01:00",
            "2026-03-07 09:00:00.000Z",
            "2026-03-07T24:00:00.000Z",
            "0000-01-01T00:00:00.000Z",
            "\uff12\uff10\uff12\uff16-03-07T09:00:00.000Z",  # full-width digits
        ]
    ),
    st.integers(min_value=0, max_value=2_000_000_000),
)
odd = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([2**63, -(2**63), 1.0, 0.5, 2.0, 1.5]),
    st.text(max_size=6),
    st.lists(st.text(max_size=3), max_size=2),
    st.lists(st.integers(min_value=-1, max_value=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    odd_timestamps,
)
attempts = st.fixed_dictionaries(
    {"n": st.integers(min_value=1, max_value=4), "started_at": canonical},
    optional={
        "ended_at": st.one_of(canonical, st.none()),
        "outcome": st.sampled_from([o.value for o in AttemptOutcome]),
        "error_code": st.one_of(st.text(max_size=4), st.none()),
        "retryable": st.one_of(st.booleans(), st.none()),
        "duration_ms": st.one_of(st.integers(min_value=-5, max_value=10**6), st.none()),
    },
)
runs = st.fixed_dictionaries(
    {
        "run_id": st.text(max_size=8),
        "task_id": st.one_of(st.text(max_size=8), st.sampled_from(["acme.job", "globex.job", "a.b.c"])),
        "tenant": st.sampled_from(["acme", "globex"]),
        "trigger": st.sampled_from([t.value for t in Trigger]),
        "scheduled_for": canonical,
        "created_at": canonical,
        "updated_at": canonical,
    },
    optional={
        "state": st.sampled_from([s.value for s in RunState]),
        "attempt": st.integers(min_value=0, max_value=5),
        "budget_started_at": st.one_of(canonical, st.none()),
        "attempts": st.lists(attempts, max_size=2),
        "lease_owner": st.one_of(st.text(max_size=4), st.none()),
        "slots": st.lists(st.text(max_size=3), max_size=2),
        "forgiven": st.lists(st.integers(min_value=0, max_value=3), max_size=2),
        "catch_up": st.booleans(),
        "audit_seq": st.integers(min_value=-1, max_value=9),
        "audit_head": st.just("a" * 64),
    },
)
"""Runs in the JSON form Rebound writes them: ``json_form`` answers every one."""
FIELDS = [*Run.model_fields, "not_a_field"]
ATTEMPT_FIELDS = [*Attempt.model_fields, "extra"]


def model_form(data: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return Run.model_validate(data).model_dump(mode="json")
    except ValidationError:
        return None


@settings(max_examples=400, deadline=None)
@given(runs)
def test_every_run_in_its_json_form_is_answered_as_pydantic_answers_it(data: dict[str, Any]) -> None:
    plain = json_form(data)
    assert plain is not None and plain == model_form(data)


@settings(max_examples=800, deadline=None)
@given(runs, st.sampled_from(FIELDS), odd)
def test_a_run_with_one_odd_field_is_answered_as_pydantic_answers_it_or_left_to_it(
    data: dict[str, Any], name: str, value: Any
) -> None:
    """Any field (or a key the model does not have) set to a value pydantic may coerce, refuse
    or keep: ``json_form`` answers what pydantic answers, or leaves it to pydantic."""
    data[name] = value
    plain = json_form(data)
    if plain is not None:
        assert plain == model_form(data)


@settings(max_examples=400, deadline=None)
@given(runs, attempts, st.sampled_from(ATTEMPT_FIELDS), st.one_of(odd, st.just(...)))
def test_an_attempt_with_one_odd_or_missing_field_is_answered_as_pydantic_answers_it_or_left_to_it(
    data: dict[str, Any], attempt: dict[str, Any], name: str, value: Any
) -> None:
    if value is ...:
        attempt.pop(name, None)
    else:
        attempt[name] = value
    data["attempts"] = [attempt]
    plain = json_form(data)
    if plain is not None:
        assert plain == model_form(data)


def test_a_trail_rebuilds_in_its_json_form_without_a_model() -> None:
    """The run a created, started, failed-and-retried, succeeded trail rebuilds is answered here
    (not left to pydantic), and is the model's answer."""
    run = Run(
        run_id="r1",
        task_id="job",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=T0,
        created_at=T0,
        updated_at=T0,
    )
    t1, t2 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=40)
    started = run.model_copy(
        update={
            "state": RunState.RUNNING,
            "attempt": 1,
            "attempts": [Attempt(n=1, started_at=t1)],
            "updated_at": t1,
        }
    )
    failed = Attempt(n=1, started_at=t1, ended_at=t2, outcome=AttemptOutcome.FAILED, error_code="HTTP_503")
    retrying = started.model_copy(
        update={
            "state": RunState.RETRY_SCHEDULED,
            "attempts": [failed],
            "next_retry_at": t2,
            "updated_at": t2,
        }
    )
    records, prev, before = [], "0" * 64, None
    for seq, (at, after) in enumerate([(T0, run), (t1, started), (t2, retrying)], start=1):
        record = next_record(
            subject="run#r1",
            prev_seq=seq - 1,
            prev_hash=prev,
            at=at,
            actor="executor",
            action="noted",
            evidence={"changes": run_changes(before, after)},
        )
        stored = record.model_dump(mode="json")  # as the bulk pass reads it
        records.append((stored["seq"], stored["at"], stored["evidence"], stored["hash"]))
        prev, before = record.hash, after
    fields_rebuilt = _rebuilt_fields("r1", records)
    plain = json_form(fields_rebuilt)
    assert plain is not None and plain == model_form(fields_rebuilt)
    assert plain["state"] == "retry_scheduled" and plain["attempts"][0]["error_code"] == "HTTP_503"
