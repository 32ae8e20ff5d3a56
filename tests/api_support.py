"""Calling the ops API's real handler with real-shaped API Gateway events (``events/ops_api``), as
a caller with an IAM identity: what the API tests share."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from support import Context

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = json.loads((ROOT / "events" / "ops_api" / "get-health.json").read_text())
ALICE = SAMPLE["requestContext"]["identity"]["userArn"]
ROUTE_TEST_FILES = (
    "test_ops_api.py",
    "test_ops_api_queues.py",
    "test_ops_api_workstreams.py",
    "test_ops_api_state.py",
    "test_async_reports.py",
    "test_ops_api_preflight.py",
    "test_ops_api_targets.py",
    "test_ops_api_approvals.py",
)
"""The modules of route tests under ``tests/integration``, run by ``test_ops_api_rights`` (see
``tests/integration/conftest.py``)."""


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
