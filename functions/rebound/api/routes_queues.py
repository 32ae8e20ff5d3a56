"""Route for the queues' depths: every queue of ``rebound.resources.SPEC`` (execution, retry,
escalation and the DLQs) with SQS's approximate counts, read from queue attributes (never by
receiving, so looking hides nothing)."""

from __future__ import annotations

from typing import Any

from rebound.api.app import Api
from rebound.resources import SPEC


def register(api: Api) -> None:
    app = api.app

    @app.get("/queues", summary="Each queue's depth: visible, in flight and delayed messages")
    def queues() -> list[dict[str, Any]]:
        api.allow("queues:read")
        deps = api.deps()
        found = []
        for spec in SPEC.queues:
            counts = deps.queues.counts(spec.logical)
            found.append(
                {
                    "queue": spec.logical,
                    "purpose": spec.purpose,
                    "dead_letter_queue": spec.logical.endswith("dlq"),
                    "visible": counts.visible,
                    "in_flight": counts.in_flight,
                    "delayed": counts.delayed,
                    "total": counts.total,
                }
            )
        return found
