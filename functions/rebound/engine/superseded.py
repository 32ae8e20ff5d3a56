"""Closing a dead-lettered run whose work another run took over: ``superseded``.

A workstream that runs a failed step again (``retry-failed``, ``resume``, a rollback that puts the
step back to pending) no longer follows the step's dead-lettered run: its end would be ignored.
Left as it was, that run could still be redriven, replayed or retried, and run its task a second
time for nothing. So, in the same transaction as the workstream's change:

- the run moves ``dead_lettered -> superseded`` (terminal) with ``superseded_by`` naming what
  replaced it, and an audit record with the actor and the reason;
- its open work order is resolved (resolution ``superseded``), by the same actor;

and once that committed, its DLQ record is marked ``superseded`` (``rebound dlq list`` no longer
shows it); the message itself is deleted by the sweeper's next DLQ check or by a redrive, which
never move a superseded run's message. ``runs retry`` refuses a superseded run, naming its
successor.
"""

from __future__ import annotations

from datetime import datetime

from rebound.domain import events as ev
from rebound.domain.ids import run_subject
from rebound.domain.run import Run, RunState
from rebound.domain.states import closed, ensure_transition
from rebound.domain.work_order import WorkOrder
from rebound.engine.escalation import stage_closing_resolution
from rebound.engine.ports import DlqStatus, Store, UnitOfWork


def stage_supersede(
    uow: UnitOfWork, store: Store, run: Run, *, replaced_by: str, by: str, reason: str
) -> WorkOrder | None:
    """Close dead-lettered ``run`` as superseded by ``replaced_by`` in ``uow``, and resolve its open
    work order there; that order, if one was resolved. The commit is guarded by the run's
    revision: if the run changed meanwhile (a replay began), nothing is written."""
    ensure_transition(run.state, RunState.SUPERSEDED, run.run_id)
    now = uow.at
    after = closed(run, RunState.SUPERSEDED, now).model_copy(update={"superseded_by": replaced_by})
    saved = uow.save_run(
        run,
        after,
        action="superseded",
        evidence={"superseded_by": replaced_by, "reason": reason, "dlq_message_id": run.dlq_message_id},
    )
    uow.emit(ev.execution_updated(saved, run.state, now), run_subject(run.run_id))
    return stage_closing_resolution(
        uow, store, run, RunState.SUPERSEDED, by=by, reason=reason, via="superseded"
    )


def mark_superseded_messages(store: Store, runs: list[Run], *, at: datetime, by: str) -> None:
    """After the commit: the DLQ records of superseded ``runs`` say so (off ``rebound dlq list``).
    A failure here leaves the records as they were; the sweeper's DLQ check marks them when it
    deletes the messages."""
    messages = [r.dlq_message_id for r in runs if r.dlq_message_id]
    if messages:
        store.mark_dlq_entries(messages, DlqStatus.SUPERSEDED, at=at, actor=by)
