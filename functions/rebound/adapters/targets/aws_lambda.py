"""The ``lambda`` target: a synchronous ``Invoke`` (``RequestResponse``) bounded by the attempt's deadline.

The event is ``invocation_document(call)``, the same JSON the ``http`` target posts. The client's
read timeout is the time left before ``call.deadline``, and the SDK does not retry on its own:
Rebound's retry policy decides, so a slow function is never invoked twice for one attempt.

How the answer is classified (``Outcome.error_code``, then whether it is retryable):

- the function returned: success; its JSON is the output (an object as is, else ``{"result": ...}``).
- the function raised (``FunctionError`` is set): ``LAMBDA_<ERRORTYPE>``, retryable, unless the
  ``errorType`` ends in ``TerminalError`` (see below): then terminal.
- Invoke refused when throttled, 429, 5xx, or the function is not ready: ``LAMBDA_INVOKE_<CODE>``,
  retryable; refused otherwise (not found, access denied, too large): terminal.
- no answer before the deadline: ``TIMEOUT``, retryable.
- the endpoint could not be reached: ``CONNECTION_ERROR``, retryable.

``<ERRORTYPE>`` is the function's ``errorType`` in upper case with every run of other characters
turned into ``_`` (``ValueError`` -> ``LAMBDA_VALUEERROR``, ``Sandbox.Timedout`` ->
``LAMBDA_SANDBOX_TIMEDOUT``), or the ``FunctionError`` value when the function gave no type.
``<CODE>`` is the AWS error code without its ``Exception`` suffix (``LAMBDA_INVOKE_TOOMANYREQUESTS``).

**Terminal errors, the convention.** A function says "do not retry this" by raising an exception
whose class name ends in ``TerminalError`` (``TerminalError``, ``InvoiceRejectedTerminalError``).
Policies can also list any ``LAMBDA_*`` code in ``terminal_errors``.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from rebound.adapters.errors import THROTTLING_CODES, error_code
from rebound.adapters.targets.http import CONNECTION_ERROR, deadline_seconds, invocation_document, output_from
from rebound.domain import tracing
from rebound.domain.jsonutil import dumps
from rebound.domain.target_specs import LambdaTarget
from rebound.engine.ports import Clock
from rebound.engine.ports.targets import TIMEOUT, Invocation, Outcome

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_lambda.type_defs import InvocationResponseTypeDef

log = logging.getLogger(__name__)

LambdaClientFactory = Callable[[float], "LambdaClient"]
"""Given the read timeout in seconds, a Lambda client that honours it and does not retry."""

TERMINAL_SUFFIX = "TerminalError"
INVOKE_ERROR = "LAMBDA_INVOKE_ERROR"
TRANSIENT_INVOKE_CODES = frozenset(
    {"ResourceConflictException", "ResourceNotReadyException", "EC2ThrottledException"}
)
MAX_RESPONSE_BYTES = 256 * 1024
_NOT_CODE = re.compile(r"[^A-Z0-9]+")
_CODE_MAX = 64
"""``ERROR_CODE_PATTERN`` allows 64 characters."""


def sanitize_code(prefix: str, raw: str) -> str:
    """``prefix`` + ``raw`` as an error code: ``[A-Z][A-Z0-9_]*``, at most 64 characters."""
    tail = _NOT_CODE.sub("_", raw.upper()).strip("_") or "UNKNOWN"
    return f"{prefix}_{tail}"[:_CODE_MAX].rstrip("_")


def is_terminal_error_type(error_type: str) -> bool:
    """The convention: the class name (after any module path) ends in ``TerminalError``."""
    return error_type.rsplit(".", 1)[-1].endswith(TERMINAL_SUFFIX)


class LambdaInvoker:
    def __init__(self, client_for: LambdaClientFactory, clock: Clock) -> None:
        self.client_for = client_for
        self.clock = clock

    def invoke(self, target: LambdaTarget, call: Invocation) -> Outcome:
        left = deadline_seconds(call, self.clock)
        if left <= 0:
            return Outcome.failure(TIMEOUT, "the attempt's deadline passed before the function was invoked")
        event = dumps(invocation_document(call)).encode()
        client = self.client_for(left)
        # An asynchronous target (mode: async) is an Event invoke: Lambda queues it and answers
        # 202 at once; the function reports with the completion token in its payload.
        kind: Literal["Event", "RequestResponse"] = "Event" if target.mode == "async" else "RequestResponse"
        # The run's trace reaches the function in its client context (``context.client_context.custom``).
        parent = tracing.span_id(call.idempotency_key)
        trace = call.trace_id or tracing.trace_id(call.run_id, call.scheduled_for)
        context = {"custom": {"traceparent": tracing.traceparent(trace, parent)}}
        args: dict[str, Any] = {
            "FunctionName": target.function,
            "InvocationType": kind,
            "Payload": event,
            "ClientContext": base64.b64encode(dumps(context).encode()).decode(),
        }
        if target.qualifier:
            args["Qualifier"] = target.qualifier
        try:
            resp = client.invoke(**args)
            raw, complete = _read_payload(resp)
        except ReadTimeoutError:
            return Outcome.failure(TIMEOUT, f"the function did not answer within {left:.1f}s")
        except (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError) as exc:
            return Outcome.failure(CONNECTION_ERROR, f"{type(exc).__name__}: {exc}")
        except ClientError as exc:
            return _invoke_refused(exc)
        except BotoCoreError as exc:
            return Outcome.failure(INVOKE_ERROR, f"{type(exc).__name__}: {exc}")
        function_error = resp.get("FunctionError")
        if function_error:
            return _function_failed(function_error, raw)
        return Outcome.success(output_from(raw, complete=complete))


def _read_payload(resp: InvocationResponseTypeDef) -> tuple[bytes, bool]:
    stream = resp.get("Payload")
    if stream is None:
        return b"", True
    try:
        raw = stream.read(MAX_RESPONSE_BYTES + 1)
    finally:
        stream.close()
    return raw[:MAX_RESPONSE_BYTES], len(raw) <= MAX_RESPONSE_BYTES


def _function_failed(function_error: str, raw: bytes) -> Outcome:
    detail: dict[str, Any] = {}
    try:
        parsed = json.loads(raw) if raw else {}
        detail = parsed if isinstance(parsed, dict) else {}
    except (ValueError, UnicodeDecodeError):
        pass
    error_type = str(detail.get("errorType") or "")
    message = str(detail.get("errorMessage") or "")
    code = sanitize_code("LAMBDA", error_type or function_error)
    terminal = bool(error_type) and is_terminal_error_type(error_type)
    text = f"{error_type or function_error}: {message}" if message else (error_type or function_error)
    return Outcome.failure(code, text, retryable=not terminal)


def _invoke_refused(exc: ClientError) -> Outcome:
    code = error_code(exc) or "Unknown"
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    retryable = status >= 500 or status == 429 or code in THROTTLING_CODES or code in TRANSIENT_INVOKE_CODES
    short = code.removesuffix("Exception") or code
    message = str(exc.response.get("Error", {}).get("Message") or code)
    log.warning("lambda invoke refused", extra={"aws_code": code, "status": status, "retryable": retryable})
    return Outcome.failure(sanitize_code("LAMBDA_INVOKE", short), f"{code}: {message}", retryable=retryable)
