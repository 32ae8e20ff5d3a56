"""A scenario's operator (``rebound_local.simulate.workstreams.operate``) runs an operation again
when the hostile cloud makes it lose a race, and never lets one end the simulation."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import memory_deps

from rebound.domain.errors import Conflict
from rebound.domain.workstreams import ResourceSpec
from rebound.engine.workstreams import Workstreams
from rebound.ops.workstreams import WorkstreamOps
from rebound_local.scenario import Operation
from rebound_local.simulate.workstreams import OPERATOR_TRIES, operate
from support import nightly_ledger, register, task

pytestmark = pytest.mark.unit


@pytest.fixture
def deps() -> Any:
    world = memory_deps()
    register(world.deps, task("extract"), task("transform"), task("load"), task("report"))
    Workstreams(world.deps, actor="test").register(
        [nightly_ledger()], [ResourceSpec(id="warehouse-write", max_holders=1)]
    )
    return world.deps


def losing(times: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``WorkstreamOps.run`` loses a race ``times`` times (someone changed the record first), then
    runs as written. The calls, counted."""
    calls: list[int] = []
    real = WorkstreamOps.run

    def run(self: WorkstreamOps, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise Conflict("workstream run changed meanwhile")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(WorkstreamOps, "run", run)
    return calls


def test_a_start_that_lost_a_race_is_run_again_and_succeeds(
    deps: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = losing(2, monkeypatch)
    entry = operate(deps, Operation(at="1h", workstream="nightly-ledger", op="start"))
    assert entry["ok"] is True and entry["tries"] == 3 and len(calls) == 3
    assert WorkstreamOps(deps, actor="test").show("nightly-ledger").run_id == entry["run_id"]


def test_an_operation_that_always_loses_is_reported_not_raised(
    deps: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = losing(OPERATOR_TRIES + 1, monkeypatch)
    entry = operate(deps, Operation(at="1h", workstream="nightly-ledger", op="start"))
    assert entry["ok"] is False and entry["tries"] == OPERATOR_TRIES and len(calls) == OPERATOR_TRIES
    assert "gave up" in entry["error"] and "changed meanwhile" in entry["error"]
