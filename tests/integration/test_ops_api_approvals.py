"""The ops API's approval routes: the real handler on real-shaped API Gateway events, against
moto. ``test_ops_api_rights`` records the AWS calls each of these tests makes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_ops_api import (
    ALICE,
    Invocations,
    call,
    next_chunk,
    ok,
    self_invoking,  # noqa: F401  (the fixture the redrive test uses)
)

from rebound import wiring
from rebound.engine.deps import Deps
from support import critical_dead_letter, dead_letters

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


def test_an_approved_large_redrive_starts_a_job_whose_chunks_act_as_the_approver(
    api: Any,
    deps: Deps,
    self_invoking: Invocations,  # noqa: F811  (the fixture imported above)
) -> None:
    """The approve call answers at once with the job; the redrive runs in chunks, each in its own
    invocation, none held for approval again (one API call lives 29 s; such a redrive may not)."""
    from rebound.domain.approvals import ApprovalRules
    from rebound.domain.run import RunState

    deps.settings = deps.settings.model_copy(update={"approvals": ApprovalRules(redrive_over=2)})
    run_ids = dead_letters(deps, 25)
    status, body = call(api, "POST", "/dlq/redrive", {"task_id": "job"})
    assert (status, body["code"], body["action"]) == (202, "APPROVAL_REQUIRED", "dlq:redrive")
    assert not self_invoking.calls
    done = ok(api, "POST", f"/approvals/{body['request_id']}/approve", {"note": "checked"}, caller=BOB)
    outcome = done["outcome"]
    assert done["state"] == "done" and outcome["ok"] and outcome["total"] == 25
    job_id = outcome["redrive_job"]
    assert outcome["poll"] == f"/dlq/redrive-jobs/{job_id}"
    assert deps.queues.counts("dlq").total == 25  # nothing moved within the approver's call
    while self_invoking.calls:  # CHUNK_MESSAGES is 10 here: three chunks
        next_chunk(api, self_invoking)
    job = ok(api, "GET", f"/dlq/redrive-jobs/{job_id}", caller=BOB)
    assert (job["state"], job["moved"], job["chunks"], job["created_by"]) == ("succeeded", 25, 3, BOB)
    assert {deps.store.get_run(r).state for r in run_ids} == {RunState.REPLAYED}  # type: ignore[union-attr]
    [started, finished] = deps.store.audit_trail(f"redrive-job#{job_id}")
    assert (started.action, started.actor, finished.action) == (
        "dlq-redrive-job-started",
        BOB,
        "dlq-redrive-job-finished",
    )
    assert (started.evidence["approval"], started.evidence["requested_by"]) == (body["request_id"], ALICE)
