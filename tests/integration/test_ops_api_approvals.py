"""The ops API's approval routes: the real handler on real-shaped API Gateway events, against
moto. ``test_ops_api_rights`` records the AWS calls each of these tests makes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_ops_api import ALICE, call, ok

from rebound import wiring
from rebound.engine.deps import Deps
from support import critical_dead_letter

pytestmark = pytest.mark.integration

BOB = "arn:aws:iam::123456789012:user/bob"


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def test_a_held_skip_answers_202_and_another_caller_approves_it(api: Any, deps: Deps) -> None:
    run_id = critical_dead_letter(deps)
    status, body = call(api, "POST", f"/runs/{run_id}/skip", {"reason": "paid by hand"})
    assert (status, body["code"], body["action"]) == (202, "APPROVAL_REQUIRED", "runs:skip")
    request_id = body["request_id"]
    [listed] = ok(api, "GET", "/approvals")
    assert (listed["request_id"], listed["requested_by"], listed["state"]) == (request_id, ALICE, "pending")
    assert ok(api, "GET", f"/approvals/{request_id}")["subject"] == f"run#{run_id}"
    status, body = call(api, "POST", f"/approvals/{request_id}/approve", {"note": "mine"})
    assert (status, body["code"]) == (403, "OWN_APPROVAL")
    done = ok(api, "POST", f"/approvals/{request_id}/approve", {"note": "checked"}, caller=BOB)
    assert (done["state"], done["decided_by"], done["outcome"]["state"]) == ("done", BOB, "skipped")
    assert ok(api, "GET", "/approvals") == []
    assert ok(api, "GET", "/approvals", query={"closed": "true"})[0]["state"] == "done"
    status, body = call(api, "POST", f"/approvals/{request_id}/reject", {"note": "too late"}, caller=BOB)
    assert (status, body["code"]) == (409, "CONFLICT")


def test_a_request_is_rejected_over_the_api_and_nothing_is_done(api: Any, deps: Deps) -> None:
    run_id = critical_dead_letter(deps)
    status, body = call(api, "POST", f"/runs/{run_id}/cancel", {"reason": "superseded"})
    assert status == 202
    rejected = ok(api, "POST", f"/approvals/{body['request_id']}/reject", {"note": "replay it"}, caller=BOB)
    assert (rejected["state"], rejected["decided_by"], rejected["note"]) == ("rejected", BOB, "replay it")
    assert deps.store.get_run(run_id).state.value == "dead_lettered"  # type: ignore[union-attr]
    status, body = call(api, "POST", "/approvals/apr-000000000000/approve", {}, caller=BOB)
    assert (status, body["code"]) == (404, "APPROVAL_NOT_FOUND")
