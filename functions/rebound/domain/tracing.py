"""One trace per run, named by the run itself.

Every component that touches a run derives the same trace id from the run's id and its scheduled
time, so nothing needs to carry it between them: the executor's target call (W3C ``traceparent``,
and a Lambda target's client context), the retry it sends (SQS ``AWSTraceHeader``), and the events
the outbox relay publishes about the run (EventBridge ``TraceHeader``) all name the same trace, and
with ``tracing: true`` in the environment X-Ray shows the run, its retries and its dead letter as
one trace.

X-Ray's trace id is ``1-<8 hex digits: seconds since the epoch>-<24 hex digits>``; W3C's is the
same 32 digits without the version and the dashes, so the two name one trace.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from rebound.domain.timefmt import parse_utc


def trace_id(run_id: str, scheduled_for: datetime) -> str:
    """The run's trace id, W3C form (32 hex digits): its scheduled second, then a hash of its id."""
    epoch = int(scheduled_for.timestamp()) & 0xFFFFFFFF
    return f"{epoch:08x}{hashlib.sha256(run_id.encode()).hexdigest()[:24]}"


def span_id(*parts: str) -> str:
    """A span id (16 hex digits, never all zero) named by ``parts``."""
    span = hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
    return span if span != "0" * 16 else "0" * 15 + "1"


def xray_header(trace: str, parent: str) -> str:
    """The X-Ray trace header (``AWSTraceHeader``, ``TraceHeader``) of a W3C ``trace``, sampled."""
    return f"Root=1-{trace[:8]}-{trace[8:]};Parent={parent};Sampled=1"


def traceparent(trace: str, parent: str) -> str:
    """The W3C ``traceparent`` of ``trace``, sampled."""
    return f"00-{trace}-{parent}-01"


def run_header(run_id: str, scheduled_for: datetime, *step: str) -> str:
    """The X-Ray header a message or an event about a run carries (its parent named by ``step``)."""
    return xray_header(trace_id(run_id, scheduled_for), span_id(run_id, *step))


def detail_header(detail: dict[str, Any], *step: str) -> str | None:
    """The header of an event whose detail names a run (``run_id`` and ``scheduled_for``); None for
    an event about something else (a work order of no run, a workstream)."""
    run_id, scheduled_for = detail.get("run_id"), detail.get("scheduled_for")
    if not isinstance(run_id, str) or not isinstance(scheduled_for, str):
        return None
    try:
        at = parse_utc(scheduled_for)
    except ValueError:
        return None
    return run_header(run_id, at, *step)
