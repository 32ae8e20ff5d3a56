"""The sweeper's DLQ check: arrivals SQS moved there itself, second copies, and the DLQ's record.

- A message that SQS moved to the DLQ after ``maxReceiveCount`` receives (the crash path) is
  escalated exactly like an explicit dead letter, and stays in the DLQ; its record is written
  with its dead letter.
- A second DLQ copy of a dead letter (a sender that died before recording the first) is removed,
  and its record says ``deleted``; so is the message of a superseded run (its record says
  ``superseded``).
- Any message the check reads without a record (a send whose id was never recorded, a stale
  copy, a message put there by hand) is recorded, so ``rebound dlq list`` shows what the queue
  holds (``rebound.engine.dlq_record``).

This is the one reader of the DLQ that receives without moving anything: SQS cannot be peeked,
and arrivals SQS moved itself pass through no Rebound code. It reads only when the queue holds
more messages than at its last look (an arrival adds one), and every ten minutes whatever its
depth (an arrival can hide behind a redrive that removed others); what it reads is hidden for
``ARRIVAL_VISIBILITY_S``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from rebound.domain import events as ev
from rebound.domain.errors import Conflict, ValidationFailed
from rebound.domain.ids import message_subject, run_subject
from rebound.domain.retry import Reason
from rebound.domain.run import Run, RunState, Trigger, unlisted_running
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine import crashpoints as cp
from rebound.engine import leases
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.deps import Deps
from rebound.engine.dlq_record import dlq_entry, read_message
from rebound.engine.messages import (
    AttemptMessage,
    EventMessage,
    FireMessage,
    ManualMessage,
    ReplayMessage,
    parse_execution_message,
)
from rebound.engine.ports import DlqEntry, DlqStatus, PeekedMessage

RECEIVE_COUNT_EXCEEDED = "RECEIVE_COUNT_EXCEEDED"
DLQ_SCAN_LIMIT = 2000
"""Messages one DLQ check reads (each hidden 30 s). Enough to see every arrival and every second
copy in a DLQ of that size; a larger one is read in full over the ten-minute checks."""
ARRIVAL_VISIBILITY_S = 30
DLQ_SEEN_TTL = timedelta(days=15)
DLQ_SCAN_STATE = "dlq#scan"
DLQ_FULL_SCAN_EVERY = timedelta(minutes=10)


@dataclass
class ArrivalsSeen:
    scanned: int = 0
    escalated: list[str] = field(default_factory=list)
    duplicates_removed: list[str] = field(default_factory=list)
    superseded_removed: list[str] = field(default_factory=list)
    """Messages of superseded runs, deleted (``rebound.engine.superseded``)."""
    recorded: list[str] = field(default_factory=list)
    """Messages found in the DLQ without a record, recorded now."""


class DlqArrivals:
    """One DLQ check. ``failed(message_id, exc)`` is told of each message that could not be handled;
    the others go on."""

    def __init__(
        self, deps: Deps, actor: str, dead_letters: DeadLetters, failed: Callable[[str, Exception], None]
    ) -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor
        self.dead_letters = dead_letters
        self.failed = failed
        self.runs: dict[str, Run | None] = {}

    def check(self) -> ArrivalsSeen:
        seen = ArrivalsSeen()
        now = self.clock.now()
        depth = self.deps.queues.depth("dlq")
        last = self.store.get_key(DLQ_SCAN_STATE) or {}
        last_at = parse_utc(last["at"]) if last.get("at") else None
        due = last_at is None or now - last_at >= DLQ_FULL_SCAN_EVERY
        if depth == 0 or (depth <= int(last.get("depth", 0)) and not due):
            if depth != int(last.get("depth", -1)):
                self.store.put_key(DLQ_SCAN_STATE, {"depth": depth, "at": last.get("at")})
            return seen
        messages = self.deps.queues.peek("dlq", DLQ_SCAN_LIMIT, visibility_s=ARRIVAL_VISIBILITY_S)
        seen.scanned = len(messages)
        recorded = set(self.store.get_dlq_entries([m.message_id for m in messages]))
        for message in messages:
            try:
                self._one(message, recorded, seen)
            except Exception as exc:
                self.failed(message.message_id, exc)
        self.store.put_key(DLQ_SCAN_STATE, {"depth": depth, "at": iso(now)})
        return seen

    def _one(self, message: PeekedMessage, recorded: set[str], seen: ArrivalsSeen) -> None:
        now = self.clock.now()
        if "reason" in message.attributes:
            if self._superseded(message):  # its run's work is another run's: not a dead letter
                self.deps.queues.delete("dlq", message.receipt_handle)
                self.store.mark_dlq_entries(
                    [message.message_id], DlqStatus.SUPERSEDED, at=now, actor=self.actor
                )
                seen.superseded_removed.append(message.message_id)
                return
            # Rebound put it there and escalated it on the way; keep exactly one copy.
            if self._duplicate(message):
                self.deps.queues.delete("dlq", message.receipt_handle)
                self.store.mark_dlq_entries([message.message_id], DlqStatus.DELETED, at=now, actor=self.actor)
                seen.duplicates_removed.append(message.message_id)
                return
        else:
            key = f"dlq-seen#{message.message_id}"
            if self.store.get_key(key) is None:
                escalated = self._escalate_arrival(message)
                if escalated is None:
                    return  # its run is running under a lease yet: a later check reads it again
                self.deps.faults.reached(cp.AFTER_ARRIVAL_ESCALATED)
                self.store.claim_key(key, now, DLQ_SEEN_TTL, {"receive_count": message.receive_count})
                if escalated:
                    seen.escalated.append(message.message_id)
        if message.message_id not in recorded and self.store.add_dlq_entry(self._entry(message)):
            seen.recorded.append(message.message_id)

    def _run(self, run_id: str) -> Run | None:
        if run_id not in self.runs:
            self.runs[run_id] = self.store.get_run(run_id)
        return self.runs[run_id]

    def _entry(self, message: PeekedMessage, run: Run | None = None, reason: str | None = None) -> DlqEntry:
        """The record of ``message``, with what its run says where the message does not."""
        if run is None:
            run_id = read_message(message.body, message.attributes).run_id
            run = self._run(run_id) if run_id else None
        return dlq_entry(
            message_id=message.message_id,
            body=message.body,
            attributes=message.attributes,
            sent_at_ms=message.sent_at_ms,
            actor=self.actor,
            receive_count=message.receive_count,
            run=run,
            reason=reason,
        )

    def _superseded(self, message: PeekedMessage) -> bool:
        """Whether the run a Rebound-sent DLQ message names was superseded (``rebound.engine.superseded``)."""
        run_id = message.attributes.get("run_id")
        run = self._run(run_id) if run_id else None
        return run is not None and run.state is RunState.SUPERSEDED

    def _duplicate(self, message: PeekedMessage) -> bool:
        """Whether a Rebound-sent DLQ message is a second copy of a dead letter that has one.

        A dead letter's copy is the one its run (or its message's audit chain) names. A run that
        names none adopts this one."""
        attrs = message.attributes
        run_id = attrs.get("run_id")
        if run_id:
            run = self._run(run_id)
            if run is None or run.state is not RunState.DEAD_LETTERED or run.dead_lettered_at is None:
                return False
            if attrs.get("dead_lettered_at") != iso(run.dead_lettered_at):
                return False
            if run.dlq_message_id is None:
                self.runs[run_id] = self.dead_letters.record_dlq_message(run, self._entry(message, run))
                return False
            return bool(run.dlq_message_id != message.message_id)
        source = attrs.get("source_message_id")
        if source:
            trail = self.store.audit_trail(message_subject(source))
            kept = next(
                (r.evidence.get("dlq_message_id") for r in trail if r.action == "dead-lettered"), None
            )
            return kept is not None and kept != message.message_id
        return False

    def _escalate_arrival(self, message: PeekedMessage) -> bool | None:
        detail = f"SQS moved the message to the DLQ after {message.receive_count} receives"
        try:
            parsed = parse_execution_message(message.body)
        except ValidationFailed as exc:
            return self._refused(message, f"{detail}; {exc.message}")
        if isinstance(parsed, FireMessage):
            run = self.store.get_run(parsed.run_id) or self._create_poisoned(
                parsed.run_id, parsed.task_id, Trigger.SCHEDULE, parsed.scheduled_time
            )
        elif isinstance(parsed, EventMessage):
            run = self.store.get_run(parsed.run_id) or self._create_poisoned(
                parsed.run_id, parsed.task_id, Trigger.EVENT, parsed.time
            )
        elif isinstance(parsed, ManualMessage):
            run = self.store.get_run(parsed.run_id) or self._create_poisoned(
                parsed.run_id, parsed.task_id, Trigger.MANUAL, parsed.requested_at
            )
        else:
            assert isinstance(parsed, AttemptMessage | ReplayMessage)
            run = self.store.get_run(parsed.run_id)
            token = parsed.dispatch
            if run is not None and token is not None and token != run.dispatch:
                return False  # a stale copy: the run has another carrier (or moved on)
        if run is None:
            return self._refused(message, f"{detail}; it names no known run")
        return self._dead_letter_run(run, message)

    def _refused(self, message: PeekedMessage, detail: str) -> bool:
        return self.dead_letters.dead_letter_message(
            message_id=message.message_id,
            body=message.body,
            receive_count=message.receive_count,
            reason=Reason.REDRIVE_EXHAUSTED,
            detail=detail,
            send=False,
            arrived=self._entry(message, reason=Reason.REDRIVE_EXHAUSTED),
        )

    def _create_poisoned(
        self, run_id: str, task_id: str, trigger: Trigger, scheduled_for: object
    ) -> Run | None:
        """The run a poison message would have created, recorded so it can be escalated and replayed."""
        now = self.clock.now()
        stored = self.store.get_task(task_id)
        run = Run.model_validate(
            {
                "run_id": run_id,
                "task_id": task_id,
                "tenant": stored.task.tenant if stored else "unknown",
                "trigger": trigger,
                "scheduled_for": scheduled_for,
                "created_at": now,
                "updated_at": now,
                "budget_started_at": now,
            }
        )
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            None, run, action="created", evidence={"trigger": trigger.value, "path": "redrive_policy"}
        )
        uow.emit(ev.execution_updated(saved, None, now), run_subject(run_id))
        try:
            uow.commit()
        except Conflict:
            return self.store.get_run(run_id)
        return saved

    def _dead_letter_run(self, run: Run, message: PeekedMessage) -> bool | None:
        if unlisted_running(run):
            # No index lists it, so no lease check will: this arrival is the message that was to
            # find it. Past its lease the attempt fails and is retried; before, None (not yet).
            if not leases.expired(run, self.clock.now()):
                return None
            leases.expire(self.deps, self.actor, run)
            return False
        if run.state in (
            RunState.RUNNING,
            RunState.SUCCEEDED,
            RunState.DEAD_LETTERED,
            RunState.SKIPPED,
            RunState.CANCELLED,
        ):
            # Running: the lease check owns it. Finished or already dead-lettered: nothing more to do.
            return False
        policy = self.deps.policies.of_task(run.task_id).policy
        failed = run.model_copy(
            update={
                "last_error_code": run.last_error_code or RECEIVE_COUNT_EXCEEDED,
                "last_error_message": run.last_error_message
                or "the execution message exceeded maxReceiveCount",
            }
        )
        return (
            self.dead_letters.dead_letter(
                failed,
                Reason.REDRIVE_EXHAUSTED,
                policy,
                send=False,
                message_id=message.message_id,
                error_code=failed.last_error_code,
                previous=run,
                arrived=self._entry(message, failed, Reason.REDRIVE_EXHAUSTED),
            )
            is not None
        )
