"""``GET /targets`` and ``GET /targets/{target}`` through the real ops API handler, on the
DynamoDB store (moto): a target tripped by a failed run lists with its held run and work order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from test_ops_api import call

from rebound import wiring
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.engine.target_budgets import TargetBudgets
from support import ended_run, register, task

pytestmark = pytest.mark.integration
RUN = "t:manual-1"
BUDGET = {"threshold": 1, "min_runs": 1}


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.handlers import ops_api

    register(deps, task("t", target={"type": "sim", "name": "db"}, retry_policy={"target_budget": BUDGET}))
    run = ended_run(deps, RUN, RunState.FAILED)
    stored = deps.store.get_task("t")
    assert (
        TargetBudgets(deps, "test").on_failure(run, stored, deps.policies.for_stored(stored).policy) == "held"
    )
    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def test_the_tripped_target_lists_and_shows_its_held_run(api: Any) -> None:
    status, listed = call(api, "GET", "/targets")
    assert status == 200
    [target] = listed
    assert target["target"] == "sim:db" and target["health"] == "unhealthy" and target["held"] == 1
    assert target["work_order_id"]

    status, shown = call(api, "GET", f"/targets/{quote('sim:db')}", query={"at_most": "5"})
    assert status == 200
    assert [r["run_id"] for r in shown["held_runs"]] == [RUN]
    assert shown["history"][0]["action"] == "target-unhealthy"
    assert shown["history"][0]["evidence"]["tripped_by"] == RUN


def test_an_unknown_target_is_404_and_a_malformed_one_400_naming_the_field(api: Any) -> None:
    status, body = call(api, "GET", f"/targets/{quote('sim:nothing')}")
    assert status == 404 and "sim:nothing" in body["message"]
    status, body = call(api, "GET", "/targets/sim:nothing")  # unencoded, as API Gateway passes it
    assert status == 404
    status, body = call(api, "GET", "/targets/nothing")
    assert status == 400 and "http:<host>" in body["message"]
