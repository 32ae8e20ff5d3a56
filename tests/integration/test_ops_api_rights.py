"""Every AWS call the ops API's Lambda makes while it serves its routes, recorded.

Each route test of ``test_ops_api``, ``test_ops_api_queues``, ``test_ops_api_workstreams``,
``test_ops_api_state``, ``test_async_reports``, ``test_ops_api_preflight`` and
``test_ops_api_targets`` runs again here
with its own fixtures while a botocore
``before-parameter-build`` hook on the session the handler's clients come from records each call
made *inside* ``ops_api.lambda_handler`` (the tests' own setup calls are not counted): the
service, the operation and the logical resource (table, queue, ...). A transaction is recorded per
item (IAM authorizes each item as its own action). Each request starts cold (no secret cached), as
in a new Lambda environment. The redrive job's self-invocation goes through the route tests'
stand-in Lambda client (``test_ops_api.Invocations``), whose ``invoke`` calls are recorded the
same way.

The calls are committed per route test in ``tests/infra/ops_api_calls.json``; the infra test
``tests/infra/test_infra_ops_api_rights.py`` checks the ops_api role in every environment's
template against them. When a route starts making a new call, this test fails until the file is
refreshed: ``REBOUND_RECORD_OPS_CALLS=1 pytest tests/integration/test_ops_api_rights.py``.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import test_async_reports
import test_ops_api
import test_ops_api_preflight
import test_ops_api_queues
import test_ops_api_state
import test_ops_api_targets
import test_ops_api_workstreams
from _pytest.fixtures import FixtureFunctionDefinition
from test_async_reports import started  # noqa: F401  (fixture of the route tests run here)
from test_ops_api import self_invoking  # noqa: F401  (fixture of the route tests run here)

from rebound import wiring
from rebound.adapters.completion_keys import SecretCompletionKeys
from rebound.api import build_app, openapi_document
from rebound.engine.deps import Deps
from rebound.settings import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CALLS_FILE = ROOT / "tests" / "infra" / "ops_api_calls.json"
RECORD = os.environ.get("REBOUND_RECORD_OPS_CALLS") == "1"
ROUTE_MODULES = (
    test_ops_api,
    test_ops_api_queues,
    test_ops_api_workstreams,
    test_ops_api_state,
    test_async_reports,
    test_ops_api_preflight,
    test_ops_api_targets,
)
# The transaction's item kinds, as the IAM actions that authorize them.
TRANSACT_ITEM = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


def route_tests() -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """Each route test, once per case of its own ``parametrize`` (those arguments given here)."""
    out: list[tuple[str, Callable[..., Any], dict[str, Any]]] = []
    for module in ROUTE_MODULES:
        for name, fn in sorted(vars(module).items()):
            if not (name.startswith("test_") and inspect.isfunction(fn)):
                continue
            cases: list[dict[str, Any]] = [{}]
            for mark in getattr(fn, "pytestmark", []):
                if mark.name == "parametrize":
                    argnames = mark.args[0]
                    names = [
                        n.strip() for n in (argnames.split(",") if isinstance(argnames, str) else argnames)
                    ]
                    values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
                    cases = [{**case, **dict(zip(names, v, strict=True))} for case in cases for v in values]
            for i, case in enumerate(cases):
                out.append((f"{module.__name__}::{name}" + (f"[{i}]" if case else ""), fn, case))
    return out


def routes() -> list[tuple[str, str]]:
    """The route table: (METHOD, path template) for every route."""
    document = openapi_document(build_app(lambda: None))
    return sorted((method.upper(), path) for path, ops in document["paths"].items() for method in ops)


def route_of(method: str, path: str) -> str | None:
    for route_method, template in routes():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if route_method == method and re.match(pattern, path):
            return f"{route_method} {template}"
    return None


def cold_start() -> None:
    """Each request as a new Lambda environment serves it: nothing read before is cached (the
    completion key read by the route test's own setup is read again by the handler)."""
    deps = wiring.deps()
    deps.cache.clear()
    if isinstance(deps.completion_keys, SecretCompletionKeys):
        deps.completion_keys._secrets.forget()


class Recorder:
    """(service, IAM-style operation, logical resource) of each call made inside the handler."""

    def __init__(self, settings: Settings) -> None:
        self.calls: set[tuple[str, str, str]] = set()
        self.routes: set[str] = set()
        self._inside = 0
        self._lock = threading.Lock()
        self._tables = {name: logical for logical, name in settings.tables.items()}
        self._queues = {ref.url: logical for logical, ref in settings.queues.items()}
        self._settings = settings

    def handler(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def serve(event: dict[str, Any], context: Any) -> Any:
            if "httpMethod" in event:
                route = route_of(event["httpMethod"], event["path"])
                if route:
                    self.routes.add(route)
            cold_start()
            with self._lock:
                self._inside += 1
            try:
                return inner(event, context)
            finally:
                with self._lock:
                    self._inside -= 1

        return serve

    def on_call(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if self._inside:
            self.record(model.service_model.service_name, model.name, params)

    def record(self, service: str, operation: str, params: dict[str, Any]) -> None:
        for op, resource in self._resources(service, operation, params):
            with self._lock:
                self.calls.add((service, op, resource))

    def _resources(self, service: str, operation: str, params: dict[str, Any]) -> list[tuple[str, str]]:
        if service == "dynamodb":
            if operation == "TransactWriteItems":
                return [
                    (TRANSACT_ITEM[kind], self._table(body["TableName"]))
                    for item in params["TransactItems"]
                    for kind, body in item.items()
                ]
            if operation == "TransactGetItems":
                return [("GetItem", self._table(i["Get"]["TableName"])) for i in params["TransactItems"]]
            if operation.startswith("Batch"):
                return [(operation, self._table(name)) for name in params["RequestItems"]]
            return [(operation, self._table(params["TableName"]))]
        if service == "sqs":
            return [(operation, self._queues.get(params.get("QueueUrl", ""), "*"))]
        if service == "scheduler":
            group = params.get("GroupName")
            return [(operation, "group" if group == self._settings.schedule_group else str(group))]
        if service == "events":
            bus = params.get("EventBusName") or self._settings.bus_name
            return [(operation, "bus" if bus == self._settings.bus_name else str(bus))]
        if service == "lambda":
            own = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
            return [(operation, "self" if params.get("FunctionName") == own else "other")]
        if service in ("ssm", "secretsmanager"):
            name = str(params.get("Name") or params.get("SecretId"))
            return [(operation, "completion_key" if name == self._settings.completion_key else name)]
        if service == "kms":
            return [
                (operation, "audit_key" if params.get("KeyId") == self._settings.audit_key_id else "other")
            ]
        if service == "sns":
            return [(operation, "topic" if params.get("TopicArn") == self._settings.topic_arn else "other")]
        return [(operation, "*")]

    def _table(self, name: str) -> str:
        return self._tables.get(name, name)


@pytest.fixture
def recorder(
    aws: boto3.session.Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Recorder]:
    """Registered on the session before ``deps`` builds its clients (botocore copies the session's
    hooks into each client as it is made), after the resources are provisioned."""
    from rebound.handlers import ops_api

    recording = Recorder(settings)
    aws.events.register("before-parameter-build", recording.on_call)
    monkeypatch.setattr(ops_api, "lambda_handler", recording.handler(ops_api.lambda_handler))
    stand_in = test_ops_api.Invocations.invoke

    def invoke(self: Any, **kwargs: Any) -> dict[str, Any]:
        recording.record("lambda", "Invoke", kwargs)
        return stand_in(self, **kwargs)

    monkeypatch.setattr(test_ops_api.Invocations, "invoke", invoke)
    yield recording
    aws.events.unregister("before-parameter-build", recording.on_call)


@pytest.fixture
def api(deps: Deps, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The route test's own module's ``api`` fixture: each sets the handler up its own way."""
    module = sys.modules[request.node.callspec.params["route_test"].__module__]
    own = getattr(module, "api", None)
    setup = own if isinstance(own, FixtureFunctionDefinition) else test_ops_api.api
    yield from setup.__wrapped__(deps)


def committed() -> dict[str, Any]:
    return json.loads(CALLS_FILE.read_text()) if CALLS_FILE.exists() else {"tests": {}}


@pytest.mark.parametrize(("name", "route_test", "case"), route_tests(), ids=[n for n, *_ in route_tests()])
def test_a_route_test_makes_exactly_the_recorded_calls(
    name: str,
    route_test: Callable[..., Any],
    case: dict[str, Any],
    recorder: Recorder,
    request: pytest.FixtureRequest,
) -> None:
    arguments = {
        p: case[p] if p in case else request.getfixturevalue(p)
        for p in inspect.signature(route_test).parameters
    }
    route_test(**arguments)
    seen = {
        "routes": sorted(recorder.routes),
        "calls": [list(c) for c in sorted(recorder.calls)],
    }
    if RECORD:
        data = committed()
        data["tests"][name] = seen
        data["tests"] = dict(sorted(data["tests"].items()))
        CALLS_FILE.write_text(json.dumps(data, indent=1) + "\n")
    assert committed()["tests"].get(name) == seen, (
        f"{name} makes other AWS calls than {CALLS_FILE.relative_to(ROOT)} records: refresh it with "
        "REBOUND_RECORD_OPS_CALLS=1, then grant what is new in rebound_infra.permissions.ACCESS['ops_api']"
    )


def test_the_recording_covers_every_route_and_no_stale_test() -> None:
    tests = committed()["tests"]
    assert set(tests) == {name for name, *_ in route_tests()}, "stale entries: refresh the recording"
    served = {route for entry in tests.values() for route in entry["routes"]}
    missing = {f"{m} {p}" for m, p in routes()} - served
    assert not missing, f"routes no route test serves, so their AWS calls are not recorded: {sorted(missing)}"
