"""Translate botocore errors into Rebound's exceptions, by error code, in one place."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from rebound.domain.errors import Conflict, OperationalError, ReboundError, Throttled

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
