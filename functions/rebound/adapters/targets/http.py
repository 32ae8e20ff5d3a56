"""The ``http`` target: POST a signed JSON envelope to a URL, within the attempt's deadline.

What the receiver gets:

- the body, ``invocation_document(call)``: run_id, task_id, tenant, attempt, scheduled_for,
  deadline, idempotency_key and the task's payload;
- ``traceparent`` (W3C Trace Context, version 00), ``Idempotency-Key``, ``X-Rebound-Run-Id``,
  ``X-Rebound-Attempt`` and ``X-Rebound-Timestamp`` (Unix seconds);
- when the target names a ``secret``, ``X-Rebound-Signature: t=<unix>,v1=<hex>``, where ``hex`` is
  HMAC-SHA256 keyed with the secret's value over ``"<t>.<raw body>"``. ``verify_signature`` is the
  receiver's side of that contract.

How the answer is classified (``Outcome.error_code``, then whether it is retryable):

- 2xx: success; a JSON object body is the output (bounded, see ``output_from``).
- 408, 429, 5xx: ``HTTP_<status>``, retryable.
- any other status, 3xx included (redirects are not followed): ``HTTP_<status>``, terminal.
- no complete answer before the deadline: ``TIMEOUT``, retryable.
- refused, reset, DNS or TLS failure: ``CONNECTION_ERROR``, retryable.
- the signing secret could not be read: ``SECRET_UNAVAILABLE``, retryable.
- a header or URL in the task that cannot be sent: ``HTTP_INVALID_REQUEST``, terminal.
- a URL or address the environment's ``TargetRules`` refuse (``rebound.domain.target_safety``):
  ``TARGET_REFUSED``, terminal; nothing is sent.

Before connecting, the host name is resolved and every address is checked; the connection goes
to the checked address while ``Host`` and TLS SNI (and certificate checks) keep the name, so DNS
rebinding between the check and the connect cannot switch it. Headers given as
``{secret: ...}`` are read at call time and never stored. An error answer's first bytes join the
message only for hosts in ``TargetRules.excerpt_hosts``, redacted (``safety.redact``).

The whole exchange (connect, send, headers, body) must finish by ``call.deadline``: each socket
operation gets only the time that is left. Only the standard library is used. Neither the key nor
the signature is ever logged, and the URL (which may carry a token) stays out of messages.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from rebound.adapters.secrets import SecretResolver, TenantSecrets
from rebound.adapters.targets.safety import Resolver, resolve
from rebound.domain import tracing
from rebound.domain.errors import OperationalError
from rebound.domain.jsonutil import dumps
from rebound.domain.target_safety import (
    TARGET_REFUSED,
    TargetRefused,
    check_url,
    redact,
    secret_references,
)
from rebound.domain.target_specs import CapacityReserve, HttpTarget, PluginTarget, SecretHeader, TargetRules
from rebound.domain.tenancy import secret_problem
from rebound.domain.timefmt import iso
from rebound.engine.ports import Clock
from rebound.engine.ports.targets import TIMEOUT, Invocation, Outcome

log = logging.getLogger(__name__)

CONNECTION_ERROR = "CONNECTION_ERROR"
SECRET_UNAVAILABLE = "SECRET_UNAVAILABLE"
SECRET_REFUSED = "SECRET_REFUSED"
"""A secret outside the task's tenant (``rebound.domain.tenancy.secret_problem``): terminal, unread."""
INVALID_REQUEST = "HTTP_INVALID_REQUEST"

SIGNATURE_HEADER = "X-Rebound-Signature"
TIMESTAMP_HEADER = "X-Rebound-Timestamp"
RUN_ID_HEADER = "X-Rebound-Run-Id"
ATTEMPT_HEADER = "X-Rebound-Attempt"
IDEMPOTENCY_HEADER = "Idempotency-Key"
TRACEPARENT_HEADER = "traceparent"
USER_AGENT = "Rebound-Target/1"

RETRYABLE_STATUSES = frozenset({408, 429})
MAX_RESPONSE_BYTES = 256 * 1024
"""Read at most this much of a response; the rest is left unread."""
MAX_OUTPUT_BYTES = 64 * 1024
"""A success's output larger than this (as JSON) is replaced by a short note."""

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_RESERVED = frozenset(
    h.lower()
    for h in (
        "Content-Type",
        "Content-Length",
        "Host",
        "User-Agent",
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        RUN_ID_HEADER,
        ATTEMPT_HEADER,
        IDEMPOTENCY_HEADER,
        TRACEPARENT_HEADER,
    )
)


# --------------------------------------------------------------------------- shared with other targets


def invocation_document(call: Invocation) -> dict[str, Any]:
    """What a target receives for one attempt (the HTTP body and the Lambda event)."""
    return {
        "run_id": call.run_id,
        "task_id": call.task_id,
        "tenant": call.tenant,
        "attempt": call.attempt,
        "scheduled_for": iso(call.scheduled_for),
        "deadline": iso(call.deadline),
        "idempotency_key": call.idempotency_key,
        "payload": call.payload,
    }


def request_document(target: HttpTarget, call: Invocation) -> dict[str, Any]:
    """The body of an attempt's request: ``invocation_document``; for a plugin, with the plugin's
    id, the task's payload as its ``parameters`` and the trace context (``traceparent``) in the
    body too, for runtimes that hand the body alone to the plugin; for a capacity reservation, the
    ``needs`` in place of the payload."""
    document = invocation_document(call)
    if isinstance(target, CapacityReserve):
        document["needs"] = document.pop("payload")
        document["trace"] = {TRACEPARENT_HEADER: traceparent(call)}
        return document
    if isinstance(target, PluginTarget):
        document["plugin_id"] = target.plugin_id
        document["parameters"] = document.pop("payload")
        document["trace"] = {TRACEPARENT_HEADER: traceparent(call)}
    return document


def output_from(raw: bytes, *, complete: bool = True, limit: int = MAX_OUTPUT_BYTES) -> dict[str, Any]:
    """A success's output from a response body: its JSON object, bounded to ``limit`` bytes.

    An empty body is ``{}``; JSON that is not an object is wrapped as ``{"result": ...}``; a body
    that is not JSON, or too large, becomes a note saying so rather than a failure.
    """
    if not raw.strip():
        return {}
    if not complete or len(raw) > limit:
        return {"output_truncated": True, "output_bytes_read": len(raw)}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {"output_not_json": True, "output_bytes": len(raw)}
    if isinstance(value, dict):
        return value
    return {} if value is None else {"result": value}


def deadline_seconds(call: Invocation, clock: Clock) -> float:
    """Seconds left before the attempt's deadline, by the injected clock."""
    return (call.deadline - clock.now()).total_seconds()


# --------------------------------------------------------------------------- signing and tracing


def signature_header(key: bytes, timestamp: int, body: bytes) -> str:
    """``t=<timestamp>,v1=<hex HMAC-SHA256 of "<timestamp>.<body>">``."""
    digest = hmac.new(key, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_signature(key: bytes, header: str, body: bytes, *, now: int, tolerance_s: int = 300) -> bool:
    """The receiver's check: a ``v1`` signature matches and ``t`` is within ``tolerance_s`` of ``now``."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, []).append(value)
    try:
        timestamp = int(fields.get("t", [""])[0])
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature_header(key, timestamp, body).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, given) for given in fields.get("v1", []))


def traceparent(call: Invocation) -> str:
    """W3C ``traceparent``: the run's trace id, a span id per attempt, sampled."""
    trace_id = call.trace_id.lower()
    if not _HEX32.match(trace_id) or trace_id == "0" * 32:
        trace_id = tracing.trace_id(call.run_id, call.scheduled_for)
    return tracing.traceparent(trace_id, tracing.span_id(call.idempotency_key))


# --------------------------------------------------------------------------- the invoker


def _pinned(address: str) -> Callable[..., socket.socket]:
    """``socket.create_connection`` to ``address`` whatever host ``http.client`` asks for: the
    request keeps the name (``Host``, SNI, the certificate check), the socket the checked address."""

    def connect(where: tuple[str, int], timeout: Any = None, source: Any = None) -> socket.socket:
        return socket.create_connection((address, where[1]), timeout, source)

    return connect


class _DeadlinePassed(TimeoutError):
    pass


class HttpInvoker:
    def __init__(
        self,
        secrets: SecretResolver,
        clock: Clock,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        rules: TargetRules | None = None,
        getaddrinfo: Resolver = socket.getaddrinfo,
        environment: str | None = None,
        tenant_secrets: TenantSecrets | None = None,
    ) -> None:
        self.tenant_secrets = tenant_secrets
        """On AWS: each tenant's secrets read under a session IAM limits to that tenant's path."""
        self.environment = environment
        """With it, a task may use only its tenant's secrets (``/rebound/<environment>/tenants/<t>/``)."""
        self.secrets = secrets
        self.clock = clock
        self.ssl_context = ssl_context
        self.max_response_bytes = max_response_bytes
        self.rules = rules or TargetRules()
        self.getaddrinfo = getaddrinfo

    def invoke(self, target: HttpTarget, call: Invocation) -> Outcome:
        left = deadline_seconds(call, self.clock)
        if left <= 0:
            return Outcome.failure(TIMEOUT, "the attempt's deadline passed before the request was sent")
        try:
            check_url(target.endpoint, self.rules)
        except TargetRefused as exc:
            return Outcome.failure(TARGET_REFUSED, exc.message, retryable=False)
        refused = self._secret_outside_tenant(target, call.tenant)
        if refused is not None:
            return refused
        secrets = self.secrets
        if self.tenant_secrets is not None and secret_references(target):
            try:
                secrets = self.tenant_secrets.for_tenant(call.tenant)
            except OperationalError as exc:
                return Outcome.failure(SECRET_UNAVAILABLE, exc.message)
        body = dumps(request_document(target, call)).encode()
        timestamp = int(self.clock.now().timestamp())
        headers: dict[str, str] = {}
        known: list[str] = []  # secret values: never in a message, whatever the answer echoes
        for name, given in target.headers.items():
            if name.lower() in _RESERVED:
                continue
            if isinstance(given, SecretHeader):
                try:
                    value = secrets.get(given.secret)
                except OperationalError as exc:
                    return Outcome.failure(SECRET_UNAVAILABLE, f"header {name}: {exc.message}")
                known.append(value)
                headers[name] = given.prefix + value
            else:
                headers[name] = given
        headers.update(
            {
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                TRACEPARENT_HEADER: traceparent(call),
                IDEMPOTENCY_HEADER: call.idempotency_key,
                RUN_ID_HEADER: call.run_id,
                ATTEMPT_HEADER: str(call.attempt),
                TIMESTAMP_HEADER: str(timestamp),
            }
        )
        if target.secret:
            try:
                key = secrets.get(target.secret)
            except OperationalError as exc:
                return Outcome.failure(SECRET_UNAVAILABLE, f"signing secret unavailable: {exc.message}")
            headers[SIGNATURE_HEADER] = signature_header(key.encode(), timestamp, body)
            known.append(key)
        return self._post(target.endpoint, body, headers, left, known)

    def _secret_outside_tenant(self, target: HttpTarget, tenant: str) -> Outcome | None:
        """Registration refuses these already; this holds for a task stored before it did, or
        written to the table by hand. Nothing is read and nothing is sent."""
        if self.environment is None:
            return None
        for where, reference in secret_references(target):
            why = secret_problem(reference, self.environment, tenant)
            if why:
                return Outcome.failure(SECRET_REFUSED, f"{where}: {why}", retryable=False)
        return None

    def _post(
        self, url: str, body: bytes, headers: dict[str, str], budget_s: float, known: list[str]
    ) -> Outcome:
        ends_at = time.monotonic() + budget_s

        def remaining() -> float:
            left = ends_at - time.monotonic()
            if left <= 0:
                raise _DeadlinePassed("deadline passed")
            return left

        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn: http.client.HTTPConnection
        host = parts.hostname or ""
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            address = resolve(host, port, self.rules, self.getaddrinfo)
        except TargetRefused as exc:
            return Outcome.failure(TARGET_REFUSED, exc.message, retryable=False)
        except ValueError as exc:  # a port that is not a number
            return Outcome.failure(INVALID_REQUEST, f"invalid URL: {type(exc).__name__}", retryable=False)
        except OSError as exc:  # the name did not resolve
            return Outcome.failure(CONNECTION_ERROR, f"{type(exc).__name__}: {exc}")
        try:
            if parts.scheme == "https":
                context = self.ssl_context or ssl.create_default_context()
                conn = http.client.HTTPSConnection(
                    parts.hostname or "", parts.port, timeout=budget_s, context=context
                )
            else:
                conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=budget_s)
        except ValueError as exc:  # a port that is not a number
            return Outcome.failure(INVALID_REQUEST, f"invalid URL: {type(exc).__name__}", retryable=False)
        conn._create_connection = _pinned(address)  # type: ignore[attr-defined]
        try:
            conn.request("POST", path, body=body, headers=headers)
            # Keep the socket: ``getresponse`` hands it to the response and may drop ``conn.sock``.
            sock = conn.sock
            if sock is not None:
                sock.settimeout(remaining())
            response = conn.getresponse()
            try:
                raw, complete = self._read(sock, response, remaining)
            finally:
                response.close()
        except TimeoutError:
            return Outcome.failure(TIMEOUT, f"no complete answer within {budget_s:.1f}s")
        except ValueError as exc:  # an invalid header name or value, or control characters in the URL
            return Outcome.failure(INVALID_REQUEST, f"request refused locally: {exc}", retryable=False)
        except (OSError, http.client.HTTPException) as exc:
            return Outcome.failure(CONNECTION_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()
        status = response.status
        log.debug("http target answered", extra={"status": status, "host": parts.hostname})
        if 200 <= status < 300:
            return Outcome.success(output_from(raw, complete=complete))
        snippet = ""
        if host.lower() in self.rules.excerpt_hosts:
            snippet = redact(raw[:300].decode(errors="replace").strip(), known)
        reason = redact(str(response.reason or "")[:80], known)
        message = f"HTTP {status} {reason}" + (f": {snippet}" if snippet else "")
        retryable = status in RETRYABLE_STATUSES or status >= 500
        return Outcome.failure(f"HTTP_{status}", message, retryable=retryable)

    def _read(
        self,
        sock: socket.socket | None,
        response: http.client.HTTPResponse,
        remaining: Callable[[], float],
    ) -> tuple[bytes, bool]:
        """At most ``max_response_bytes`` of the body, each read bounded by the time left."""
        chunks: list[bytes] = []
        size = 0
        while size <= self.max_response_bytes:
            if sock is not None:
                sock.settimeout(remaining())
            chunk = response.read1(min(65536, self.max_response_bytes + 1 - size))
            if not chunk:
                return b"".join(chunks), True
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)[: self.max_response_bytes], False
