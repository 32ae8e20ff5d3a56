"""The resolver: request validation, JSON errors with a stable code, the OpenAPI document.

Every error is ``{"code", "message", ...details}`` with the status its class names (400 bad input,
403 no right, 404 unknown id, 409 conflict, 429 throttled, 503 AWS unavailable). A request that
does not match a route's parameters or body is a 400 naming the field. Anything unexpected is a
500 with code ``INTERNAL``; the stack trace goes to the function's log, never to the caller.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from rebound.api.auth import Caller, Gate, caller_of
from rebound.config.loader import problem
from rebound.domain.errors import ReboundError
from rebound.engine.deps import Deps
from rebound.ops.access import TenantAccess, task_key
from rebound.ops.authz import Public, Rule
from rebound.ops.dlq.jobs import Continuation, ThreadContinuation

log = logging.getLogger(__name__)
Handler = TypeVar("Handler", bound=Callable[..., Any])
RULES_ATTRIBUTE = "rebound_rules"

TITLE = "Rebound operations API"
VERSION = "1"


@dataclass
class Api:
    """What a route needs: the app (for the current request), the dependencies, and the rule each
    route declares (``route``), which is applied before the route's code runs."""

    app: APIGatewayRestResolver
    deps: Callable[[], Deps]
    continuation: Continuation
    """How a redrive job's next chunk gets run (``rebound.ops.dlq.jobs``)."""
    rules: dict[tuple[str, str], Rule] = field(default_factory=dict)
    """Every route's rule, by (method, path): what the generated authorization test walks."""

    def route(self, method: str, path: str, rule: Rule, **options: Any) -> Callable[[Handler], Handler]:
        """Register a route with its rule: ``rule.decide`` runs before the route, with the request's
        validated parameters, and the route reads its caller from ``caller``/``gate``."""
        self.rules[(method.upper(), path)] = rule

        def decide(app: APIGatewayRestResolver, next_middleware: Any) -> Any:
            if not rule.public:
                gate = self.gate()
                tenant = rule.decide(gate, self.deps(), app.context.get("_route_args") or {})
                app.context.update(rebound_gate=gate, rebound_tenant=tenant)
            return next_middleware(app)

        decide.__name__ = f"authorize[{rule.action}]"
        route: Callable[[Handler], Handler] = self.app.route(
            path, method.upper(), middlewares=[decide], **options
        )
        return route

    def get(self, path: str, rule: Rule, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("GET", path, rule, **options)

    def post(self, path: str, rule: Rule, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("POST", path, rule, **options)

    def put(self, path: str, rule: Rule, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("PUT", path, rule, **options)

    def delete(self, path: str, rule: Rule, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("DELETE", path, rule, **options)

    def gate(self) -> Gate:
        """``authorize`` for the current request's caller (refusals audited): the one its route's
        rule decided with."""
        decided = self.app.context.get("rebound_gate")
        if isinstance(decided, Gate):
            return decided
        access = TenantAccess(self.deps())
        return Gate(caller_of(self.app.current_event.raw_event, access), access)

    @property
    def caller(self) -> Caller:
        """The current request's caller, as its route's rule let it through."""
        return self.gate().caller

    @property
    def tenant(self) -> str | None:
        """The tenant the route's rule decided on (``TenantFilter``: the one a filtered request is
        about; ``None``: every tenant, for an administrator)."""
        return self.app.context.get("rebound_tenant")

    def sees(self, tenant: str | None) -> bool:
        """Whether a list shows the caller a thing of ``tenant`` (one of no tenant: always)."""
        return tenant is None or self.gate().sees(tenant)

    def task_key(self, task_id: str | None) -> str | None:
        """The key of the task ``task_id`` names: a short id one task the caller may see has
        becomes that task's ``<tenant>.<id>`` (several: a 400 listing them)."""
        return task_key(self.deps().store, task_id, self.gate()) if task_id else task_id


def _error(status: int, body: dict[str, Any]) -> Response[str]:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body))


def _field(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def build_app(
    deps: Callable[[], Deps],
    environment: Callable[[], str] | None = None,
    continuation: Continuation | None = None,
) -> APIGatewayRestResolver:
    """The route table over ``deps``; ``environment`` names the environment ``GET /health``
    reports (the Lambda's own variable), else ``deps``' settings do. ``continuation`` runs a
    redrive job's next chunk: the ops API function passes its async self-invocation; by default
    a background thread does (in-process: the console, the local cloud)."""
    from rebound.api import (
        routes_approvals,
        routes_async,
        routes_queues,
        routes_recovery,
        routes_runs,
        routes_settings,
        routes_sla,
        routes_state,
        routes_targets,
        routes_tasks,
        routes_workstreams,
    )

    app = APIGatewayRestResolver(enable_validation=True)
    api = Api(app, deps, continuation or ThreadContinuation(deps))

    @app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
    def invalid(exc: RequestValidationError) -> Response[str]:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "type": "", "msg": "invalid request"}
        field = _field(first.get("loc", ()))
        message = f"{field}: {problem(first, 'field')}"
        return _error(400, {"code": "VALIDATION_FAILED", "message": message, "field": field})

    @app.exception_handler(ReboundError)  # type: ignore[untyped-decorator]
    def refused(exc: ReboundError) -> Response[str]:
        return _error(exc.http_status, exc.to_dict())

    @app.exception_handler(Exception)  # type: ignore[untyped-decorator]
    def unexpected(exc: Exception) -> Response[str]:
        log.exception("unexpected error in an ops API route")
        return _error(500, {"code": "INTERNAL", "message": "internal error; see the ops API function's log"})

    @app.not_found
    def unknown_route(exc: Exception) -> Response[str]:
        event = app.current_event
        return _error(404, {"code": "NO_SUCH_ROUTE", "message": f"no route {event.http_method} {event.path}"})

    @api.get("/health", Rule("health:ping", Public()))
    def health() -> dict[str, Any]:
        """What deploy pipelines and monitors poll: with ``environment``, answered without building
        the dependencies or touching AWS."""
        return {"status": "ok", "environment": (environment or (lambda: deps().settings.environment))()}

    document: dict[str, Any] = {}

    @api.get("/openapi.json", Rule("api:describe", Public()))
    def openapi() -> dict[str, Any]:
        if not document:  # the routes do not change once built: generate it once
            document.update(openapi_document(app))
        return document

    for module in (
        routes_tasks,
        routes_runs,
        routes_recovery,
        routes_settings,
        routes_queues,
        routes_async,
        routes_workstreams,
        routes_sla,
        routes_state,
        routes_targets,
        routes_approvals,
    ):
        module.register(api)
    setattr(app, RULES_ATTRIBUTE, api.rules)
    return app


def route_rules(app: APIGatewayRestResolver) -> dict[tuple[str, str], Rule]:
    """Every route's declared rule, by (method, path as registered: ``/runs/<run_id>``)."""
    return dict(getattr(app, RULES_ATTRIBUTE, {}))


def openapi_document(app: APIGatewayRestResolver) -> dict[str, Any]:
    """The OpenAPI document generated from the routes (``docs/openapi.json`` is this, committed)."""
    return dict(json.loads(app.get_openapi_json_schema(title=TITLE, version=VERSION)))
