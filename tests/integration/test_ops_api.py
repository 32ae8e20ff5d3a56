"""The operations API: the real handler on real-shaped API Gateway events (``events/ops_api``),
against moto. One test per route at least, then bad bodies, unknown ids and a caller without an
identity. The actor of every change is the caller's IAM identity, never a field of the body."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rebound import wiring
from rebound.api import build_app, openapi_document
from rebound.domain.models import RunState
from rebound.engine.deps import Deps
from support import Context, dead_letters, register, task

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = json.loads((ROOT / "events" / "ops_api" / "get-health.json").read_text())
ALICE = SAMPLE["requestContext"]["identity"]["userArn"]
DOCUMENT = {
    "tasks": [
        {"id": "nightly", "tenant": "acme", "schedule": {"cron": "0 2 * * *"}, "target": {"type": "sim"}}
    ]
}


@pytest.fixture
def api(deps: Deps) -> Any:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def call(
    handler: Any,
    method: str,
    path: str,
    body: Any = None,
    query: dict[str, str] | None = None,
    caller: str | None = ALICE,
    with_headers: bool = False,
) -> Any:
    event = copy.deepcopy(SAMPLE)
    event["httpMethod"] = event["requestContext"]["httpMethod"] = method
    event["path"] = path
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["queryStringParameters"] = query
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} if query else None
    event["body"] = json.dumps(body) if body is not None else None
    if body is not None:
        event["headers"]["Content-Type"] = "application/json"
    identity = event["requestContext"]["identity"]
    identity["userArn"] = identity["caller"] = caller
    response = handler.lambda_handler(event, Context())
    text = response.get("body") or "null"
    if with_headers:
        headers = {k: v[0] for k, v in (response.get("multiValueHeaders") or {}).items()}
        return int(response["statusCode"]), json.loads(text), {**headers, **(response.get("headers") or {})}
    return int(response["statusCode"]), json.loads(text)


def ok(handler: Any, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    status, data = call(handler, method, path, body, **kw)
    assert status == 200, (status, data)
    return data


def test_health_and_the_openapi_document(api: Any, deps: Deps) -> None:
    assert ok(api, "GET", "/health") == {"status": "ok", "environment": deps.settings.environment}
    served = ok(api, "GET", "/openapi.json")
    assert served == openapi_document(api.app)
    assert {"/tasks", "/runs/{run_id}", "/dlq/redrive", "/internal/tasks/retry", "/ops/workorders"} <= set(
        served["paths"]
    )


def test_the_committed_openapi_document_matches_the_routes() -> None:
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert committed == openapi_document(build_app(lambda: None)), (
        "docs/openapi.json drifted: run make openapi"
    )


def test_register_plans_then_applies_a_task_document(api: Any, deps: Deps) -> None:
    plan = ok(api, "POST", "/tasks", {"document": DOCUMENT, "dry_run": True})
    assert plan["plan"] == [{"id": "nightly", "change": "create", "diff": plan["plan"][0]["diff"]}]
    assert plan["applied"] is None and deps.store.get_task("nightly") is None
    applied = ok(api, "POST", "/internal/tasks/register", {"document": DOCUMENT})
    assert applied["applied"]["created"] == ["nightly"]
    stored = deps.store.get_task("nightly")
    assert stored is not None
    trail = deps.store.audit_trail("task#nightly")
    assert trail[-1].actor == ALICE  # the caller's identity, not the body's


def test_list_show_pause_resume_run_and_preview_a_task(api: Any, deps: Deps) -> None:
    ok(api, "POST", "/tasks", {"document": DOCUMENT})
    assert [t["id"] for t in ok(api, "GET", "/tasks")] == ["nightly"]
    assert ok(api, "GET", "/tasks", query={"state": "paused"}) == []
    assert ok(api, "GET", "/tasks/nightly")["task"]["id"] == "nightly"
    assert ok(api, "PUT", "/tasks/nightly/pause", {"reason": "maintenance"})["state"] == "paused"
    assert ok(api, "PUT", "/internal/tasks/nightly/resume")["state"] == "active"
    assert ok(api, "PUT", "/internal/tasks/nightly/pause")["state"] == "paused"
    assert ok(api, "PUT", "/tasks/nightly/resume")["state"] == "active"
    run = ok(api, "POST", "/tasks/nightly/run", {"token": "t-1"})
    assert run["run_id"].startswith("nightly:manual-")  # the manual message is on the execution queue
    assert ok(api, "POST", "/tasks/nightly/run", {"token": "t-1"})["run_id"] == run["run_id"]
    fires = ok(api, "GET", "/tasks/nightly/preview", query={"count": "3"})
    assert len(fires) == 3


def test_runs_list_show_retry_skip_cancel_and_retry_failed(api: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 4)
    listed = ok(api, "GET", "/runs", query={"state": "dead_lettered"})
    assert sorted(r["run_id"] for r in listed) == sorted(run_ids)
    first = ok(api, "GET", "/runs", query={"task_id": "job", "limit": "3"})
    assert [r["run_id"] for r in first] == sorted(run_ids, reverse=True)[:3]
    shown = ok(api, "GET", f"/runs/{run_ids[0]}")
    assert shown["run"]["run_id"] == run_ids[0] and shown["audit"]["ok"] is True
    assert {"attempt-failed", "dead-lettered"} <= {e["action"] for e in shown["timeline"]}
    retried = ok(api, "POST", f"/runs/{run_ids[0]}/retry", {"max_attempts": 2, "reason": "fixed"})
    assert retried["action"] == "replayed"
    assert ok(api, "POST", f"/runs/{run_ids[1]}/skip", {"reason": "superseded"})["state"] == "skipped"
    assert ok(api, "POST", f"/runs/{run_ids[2]}/cancel", {"reason": "obsolete"})["state"] == ("cancelled")
    failed = ok(api, "POST", "/runs/retry-failed", {"task_id": "job", "reason": "fixed"})
    assert failed["matched"] == 1 and failed["outcomes"][0]["run_id"] == run_ids[3]
    assert ok(api, "POST", "/internal/tasks/retry", {"run_id": run_ids[3]})["matched"] == 1
    run = deps.store.get_run(run_ids[1])
    assert run is not None and run.state is RunState.SKIPPED
    assert deps.store.audit_trail(f"run#{run_ids[1]}")[-1].actor == ALICE


def test_a_task_s_runs_come_a_page_at_a_time(api: Any, deps: Deps) -> None:
    run_ids = sorted(dead_letters(deps, 5), reverse=True)
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        query = {"task_id": "job", "limit": "2", **({"after": after} if after else {})}
        status, page, headers = call(api, "GET", "/runs", query=query, with_headers=True)
        assert status == 200
        pages.append([r["run_id"] for r in page])
        after = headers.get("X-Next-After")
        if after is None:
            break
    assert pages == [run_ids[0:2], run_ids[2:4], run_ids[4:]]


def test_dlq_list_show_and_redrive(api: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 3)
    listed = ok(api, "GET", "/dlq", query={"task_id": "job"})
    messages = listed["messages"]
    assert sorted(m["run_id"] for m in messages) == sorted(run_ids)
    assert listed["depth"]["in_flight"] == 0  # listing hid nothing
    first = ok(api, "GET", "/dlq", query={"task_id": "job", "limit": "2"})
    rest = ok(api, "GET", "/dlq", query={"task_id": "job", "limit": "2", "after": first["next"]})
    assert [m["message_id"] for m in first["messages"] + rest["messages"]] == [
        m["message_id"] for m in messages
    ]
    assert rest["next"] is None
    shown = ok(api, "GET", f"/dlq/{messages[0]['message_id']}")
    assert shown["message_id"] == messages[0]["message_id"]
    dry = ok(api, "POST", "/dlq/redrive", {"task_id": "job", "dry_run": True})
    assert dry["dry_run"] is True
    moved = ok(api, "POST", "/dlq/redrive", {"task_id": "job", "limit": 2})
    assert moved["outcomes"]["moved"] == 2  # the limit


def test_work_orders_list_show_create_ack_resolve(api: Any, deps: Deps) -> None:
    register(deps, task("job"))
    opened = ok(api, "POST", "/ops/workorders", {"severity": "high", "reason": "disk full", "task_id": "job"})
    order_id = opened["work_order_id"]
    assert opened["state"] == "open" and opened["task_id"] == "job"
    again = ok(api, "POST", "/workorders", {"severity": "low", "reason": "heads up"})
    assert again["work_order_id"] != order_id
    assert {o["work_order_id"] for o in ok(api, "GET", "/workorders", query={"state": "open"})} == {
        order_id,
        again["work_order_id"],
    }
    shown = ok(api, "GET", f"/workorders/{order_id}")
    assert shown["work_order_id"] == order_id and shown["audit"][0]["actor"] == ALICE
    assert ok(api, "POST", f"/workorders/{order_id}/ack", {"note": "on it"})["state"] == "acknowledged"
    resolved = ok(api, "POST", f"/workorders/{order_id}/resolve", {"resolution": "fixed", "note": "freed"})
    assert resolved["state"] == "resolved"


def test_policies_list_show_and_set_with_field_errors(api: Any, deps: Deps) -> None:
    names = {p["name"] for p in ok(api, "GET", "/policies")}
    assert "default" in names
    shown = ok(api, "GET", "/policies/default")
    assert shown["policy"]["name"] == "default"
    dry = ok(api, "PUT", "/policies/default", {"changes": {"max_attempts": 7}, "dry_run": True})
    assert dry["dry_run"] is True and deps.policies.effective("default").max_attempts != 7
    saved = ok(api, "PUT", "/policies/default", {"changes": {"max_attempts": 7}})
    assert saved["policy"]["max_attempts"] == 7 == deps.policies.effective("default").max_attempts
    status, error = call(api, "PUT", "/policies/default", {"changes": {"max_attempts": 0}})
    assert status == 400 and error["code"] in {"VALIDATION_FAILED", "CONFIG_ERROR"}
    assert "max_attempts" in error["message"]


def test_audit_verify_and_retry_health(api: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 1)
    verified = ok(api, "POST", "/audit/verify", {"target": run_ids[0]})
    assert verified["ok"] is True
    health = ok(api, "GET", "/health/retry")
    assert {c["name"] for c in health["checks"]} >= {
        "retry_worker",
        "stale_retry_plans",
        "acknowledgement_gaps",
        "disabled_schedules",
    }


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/tasks/nope", None, 404, "TASK_NOT_FOUND"),
        ("GET", "/runs/nope", None, 404, "RUN_NOT_FOUND"),
        ("GET", "/workorders/wo-nope", None, 404, "WORK_ORDER_NOT_FOUND"),
        ("GET", "/policies/nope", None, 404, "POLICY_NOT_FOUND"),
        ("POST", "/runs/nope/skip", {"reason": ""}, 400, "VALIDATION_FAILED"),
        ("POST", "/runs/nope/skip", None, 400, "VALIDATION_FAILED"),
        ("POST", "/tasks", {"document": {"tasks": [{"id": "Bad Id"}]}}, 400, "CONFIG_ERROR"),
        ("POST", "/tasks", {"dry_run": True}, 400, "VALIDATION_FAILED"),
        ("POST", "/internal/tasks/retry", {}, 400, "VALIDATION_FAILED"),
        ("POST", "/workorders", {"severity": "loud", "reason": "x"}, 400, "VALIDATION_FAILED"),
        ("GET", "/runs", None, 400, "VALIDATION_FAILED"),
        ("GET", "/nowhere", None, 404, "NO_SUCH_ROUTE"),
    ],
)
def test_bad_requests_get_a_json_error_naming_what_was_wrong(
    api: Any, method: str, path: str, body: Any, status: int, code: str
) -> None:
    got, error = call(api, method, path, body)
    assert (got, error["code"]) == (status, code), error
    assert error["message"] and "Traceback" not in json.dumps(error)


def test_a_caller_without_an_identity_is_refused(api: Any, deps: Deps) -> None:
    status, error = call(api, "PUT", "/tasks/nightly/pause", caller=None)
    assert (status, error["code"]) == (403, "FORBIDDEN")


def test_an_unexpected_error_is_a_500_without_a_stack_trace(api: Any, deps: Deps, monkeypatch: Any) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(deps.store, "list_tasks", boom)
    monkeypatch.setattr(deps.store, "get_task", boom)
    status, error = call(api, "GET", "/tasks")
    assert (status, error["code"]) == (500, "INTERNAL")
    assert "secret" not in json.dumps(error)
