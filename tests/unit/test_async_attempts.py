"""Asynchronous attempts on the in-memory engine: start, heartbeats, completion, timeouts, and
every refusal of a report (``rebound.engine.async_reports``), each audited once and never reopening
the run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.adapters.completion_keys import StaticCompletionKey
from rebound.domain.audit import rebuild_run, verify_chain
from rebound.domain.completion import ASYNC_PAYLOAD_KEY, Claims, Refusal, sign
from rebound.domain.ids import run_subject
from rebound.domain.run import AttemptOutcome, Run, RunState
from rebound.engine.async_reports import AsyncReports, Report, ReportKind, reports_subject
from rebound.engine.sweeper import Sweeper
from support import fire, register, task

pytestmark = pytest.mark.unit

RUN = "job:20260307T090000Z"
KEY = b"k" * 32


@pytest.fixture
def world() -> MemoryWorld:
    world = memory_deps()
    world.deps.completion_keys = StaticCompletionKey(KEY)
    return world


def async_task(**overrides: Any) -> Any:
    behavior = overrides.pop("behavior", {"async": {"duration": "40m", "heartbeat_every": "1m"}})
    return task(
        "job",
        target={"type": "sim", "mode": "async", "behavior": behavior},
        heartbeat_timeout=overrides.pop("heartbeat_timeout", "5m"),
        max_duration=overrides.pop("max_duration", "2h"),
        **overrides,
    )


def start(world: MemoryWorld, **overrides: Any) -> str:
    register(world.deps, async_task(**overrides))
    assert world.execute(fire("job")) == "started-async"
    [call] = world.targets.calls
    token = call.payload[ASYNC_PAYLOAD_KEY]["completion_token"]
    assert isinstance(token, str)
    return token


def run_of(world: MemoryWorld, run_id: str = RUN) -> Run:
    run = world.store.get_run(run_id)
    assert run is not None
    return run


def send(world: MemoryWorld, kind: ReportKind, token: str, **kw: Any) -> Any:
    return AsyncReports(world.deps, "test").report(Report(kind=kind, token=token, **kw))


def refusals(world: MemoryWorld, run_id: str = RUN) -> list[str]:
    trail = world.store.audit_trail(reports_subject(run_id))
    assert verify_chain(reports_subject(run_id), trail).ok
    return [str(r.evidence["reason"]) for r in trail]


def run_actions(world: MemoryWorld) -> list[str]:
    return [r.action for r in world.store.audit_trail(run_subject(RUN))]


def test_an_async_attempt_returns_at_once_and_stays_running_under_its_heartbeat_lease(
    world: MemoryWorld,
) -> None:
    start(world)
    run = run_of(world)
    assert run.state is RunState.RUNNING
    assert run.lease_expires_at == world.clock.now() + timedelta(minutes=5)
    assert run.async_ends_at == world.clock.now() + timedelta(hours=2)
    assert run_actions(world) == ["attempt-started"]


def test_heartbeats_move_the_lease_and_a_completion_succeeds_the_run_once(world: MemoryWorld) -> None:
    token = start(world)
    world.clock.advance(240)
    answer = send(world, ReportKind.HEARTBEAT, token, progress=0.4)
    assert answer.accepted and answer.progress == 0.4
    run = run_of(world)
    assert run.lease_expires_at == world.clock.now() + timedelta(minutes=5)
    assert run.progress == 0.4 and run.heartbeats == 1
    world.clock.advance(240)
    assert Sweeper(world.deps).sweep(scan_dlq=False, ledger=False).leases_expired == []

    done = send(world, ReportKind.COMPLETE, token, run_id=RUN)
    assert done.accepted and done.state == "succeeded"
    assert run_of(world).state is RunState.SUCCEEDED and run_of(world).progress == 1.0
    assert run_actions(world) == ["attempt-started", "attempt-succeeded"]

    # A duplicate completion and a heartbeat after it: refused as used, one audit record each.
    again = send(world, ReportKind.COMPLETE, token)
    late_beat = send(world, ReportKind.HEARTBEAT, token)
    assert (again.accepted, again.reason) == (False, Refusal.USED.value)
    assert (late_beat.accepted, late_beat.reason) == (False, Refusal.USED.value)
    assert refusals(world) == ["used", "used"]
    assert run_actions(world) == ["attempt-started", "attempt-succeeded"]  # the run is untouched
    trail = world.store.audit_trail(run_subject(RUN))
    assert rebuild_run(RUN, trail) == run_of(world).model_copy(update={"rev": 0})  # heartbeats caught up


def test_missed_heartbeats_fail_the_attempt_with_heartbeat_timeout_and_it_is_retried(
    world: MemoryWorld,
) -> None:
    token = start(world)
    world.clock.advance(301)
    report = Sweeper(world.deps).sweep(scan_dlq=False, ledger=False)
    assert report.leases_expired == [RUN]
    run = run_of(world)
    assert run.state is RunState.FAILED and run.last_error_code == "HEARTBEAT_TIMEOUT"
    assert run.async_token_id is None
    assert world.relay() == ["retry-scheduled"]  # the normal retry policy decides

    late = send(world, ReportKind.COMPLETE, token)
    assert (late.accepted, late.reason) == (False, Refusal.TIMED_OUT.value)
    assert "not reopened" in late.message
    assert run_of(world).state is RunState.RETRY_SCHEDULED
    assert refusals(world) == ["timed_out"]


def test_max_duration_fails_with_timeout_and_feeds_the_sla(world: MemoryWorld) -> None:
    token = start(world, heartbeat_timeout="30m", max_duration="1h")
    for minutes in (20, 20, 15):
        world.clock.advance(minutes * 60)
        assert send(world, ReportKind.HEARTBEAT, token).accepted
    assert run_of(world).lease_expires_at == run_of(world).async_ends_at  # never past max_duration
    world.clock.advance(5 * 60 + 1)
    Sweeper(world.deps).sweep(scan_dlq=False, ledger=False)
    run = run_of(world)
    assert run.state is RunState.FAILED and run.last_error_code == "TIMEOUT"
    assert run.attempts[-1].outcome is AttemptOutcome.TIMEOUT
    assert run.sla_breaches == ["duration"]
    assert "task.sla.breached" in world.detail_types(run_subject(RUN))

    # The work completes an hour late, when even its token has expired: refused as timed out.
    world.clock.advance(3600)
    late = send(world, ReportKind.COMPLETE, token)
    assert (late.accepted, late.reason) == (False, Refusal.TIMED_OUT.value)
    assert "expired" in late.message and "not reopened" in late.message
    assert run_of(world).state is RunState.FAILED
    assert refusals(world) == ["timed_out"]


def test_a_completion_after_the_lease_ran_out_times_the_attempt_out_and_is_refused(
    world: MemoryWorld,
) -> None:
    token = start(world)
    world.clock.advance(301)  # no sweep yet: the report itself finds the lease gone
    answer = send(world, ReportKind.COMPLETE, token)
    assert (answer.accepted, answer.reason) == (False, Refusal.TIMED_OUT.value)
    assert run_of(world).last_error_code == "HEARTBEAT_TIMEOUT"
    assert run_actions(world) == ["attempt-started", "lease-expired"]
    assert refusals(world) == ["timed_out"]


def test_a_token_is_refused_for_another_run_another_attempt_after_expiry_and_when_forged(
    world: MemoryWorld,
) -> None:
    token = start(world)
    run = run_of(world)
    assert send(world, ReportKind.HEARTBEAT, token, run_id="job:20260308T090000Z").reason == "other_run"

    other_attempt = sign(
        KEY, Claims(RUN, 2, run.async_token_id or "", world.clock.now() + timedelta(hours=1))
    )
    assert send(world, ReportKind.COMPLETE, other_attempt).reason == "other_attempt"

    expired = sign(KEY, Claims(RUN, 1, run.async_token_id or "", world.clock.now() - timedelta(seconds=1)))
    assert send(world, ReportKind.COMPLETE, expired).reason == "expired"

    forged = sign(b"x" * 32, Claims(RUN, 1, run.async_token_id or "", world.clock.now() + timedelta(hours=1)))
    assert send(world, ReportKind.COMPLETE, forged).reason == "bad_signature"
    assert send(world, ReportKind.COMPLETE, "not-a-token").reason == "malformed"

    assert run_of(world).state is RunState.RUNNING  # none of them touched the run
    # A refusal of a token that verifies is audited; forged and malformed ones cannot name a run.
    assert refusals(world) == ["other_attempt", "expired"]
    assert refusals(world, "job:20260308T090000Z") == ["other_run"]


def test_a_completion_racing_the_timeout_ends_in_one_outcome(world: MemoryWorld) -> None:
    token = start(world)
    world.clock.advance(301)
    stale = run_of(world)
    # The sweeper read the run, then the completion arrived first (the lease had run out: it times out).
    assert send(world, ReportKind.COMPLETE, token).reason == "timed_out"
    assert Sweeper(world.deps).fail_expired(stale) is False  # the sweeper's guarded write loses
    assert [r.action for r in world.store.audit_trail(run_subject(RUN))].count("lease-expired") == 1


def test_a_failure_report_fails_the_attempt_with_its_code(world: MemoryWorld) -> None:
    token = start(world)
    answer = send(world, ReportKind.FAIL, token, error_code="EXPORT_BROKEN", message="disk full")
    assert answer.accepted and answer.state == "failed"
    run = run_of(world)
    assert (run.last_error_code, run.last_error_message) == ("EXPORT_BROKEN", "disk full")
    assert world.relay() == ["retry-scheduled"]
    assert send(world, ReportKind.FAIL, token).reason == "used"


def test_without_a_completion_key_an_async_attempt_fails_with_a_reason() -> None:
    world = memory_deps()
    register(world.deps, async_task())
    assert world.execute(fire("job")) == "failed"
    run = run_of(world)
    assert run.last_error_code == "COMPLETION_KEY_MISSING"
    assert "REBOUND_COMPLETION_KEY" in (run.last_error_message or "")
