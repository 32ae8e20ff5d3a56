"""Dead letters: the one way a run becomes ``dead_lettered``, and its message in the DLQ.

A dead letter is recorded first (state, audit record, ``task.execution.dead_lettered`` event),
then its replay message is put in the DLQ. The escalation handler, which every dead letter reaches
through the outbox, sends that message if it is still missing, so a crash in between loses
nothing; a second copy (a crash after the send, before its id was recorded) is removed by the
sweeper's DLQ check. A message that names no run Rebound can act on is dead-lettered as itself.

Each DLQ message is recorded in the store (``rebound.engine.dlq_record``) in the transaction that
names it: with the run's ``dlq_message_id``, with a refused message's audit record, with a
crash-path arrival's dead letter.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta

from rebound.domain import events as ev
from rebound.domain.errors import Conflict, OperationalError
from rebound.domain.ids import message_subject, run_subject
from rebound.domain.jsonutil import dumps
from rebound.domain.retry_policy import RetryPolicy
from rebound.domain.run import AttemptOutcome, Run, RunState
from rebound.domain.states import ensure_transition
from rebound.domain.timefmt import iso
from rebound.engine import crashpoints as cp
from rebound.engine import telemetry as m
from rebound.engine.concurrency import leave
from rebound.engine.deps import Deps
from rebound.engine.dlq_record import dlq_entry, millis
from rebound.engine.ports import DlqEntry

log = logging.getLogger(__name__)

DLQ_SEND_CLAIM = timedelta(minutes=5)
INVALID_MESSAGE = "INVALID_MESSAGE"


def last_outcome(run: Run) -> str:
    """The outcome of the run's last attempt, as its evidence names it."""
    attempt = run.current_attempt
    if attempt is None:
        return "refused"
    return attempt.outcome.value if attempt.outcome is not AttemptOutcome.RUNNING else "failed"


class DeadLetters:
    """The one way a run becomes dead-lettered, whichever path found it."""

    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor

    def dead_letter(
        self,
        run: Run,
        reason: str,
        policy: RetryPolicy,
        *,
        send: bool = True,
        message_id: str | None = None,
        error_code: str | None = None,
        previous: Run | None = None,
        arrived: DlqEntry | None = None,
    ) -> Run | None:
        """Record ``dead_lettered`` with its evidence and event; then put the run in the DLQ.

        ``previous`` is the stored run when ``run`` carries changes not yet written (the error
        that dead-letters it). Slots the run still holds (a waiting run's buffer) are left in the
        same transaction. ``send=False`` is the crash path: SQS already moved the message to the
        DLQ, where it stays, and ``arrived`` is its record, written with the dead letter. ``None``
        if the run changed meanwhile.
        """
        now = self.clock.now()
        before = previous or run
        after = run.model_copy(
            update={
                "state": RunState.DEAD_LETTERED,
                "dead_lettered_at": now,
                "dead_letter_reason": reason,
                "next_retry_at": None,
                "lease_expires_at": None,
                "lease_owner": None,
                "policy_ref": f"{policy.name}@v{policy.version}",
                "dlq_message_id": message_id,
                "last_error_code": error_code or run.last_error_code,
                "slots": [],
                "waiting_since": None,
                "held_at": None,
            }
        )
        ensure_transition(before.state, after.state, run.run_id)
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            before,
            after,
            action="dead-lettered",
            evidence={
                "attempt": run.attempt,
                "outcome": last_outcome(run),
                "dead_lettered_at": iso(now),
                "reason": reason,
                "error_code": after.last_error_code,
                "error_message": after.last_error_message,
                "path": "explicit" if send else "redrive_policy",
                "policy": f"{policy.name}@v{policy.version}",
            },
        )
        for key in before.slots:
            leave(uow, key, run.run_id)
        if arrived is not None:
            uow.record_dlq_entry(arrived)
        subject = run_subject(run.run_id)
        uow.emit(ev.execution_updated(saved, before.state, now), subject)
        uow.emit(
            ev.dead_lettered(
                subject=subject,
                run=saved,
                reason=reason,
                at=now,
                error_code=after.last_error_code,
                severity=policy.severity.value,
                message_id=message_id,
            ),
            subject,
        )
        try:
            uow.commit()
        except Conflict:
            return None
        self.deps.metrics.count(m.RETRY_DLQ)
        log.warning(
            "run dead-lettered",
            extra={
                "run_id": run.run_id,
                "task_id": run.task_id,
                "tenant_id": run.tenant,
                "reason": reason,
                "error_code": after.last_error_code,
                "retry_count": max(run.attempt - 1, 0),
                "status": "dead_lettered",
            },
        )
        if send:
            self.deps.faults.reached(cp.AFTER_DEAD_LETTER_COMMIT)
            return self.send_to_dlq(saved)
        return saved

    def ensure_in_dlq(self, run_id: str, dead_lettered_at: str | None) -> str:
        """The escalation path's guarantee: this dead letter has its DLQ message.

        ``recorded`` if the run names its message (or moved on), ``sent`` if this call sent it;
        raises ``OperationalError`` while another sender holds the claim, so the event comes back
        later and checks again."""
        run = self.store.get_run(run_id)
        if (
            run is None
            or run.state is not RunState.DEAD_LETTERED
            or run.dlq_message_id is not None
            or (dead_lettered_at and run.dead_lettered_at and iso(run.dead_lettered_at) != dead_lettered_at)
        ):
            return "recorded"
        sent = self.send_to_dlq(run)
        if sent.dlq_message_id is None:
            raise OperationalError(
                f"the DLQ message of {run_id} is being sent by another invocation; checking again later",
                run_id=run_id,
            )
        return "sent"

    def send_to_dlq(self, run: Run) -> Run:
        """Put a dead-lettered run's replay message in the DLQ and record its message id.

        Concurrent senders (the retry scheduler right after the dead letter, the escalation
        handler that checks for it) take a short claim so that one sends. If the one that claimed
        dies before sending, the claim expires before the escalation event comes back.
        """
        assert run.dead_lettered_at is not None
        if not self.store.claim_key(
            f"dlq-send#{run.run_id}#{iso(run.dead_lettered_at)}", self.clock.now(), DLQ_SEND_CLAIM
        ):
            return run
        body = {
            "v": 1,
            "kind": "replay",
            "run_id": run.run_id,
            "task_id": run.task_id,
            "reason": run.dead_letter_reason,
            "attempts": run.attempt,
            "error_code": run.last_error_code,
            "dead_lettered_at": iso(run.dead_lettered_at),
        }
        text = dumps(body)
        attributes = {
            "run_id": run.run_id,
            "task_id": run.task_id,
            "tenant": run.tenant,
            "attempts": run.attempt,
            "error_code": run.last_error_code or "NONE",
            "reason": run.dead_letter_reason,
            "dead_lettered_at": iso(run.dead_lettered_at),
        }
        sent = self.deps.queues.send("dlq", text, attributes=attributes)
        self.deps.faults.reached(cp.AFTER_DLQ_SEND)
        entry = dlq_entry(
            message_id=sent.message_id,
            body=text,
            attributes=attributes,
            sent_at_ms=millis(self.clock.now()),
            actor=self.actor,
            run=run,
        )
        return self.record_dlq_message(run, entry) or run

    def record_dlq_message(self, run: Run, entry: DlqEntry) -> Run | None:
        """Name ``entry``'s message as the dead letter's DLQ message on the run, and record it, in
        one transaction. None if the run changed (the message is recorded all the same)."""
        uow = self.store.unit_of_work(self.actor, self.clock.now())
        recorded = uow.save_run(
            run,
            run.model_copy(update={"dlq_message_id": entry.message_id}),
            action="dlq-message-sent",
            evidence={"dlq_message_id": entry.message_id},
        )
        uow.record_dlq_entry(entry)
        try:
            uow.commit()
        except Conflict:
            # The run moved on (an operator replayed it already); the message is a harmless extra,
            # in the DLQ until a redrive cleans it up.
            log.info("dlq message id not recorded: run changed", extra={"run_id": run.run_id})
            self.store.add_dlq_entry(entry)
            return None
        return recorded

    def dead_letter_message(
        self,
        *,
        message_id: str,
        body: str,
        receive_count: int,
        reason: str,
        detail: str,
        send: bool,
        arrived: DlqEntry | None = None,
    ) -> bool:
        """A message that names no run Rebound can act on. Returns False if it was recorded before.

        ``send=False``: it is in the DLQ already (the crash path), and ``arrived`` is its record."""
        now = self.clock.now()
        subject = message_subject(message_id)
        if self.store.audit_head(subject)[0] > 0:
            return False  # a redelivery of a message refused before: it is in the DLQ already
        dlq_message_id = message_id
        entry = arrived
        if send:
            attributes = {
                "run_id": None,
                "attempts": receive_count,
                "error_code": INVALID_MESSAGE,
                "reason": f"{reason}: {detail}"[:256],
                "dead_lettered_at": iso(now),
                "source_message_id": message_id,
            }
            dlq_message_id = self.deps.queues.send("dlq", body, attributes=attributes).message_id
            self.deps.faults.reached(cp.AFTER_REFUSE_SEND)
            entry = dlq_entry(
                message_id=dlq_message_id,
                body=body,
                attributes=attributes,
                sent_at_ms=millis(now),
                actor=self.actor,
            )
        uow = self.store.unit_of_work(self.actor, now)
        uow.append_audit(
            subject,
            action="dead-lettered",
            head=(0, "0" * 64),
            to_state="dead_lettered",
            evidence={
                "reason": reason,
                "detail": detail,
                "outcome": "refused",
                "dead_lettered_at": iso(now),
                "dlq_message_id": dlq_message_id,
                "path": "explicit" if send else "redrive_policy",
                "body_sha256": hashlib.sha256(body.encode()).hexdigest(),
                "body_preview": body[:200],
                "receive_count": receive_count,
            },
        )
        uow.emit(
            ev.dead_lettered(
                subject=subject, reason=reason, at=now, error_code=INVALID_MESSAGE, message_id=message_id
            ),
            subject,
        )
        if entry is not None:
            uow.record_dlq_entry(entry)
        try:
            uow.commit()
        except Conflict:
            if send and entry is not None:
                self.store.add_dlq_entry(entry)  # a second copy: in the DLQ until the sweeper removes it
            return False
        self.deps.metrics.count(m.RETRY_DLQ)
        return True
