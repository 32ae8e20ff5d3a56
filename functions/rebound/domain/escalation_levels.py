"""Escalation levels 1 to 4 of a work order: Rebound's own definition.

The user's document that defines four levels was not available to us, so these are ours, in the
conventional shape of on-call escalation policies:

- **1 - informational**: recorded for the owning team, nothing expected now (a low-severity order);
- **2 - work order for the owning team**: someone must act within the acknowledgement target of
  its severity (a medium or high order);
- **3 - page on-call**: a critical order;
- **4 - incident / management escalation**: repeated failure (the order's subject dead-lettered
  a third time while it was open), or an order of level 2 or more left unacknowledged past four
  times its target.

An order left unacknowledged past its severity's target goes one level up (so a critical one
becomes an incident after 5 minutes, a high one pages after 15); a low-severity order goes to 2
at most.

The level is a function of the order alone (severity, occurrences, when it was opened and
acknowledged) and of the time it is judged at, so it is deterministic. Time only raises it: the
acknowledgement age stops at ``acknowledged_at`` (or ``resolved_at``), so acknowledging an order
stops it from rising, and a resolved order keeps the level it had.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import IntEnum

from rebound.domain.basics import Severity
from rebound.domain.work_order import WorkOrder

ACK_TARGETS: dict[Severity, timedelta] = {
    Severity.CRITICAL: timedelta(minutes=5),
    Severity.HIGH: timedelta(minutes=15),
    Severity.MEDIUM: timedelta(hours=1),
    Severity.LOW: timedelta(hours=4),
}
"""How soon an order of each severity should be acknowledged (the retry-health report's
``acknowledgement_gaps`` check uses the same targets by default)."""
INCIDENT_FACTOR = 4
"""Unacknowledged past this many times its target: level 4."""
REPEATED_FAILURES = 3
"""Dead letters of the order's subject while it was open (the first one included): level 4."""


class Level(IntEnum):
    INFORMATIONAL = 1
    TEAM = 2
    PAGE = 3
    INCIDENT = 4


BASE = {Severity.LOW: Level.INFORMATIONAL, Severity.MEDIUM: Level.TEAM, Severity.HIGH: Level.TEAM}


def unacknowledged_for(order: WorkOrder, now: datetime) -> timedelta:
    """How long the order went without acknowledgement: to its acknowledgement, its resolution, or ``now``."""
    end = order.acknowledged_at or order.resolved_at or now
    return max(end - order.opened_at, timedelta(0))


def derive_level(order: WorkOrder, now: datetime) -> Level:
    """The order's level at ``now`` (see the module's docstring)."""
    base = BASE.get(order.severity, Level.PAGE)
    target = ACK_TARGETS[order.severity]
    waited = unacknowledged_for(order, now)
    level = base + 1 if waited > target else base
    if base is Level.INFORMATIONAL:
        return Level(min(level, Level.TEAM))
    if waited > target * INCIDENT_FACTOR or 1 + len(order.occurrences) >= REPEATED_FAILURES:
        return Level.INCIDENT
    return Level(min(level, Level.INCIDENT))


def level_of(order: WorkOrder, now: datetime) -> int:
    """The level an order reads as: its recorded level, or for an order written before levels were
    recorded, its derived one (so no migration is needed)."""
    return order.level if order.level is not None else int(derive_level(order, now))


def with_level(order: WorkOrder, now: datetime) -> WorkOrder:
    """``order`` with its level judged at ``now``: never lower than the one it had recorded."""
    level = max(int(derive_level(order, now)), order.level or 0)
    return order if order.level == level else order.model_copy(update={"level": level})
