"""Builders shared by the store contract tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebound.domain.events import execution_updated
from rebound.domain.ids import run_subject
from rebound.domain.run import Attempt, Run, RunState, Trigger
from rebound.domain.work_order import WorkOrder
from rebound.engine.ports import Store
from support import START


@dataclass(frozen=True)
class Event:
    event_id: str
    detail_type: str
    subject: str
    created_at: str
    detail: dict[str, Any]


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def new_run(run_id: str = "r1", task_id: str = "t", scheduled_for: datetime = START, **fields: Any) -> Run:
    return Run(
        run_id=run_id,
        task_id=task_id,
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=scheduled_for,
        created_at=START,
        updated_at=START,
        **fields,
    )


def create(store: Store, run: Run, when: datetime = START, actor: str = "test") -> Run:
    """Commit a new run with its first audit record and an event."""
    uow = store.unit_of_work(actor, when)
    saved = uow.save_run(None, run, action="created")
    uow.emit(execution_updated(saved, None, when), run_subject(run.run_id))
    uow.commit()
    return saved


def running(run: Run, when: datetime = START) -> Run:
    """``run`` with its next attempt started."""
    n = run.attempt + 1
    return run.model_copy(
        update={
            "state": RunState.RUNNING,
            "attempt": n,
            "attempts": [*run.attempts, Attempt(n=n, started_at=when)],
        }
    )


def new_work_order(work_order_id: str = "wo-1", opened_at: datetime = START) -> WorkOrder:
    return WorkOrder(
        work_order_id=work_order_id,
        subject=f"run#{work_order_id}",
        reason="dead_lettered",
        opened_at=opened_at,
    )
