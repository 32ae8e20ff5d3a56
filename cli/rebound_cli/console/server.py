"""The console's HTTP server: static assets and the operations API, in-process, on 127.0.0.1.

- **Access token.** Every launch makes a random token; the first line printed is the URL with it
  (``http://127.0.0.1:8765/?token=...``). The first visit trades it for an HttpOnly, SameSite=Strict
  cookie and a redirect to a clean URL. Every request must carry it (the cookie or an
  ``X-Console-Token`` header), else 401.
- **CSRF.** A second per-launch token is put in the page (``<meta name="csrf-token">``); POST, PUT
  and DELETE must send it back in ``X-CSRF-Token`` and, when the browser says where they come from,
  an ``Origin`` of this server, else 403. The ``Host`` header must name this server too (no DNS
  rebinding).
- **The API.** ``/api/<path>`` becomes an API Gateway REST event for ``<path>`` with the operator's
  identity as ``requestContext.identity.userArn``, resolved by the same ``build_app`` the ``ops_api``
  Lambda runs, so the console can never disagree with the API or the CLI. One request at a time
  reaches the resolver (it keeps the current event on itself).
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from rebound.api import build_app
from rebound.engine.deps import Deps

log = logging.getLogger(__name__)

COOKIE = "rebound_console"
TOKEN_HEADER = "X-Console-Token"
CSRF_HEADER = "X-CSRF-Token"
MUTATING = {"POST", "PUT", "DELETE", "PATCH"}
MAX_BODY = 1_000_000
ASSETS = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "views.js": "text/javascript; charset=utf-8",
    "workstreams.js": "text/javascript; charset=utf-8",
    "tasks.js": "text/javascript; charset=utf-8",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def asset(name: str) -> bytes:
    """A file shipped in ``rebound_cli/console/assets``."""
    return resources.files("rebound_cli.console").joinpath("assets", name).read_bytes()


class _Context:
    """The little of a Lambda context the resolver and its logger look at."""

    function_name = "rebound-console"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:local:000000000000:function:rebound-console"
    aws_request_id = "console"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def api_event(
    method: str, path: str, query: str, headers: dict[str, str], body: str | None, caller: str
) -> dict[str, Any]:
    """An API Gateway REST (proxy) event, shaped as API Gateway sends it to the ``ops_api`` Lambda."""
    params = parse_qs(query, keep_blank_values=False)
    now = time.time()
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in params.items()} or None,
        "multiValueQueryStringParameters": params or None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": path,
            "stage": "console",
            "protocol": "HTTP/1.1",
            "requestId": secrets.token_hex(8),
            "requestTimeEpoch": int(now * 1000),
            "identity": {"userArn": caller, "caller": caller, "sourceIp": "127.0.0.1"},
        },
        "body": body,
        "isBase64Encoded": False,
    }


PASSED_HEADERS = ("X-Next-After", "Location")
"""API response headers the console passes on to the page."""


class ConsoleServer:
    """The console on ``host:port`` (0: a free port) over ``deps`` with ``caller`` as the operator.

    ``caller`` may be a function, asked once on the first API request (STS is only called then).
    """

    def __init__(
        self,
        deps: Callable[[], Deps],
        caller: str | Callable[[], str],
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
    ) -> None:
        self.app = build_app(deps)
        self._caller = caller
        self.token = secrets.token_urlsafe(24)
        self.csrf = secrets.token_urlsafe(24)
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """What to open: the console with this launch's access token."""
        return f"{self.origin}/?token={self.token}"

    def caller(self) -> str:
        if callable(self._caller):
            self._caller = self._caller()
        return self._caller

    def allowed_hosts(self) -> set[str]:
        return {f"{self.host}:{self.port}", f"127.0.0.1:{self.port}", f"localhost:{self.port}"}

    def allowed_origins(self) -> set[str]:
        return {f"http://{h}" for h in self.allowed_hosts()}

    def start(self) -> ConsoleServer:
        """Serve in a daemon thread (``stop`` ends it)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="console", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def call_api(
        self, method: str, path: str, query: str, body: str | None
    ) -> tuple[int, bytes, str, dict[str, str]]:
        """The API's answer: status, body, content type and the headers a page passes on
        (``PASSED_HEADERS``: a page's cursor, a job's location)."""
        headers = {"Accept": "application/json", "Host": self.origin.removeprefix("http://")}
        if body:
            headers["Content-Type"] = "application/json"
        event = api_event(method, path or "/", query, headers, body or None, self.caller())
        with self.lock:
            response = self.app.resolve(event, _Context())  # type: ignore[arg-type]
        content_type = "application/json"
        for key, value in (response.get("headers") or {}).items():
            if key.lower() == "content-type":
                content_type = str(value)
        for key, values in (response.get("multiValueHeaders") or {}).items():
            if key.lower() == "content-type" and values:
                content_type = str(values[0])
        passed: dict[str, str] = {}
        for key, value in (response.get("headers") or {}).items():
            if key in PASSED_HEADERS:
                passed[key] = str(value)
        for key, values in (response.get("multiValueHeaders") or {}).items():
            if key in PASSED_HEADERS and values:
                passed[key] = str(values[0])
        text = response.get("body") or ""
        return int(response["statusCode"]), str(text).encode(), content_type, passed


def _handler(console: ConsoleServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "rebound-console"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            return None  # requests are not logged: the access token must not land in a terminal

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        # ------------------------------------------------------------------ checks
        def _cookie_token(self) -> str:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(self.headers.get("Cookie") or "")
            except Exception:
                return ""
            morsel = jar.get(COOKIE)
            return morsel.value if morsel else ""

        def _authorized(self, query_token: str) -> bool:
            for given in (self.headers.get(TOKEN_HEADER) or "", self._cookie_token(), query_token):
                if given and hmac.compare_digest(given.encode(), console.token.encode()):
                    return True
            return False

        def _csrf_ok(self) -> bool:
            given = self.headers.get(CSRF_HEADER) or ""
            if not given or not hmac.compare_digest(given.encode(), console.csrf.encode()):
                return False
            origin = self.headers.get("Origin")
            return origin is None or origin in console.allowed_origins()

        # ------------------------------------------------------------------ dispatch
        def _handle(self, method: str) -> None:
            try:
                self._dispatch(method)
            except (BrokenPipeError, ConnectionResetError):
                return
            except Exception as exc:
                log.exception("console request failed")
                message = f"console error: {type(exc).__name__}: {exc}"  # the operator's own console
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"code": "INTERNAL", "message": message})

        def _dispatch(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            if (self.headers.get("Host") or "") not in console.allowed_hosts():
                self._json(HTTPStatus.FORBIDDEN, {"code": "BAD_HOST", "message": "unexpected Host header"})
                return
            query_token = query.get("token", [""])[-1] if parts.path == "/" and method == "GET" else ""
            if not self._authorized(query_token):
                self._json(
                    HTTPStatus.UNAUTHORIZED,
                    {"code": "UNAUTHORIZED", "message": "open the URL `rebound console` printed (its token)"},
                )
                return
            if query_token:  # trade the token in the URL for a cookie and a clean address
                self.send_response(HTTPStatus.SEE_OTHER)
                self.send_header("Set-Cookie", f"{COOKIE}={console.token}; Path=/; HttpOnly; SameSite=Strict")
                self.send_header("Location", "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if method in MUTATING and not self._csrf_ok():
                self._json(
                    HTTPStatus.FORBIDDEN,
                    {"code": "CSRF", "message": f"a changing request needs the {CSRF_HEADER} header"},
                )
                return
            if parts.path.startswith("/api/") or parts.path == "/api":
                # API Gateway hands the function the decoded path (run ids have colons in them).
                self._api(method, unquote(parts.path.removeprefix("/api")), parts.query)
            elif method != "GET":
                self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"code": "METHOD", "message": "GET only"})
            elif parts.path in ("/", "/index.html"):
                page = asset("index.html").replace(b"__CSRF_TOKEN__", console.csrf.encode())
                self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")
            elif parts.path.startswith("/assets/") and parts.path.removeprefix("/assets/") in ASSETS:
                name = parts.path.removeprefix("/assets/")
                self._send(HTTPStatus.OK, asset(name), ASSETS[name])
            else:
                self._json(HTTPStatus.NOT_FOUND, {"code": "NOT_FOUND", "message": f"no page {parts.path}"})

        def _api(self, method: str, path: str, query: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                too_large = {"code": "TOO_LARGE", "message": "body too large"}
                self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_large)
                return
            body = self.rfile.read(length).decode() if length else None
            status, payload, content_type, headers = console.call_api(method, path, query, body)
            self._send(status, payload, content_type, headers)

        # ------------------------------------------------------------------ responses
        def _json(self, status: int, body: dict[str, Any]) -> None:
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(
            self, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            for key, value in SECURITY_HEADERS.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

    return Handler
