"""Bad request bodies get a JSON error naming what is wrong, never a 500 (issue 14).

Every route that takes a body, through the real Lambda handler on API Gateway-shaped events,
with bodies hypothesis builds: text that is not JSON, JSON of any shape, and objects with the
route's own field names holding values of the wrong type, out of range or absurd.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rebound import wiring
from rebound.engine.deps import Deps
from support import Context

pytestmark = pytest.mark.property_based
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = json.loads((ROOT / "events" / "ops_api" / "get-health.json").read_text())

ROUTES: list[tuple[str, str, list[str]]] = [
    ("POST", "/tasks", ["document", "dry_run", "allow_past"]),
    ("POST", "/internal/tasks/register", ["document", "dry_run", "allow_past"]),
    ("PUT", "/tasks/nightly/pause", ["reason"]),
    ("POST", "/tasks/nightly/run", ["token"]),
    ("POST", "/runs/nightly:20260307T020000Z/retry", ["timeout_s", "max_attempts", "reason"]),
    ("POST", "/runs/nightly:20260307T020000Z/skip", ["reason"]),
    ("POST", "/runs/retry-failed", ["task_id", "since", "reason"]),
    ("POST", "/internal/tasks/retry", ["run_id", "task_id", "since", "reason"]),
    ("POST", "/dlq/redrive", ["task_id", "tenant", "error_code", "since", "until", "limit", "dry_run"]),
    ("POST", "/workorders", ["severity", "reason", "run_id", "task_id"]),
    ("POST", "/workorders/wo-0001/resolve", ["resolution", "note"]),
    ("PUT", "/policies/default", ["changes", "dry_run"]),
    ("POST", "/audit/verify", ["target"]),
    ("POST", "/tasks/dryrun", ["document", "window"]),
    ("POST", "/sla/rebuild", ["since", "tenant"]),
]
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
task_like = st.fixed_dictionaries(
    {"tasks": st.lists(st.dictionaries(st.sampled_from(["id", "tenant", "schedule", "target"]), json_values))}
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, str]:
    method, path, fields = draw(st.sampled_from(ROUTES))
    shape = draw(st.sampled_from(["text", "json", "fields"]))
    if shape == "text":
        return method, path, draw(st.text(max_size=100))
    if shape == "json":
        return method, path, json.dumps(draw(json_values))
    chosen = draw(st.lists(st.sampled_from(fields), unique=True, max_size=len(fields)))
    body = {name: draw(task_like if name == "document" else json_values) for name in chosen}
    return method, path, json.dumps(body)


def send(method: str, path: str, body: str) -> tuple[int, Any]:
    from rebound.handlers import ops_api

    event = copy.deepcopy(SAMPLE)
    event["httpMethod"] = event["requestContext"]["httpMethod"] = method
    event["path"] = path
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["body"] = body
    event["headers"]["Content-Type"] = "application/json"
    response = ops_api.lambda_handler(event, Context())
    return int(response["statusCode"]), json.loads(response.get("body") or "null")


@FUZZ
@given(request=requests())
@example(request=("POST", "/runs/retry-failed", '{"task_id": ""}'))
@example(request=("POST", "/dlq/redrive", '{"task_id": "", "dry_run": true}'))
@example(request=("POST", "/internal/tasks/retry", '{"run_id": ""}'))
@example(request=("POST", "/tasks/dryrun", '{"document": {"tasks": []}, "window": "99999999999999d"}'))
@example(request=("POST", "/sla/rebuild", '{"since": "99999999999999d"}'))
def test_a_bad_body_is_a_json_error_with_a_code_never_a_500(
    deps: Deps, request: tuple[str, str, str]
) -> None:
    wiring.use(deps)
    try:
        status, answer = send(*request)
    finally:
        wiring.use(None)

    assert status < 500, (request, status, answer)
    assert isinstance(answer, dict), answer
    if status >= 400:
        assert answer.get("code") and answer.get("message"), answer
    if status == 400:
        assert "field" in answer or "key_path" in answer, answer
