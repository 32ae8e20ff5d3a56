"""Replaying a dead-lettered run: a fresh attempt budget, recorded, then a replay message.

Both ``runs retry`` and ``dlq redrive`` replay runs the same way, in two steps:

1. **Record.** One transaction moves the run ``dead_lettered -> replayed`` through the state
   machine, starts a fresh budget (``budget_start = attempt``), and writes the audit record
   (actor: the operator) and the ``task.execution.updated`` event. The record's evidence names
   the DLQ message the replay came from, so a later redrive can tell that message was handled.
2. **Send.** A ``replay`` message for the run goes to the execution queue. The executor claims a
   ``replayed`` run whose ``attempt == budget_start`` with a conditional write, so however many
   replay messages arrive, the fresh budget's first attempt runs once.

If step 2 never happens (a crash, a refused send), the run waits in ``replayed`` and the next
``runs retry`` or redrive sends the message again (``rebound health`` reports such runs).

Budget overrides (``--timeout``, ``--max-attempts``) belong to the budget that starts here: they
are recorded in the evidence and on the run, and the next budget starts without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rebound.domain import events as ev
from rebound.domain.audit import sign_actor
from rebound.domain.audit_record import AuditRecord
from rebound.domain.basics import MAX_TASK_TIMEOUT_S
from rebound.domain.errors import Conflict, ValidationFailed
from rebound.domain.ids import run_subject
from rebound.domain.jsonutil import dumps
from rebound.domain.run import Run, RunState, with_changes
from rebound.domain.states import ensure_transition
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.engine.ports import Outgoing, UnitOfWork

REPLAYED_ACTION = "replayed"


@dataclass(frozen=True)
class BudgetOverrides:
    """What an operator changes for one budget of one run."""

    timeout_s: int | None = None
    max_attempts: int | None = None

    @classmethod
    def of(cls, timeout_s: int | None, max_attempts: int | None) -> BudgetOverrides | None:
        if timeout_s is None and max_attempts is None:
            return None
        if timeout_s is not None and not 1 <= timeout_s <= MAX_TASK_TIMEOUT_S:
            raise ValidationFailed(
                f"--timeout must be between 1 and {MAX_TASK_TIMEOUT_S} seconds", key_path="timeout"
            )
        if max_attempts is not None and not 1 <= max_attempts <= 100:
            raise ValidationFailed("--max-attempts must be between 1 and 100", key_path="max_attempts")
        return cls(timeout_s, max_attempts)

    def as_dict(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.timeout_s is not None:
            out["timeout_s"] = self.timeout_s
        if self.max_attempts is not None:
            out["max_attempts"] = self.max_attempts
        return out


class Replays:
    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor

    def begin(
        self,
        run: Run,
        *,
        via: str,
        dlq_message_id: str | None,
        overrides: BudgetOverrides | None = None,
        reason: str = "",
        evidence: dict[str, Any] | None = None,
    ) -> Run:
        """Step 1: ``dead_lettered -> replayed`` with a fresh budget, audited. Raises ``Conflict``."""
        uow = self.store.unit_of_work(self.actor, self.deps.clock.now())
        saved = self._stage(uow, run, via, dlq_message_id, overrides, reason, evidence or {})
        try:
            uow.commit()
        except Conflict as exc:
            raise Conflict(
                f"run {run.run_id} changed while it was being replayed; look at it again",
                run_id=run.run_id,
            ) from exc
        return saved

    def begin_many(self, runs: list[tuple[Run, str | None, dict[str, Any]]], *, via: str) -> list[Run] | None:
        """Step 1 for up to ten runs, ``(run, dlq_message_id, evidence)``, in one transaction.

        ``None`` if any of them changed meanwhile (nothing was written): then begin each alone.
        """
        if not runs:
            return []
        uow = self.store.unit_of_work(self.actor, self.deps.clock.now())
        saved = [
            self._stage(uow, run, via, message_id, None, "", evidence) for run, message_id, evidence in runs
        ]
        try:
            uow.commit()
        except Conflict:
            return None
        return saved

    def _stage(
        self,
        uow: UnitOfWork,
        run: Run,
        via: str,
        dlq_message_id: str | None,
        overrides: BudgetOverrides | None,
        reason: str,
        evidence: dict[str, Any],
    ) -> Run:
        now = uow.at
        if run.state is RunState.SUPERSEDED:
            raise Conflict(
                f"run {run.run_id} was superseded by {run.superseded_by}: it is never run again",
                run_id=run.run_id,
                superseded_by=run.superseded_by,
            )
        ensure_transition(run.state, RunState.REPLAYED, run.run_id)
        update: dict[str, Any] = {
            "state": RunState.REPLAYED,
            "budget_start": run.attempt,
            "budget_started_at": now,
            "dlq_message_id": None,
            "next_retry_at": now,
            "dispatch": run.dispatch + 1,
        }
        update["budget_overrides"] = overrides.as_dict() if overrides else None
        saved = uow.save_run(
            run,
            with_changes(run, update),
            action=REPLAYED_ACTION,
            evidence={
                **evidence,
                "via": via,
                "dlq_message_id": dlq_message_id,
                "fresh_budget_from_attempt": run.attempt + 1,
                "overrides": overrides.as_dict() if overrides else None,
                "reason": reason or None,
                "dead_letter": {
                    "reason": run.dead_letter_reason,
                    "error_code": run.last_error_code,
                    "dead_lettered_at": iso(run.dead_lettered_at) if run.dead_lettered_at else None,
                    "work_order_id": run.work_order_id,
                },
            },
        )
        uow.emit(ev.execution_updated(saved, run.state, now), run_subject(run.run_id))
        return saved

    def message(self, run: Run, *, key: str, dlq_message_id: str | None, redrive_id: str = "") -> Outgoing:
        """Step 2's message: what the executor's ``replay`` kind reads."""
        body = {
            "v": 1,
            "kind": "replay",
            "run_id": run.run_id,
            "dispatch": run.dispatch,
            "actor": self.actor,
            "actor_sig": sign_actor(
                run.run_id, self.actor, self.deps.clock.now(), self.store.audit_keys.sign
            ),
            "task_id": run.task_id,
            "reason": run.dead_letter_reason,
            "attempts": run.attempt,
            "error_code": run.last_error_code,
            "dead_lettered_at": iso(run.dead_lettered_at) if run.dead_lettered_at else None,
        }
        return Outgoing(
            key=key,
            body=dumps(body),
            attributes={
                "run_id": run.run_id,
                "task_id": run.task_id,
                "tenant": run.tenant,
                "replay_of": dlq_message_id,
                "redrive_id": redrive_id or None,
            },
        )

    def record_for(self, run: Run, dlq_message_id: str) -> tuple[AuditRecord | None, bool]:
        """The replay record that names ``dlq_message_id``, and whether its replay is still unclaimed.

        Unclaimed: the run is still ``replayed`` in the budget that record started, so its replay
        message may never have been sent.
        """
        trail = self.store.audit_trail(run_subject(run.run_id))
        replays = [r for r in trail if r.action == REPLAYED_ACTION]
        mine = [r for r in replays if r.evidence.get("dlq_message_id") == dlq_message_id]
        if not mine:
            return None, False
        record = mine[-1]
        unclaimed = (
            run.state is RunState.REPLAYED and run.attempt == run.budget_start and record is replays[-1]
        )
        return record, unclaimed

    def unclaimed(self, run: Run) -> bool:
        return run.state is RunState.REPLAYED and run.attempt == run.budget_start
