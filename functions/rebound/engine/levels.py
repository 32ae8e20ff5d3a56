"""Raise open work orders' escalation levels as time passes (``rebound.domain.escalation_levels``).

A write of a work order judges its level again (``StagingUnitOfWork.save_work_order``), so a
change of severity, a new occurrence or an acknowledgement moves it at once. What no write
changes is time: an order nobody acknowledges passes its acknowledgement target, and later four
times it. The sweeper calls ``raise_levels`` every minute; each order whose level rose is written
with one audit record (``level-raised``, from and to, and why), guarded by its audit sequence
number, so a concurrent acknowledgement wins and the next sweep judges the order again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from rebound.domain.errors import Conflict
from rebound.domain.escalation_levels import unacknowledged_for, with_level
from rebound.domain.work_order import WorkOrder, WorkOrderState
from rebound.engine.deps import Deps

log = logging.getLogger(__name__)

ACTION = "level-raised"


def raise_levels(
    deps: Deps, actor: str, on_failure: Callable[[str, Exception], None] | None = None
) -> list[str]:
    """Write each open order whose level is now higher than recorded; their ids. An order that
    fails is passed to ``on_failure`` (the sweeper counts it) and the others go on."""
    now = deps.clock.now()
    raised: list[str] = []
    for order in deps.store.work_orders(WorkOrderState.OPEN):
        try:
            if _raise(deps, actor, order, now):
                raised.append(order.work_order_id)
        except Exception as exc:
            if on_failure is None:
                raise
            on_failure(order.work_order_id, exc)
    return raised


def _raise(deps: Deps, actor: str, order: WorkOrder, now: datetime) -> bool:
    judged = with_level(order, now)
    if judged.level == order.level:
        return False
    uow = deps.store.unit_of_work(actor, now)
    uow.save_work_order(
        order,
        judged,
        action=ACTION,
        evidence={
            "from": order.level,
            "to": judged.level,
            "unacknowledged_s": round(unacknowledged_for(order, now).total_seconds(), 3),
            "dead_letters": 1 + len(order.occurrences),
        },
    )
    try:
        uow.commit()
    except Conflict:  # written meanwhile (acknowledged, say): judged again next sweep
        return False
    log.warning(
        "work order escalation level raised",
        extra={"work_order_id": order.work_order_id, "from": order.level, "to": judged.level},
    )
    return True
