"""The console's server (``rebound_cli.console``): the access token (401 without it), CSRF on
changes (403 without the header or from another origin), the Host check, the static assets, and
the operations API served in-process against moto with the operator as the actor."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from rebound.engine.deps import Deps
from rebound_cli.console import ConsoleServer
from rebound_cli.console.server import ASSETS, COOKIE, CSRF_HEADER, TOKEN_HEADER
from support import dead_letters

pytestmark = pytest.mark.integration
OPERATOR = "arn:aws:sts::123456789012:assumed-role/oncall/bob"


@pytest.fixture
def console(deps: Deps) -> Iterator[ConsoleServer]:
    server = ConsoleServer(lambda: deps, OPERATOR, port=0).start()
    yield server
    server.stop()


def request(
    server: ConsoleServer, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    payload = json.dumps(body).encode() if body is not None else None
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    connection.request(method, path, body=payload, headers=all_headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def authed(server: ConsoleServer, **extra: str) -> dict[str, str]:
    return {TOKEN_HEADER: server.token, **extra}


def test_the_url_carries_a_fresh_token_for_127_0_0_1(console: ConsoleServer, deps: Deps) -> None:
    assert console.url.startswith(f"http://127.0.0.1:{console.port}/?token=")
    assert console.token in console.url and len(console.token) >= 24
    other = ConsoleServer(lambda: deps, OPERATOR, port=0)
    try:
        assert other.token != console.token and other.csrf != console.csrf
    finally:
        other.httpd.server_close()


@pytest.mark.parametrize("path", ["/", "/assets/console.js", "/api/health", "/api/queues"])
def test_every_request_without_the_token_is_401(console: ConsoleServer, path: str) -> None:
    status, _, body = request(console, "GET", path)
    assert status == 401 and json.loads(body)["code"] == "UNAUTHORIZED"
    status, _, _ = request(console, "GET", path, headers={TOKEN_HEADER: "wrong"})
    assert status == 401
    status, _, _ = request(console, "GET", path, headers={"Cookie": f"{COOKIE}=wrong"})
    assert status == 401


def test_the_first_visit_trades_the_token_for_a_cookie(console: ConsoleServer) -> None:
    status, headers, _ = request(console, "GET", f"/?token={console.token}")
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={console.token}")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, headers, page = request(console, "GET", "/", headers={"Cookie": f"{COOKIE}={console.token}"})
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert console.csrf.encode() in page and b"__CSRF_TOKEN__" not in page
    assert "default-src 'self'" in headers["content-security-policy"]
    # The token only opens the page: it is not accepted in the query of an API call.
    status, _, _ = request(console, "GET", f"/api/health?token={console.token}")
    assert status == 401


def test_the_assets_ship_in_the_package_and_fetch_nothing_from_elsewhere(console: ConsoleServer) -> None:
    assert {"console.js", "views.js", "workstreams.js", "console.css"} <= set(ASSETS)
    for name, kind in ((name, kind.split(";")[0]) for name, kind in ASSETS.items()):
        status, headers, body = request(console, "GET", f"/assets/{name}", headers=authed(console))
        assert status == 200 and headers["content-type"].startswith(kind) and body
        assert b"http://" not in body and b"https://" not in body
    status, _, _ = request(console, "GET", "/assets/../server.py", headers=authed(console))
    assert status == 404


def test_a_change_needs_the_csrf_header_and_this_origin(console: ConsoleServer, deps: Deps) -> None:
    body = {"severity": "low", "reason": "heads up"}
    status, _, data = request(console, "POST", "/api/workorders", body, headers=authed(console))
    assert status == 403 and json.loads(data)["code"] == "CSRF"
    status, _, _ = request(
        console, "POST", "/api/workorders", body, headers=authed(console, **{CSRF_HEADER: "forged"})
    )
    assert status == 403
    status, _, _ = request(
        console,
        "POST",
        "/api/workorders",
        body,
        headers=authed(console, **{CSRF_HEADER: console.csrf, "Origin": "http://evil.example"}),
    )
    assert status == 403
    status, _, data = request(
        console,
        "POST",
        "/api/workorders",
        body,
        headers=authed(console, **{CSRF_HEADER: console.csrf, "Origin": console.origin}),
    )
    assert status == 200, data
    order = json.loads(data)
    assert order["state"] == "open"
    trail = deps.store.audit_trail(f"workorder#{order['work_order_id']}")
    assert trail and trail[-1].actor == OPERATOR  # the operator's identity, from the server


def test_a_foreign_host_header_is_refused(console: ConsoleServer) -> None:
    status, _, _ = request(console, "GET", "/api/health", headers=authed(console, Host="evil.example:8765"))
    assert status == 403


def test_the_api_is_served_in_process(console: ConsoleServer, deps: Deps) -> None:
    run_ids = dead_letters(deps, 2)
    status, _, data = request(console, "GET", "/api/health", headers=authed(console))
    assert status == 200 and json.loads(data)["environment"] == deps.settings.environment
    path = "/api/runs?state=dead_lettered&limit=10"
    status, _, data = request(console, "GET", path, headers=authed(console))
    assert status == 200 and sorted(r["run_id"] for r in json.loads(data)) == sorted(run_ids)
    status, _, data = request(console, "GET", "/api/queues", headers=authed(console))
    depths = {q["queue"]: q["total"] for q in json.loads(data)}
    assert status == 200 and depths["dlq"] == 2
    status, _, data = request(console, "GET", "/api/runs/nope", headers=authed(console))
    assert status == 404 and json.loads(data)["code"] == "RUN_NOT_FOUND"
    status, _, data = request(
        console,
        "PUT",
        "/api/policies/default",
        {"changes": {"max_attempts": 0}},
        headers=authed(console, **{CSRF_HEADER: console.csrf}),
    )
    assert status == 400 and "max_attempts" in json.loads(data)["message"]
