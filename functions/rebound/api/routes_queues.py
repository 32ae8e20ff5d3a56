"""Route for the queues' depths and ages: every queue of ``rebound.resources.SPEC`` (execution,
retry, escalation and the DLQs) with SQS's approximate counts, read from queue attributes (never
by receiving, so looking hides nothing), and the age of its oldest message.

The age is not a queue attribute. The execution DLQ's comes from its record (the oldest entry
still in the DLQ, ``age_source: "dlq record"``); every other queue's from ``Deps.queue_ages``:
CloudWatch's ``ApproximateAgeOfOldestMessage`` on AWS, the local runtime's own queues locally
(``age_source`` names which); ``null`` when neither knows (an empty queue, no datapoint yet)."""

from __future__ import annotations

from typing import Any

from rebound.api.app import Api
from rebound.domain.errors import ReboundError
from rebound.engine.deps import Deps
from rebound.engine.ports import DlqQuery
from rebound.ops.authz import rule
from rebound.resources import SPEC

RECORDED_DLQ = "dlq"
"""The queue whose arrivals are recorded (``dlq_messages``)."""


def oldest_age(deps: Deps, queue: str) -> tuple[float | None, str | None]:
    """The oldest message's age in seconds and where it was read; ``(None, None)`` if unknown."""
    if queue == RECORDED_DLQ:
        now = deps.clock.now()
        page = deps.store.dlq_entries(DlqQuery(present_at=now, limit=1))
        oldest = page.entries[0].at if page.entries else None
        return (max((now - oldest).total_seconds(), 0.0) if oldest else None), "dlq record"
    if deps.queue_ages is None:
        return None, None
    try:
        return deps.queue_ages.oldest_age_s(queue), deps.queue_ages.source
    except ReboundError:  # the depth still shows; the age says it is unknown
        return None, None


def register(api: Api) -> None:
    @api.get(
        "/queues",
        rule("queues:read"),
        summary="Each queue's depth (visible, in flight, delayed) and oldest message's age",
    )
    def queues() -> list[dict[str, Any]]:
        deps = api.deps()
        found = []
        for spec in SPEC.queues:
            counts = deps.queues.counts(spec.logical)
            age, source = oldest_age(deps, spec.logical)
            found.append(
                {
                    "queue": spec.logical,
                    "purpose": spec.purpose,
                    "dead_letter_queue": spec.logical.endswith("dlq"),
                    "visible": counts.visible,
                    "in_flight": counts.in_flight,
                    "delayed": counts.delayed,
                    "total": counts.total,
                    "oldest_age_s": None if age is None else round(age, 1),
                    "age_source": source,
                }
            )
        return found
