"""One exception hierarchy for everything Rebound raises on purpose.

Each class carries a stable ``code`` and the HTTP status the ops API answers with; the API and
the batch handlers translate these in exactly one place each and never look at message text.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ReboundError(Exception):
    """Base of every deliberate Rebound error."""

    code: ClassVar[str] = "REBOUND_ERROR"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class DomainError(ReboundError):
    code = "DOMAIN_ERROR"
    http_status = 400


class IllegalTransition(DomainError):
    code = "ILLEGAL_TRANSITION"
    http_status = 409

    def __init__(self, current: str, requested: str, subject: str = "") -> None:
        where = f" for {subject}" if subject else ""
        super().__init__(
            f"illegal run transition{where}: {current} -> {requested}",
            current=current,
            requested=requested,
            subject=subject,
        )


class ValidationFailed(DomainError):
    """Bad input, with where it was found."""

    code = "VALIDATION_FAILED"


class ConfigError(ValidationFailed):
    """A configuration file is wrong. The message names the file, the key path and the problem."""

    code = "CONFIG_ERROR"

    def __init__(self, file: str, key_path: str, problem: str) -> None:
        location = f"{file}: {key_path}" if key_path else file
        super().__init__(f"{location}: {problem}", file=file, key_path=key_path, problem=problem)
        self.file = file
        self.key_path = key_path
        self.problem = problem


class NotFound(ReboundError):
    code = "NOT_FOUND"
    http_status = 404


class Forbidden(ReboundError):
    """The caller may not do this (on this tenant): ``rebound.api.auth.authorize`` decided so."""

    code = "FORBIDDEN"
    http_status = 403


class TaskNotFound(NotFound):
    code = "TASK_NOT_FOUND"

    @classmethod
    def of(cls, task_id: str) -> TaskNotFound:
        """The one answer for a task that does not exist, or that the caller may not see."""
        return cls(f"no task {task_id!r}", task_id=task_id)


class RunNotFound(NotFound):
    code = "RUN_NOT_FOUND"

    @classmethod
    def of(cls, run_id: str) -> RunNotFound:
        """The one answer for a run that does not exist, or that the caller may not see."""
        return cls(f"no run {run_id!r}", run_id=run_id)


class WorkOrderNotFound(NotFound):
    code = "WORK_ORDER_NOT_FOUND"

    @classmethod
    def of(cls, work_order_id: str) -> WorkOrderNotFound:
        """The one answer for a work order that does not exist, or that the caller may not see."""
        return cls(f"no work order {work_order_id!r}", work_order_id=work_order_id)


class PolicyNotFound(NotFound):
    code = "POLICY_NOT_FOUND"


class MessageNotFound(NotFound):
    code = "MESSAGE_NOT_FOUND"

    @classmethod
    def of(cls, message_id: str) -> MessageNotFound:
        """The one answer for a DLQ message that is not there, or that the caller may not see."""
        return cls(f"no message {message_id} in the DLQ or its archive", message_id=message_id)


class FeatureDisabled(ReboundError):
    """A capability a feature flag turned off in this environment (``rebound.domain.flags``)."""

    code = "FEATURE_DISABLED"
    http_status = 409

    @classmethod
    def of(cls, flag: str, what: str) -> FeatureDisabled:
        return cls(
            f"{what} is disabled in this environment (feature flag {flag} is off; "
            f"`rebound flags set {flag} on` turns it back on)",
            flag=flag,
        )


class Conflict(ReboundError):
    """Someone else changed the record first; re-read and decide again."""

    code = "CONFLICT"
    http_status = 409


class OperationalError(ReboundError):
    """Rebound could not do its own job (an audit write, a work order). Never swallowed."""

    code = "OPERATIONAL_ERROR"
    http_status = 503


class Throttled(OperationalError):
    code = "THROTTLED"
    http_status = 429


class Contended(OperationalError):
    """Another write touched the same item at the same moment (DynamoDB's ``TransactionConflict``).

    Nothing was written and no condition was judged: the same write may simply be tried again.
    It is never a lost condition (that is ``Conflict``).
    """

    code = "CONTENDED"
    http_status = 503


TRANSIENT: tuple[type[OperationalError], ...] = (Throttled, Contended)
"""Errors after which the same request may be sent again unchanged."""
