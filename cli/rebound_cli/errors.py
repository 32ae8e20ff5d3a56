"""The one place where an error becomes a line on stderr and an exit code.

Rebound errors carry the HTTP status the ops API answers with; the CLI maps that status to its
exit code, so both surfaces classify an error the same way and neither reads message text.

=====  ==========================================================================
 code  meaning
=====  ==========================================================================
   0   done
   1   failed (an unexpected error, or one with no more specific code)
   2   bad input or configuration (click's usage errors use 2 as well)
   3   unhealthy: ``rebound health`` found a failing check, ``audit verify`` a broken chain
   4   not found: no such task, run, work order, policy, message or environment
   5   conflict: the state does not allow it, or it changed underneath; look again
   6   AWS unavailable or throttling; try again later
   7   refused: your identity may not do that (on that tenant); the refusal is audited
   8   pending: the action waits for a second operator (``rebound approvals approve ID``)
=====  ==========================================================================
"""

from __future__ import annotations

from botocore.exceptions import (
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ProfileNotFound,
)

from rebound.domain.errors import ReboundError

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_UNHEALTHY = 3
EXIT_NOT_FOUND = 4
EXIT_CONFLICT = 5
EXIT_UNAVAILABLE = 6
EXIT_FORBIDDEN = 7
EXIT_PENDING = 8

_BY_STATUS = {
    202: EXIT_PENDING,
    400: EXIT_INVALID,
    403: EXIT_FORBIDDEN,
    404: EXIT_NOT_FOUND,
    409: EXIT_CONFLICT,
    429: EXIT_UNAVAILABLE,
    503: EXIT_UNAVAILABLE,
}

_AWS_SETUP: dict[type[Exception], tuple[str, int]] = {
    NoCredentialsError: (
        "no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        EXIT_INVALID,
    ),
    NoRegionError: ("no AWS region: set AWS_REGION (or a region in your AWS profile)", EXIT_INVALID),
    ProfileNotFound: ("the AWS_PROFILE you named is not in your AWS config", EXIT_INVALID),
    EndpointConnectionError: (
        "cannot reach AWS at the configured endpoint (check AWS_ENDPOINT_URL, or start `rebound local up`)",
        EXIT_UNAVAILABLE,
    ),
}


def _aws_setup_problem(exc: BaseException) -> tuple[str, int] | None:
    """A botocore configuration problem, possibly wrapped by ``rebound.adapters.errors.translate``."""
    for candidate in (exc, exc.__cause__):
        if candidate is None:
            continue
        for cls in type(candidate).__mro__:
            if cls in _AWS_SETUP:
                return _AWS_SETUP[cls]
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def describe(exc: Exception) -> tuple[str, int]:
    """The line to print and the exit code for ``exc``."""
    setup = _aws_setup_problem(exc)
    if setup is not None:
        return f"error: {setup[0]}", setup[1]
    if isinstance(exc, ReboundError):
        return f"error: {_one_line(exc.message)} [{exc.code}]", _BY_STATUS.get(exc.http_status, EXIT_FAILED)
    detail = _one_line(str(exc)) or "(no message)"
    return (
        f"error: unexpected {type(exc).__name__}: {detail} (run again with --debug for the traceback)",
        EXIT_FAILED,
    )
