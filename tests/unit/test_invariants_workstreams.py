"""The simulator's workstream invariants hold on a faithful report and fail on a doctored one."""

from __future__ import annotations

from typing import Any

import pytest

from rebound_local.invariants import no_idle_holders
from rebound_local.simulate.invariants import (
    resources_within_max_holders,
    rollbacks_keep_completed_steps,
    steps_start_after_their_needs,
    workstream_runs_settled,
)

pytestmark = pytest.mark.unit


def step(
    name: str,
    state: str,
    *,
    needs: list[str] | None = None,
    resources: list[str] | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    return {
        "step": name,
        "task_id": name,
        "state": state,
        "needs": needs or [],
        "resources": resources or [],
        "run_id": run_id,
    }


def ws_run(run_id: str, state: str, *steps: dict[str, Any]) -> dict[str, Any]:
    return {"workstream_id": run_id.split(":")[0], "run_id": run_id, "state": state, "steps": list(steps)}


def record(
    seq: int, action: str, minute: int, steps: dict[str, str], started: list[str] | None = None
) -> dict[str, Any]:
    return {
        "seq": seq,
        "action": action,
        "at": f"2026-03-07T02:{minute:02d}:00.000Z",
        "evidence": {"steps": steps, "started": started or []},
    }


CHAIN = "workstream#ledger:1"
LEDGER = ws_run(
    "ledger:1", "completed", step("extract", "succeeded"), step("transform", "succeeded", needs=["extract"])
)
IN_ORDER = [
    record(1, "started", 0, {"extract": "running", "transform": "pending"}, ["extract"]),
    record(2, "step-ended", 1, {"extract": "succeeded", "transform": "running"}, ["transform"]),
    record(3, "step-ended", 2, {"extract": "succeeded", "transform": "succeeded"}),
]


def test_a_step_started_while_its_need_was_running_breaks_the_order() -> None:
    assert steps_start_after_their_needs([LEDGER], {CHAIN: IN_ORDER}).ok

    doctored = [
        record(1, "started", 0, {"extract": "running", "transform": "running"}, ["extract", "transform"])
    ]
    broken = steps_start_after_their_needs([LEDGER], {CHAIN: doctored})
    assert not broken.ok
    assert "transform started while extract running" in broken.examples[0]


def test_a_need_skipped_by_an_operator_counts_as_completed_and_a_removed_need_no_longer_counts() -> None:
    skipped = [
        record(1, "started", 0, {"extract": "failed", "transform": "blocked"}),
        record(2, "step-skipped", 1, {"extract": "skipped", "transform": "running"}, ["transform"]),
    ]
    assert steps_start_after_their_needs([LEDGER], {CHAIN: skipped}).ok

    removed = ws_run("ledger:1", "completed", step("extract", "failed"), step("transform", "succeeded"))
    dropped = [
        record(1, "dependency-removed", 0, {"extract": "failed", "transform": "running"}, ["transform"])
    ]
    assert steps_start_after_their_needs([removed], {CHAIN: dropped}).ok


def test_a_rollback_that_reverts_a_completed_step_is_caught() -> None:
    kept = [
        record(1, "step-ended", 0, {"extract": "succeeded", "transform": "running"}),
        record(2, "rolled-back", 1, {"extract": "succeeded", "transform": "pending"}),
    ]
    assert rollbacks_keep_completed_steps([LEDGER], {CHAIN: kept}).ok

    reverted = [kept[0], record(2, "rolled-back", 1, {"extract": "pending", "transform": "pending"})]
    broken = rollbacks_keep_completed_steps([LEDGER], {CHAIN: reverted})
    assert not broken.ok
    assert "extract was succeeded, rolled back to pending" in broken.examples[0]


def test_a_resume_from_a_step_may_run_a_completed_step_again_it_is_not_a_rollback() -> None:
    resumed = [
        record(1, "step-ended", 0, {"extract": "succeeded", "transform": "succeeded"}),
        record(2, "resumed", 1, {"extract": "running", "transform": "pending"}, ["extract"]),
    ]
    assert rollbacks_keep_completed_steps([LEDGER], {CHAIN: resumed}).ok


def _holding(
    run_id: str, step_name: str, start: int, end: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = ws_run(run_id, "completed", step(step_name, "succeeded", resources=["warehouse"]))
    chain = [
        record(1, "started", start, {step_name: "running"}, [step_name]),
        record(2, "step-ended", end, {step_name: "succeeded"}),
    ]
    return run, chain


def test_more_holders_than_max_holders_at_one_moment_is_caught_and_a_handover_is_not() -> None:
    a, chain_a = _holding("a:1", "load", 0, 10)
    b, chain_b = _holding("b:1", "load", 10, 20)  # enters the instant a leaves
    chains = {"workstream#a:1": chain_a, "workstream#b:1": chain_b}
    assert resources_within_max_holders([a, b], chains, {"warehouse": 1}).ok

    c, chain_c = _holding("c:1", "load", 5, 15)  # inside while a holds it
    chains["workstream#c:1"] = chain_c
    broken = resources_within_max_holders([a, b, c], chains, {"warehouse": 1})
    assert not broken.ok
    assert "2 holders" in broken.examples[0]
    assert resources_within_max_holders([a, b, c], chains, {"warehouse": 2}).ok


def test_a_workstream_left_running_or_a_step_that_never_heard_its_run_ended_is_caught() -> None:
    done = ws_run("ledger:1", "completed", step("extract", "succeeded", run_id="extract:r1"))
    runs = {"extract:r1": {"run_id": "extract:r1", "state": "succeeded"}}
    assert workstream_runs_settled([done], runs).ok

    deaf = ws_run("ledger:1", "running", step("extract", "running", run_id="extract:r1"))
    broken = workstream_runs_settled([deaf], runs)
    assert not broken.ok
    assert any("its run extract:r1 is succeeded" in e for e in broken.examples)


def test_a_resource_held_by_a_step_that_is_not_running_is_an_idle_holder() -> None:
    slot = {"pk": "slots#resource#warehouse", "holders": ["ledger:1/load"]}
    running = ws_run("ledger:1", "running", step("load", "running", resources=["warehouse"]))
    assert no_idle_holders([slot], {}, [running]).ok

    ended = ws_run("ledger:1", "completed", step("load", "succeeded", resources=["warehouse"]))
    broken = no_idle_holders([slot], {}, [ended])
    assert not broken.ok and "ledger:1/load (succeeded)" in broken.examples[0]


def test_a_delivered_workstream_fire_without_its_run_is_caught() -> None:
    from rebound_local.invariants import Fire
    from rebound_local.simulate.invariants import workstream_fires_became_runs

    fire = Fire("sync", "2026-03-07T02:20:00Z")
    started = ws_run(fire.run_id, "completed")
    assert fire.run_id == "sync:20260307T022000Z"
    assert workstream_fires_became_runs([started], [fire, fire]).ok  # delivered twice, one run

    broken = workstream_fires_became_runs([], [fire])
    assert not broken.ok and "no run sync:20260307T022000Z" in broken.examples[0]
