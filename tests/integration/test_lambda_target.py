"""The ``lambda`` target. moto cannot run a function without Docker, so the Lambda API is a fake that
records each ``Invoke`` (and, once, botocore's Stubber on a real client, to check the request shape).
"""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from rebound.adapters.targets.aws_lambda import LambdaInvoker, sanitize_code
from rebound.adapters.targets.registry import lambda_clients
from rebound.domain.basics import ERROR_CODE_PATTERN
from rebound.domain.target_specs import LambdaTarget
from rebound.engine.ports.targets import Invocation
from rebound.wiring import AWS_CONFIG

pytestmark = pytest.mark.integration

FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:billing-run"


def stream(document: Any) -> StreamingBody:
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


class FakeLambda:
    """Records each Invoke and the read timeout of the client it was made on."""

    def __init__(self) -> None:
        self.read_timeouts: list[float] = []
        self.calls: list[dict[str, Any]] = []
        self.returns: Any = {"ok": True}
        self.error_kind: str | None = None
        self.raises: Exception | None = None

    def client_for(self, seconds: float) -> FakeLambda:
        self.read_timeouts.append(seconds)
        return self

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.raises is not None:
            raise self.raises
        answer: dict[str, Any] = {"StatusCode": 200, "Payload": stream(self.returns)}
        if self.error_kind:
            answer["FunctionError"] = self.error_kind
        return answer

    def function_error(self, document: Any, kind: str = "Unhandled") -> None:
        self.returns, self.error_kind = document, kind


@pytest.fixture
def fake() -> FakeLambda:
    return FakeLambda()


@pytest.fixture
def invoker(fake: FakeLambda, clock: Any) -> LambdaInvoker:
    return LambdaInvoker(fake.client_for, clock)  # type: ignore[arg-type]


def a_call(clock: Any, seconds: float = 42.5) -> Invocation:
    now = clock.now()
    return Invocation(
        run_id="run-1",
        task_id="billing",
        tenant="acme",
        attempt=3,
        scheduled_for=now - timedelta(seconds=30),
        payload={"invoice": 42},
        deadline=now + timedelta(seconds=seconds),
        trace_id="0af7651916cd43dd8448eb211c80319c",
    )


TARGET = LambdaTarget(type="lambda", function=FUNCTION, qualifier="live")


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"{code} happened"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "Invoke",
    )


def test_invoke_is_request_response_with_the_invocation_document(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    outcome = invoker.invoke(TARGET, a_call(clock))

    assert outcome.ok
    (call,) = fake.calls
    assert call["InvocationType"] == "RequestResponse"
    assert call["FunctionName"] == FUNCTION
    assert call["Qualifier"] == "live"
    assert json.loads(call["Payload"]) == {
        "run_id": "run-1",
        "task_id": "billing",
        "tenant": "acme",
        "attempt": 3,
        "scheduled_for": "2026-03-07T08:59:30.000Z",
        "deadline": "2026-03-07T09:00:42.500Z",
        "idempotency_key": "run-1#3",
        "payload": {"invoice": 42},
    }


def test_function_without_qualifier_is_invoked_unqualified(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    invoker.invoke(LambdaTarget(type="lambda", function="billing-run"), a_call(clock))

    assert "Qualifier" not in fake.calls[0]


def test_read_timeout_is_the_time_left_to_the_deadline(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    call = a_call(clock, seconds=42.5)
    invoker.invoke(TARGET, call)
    clock.advance(10)
    invoker.invoke(TARGET, call)

    assert fake.read_timeouts == [42.5, 32.5]


def test_deadline_already_passed_invokes_nothing(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    call = a_call(clock, seconds=5)
    clock.advance(6)

    outcome = invoker.invoke(TARGET, call)

    assert (outcome.error_code, outcome.retryable) == ("TIMEOUT", True)
    assert fake.calls == []


def test_function_error_is_a_retryable_failure_coded_from_its_error_type(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    fake.function_error({"errorType": "ValueError", "errorMessage": "bad invoice", "stackTrace": []})

    outcome = invoker.invoke(TARGET, a_call(clock))

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "LAMBDA_VALUEERROR", True)
    assert outcome.message == "ValueError: bad invoice"


@pytest.mark.parametrize(
    "error_type", ["InvoiceRejectedTerminalError", "TerminalError", "billing.TerminalError"]
)
def test_error_type_ending_in_terminal_error_is_not_retryable(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any, error_type: str
) -> None:
    fake.function_error({"errorType": error_type, "errorMessage": "invoice was rejected"})

    outcome = invoker.invoke(TARGET, a_call(clock))

    assert outcome.retryable is False
    assert outcome.error_code is not None and outcome.error_code.endswith("TERMINALERROR")


def test_function_error_without_a_type_is_coded_from_the_function_error(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    fake.function_error(b"not json at all")

    outcome = invoker.invoke(TARGET, a_call(clock))

    assert (outcome.error_code, outcome.retryable) == ("LAMBDA_UNHANDLED", True)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("ValueError", "LAMBDA_VALUEERROR"),
        ("Sandbox.Timedout", "LAMBDA_SANDBOX_TIMEDOUT"),
        ("Runtime.ExitError", "LAMBDA_RUNTIME_EXITERROR"),
        ("java.lang.IllegalStateException", "LAMBDA_JAVA_LANG_ILLEGALSTATEEXCEPTION"),
        ("..!!", "LAMBDA_UNKNOWN"),
        ("ÄrgerError", "LAMBDA_RGERERROR"),
        ("X" * 200, "LAMBDA_" + "X" * 57),
    ],
)
def test_error_codes_are_sanitized_to_the_domain_pattern(raw: str, code: str) -> None:
    got = sanitize_code("LAMBDA", raw)

    assert got == code
    assert re.match(ERROR_CODE_PATTERN, got)


@pytest.mark.parametrize(
    ("code", "status", "error_code", "retryable"),
    [
        ("TooManyRequestsException", 429, "LAMBDA_INVOKE_TOOMANYREQUESTS", True),
        ("ServiceException", 500, "LAMBDA_INVOKE_SERVICE", True),
        ("EC2UnexpectedException", 502, "LAMBDA_INVOKE_EC2UNEXPECTED", True),
        ("ResourceNotReadyException", 502, "LAMBDA_INVOKE_RESOURCENOTREADY", True),
        ("ResourceConflictException", 409, "LAMBDA_INVOKE_RESOURCECONFLICT", True),
        ("ResourceNotFoundException", 404, "LAMBDA_INVOKE_RESOURCENOTFOUND", False),
        ("AccessDeniedException", 403, "LAMBDA_INVOKE_ACCESSDENIED", False),
        ("RequestTooLargeException", 413, "LAMBDA_INVOKE_REQUESTTOOLARGE", False),
    ],
)
def test_invoke_refusals_are_retryable_only_when_throttled_or_transient(
    fake: FakeLambda,
    invoker: LambdaInvoker,
    clock: Any,
    code: str,
    status: int,
    error_code: str,
    retryable: bool,
) -> None:
    fake.raises = client_error(code, status)

    outcome = invoker.invoke(TARGET, a_call(clock))

    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, error_code, retryable)


def test_no_answer_within_the_read_timeout_is_a_retryable_timeout(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    fake.raises = ReadTimeoutError(endpoint_url="https://lambda.us-east-1.amazonaws.com")

    outcome = invoker.invoke(TARGET, a_call(clock))

    assert (outcome.error_code, outcome.retryable) == ("TIMEOUT", True)


def test_unreachable_endpoint_is_a_retryable_connection_error(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any
) -> None:
    fake.raises = EndpointConnectionError(endpoint_url="https://lambda.us-east-1.amazonaws.com")

    outcome = invoker.invoke(TARGET, a_call(clock))

    assert (outcome.error_code, outcome.retryable) == ("CONNECTION_ERROR", True)


@pytest.mark.parametrize(
    ("returned", "output"),
    [
        ({"invoice": 42, "state": "sent"}, {"invoice": 42, "state": "sent"}),
        ([1, 2], {"result": [1, 2]}),
        ("done", {"result": "done"}),
        (None, {}),
    ],
)
def test_returned_json_becomes_the_output(
    fake: FakeLambda, invoker: LambdaInvoker, clock: Any, returned: Any, output: dict[str, Any]
) -> None:
    fake.returns = returned

    assert invoker.invoke(TARGET, a_call(clock)).output == output


def test_oversized_return_value_is_bounded(fake: FakeLambda, invoker: LambdaInvoker, clock: Any) -> None:
    fake.returns = {"blob": "x" * 300_000}

    outcome = invoker.invoke(TARGET, a_call(clock))

    assert outcome.ok
    assert outcome.output["output_truncated"] is True


def test_registry_clients_use_the_deadline_as_read_timeout_and_never_retry(
    aws: boto3.session.Session,
) -> None:
    client_for = lambda_clients(aws, {"config": AWS_CONFIG})

    client = client_for(42.3)

    config = client.meta.config
    assert config.read_timeout == 43
    assert config.connect_timeout == 5
    assert config.retries is not None and config.retries["total_max_attempts"] == 1
    assert client_for(42.9) is client
    assert client_for(0.2).meta.config.read_timeout == 1


def client_context(call: Any) -> str:
    """The client context the function receives: the run's trace as a W3C ``traceparent``."""
    import base64
    import json

    from rebound.domain import tracing

    trace = call.trace_id or tracing.trace_id(call.run_id, call.scheduled_for)
    parent = tracing.span_id(call.idempotency_key)
    custom = {"custom": {"traceparent": tracing.traceparent(trace, parent)}}
    return base64.b64encode(json.dumps(custom, separators=(",", ":")).encode()).decode()


def test_stubbed_lambda_api_accepts_the_request_and_reports_the_function_error(
    aws: boto3.session.Session, clock: Any
) -> None:
    client = lambda_clients(aws, {"config": AWS_CONFIG})(42.5)
    call = a_call(clock)
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {
                "StatusCode": 200,
                "FunctionError": "Unhandled",
                "Payload": stream({"errorType": "KeyError", "errorMessage": "'invoice'"}),
            },
            {
                "FunctionName": FUNCTION,
                "InvocationType": "RequestResponse",
                "Qualifier": "live",
                "Payload": ANY,
                "ClientContext": client_context(call),
            },
        )
        outcome = LambdaInvoker(lambda seconds: client, clock).invoke(TARGET, call)
        stub.assert_no_pending_responses()

    assert (outcome.error_code, outcome.retryable) == ("LAMBDA_KEYERROR", True)
