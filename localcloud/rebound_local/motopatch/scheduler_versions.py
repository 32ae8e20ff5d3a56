"""Patch 5, change counters: schedule changes bump ``versions["scheduler"]``.

The local Scheduler re-reads schedules only when something changed. Owns ``versions``, the
counters of every service's changes (the SQS and stream counters are bumped by ``changes``).
"""

from __future__ import annotations

from typing import Any

versions: dict[str, int] = {"scheduler": 0}
"""Bumped on every change to a service's definitions, so the runtime re-reads only then."""


def _patch_scheduler_versions() -> None:
    from moto.scheduler.models import EventBridgeSchedulerBackend

    for name in ("create_schedule", "update_schedule", "delete_schedule", "delete_schedule_group"):
        original = getattr(EventBridgeSchedulerBackend, name)

        def bumped(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            try:
                return _original(self, *args, **kwargs)
            finally:
                versions["scheduler"] += 1

        setattr(EventBridgeSchedulerBackend, name, bumped)
