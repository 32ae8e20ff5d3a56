"""Translate botocore errors into Rebound's exceptions, by error code, in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from rebound.domain.errors import Conflict, Contended, OperationalError, ReboundError, Throttled

T = TypeVar("T")

CONTENTION_CODES = frozenset({"TransactionConflictException", "TransactionInProgressException"})
"""A single write that met a transaction on the same item: nothing written, try again."""
TRANSIENT_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
)
"""Cancellation reasons of a transaction that say "not now", not "no"."""

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
            return _cancelled(exc, doing)
        if code in CONTENTION_CODES:
            return Contended(f"{doing}: a concurrent transaction held the item ({code})", aws_code=code)
        if code in THROTTLING_CODES:
            return Throttled(f"{doing}: throttled ({code})", aws_code=code)
        return OperationalError(f"{doing}: AWS refused ({code})", aws_code=code)
    if isinstance(exc, BotoCoreError):
        return OperationalError(f"{doing}: {type(exc).__name__}")
    return OperationalError(f"{doing}: {type(exc).__name__}: {exc}")


def _cancelled(exc: ClientError, doing: str) -> ReboundError:
    """A cancelled transaction. A transient reason on any item (a conflict with another write, a
    throttle) means the outcome of every condition is unknown, so the whole transaction is
    transient and may be sent again; only conditions that failed with nothing transient beside
    them are a ``Conflict``."""
    code = error_code(exc)
    reasons = [str(r.get("Code", "")) for r in exc.response.get("CancellationReasons", [])]
    if "TransactionConflict" in reasons:
        return Contended(f"{doing}: a concurrent write touched the same item", aws_code=code, reasons=reasons)
    if TRANSIENT_REASONS.intersection(reasons):
        return Throttled(f"{doing}: throttled by DynamoDB", aws_code=code, reasons=reasons)
    if "ConditionalCheckFailed" in reasons:
        return Conflict(f"{doing}: the record changed underneath us", aws_code=code, reasons=reasons)
    return OperationalError(f"{doing}: transaction cancelled ({', '.join(reasons)})", aws_code=code)


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
