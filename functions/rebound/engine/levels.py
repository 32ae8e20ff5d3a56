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

from rebound.domain.errors import Conflict
from rebound.domain.escalation_levels import unacknowledged_for, with_level
from rebound.domain.models import WorkOrderState
from rebound.engine.deps import Deps

log = logging.getLogger(__name__)

ACTION = "level-raised"


def raise_levels(deps: Deps, actor: str) -> list[str]:
    """Write each open order whose level is now higher than recorded; their ids."""
    now = deps.clock.now()
    raised: list[str] = []
    for order in deps.store.work_orders(WorkOrderState.OPEN):
        judged = with_level(order, now)
        if judged.level == order.level:
            continue
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
            continue
        log.warning(
            "work order escalation level raised",
            extra={"work_order_id": order.work_order_id, "from": order.level, "to": judged.level},
        )
        raised.append(order.work_order_id)
    return raised
