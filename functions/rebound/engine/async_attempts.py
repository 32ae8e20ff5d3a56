"""Asynchronous attempts (``target.mode: async``): the claim's heartbeat lease and the token.

An asynchronous attempt is claimed like any other, in the same conditional transaction, which
also records what its reports will be checked against: the id of its one completion token
(``async_token_id``), when it reaches its ``max_duration`` (``async_ends_at``) and its heartbeat
timeout. Its lease is the *heartbeat lease*: the later of the start call's deadline (plus grace)
and one heartbeat timeout, never past ``async_ends_at``. Each accepted heartbeat moves it on
(``heartbeat_lease``); the sweeper fails an attempt whose lease ran out with
``HEARTBEAT_TIMEOUT``, or with ``TIMEOUT`` once ``async_ends_at`` has passed
(``timeout_code``). The executor returns as soon as the start call has succeeded.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rebound.domain.completion import Claims, sign, token_id_for
from rebound.domain.run import Run
from rebound.domain.task import Task

if TYPE_CHECKING:
    from rebound.engine.deps import Deps

HEARTBEAT_TIMEOUT = "HEARTBEAT_TIMEOUT"
TIMEOUT = "TIMEOUT"
COMPLETION_KEY_MISSING = "COMPLETION_KEY_MISSING"
TOKEN_GRACE = timedelta(minutes=10)
"""A token outlives its attempt's max_duration by this much, so that a late report is answered
"timed out" (and audited) rather than "expired"."""

ASYNC_CLEARED: dict[str, Any] = {
    "async_token_id": None,
    "async_ends_at": None,
    "heartbeat_timeout_s": None,
    "heartbeat_at": None,
    "heartbeats": 0,
    "progress": None,
}
"""What a synchronous claim sets: nothing left from an earlier asynchronous attempt."""


def async_claim(
    task: Task, run_id: str, attempt: int, now: datetime, call_lease: datetime
) -> dict[str, Any] | None:
    """The fields an asynchronous claim sets on the run (``None`` for a synchronous task)."""
    if not task.is_async or task.max_duration is None or task.heartbeat_timeout is None:
        return None
    ends_at = now + timedelta(seconds=task.max_duration)
    lease = min(ends_at, max(call_lease, now + timedelta(seconds=task.heartbeat_timeout)))
    return {
        **ASYNC_CLEARED,
        "async_token_id": token_id_for(run_id, attempt),
        "async_ends_at": ends_at,
        "heartbeat_timeout_s": float(task.heartbeat_timeout),
        "heartbeat_at": now,
        "lease_expires_at": lease,
    }


def heartbeat_lease(run: Run, now: datetime) -> datetime:
    """The lease after a heartbeat at ``now``: one heartbeat timeout on, never past the end."""
    ends = run.async_ends_at or now
    return min(ends, now + timedelta(seconds=run.heartbeat_timeout_s or 0.0))


def timeout_code(run: Run, now: datetime) -> str:
    """Why an asynchronous attempt whose lease ran out failed: its max_duration, or its heartbeats."""
    if run.async_ends_at is not None and now >= run.async_ends_at:
        return TIMEOUT
    return HEARTBEAT_TIMEOUT


def completion_token(deps: Deps, run: Run) -> str:
    """The signed token of ``run``'s running asynchronous attempt."""
    if run.async_token_id is None or run.async_ends_at is None:
        raise ValueError(f"run {run.run_id} has no asynchronous attempt running")
    claims = Claims(run.run_id, run.attempt, run.async_token_id, run.async_ends_at + TOKEN_GRACE)
    return sign(deps.completion_keys.key(), claims)


def completion_details(deps: Deps, run: Run, task: Task) -> dict[str, Any]:
    """The payload block the work receives: what it needs to report (``rebound.worker``)."""
    return {
        "completion_token": completion_token(deps, run),
        "run_id": run.run_id,
        "attempt": run.attempt,
        "heartbeat_timeout_s": task.heartbeat_timeout,
        "max_duration_s": task.max_duration,
    }
