"""The ``http`` target against a real HTTP server on 127.0.0.1, with its signing key in (moto) SSM."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest

from rebound.adapters.secrets import SecretResolver
from rebound.adapters.targets.http import HttpInvoker, verify_signature
from rebound.domain.target_specs import HttpTarget, TargetRules
from rebound.engine.ports.targets import Invocation

pytestmark = pytest.mark.integration

KEY = "whsec-test-0123456789abcdef"
KEY_PARAM = "/rebound/test/targets/billing-hook"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
LOCAL_RULES = TargetRules.defaults_for("local")
"""The receiver is a plain-http server on loopback: the local environment's allowlist reaches it."""


@dataclass
class Reply:
    status: int = 200
    body: bytes = b'{"accepted": true}'
    delay_before_headers_s: float = 0.0
    delay_before_body_s: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A loopback server that records each request and answers with ``reply``."""

    reply: Reply = field(default_factory=Reply)
    requests: list[Received] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            state.requests.append(Received(self.path, dict(self.headers.items()), body))
            reply = state.reply
            time.sleep(reply.delay_before_headers_s)
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.flush()
            time.sleep(reply.delay_before_body_s)
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/billing?tenant=acme"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def secrets(aws: boto3.session.Session) -> SecretResolver:
    aws.client("ssm").put_parameter(Name=KEY_PARAM, Value=KEY, Type="SecureString")
    return SecretResolver(lambda: aws.client("ssm"), lambda: aws.client("secretsmanager"))


@pytest.fixture
def invoker(secrets: SecretResolver, clock: Any) -> HttpInvoker:
    return HttpInvoker(secrets, clock, rules=LOCAL_RULES)


def a_call(clock: Any, *, seconds: float = 5.0, attempt: int = 2) -> Invocation:
    now = clock.now()
    return Invocation(
        run_id="run-20260307T090000Z-billing",
        task_id="billing",
        tenant="acme",
        attempt=attempt,
        scheduled_for=now - timedelta(minutes=3),
        payload={"invoice": 42, "currency": "EUR"},
        deadline=now + timedelta(seconds=seconds),
        trace_id=TRACE_ID,
    )


def a_target(receiver: Receiver, **changes: Any) -> HttpTarget:
    return HttpTarget.model_validate({"type": "http", "url": receiver.url, "secret": KEY_PARAM, **changes})


def test_receiver_verifies_the_signature_over_timestamp_and_raw_body(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    outcome = invoker.invoke(a_target(receiver), a_call(clock))

    assert outcome.ok, outcome
    got = receiver.requests[0]
    header = got.headers["X-Rebound-Signature"]
    fields = dict(part.split("=", 1) for part in header.split(","))
    assert fields["t"] == got.headers["X-Rebound-Timestamp"] == str(int(clock.now().timestamp()))
    expected = hmac.new(KEY.encode(), f"{fields['t']}.".encode() + got.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)
    now = int(clock.now().timestamp())
    assert verify_signature(KEY.encode(), header, got.body, now=now)
    assert not verify_signature(KEY.encode(), header, got.body + b" ", now=now)
    assert not verify_signature(b"another key", header, got.body, now=now)
    assert not verify_signature(KEY.encode(), header, got.body, now=now + 301)


def test_request_carries_trace_context_idempotency_and_run_headers(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    target = a_target(receiver, headers={"X-Team": "billing", "idempotency-key": "not-yours"})
    call = a_call(clock)

    invoker.invoke(target, call)

    got = receiver.requests[0]
    h = {k.lower(): v for k, v in got.headers.items()}
    version, trace_id, span_id, flags = h["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert len(span_id) == 16 and int(span_id, 16) != 0
    assert h["idempotency-key"] == call.idempotency_key == "run-20260307T090000Z-billing#2"
    assert h["x-rebound-run-id"] == call.run_id
    assert h["x-rebound-attempt"] == "2"
    assert h["content-type"] == "application/json"
    assert h["x-team"] == "billing"
    assert got.path == "/hooks/billing?tenant=acme"
    body = json.loads(got.body)
    assert body == {
        "run_id": call.run_id,
        "task_id": "billing",
        "tenant": "acme",
        "attempt": 2,
        "scheduled_for": "2026-03-07T08:57:00.000Z",
        "deadline": "2026-03-07T09:00:05.000Z",
        "idempotency_key": call.idempotency_key,
        "payload": {"invoice": 42, "currency": "EUR"},
    }


def test_each_attempt_gets_its_own_span_in_the_same_trace(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    invoker.invoke(a_target(receiver), a_call(clock, attempt=1))
    invoker.invoke(a_target(receiver), a_call(clock, attempt=2))

    first, second = (r.headers["traceparent"].split("-") for r in receiver.requests)
    assert first[1] == second[1] == TRACE_ID
    assert first[2] != second[2]


def test_2xx_json_answer_becomes_the_output(receiver: Receiver, invoker: HttpInvoker, clock: Any) -> None:
    receiver.reply = Reply(201, b'{"invoice": 42, "state": "sent"}')

    outcome = invoker.invoke(a_target(receiver), a_call(clock))

    assert outcome.ok
    assert outcome.output == {"invoice": 42, "state": "sent"}


def test_oversized_answer_is_bounded_not_kept(
    receiver: Receiver, secrets: SecretResolver, clock: Any
) -> None:
    receiver.reply = Reply(200, b'{"blob": "' + b"x" * 5000 + b'"}')

    outcome = HttpInvoker(secrets, clock, max_response_bytes=1024, rules=LOCAL_RULES).invoke(
        a_target(receiver), a_call(clock)
    )

    assert outcome.ok
    assert outcome.output == {"output_truncated": True, "output_bytes_read": 1024}


def test_server_slower_than_the_deadline_is_a_retryable_timeout(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    receiver.reply = Reply(delay_before_headers_s=2.0)

    started = time.monotonic()
    outcome = invoker.invoke(a_target(receiver), a_call(clock, seconds=0.3))
    elapsed = time.monotonic() - started

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "TIMEOUT", True)
    assert elapsed < 1.0


def test_deadline_bounds_the_whole_exchange_not_each_read(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    # Each pause alone fits in the 0.8 s budget; together they do not.
    receiver.reply = Reply(delay_before_headers_s=0.5, delay_before_body_s=0.5)

    started = time.monotonic()
    outcome = invoker.invoke(a_target(receiver), a_call(clock, seconds=0.8))

    assert (outcome.error_code, outcome.retryable) == ("TIMEOUT", True)
    assert time.monotonic() - started < 0.95


def test_deadline_already_passed_sends_nothing(receiver: Receiver, invoker: HttpInvoker, clock: Any) -> None:
    call = a_call(clock, seconds=1)
    clock.advance(2)

    outcome = invoker.invoke(a_target(receiver), call)

    assert (outcome.error_code, outcome.retryable) == ("TIMEOUT", True)
    assert receiver.requests == []


@pytest.mark.parametrize("status", [500, 502, 503, 429, 408])
def test_server_errors_throttles_and_request_timeouts_are_retryable(
    receiver: Receiver, invoker: HttpInvoker, clock: Any, status: int
) -> None:
    receiver.reply = Reply(status, b'{"error": "try later"}')

    outcome = invoker.invoke(a_target(receiver), a_call(clock))

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, f"HTTP_{status}", True)
    assert "try later" in outcome.message


@pytest.mark.parametrize("status", [404, 400, 401, 403, 410, 422, 301])
def test_other_client_errors_and_redirects_are_terminal(
    receiver: Receiver, invoker: HttpInvoker, clock: Any, status: int
) -> None:
    receiver.reply = Reply(status, b"")

    outcome = invoker.invoke(a_target(receiver), a_call(clock))

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, f"HTTP_{status}", False)
    assert len(receiver.requests) == 1


def test_connection_refused_is_retryable(invoker: HttpInvoker, clock: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    target = HttpTarget(type="http", url=f"http://127.0.0.1:{port}/hook", secret=KEY_PARAM)

    outcome = invoker.invoke(target, a_call(clock))

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "CONNECTION_ERROR", True)


def test_unreadable_signing_secret_is_retryable_and_sends_nothing(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    outcome = invoker.invoke(a_target(receiver, secret="/rebound/test/missing"), a_call(clock))

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "SECRET_UNAVAILABLE", True)
    assert "/rebound/test/missing" in outcome.message
    assert receiver.requests == []


def test_target_without_a_secret_is_sent_unsigned(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    outcome = invoker.invoke(a_target(receiver, secret=None), a_call(clock))

    assert outcome.ok
    assert "X-Rebound-Signature" not in receiver.requests[0].headers


def test_header_with_a_line_break_is_a_terminal_error(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    target = a_target(receiver, headers={"X-Bad": "a\r\nX-Injected: 1"})

    outcome = invoker.invoke(target, a_call(clock))

    assert (outcome.error_code, outcome.retryable) == ("HTTP_INVALID_REQUEST", False)
    assert receiver.requests == []


def test_neither_the_key_nor_the_signature_is_logged(
    receiver: Receiver, invoker: HttpInvoker, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    invoker.invoke(a_target(receiver), a_call(clock))
    receiver.reply = Reply(500, b"")
    invoker.invoke(a_target(receiver), a_call(clock))

    signature = receiver.requests[0].headers["X-Rebound-Signature"].split("v1=")[1]
    logged = caplog.text + "".join(repr(r.__dict__) for r in caplog.records)
    assert caplog.records, "expected the SDK and the target to log something at DEBUG"
    assert KEY not in logged
    assert signature not in logged


def test_default_targets_register_lambda_http_and_plugin(aws: boto3.session.Session, clock: Any) -> None:
    from rebound.adapters.targets.registry import default_targets

    targets = default_targets(aws, clock, {})

    assert set(targets.invokers) == {"sim", "lambda", "http", "plugin", "capacity"}


# --------------------------------------------------------------------------- what a target may reach

TOKEN = "tok-planted-7c1e5f0a"
TOKEN_PARAM = "/rebound/test/targets/billing-token"


def test_the_connection_goes_to_the_address_that_was_checked(
    receiver: Receiver, secrets: SecretResolver, clock: Any
) -> None:
    """DNS rebinding: the name answers a checked address once; any later lookup would answer the
    metadata service. The request still reaches the checked address, with the name as Host."""
    port = int(receiver.url.split(":")[2].split("/")[0])
    answers: list[str] = []

    def rebinding(host: str, port_: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        address = "127.0.0.1" if not answers else "169.254.169.254"
        answers.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port_))]

    rules = LOCAL_RULES.model_copy(update={"plain_http_hosts": ("hooks.example.test",)})
    invoker = HttpInvoker(secrets, clock, rules=rules, getaddrinfo=rebinding)
    target = a_target(receiver, url=f"http://hooks.example.test:{port}/hooks/billing")

    outcome = invoker.invoke(target, a_call(clock))

    assert outcome.ok, outcome
    assert answers == ["127.0.0.1"]
    assert receiver.requests[0].headers["Host"] == f"hooks.example.test:{port}"


@pytest.mark.parametrize("address", ["169.254.169.254", "10.0.0.8", "::ffff:127.0.0.1"])
def test_a_name_resolving_inside_is_refused_terminally_and_nothing_is_sent(
    receiver: Receiver, secrets: SecretResolver, clock: Any, address: str
) -> None:
    def inside(host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port))]

    invoker = HttpInvoker(secrets, clock, rules=TargetRules(), getaddrinfo=inside)
    target = a_target(receiver, url="https://hooks.example.test/run")

    outcome = invoker.invoke(target, a_call(clock))

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "TARGET_REFUSED", False)
    assert receiver.requests == []


def test_loopback_and_plain_http_are_refused_by_default(
    receiver: Receiver, secrets: SecretResolver, clock: Any
) -> None:
    outcome = HttpInvoker(secrets, clock).invoke(a_target(receiver), a_call(clock))

    assert (outcome.error_code, outcome.retryable) == ("TARGET_REFUSED", False)
    assert receiver.requests == []


def test_a_secret_header_is_read_at_call_time_and_kept_out_of_the_error(
    aws: boto3.session.Session, receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    aws.client("ssm").put_parameter(Name=TOKEN_PARAM, Value=TOKEN, Type="SecureString")
    target = a_target(
        receiver, headers={"Authorization": {"secret": f"ssm:{TOKEN_PARAM}", "prefix": "Bearer "}}
    )
    receiver.reply = Reply(401, f'{{"error": "bad credentials Bearer {TOKEN}", "you": "{TOKEN}"}}'.encode())

    outcome = invoker.invoke(target, a_call(clock))

    assert receiver.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert outcome.error_code == "HTTP_401"
    assert "bad credentials" in outcome.message
    assert TOKEN not in outcome.message
    assert TOKEN not in json.dumps(target.model_dump(mode="json"))


def test_an_unreadable_secret_header_sends_nothing(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    target = a_target(receiver, headers={"X-Api-Key": {"secret": "ssm:/rebound/test/none"}})

    outcome = invoker.invoke(target, a_call(clock))

    assert (outcome.error_code, outcome.retryable) == ("SECRET_UNAVAILABLE", True)
    assert receiver.requests == []


def test_error_answers_are_kept_only_from_allowlisted_hosts(
    receiver: Receiver, secrets: SecretResolver, clock: Any
) -> None:
    receiver.reply = Reply(500, b"internal: db password=hunter2 at 10.0.3.7")
    not_listed = LOCAL_RULES.model_copy(update={"excerpt_hosts": ()})

    kept = HttpInvoker(secrets, clock, rules=LOCAL_RULES).invoke(a_target(receiver), a_call(clock))
    dropped = HttpInvoker(secrets, clock, rules=not_listed).invoke(a_target(receiver), a_call(clock))

    assert kept.message.startswith("HTTP 500") and "internal: db" in kept.message
    assert "hunter2" not in kept.message
    assert dropped.error_code == "HTTP_500" and "internal" not in dropped.message


def test_the_sim_target_is_refused_where_it_is_not_enabled(aws: boto3.session.Session, clock: Any) -> None:
    from rebound.adapters.targets.registry import default_targets
    from rebound.domain.target_specs import SimTarget

    prod = default_targets(aws, clock, {}, TargetRules.defaults_for("prod"))
    outcome = prod.invoke(SimTarget(type="sim"), a_call(clock))

    assert (outcome.error_code, outcome.retryable) == ("TARGET_REFUSED", False)
