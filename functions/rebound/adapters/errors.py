"""Translate botocore errors into Rebound's exceptions, by error code, in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from rebound.domain.errors import Conflict, OperationalError, ReboundError, Throttled

T = TypeVar("T")

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "SlowDown",
    }
)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: Exception, doing: str) -> ReboundError:
    """The Rebound error for a failed AWS call made while ``doing`` something."""
    if isinstance(exc, ReboundError):
        return exc
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code == "ConditionalCheckFailedException":
            return Conflict(f"{doing}: the record changed underneath us", aws_code=code)
        if code == "TransactionCanceledException":
            reasons = [str(r.get("Code", "")) for r in exc.response.get("CancellationReasons", [])]
            if "ConditionalCheckFailed" in reasons or "TransactionConflict" in reasons:
                return Conflict(f"{doing}: the record changed underneath us", aws_code=code, reasons=reasons)
            if any(reason in ("ThrottlingError", "ProvisionedThroughputExceeded") for reason in reasons):
                return Throttled(f"{doing}: throttled by DynamoDB", aws_code=code, reasons=reasons)
            return OperationalError(f"{doing}: transaction cancelled ({', '.join(reasons)})", aws_code=code)
        if code in THROTTLING_CODES:
            return Throttled(f"{doing}: throttled ({code})", aws_code=code)
        return OperationalError(f"{doing}: AWS refused ({code})", aws_code=code)
    if isinstance(exc, BotoCoreError):
        return OperationalError(f"{doing}: {type(exc).__name__}")
    return OperationalError(f"{doing}: {type(exc).__name__}: {exc}")


def call_or_none(doing: str, call: Callable[[], T], *, none_on: str) -> T | None:
    """Make an AWS call. ``None`` when AWS answers with the error code ``none_on`` (the schedule
    is not there, the conditional put lost); any other failure is raised as :func:`translate` says."""
    try:
        return call()
    except ClientError as exc:
        if error_code(exc) == none_on:
            return None
        raise translate(exc, doing) from exc
    except BotoCoreError as exc:
        raise translate(exc, doing) from exc
