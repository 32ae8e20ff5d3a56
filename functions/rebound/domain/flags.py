"""Rebound's feature flags: what each one switches, and the document AppConfig holds them in.

Five flags, the ones the seed documents name, each on by default. Each has one effect:

- ``task-retry-queue``: off, a failed attempt is not retried: the run is dead-lettered with a work
  order at once (reason ``retries_disabled_by_flag``), as if its budget were spent.
- ``dlq-inspector``: off, the DLQ's views and routes answer "disabled in this environment".
- ``task-sla-monitor``: off, no SLA breach is judged or recorded (start delays and durations
  are still measured).
- ``audit-streaming``: off, events that only outside subscribers consume (those the environment's
  ``outbox.publish`` adds) are not published; audit records are written as ever, and the events
  Rebound's own loop consumes are published as ever.
- ``task-scheduler-v3``: off, a fire starts at its scheduled instant: no stagger offset, no
  flexible time window on its schedules (switching the flag rewrites the schedules of jittered
  tasks and workstreams), no pre-flight warnings (fires and quotas are still predicted).

The document is AppConfig's feature-flags form (``AWS.AppConfig.FeatureFlags``, as Powertools'
feature flags utility reads it): ``{"<name>": {"default": true|false}, ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rebound.domain.errors import ValidationFailed

TASK_RETRY_QUEUE = "task-retry-queue"
DLQ_INSPECTOR = "dlq-inspector"
AUDIT_STREAMING = "audit-streaming"
TASK_SCHEDULER_V3 = "task-scheduler-v3"
TASK_SLA_MONITOR = "task-sla-monitor"

FLAGS: dict[str, str] = {
    TASK_RETRY_QUEUE: "failed attempts are retried; off: a failed run is dead-lettered at once",
    DLQ_INSPECTOR: "the DLQ's views and routes; off: they answer 'disabled in this environment'",
    AUDIT_STREAMING: "events only outside subscribers consume are published; off: they are not",
    TASK_SCHEDULER_V3: "stagger, jitter and pre-flight warnings; off: every fire at its exact instant",
    TASK_SLA_MONITOR: "SLA breaches are judged and recorded; off: none is",
}
"""Each flag and what it switches (``rebound flags list`` prints these)."""
DEFAULTS: dict[str, bool] = dict.fromkeys(FLAGS, True)


def known_flag(name: str) -> str:
    """``name`` if it is one of Rebound's flags; else ``ValidationFailed`` naming the known ones."""
    if name not in FLAGS:
        raise ValidationFailed(
            f"no feature flag {name!r}; the flags are {', '.join(sorted(FLAGS))}", field="name"
        )
    return name


def flags_document(values: Mapping[str, bool]) -> dict[str, Any]:
    """The AppConfig feature-flags document for ``values`` (every flag, defaults for the rest)."""
    return {name: {"default": bool(values.get(name, DEFAULTS[name]))} for name in FLAGS}


def flag_values(document: Mapping[str, Any]) -> dict[str, bool]:
    """Each flag's value in ``document`` (a flag it leaves out, or garbles, is its default)."""
    out: dict[str, bool] = {}
    for name in FLAGS:
        entry = document.get(name)
        value = entry.get("default") if isinstance(entry, Mapping) else None
        out[name] = value if isinstance(value, bool) else DEFAULTS[name]
    return out
