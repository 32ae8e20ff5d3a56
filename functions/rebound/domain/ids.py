"""Identifiers that derive from what they identify, so that repeating a request finds the same thing."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, date, datetime, timedelta

from rebound.domain.timefmt import compact

_EVENT_ID = re.compile(r"[^A-Za-z0-9_.-]")


def _digest(*parts: str, length: int = 16) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:length]


def scheduled_run_id(task_id: str, fire_time: datetime) -> str:
    """The retry key of a scheduled run: task + logical fire time."""
    return f"{task_id}:{compact(fire_time)}"


def fire_time(run_id: str) -> datetime | None:
    """A scheduled run's fire time (``scheduled_run_id``); None for an id that names no time."""
    try:
        return datetime.strptime(run_id.rsplit(":", 1)[-1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def scheduled_day(run_id: str) -> date | None:
    """The day before that of a scheduled run's fire time (``scheduled_run_id``), from where its
    audit records are in the archive; None for an id that names no time."""
    fired = fire_time(run_id)
    return None if fired is None else fired.date() - timedelta(days=1)


def event_run_id(task_id: str, event_id: str) -> str:
    return f"{task_id}:evt-{_EVENT_ID.sub('_', event_id)[:64]}"


def manual_run_id(owner_id: str, at: datetime, token: str | None = None, *, unique: str = "") -> str:
    """The run a request to start ``owner_id`` (a task or a workstream) now names. With a
    ``token``, the token alone: the same token names the same run whenever it is sent again (a
    client retrying after a timeout a day later starts nothing new). Without one, a new run at
    ``at``, told apart by ``unique``."""
    if token is not None:
        return f"{owner_id}:manual-t{_digest(token)}"
    return f"{owner_id}:manual-{compact(at)}-{_digest(unique, length=8)}"


def work_order_id(subject: str, occurrence: str = "") -> str:
    """Exactly one work order per subject and occurrence: the id is a function of both.

    A run dead-lettered, replayed and dead-lettered again gets a second work order (its
    occurrence is the ``dead_lettered_at`` of each dead letter); repeated deliveries of the same
    dead letter find the same one.
    """
    return f"wo-{_digest(subject, occurrence)}" if occurrence else f"wo-{_digest(subject)}"


def retry_dispatch_reference(run_id: str, attempt: int, dispatch: int = 0) -> str:
    """Names the dispatch of ``attempt`` under the run's dispatch token; also the one-time
    schedule's name (<= 64 chars), so re-sending the same dispatch finds the same schedule."""
    base = f"retry-{_digest(run_id)}-{attempt}"
    return f"{base}-{dispatch}" if dispatch else base


AWS_NAME_LIMIT = 64
"""EventBridge Scheduler schedule names and EventBridge rule names: at most 64 of [0-9A-Za-z._-]."""


def fit_name(name: str, limit: int = AWS_NAME_LIMIT) -> str:
    """``name`` if it fits ``limit``; else its start and a hash of the whole, so that two long
    names that share a start stay two names (a tenant and a task id may be 48 characters each)."""
    if len(name) <= limit:
        return name
    digest = _digest(name, length=12)
    return f"{name[: limit - len(digest) - 1].rstrip('.-_')}-{digest}"


def task_schedule_name(task_id: str, index: int = 0) -> str:
    """The EventBridge Scheduler schedule of a task (a task may need several)."""
    return fit_name(f"task-{task_id}" if index == 0 else f"task-{task_id}-{index}")


def task_rule_name(task_id: str) -> str:
    """The EventBridge rule of an event-triggered task, on the environment's bus."""
    return fit_name(f"task-{task_id}")


def workstream_schedule_name(workstream_id: str, index: int = 0) -> str:
    """The EventBridge Scheduler schedule that starts a workstream (a schedule may need several)."""
    return f"ws-{workstream_id}" if index == 0 else f"ws-{workstream_id}-{index}"


def workstream_rule_name(workstream_id: str) -> str:
    """The EventBridge rule of a workstream started by events, on the environment's bus."""
    return f"ws-{workstream_id}"


RUN_PREFIX = "run#"
"""Audit subjects are ``<kind>#<id>``: one hash chain per run, work order, task, policy, tenant, slot."""


def run_subject(run_id: str) -> str:
    return f"{RUN_PREFIX}{run_id}"


def task_subject(task_id: str) -> str:
    return f"task#{task_id}"


def work_order_subject(work_order_id: str) -> str:
    return f"workorder#{work_order_id}"


def policy_subject(name: str) -> str:
    return f"policy#{name}"


def tenant_subject(tenant: str) -> str:
    return f"tenant#{tenant}"


def slot_subject(slot: str) -> str:
    """The chain of a concurrency slot (``<kind>#<name>``), where expired holders are recorded."""
    return f"slot#{slot}"


def message_subject(message_id: str) -> str:
    return f"msg#{message_id}"


def outbox_event_id(subject: str, seq: int, index: int) -> str:
    return f"{subject}#{seq}#{index}"


def slot_expiry_attribute(run_id: str) -> str:
    """The attribute of a slot's control record that holds one holder's expiry (epoch seconds)."""
    return f"exp:{run_id}"
