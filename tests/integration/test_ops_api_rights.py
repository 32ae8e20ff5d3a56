"""Every AWS call the ops API's Lambda makes while it serves its routes is allowed by its role in
the synthesized template of every environment, and its role grants nothing that no route uses.

Each route test of ``test_ops_api``, ``test_ops_api_queues``, ``test_ops_api_workstreams``,
``test_ops_api_state``, ``test_async_reports``, ``test_ops_api_preflight``,
``test_ops_api_targets`` and ``test_ops_api_approvals`` runs here, and only here in a whole session
(``tests/integration/conftest.py``), with its own fixtures while a botocore
``before-parameter-build`` hook on the session the handler's clients come from records each call
made *inside* ``ops_api.lambda_handler`` (the tests' own setup calls are not counted). Each request
starts cold (no secret cached), as in a new Lambda environment. The redrive job's self-invocation
goes through the route tests' stand-in Lambda client (``test_ops_api.Invocations``), whose
``invoke`` calls are recorded the same way.

Each call is then decided as the rehearsal decides it (``rebound_local.rehearse.rights``): its
names become the template's, IAM's actions and resource ARNs follow from it (a transaction item by
item, ``iam:PassRole`` for a schedule's role), and the ops API's role in each environment's
template (with the audit key's policy for KMS) must allow every one. Once every route test has
run, every grant of the role (action on resource) must have been used by some call, but the
plumbing that comes with the grants (``rights.PLUMBING``).
"""

from __future__ import annotations

import functools
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
import test_ops_api_approvals
import test_ops_api_preflight
import test_ops_api_queues
import test_ops_api_state
import test_ops_api_targets
import test_ops_api_workstreams
from _pytest.fixtures import FixtureFunctionDefinition
from api_support import ROUTE_TEST_FILES
from synth_support import shared_assembly
from test_async_reports import started  # noqa: F401  (fixture of the route tests run here)
from test_ops_api import self_invoking  # noqa: F401  (fixture of the route tests run here)

from rebound import resources as r
from rebound import wiring
from rebound.adapters.completion_keys import SecretCompletionKeys
from rebound.api import build_app, openapi_document
from rebound.engine.deps import Deps
from rebound.settings import Settings
from rebound_local.rehearse.rights import RoleCheck
from rebound_local.rehearse.template import Template

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ROUTE_MODULES = (
    test_ops_api,
    test_ops_api_queues,
    test_ops_api_workstreams,
    test_ops_api_state,
    test_async_reports,
    test_ops_api_preflight,
    test_ops_api_targets,
    test_ops_api_approvals,
)


def test_the_route_modules_are_the_files_the_session_leaves_to_this_check() -> None:
    assert sorted(Path(str(m.__file__)).name for m in ROUTE_MODULES) == sorted(ROUTE_TEST_FILES)


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


@functools.cache
def routes() -> list[tuple[str, str]]:
    """The route table: (METHOD, path template) for every route. Built once: the OpenAPI document
    of the whole app takes a second to generate, and every recorded call asks for its route."""
    document = openapi_document(build_app(lambda: None))
    return sorted((method.upper(), path) for path, ops in document["paths"].items() for method in ops)


@functools.cache
def _patterns() -> list[tuple[str, str, re.Pattern[str]]]:
    return [
        (method, template, re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"))
        for method, template in routes()
    ]


def route_of(method: str, path: str) -> str | None:
    for route_method, template, pattern in _patterns():
        if route_method == method and pattern.match(path):
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
    """Each call made inside the handler: (service, operation, parameters)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.routes: set[str] = set()
        self._inside = 0
        self._lock = threading.Lock()

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
        with self._lock:
            self.calls.append((service, operation, json.loads(json.dumps(params, default=str))))


@pytest.fixture
def recorder(
    aws: boto3.session.Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Recorder]:
    """Registered on the session before ``deps`` builds its clients (botocore copies the session's
    hooks into each client as it is made), after the resources are provisioned."""
    from rebound.handlers import ops_api

    recording = Recorder()
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


ENVIRONMENTS = ("dev", "staging", "prod")
USED: dict[str, set[tuple[str, str]]] = {}
"""Environment -> every (action, resource) a route test's calls used, across this module's tests."""
RAN: set[str] = set()
SERVED: set[str] = set()


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Template]:
    """Every environment's template, synthesized once a session, as ``make synth`` does."""
    folder = shared_assembly(tmp_path_factory)
    return {env: Template.load(folder / f"Rebound-{env}.template.json") for env in ENVIRONMENTS}


def checks(templates: dict[str, Template], settings: Settings) -> dict[str, RoleCheck]:
    own = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
    return {env: RoleCheck(t, r.OPS_API_FUNCTION, env, settings, own) for env, t in templates.items()}


@pytest.mark.parametrize(("name", "route_test", "case"), route_tests(), ids=[n for n, *_ in route_tests()])
def test_every_call_a_route_makes_is_allowed_by_the_ops_api_role_in_every_environment(
    name: str,
    route_test: Callable[..., Any],
    case: dict[str, Any],
    recorder: Recorder,
    settings: Settings,
    templates: dict[str, Template],
    request: pytest.FixtureRequest,
) -> None:
    arguments = {
        p: case[p] if p in case else request.getfixturevalue(p)
        for p in inspect.signature(route_test).parameters
    }
    route_test(**arguments)
    denied = []
    for env, check in checks(templates, settings).items():
        for service, operation, params in recorder.calls:
            for action, resource, decision in check.decide(service, operation, params):
                if not decision.allowed:
                    denied.append(f"{env}: {action} on {resource} ({decision.reason})")
        USED.setdefault(env, set()).update(check.used)
    RAN.add(name)
    SERVED.update(recorder.routes)
    assert not denied, f"{name}: the ops API's role does not allow {sorted(set(denied))}"


def test_every_route_is_served_and_every_grant_of_the_role_is_used(
    settings: Settings, templates: dict[str, Template]
) -> None:
    """Runs after the route tests (in this module's order, on one worker with ``--dist loadfile``)."""
    if {name for name, *_ in route_tests()} != RAN:
        pytest.skip("only some of the route tests ran in this session: the grants they use are not all known")
    missing = {f"{m} {p}" for m, p in routes()} - SERVED
    assert not missing, f"routes no route test serves, so their AWS calls are not checked: {sorted(missing)}"
    for env, check in checks(templates, settings).items():
        check.used = USED[env]
        assert not check.unused(), f"{env}: granted to the ops API but used by no route: {check.unused()}"
        assert not too_wide(check), f"{env}: granted on more than its own resources: {too_wide(check)}"


STAR = {
    "scheduler:ListSchedules",
    "cloudwatch:GetMetricStatistics",
    "xray:PutTraceSegments",  # active tracing (tracing: true)
    "xray:PutTelemetryRecords",
}
"""The actions AWS takes no resource ARN for."""


def too_wide(check: RoleCheck) -> list[str]:
    """Grants wider than the environment's own resources: ``*`` but for ``STAR``; schedules outside
    the group's; rules other than the bus's ``task-*``; a role handed on other than the scheduler's."""
    deployed = check.deployed
    group = f"arn:aws:scheduler:us-east-1:123456789012:schedule/{deployed.schedule_group}/*"
    rules = f"arn:aws:events:us-east-1:123456789012:rule/{deployed.bus_name}/task-*"
    out = []
    for statement in check.function.statements:
        if statement.get("Effect") != "Allow":
            continue
        for action in as_list(statement["Action"]):
            for resource in as_list(statement["Resource"]):
                wide = (
                    (resource == "*" and action not in STAR)
                    or (action.startswith("scheduler:") and action not in STAR and resource != group)
                    or (action.startswith("events:") and action != "events:PutEvents" and resource != rules)
                    or (action == "iam:PassRole" and resource != deployed.scheduler_role_arn)
                )
                if wide:
                    out.append(f"{action} on {resource}")
    return out


def as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
