"""The ops API's workstream routes: the same operations as ``rebound workstreams``, with the caller
as the actor of every change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_ops_api import ALICE, call

from rebound import wiring
from rebound.engine.deps import Deps
from rebound.engine.workstreams import Workstreams, workstream_subject
from support import nightly_ledger, register, task

pytestmark = pytest.mark.integration


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.domain.workstreams import ResourceSpec
    from rebound.handlers import ops_api

    register(deps, task("extract"), task("transform"), task("load"), task("report"))
    Workstreams(deps, "test").register(
        [nightly_ledger()], [ResourceSpec(id="warehouse-write", max_holders=1)]
    )
    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def test_start_show_and_recover_a_workstream_over_http(api: Any, deps: Deps) -> None:
    status, started = call(api, "POST", "/workstreams/nightly-ledger/run", {"token": "t1"})
    assert status == 200 and started["state"] == "running"
    run_id = started["run_id"]
    assert call(api, "POST", "/workstreams/nightly-ledger/run", {"token": "t1"})[1]["run_id"] == run_id

    status, shown = call(api, "GET", "/workstreams/nightly-ledger", query={"graph": "mermaid"})
    assert status == 200 and shown["run_id"] == run_id and shown["graph"].startswith("graph LR")
    status, listed = call(api, "GET", "/workstreams")
    assert listed == [
        {
            "workstream_id": "nightly-ledger",
            "tenant": "acme",
            "steps": ["extract", "transform", "load", "report"],
            "trigger": "by hand",
            "last_run": run_id,
            "last_state": "running",
        }
    ]

    status, skipped = call(
        api, "POST", f"/workstream-runs/{run_id}/steps/transform/skip", {"reason": "done by hand"}
    )
    assert status == 200
    assert {s["step"]: s["state"] for s in skipped["steps"]}["transform"] == "skipped"
    status, refused = call(api, "POST", f"/workstream-runs/{run_id}/steps/load/skip", {"reason": ""})
    assert status in (400, 422), refused

    status, cps = call(api, "GET", f"/workstream-runs/{run_id}/checkpoints")
    assert [c["version"] for c in cps] == [1, 2]
    status, rolled = call(api, "POST", f"/workstream-runs/{run_id}/rollback", {"to": 1})
    assert status == 200 and rolled["state"] == "rolled_back"
    assert "transform" in rolled["not_rolled_back"]
    status, refused = call(api, "POST", f"/workstream-runs/{run_id}/resume", {"from_step": "load"})
    assert status == 409 and "needs" in refused["message"]

    status, limits = call(api, "PUT", "/resources/warehouse-write", {"max_holders": 3})
    assert status == 200 and limits == {"warehouse-write": 3}
    status, resources = call(api, "GET", "/resources")
    assert resources == [{"resource": "warehouse-write", "max_holders": 3, "holders": [], "other_holders": 0}]
    assert call(api, "GET", "/workstreams/nope")[0] == 404

    trail = deps.store.audit_trail(workstream_subject(run_id))
    assert [r.action for r in trail if r.actor == ALICE] == ["started", "step-skipped", "rolled-back"]


def steps(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in view["steps"]}


def test_cancel_a_step_remove_a_dependency_and_retry_over_http(api: Any, deps: Deps) -> None:
    """The remaining recovery routes: each answers the run as it now is, audited as the caller."""
    run_id = call(api, "POST", "/workstreams/nightly-ledger/run", {"token": "t2"})[1]["run_id"]
    status, cancelled = call(
        api, "POST", f"/workstream-runs/{run_id}/steps/extract/cancel", {"reason": "source is down"}
    )
    assert status == 200 and steps(cancelled)["extract"]["state"] == "cancelled"
    assert steps(cancelled)["extract"]["reason"] == "source is down"
    status, edited = call(api, "DELETE", f"/workstream-runs/{run_id}/steps/report/needs/load")
    assert status == 200 and "load" in steps(edited)["report"]["removed_needs"], edited
    status, again = call(api, "POST", f"/workstream-runs/{run_id}/retry-failed")
    assert status == 200 and steps(again)["extract"]["state"] == "running"
    assert steps(again)["extract"]["tries"] == 2
    status, fresh = call(api, "POST", f"/workstream-runs/{run_id}/retry")
    assert status == 200 and fresh["run_id"] != run_id and fresh["state"] == "running"
    assert [r.actor for r in deps.store.audit_trail(workstream_subject(run_id))][-3:] == [ALICE] * 3


def test_a_workstream_s_runs_are_listed_latest_first(api: Any, deps: Deps) -> None:
    first = call(api, "POST", "/workstreams/nightly-ledger/run", {"token": "t3"})[1]["run_id"]
    second = call(api, "POST", f"/workstream-runs/{first}/retry")[1]["run_id"]
    status, runs = call(api, "GET", "/workstreams/nightly-ledger/runs")
    assert status == 200 and [r["run_id"] for r in runs] == [second, first]
    assert [s["step"] for s in runs[1]["steps"]] == ["extract", "transform", "load", "report"]
    status, latest = call(api, "GET", "/workstreams/nightly-ledger/runs", query={"limit": "1"})
    assert [r["run_id"] for r in latest] == [second]
    status, error = call(api, "GET", "/workstreams/nope/runs")
    assert status == 404 and error["code"] == "WORKSTREAM_NOT_FOUND", error
    status, error = call(api, "GET", "/workstreams/nightly-ledger/runs", query={"limit": "0"})
    assert (status, error["field"]) == (400, "limit")
