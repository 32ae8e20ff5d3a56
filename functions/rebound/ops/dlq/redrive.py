"""Redriving the DLQ: moving dead-lettered runs back to the execution queue as replays.

``redrive`` does what the console's ``StartMessageMoveTask`` cannot: it filters, can dry-run,
keeps a rate, skips messages whose run has already succeeded, starts a fresh attempt budget with
an audit record for every message moved, and is batched (one ``ReceiveMessage``, one
``SendMessageBatch`` and one ``DeleteMessageBatch`` per ten messages: 0.3 requests per message).
This module owns how a redrive judges each message (``classify``), one pass over a source
(``RedrivePass``: record the replays, send them, then remove the messages), its report and the
progress items it hands out as it goes.

Exactly once, under interruption
--------------------------------
For each message whose run is ``dead_lettered`` the redrive (1) commits ``dead_lettered ->
replayed`` with a fresh budget and an audit record naming the message, (2) sends a ``replay``
message to the execution queue, and (3) only after SQS accepted that send, deletes the DLQ
message (the DLQ's record then says ``redriven``; for a second copy, ``deleted``). A message is
therefore never lost: until (3) it is still in the DLQ, and it becomes visible again when the
redrive's visibility timeout runs out.

The next redrive resumes: a message whose run is no longer ``dead_lettered`` but whose audit
trail has a ``replayed`` record naming this message was moved by an earlier, interrupted
redrive. If that replay is still unclaimed (``replayed`` with ``attempt == budget_start``), the
replay message may never have been sent, so it is sent again; then the DLQ message is deleted.
Sending again can put a second replay message for the run on the execution queue, and that is
harmless: the executor starts the fresh budget's first attempt only with a conditional write on
``replayed`` and ``attempt == budget_start``, so exactly one copy claims it and every other copy
finds the run already ``running`` (or later) and is dropped as a duplicate. Each run also gets at
most one replay per redrive: a second DLQ message for a run moved in the same pass is removed as
a duplicate, with an audit record of its own, without a second budget.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from rebound.domain.errors import Conflict
from rebound.domain.run import Run, RunState
from rebound.domain.timefmt import iso
from rebound.engine.ports import BATCH, DlqStatus
from rebound.ops.dlq.message import Arrival, DlqFilter, DlqMessage
from rebound.ops.dlq.sources import Source
from rebound.ops.replay import Replays
from rebound.ops.throttle import RateLimiter

if TYPE_CHECKING:
    from rebound.engine.ports import QueueBatches, Store

EXECUTION = "execution"
SEND_TRIES = 3


class Verdict(StrEnum):
    MOVE = "move"
    """The run is dead-lettered: replay it with a fresh budget, then delete the message."""
    RESUME = "resume"
    """An earlier redrive replayed the run from this message and may not have sent it: send, delete."""
    CLEAN_UP = "clean-up"
    """An earlier redrive or ``runs retry`` replayed the run from this message: only delete it."""
    DUPLICATE = "duplicate"
    """This redrive already replayed the run from another message: delete this one, no second budget."""
    SKIP = "skip"
    """Leave the message where it is (the detail says why)."""


def classify(msg: DlqMessage, run: Run | None, moved: set[str], replays: Replays) -> tuple[Verdict, str]:
    if msg.run_id is None:
        return Verdict.SKIP, f"names no run ({msg.reason or 'unreadable message'})"
    if run is None:
        return Verdict.SKIP, f"run {msg.run_id} does not exist"
    if run.run_id in moved:
        return Verdict.DUPLICATE, "this redrive already replayed the run from another message"
    if run.state is RunState.DEAD_LETTERED:
        return Verdict.MOVE, f"fresh budget from attempt {run.attempt + 1}"
    record, unclaimed = replays.record_for(run, msg.message_id)
    if record is not None:
        if unclaimed:
            return Verdict.RESUME, f"replayed at {iso(record.at)}; its replay may not have been sent"
        return Verdict.CLEAN_UP, f"replayed at {iso(record.at)}; the run is {run.state.value} now"
    if run.state is RunState.SUPERSEDED:
        return (
            Verdict.CLEAN_UP,
            f"run was superseded by {run.superseded_by}: its message is removed, never moved",
        )
    if run.state is RunState.SUCCEEDED:
        return Verdict.SKIP, "run already succeeded"
    if run.state in (RunState.SKIPPED, RunState.CANCELLED):
        return Verdict.SKIP, f"run was {run.state.value}"
    hint = ""
    if msg.arrival is Arrival.REDRIVE_POLICY and run.state in (RunState.PENDING, RunState.FAILED):
        hint = "; the sweeper dead-letters crash-path arrivals within a minute"
    return Verdict.SKIP, f"run is {run.state.value}, not dead-lettered{hint}"


@dataclass(frozen=True)
class RedriveItem:
    message_id: str
    run_id: str | None
    task_id: str | None
    outcome: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


MOVED = "moved"
RESUMED = "resumed"
CLEANED_UP = "cleaned-up"
DUPLICATE_REMOVED = "duplicate-removed"
SKIPPED = "skipped"
FAILED = "failed"
_DONE = {Verdict.MOVE: MOVED, Verdict.RESUME: RESUMED, Verdict.CLEAN_UP: CLEANED_UP}


@dataclass
class RedriveReport:
    redrive_id: str
    dry_run: bool
    source: str
    filters: DlqFilter
    examined: int = 0
    matched: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    items: list[RedriveItem] = field(default_factory=list)
    sqs_requests: int = 0
    stopped: bool = False
    """The pass ended early (its ``stop`` said so): matching messages may remain."""

    @property
    def moved(self) -> int:
        return self.outcomes[MOVED] + self.outcomes[RESUMED]

    @property
    def failed(self) -> int:
        return self.outcomes[FAILED]

    def add(self, item: RedriveItem) -> None:
        self.items.append(item)
        self.outcomes[item.outcome] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "redrive_id": self.redrive_id,
            "dry_run": self.dry_run,
            "source": self.source,
            "filters": self.filters.as_dict(),
            "examined": self.examined,
            "matched": self.matched,
            "outcomes": dict(sorted(self.outcomes.items())),
            "moved": self.moved,
            "failed": self.failed,
            "sqs_requests": self.sqs_requests,
            "items": [item.as_dict() for item in self.items],
        }


@dataclass
class _Pending:
    message: DlqMessage
    run: Run
    verdict: Verdict
    detail: str
    redrive_id: str


@dataclass(frozen=True)
class RedriveTools:
    """What a pass works with, handed over by whoever runs it (``DlqOps.redrive``): the store, the
    replays, the execution queue in batches, a pause for backing off, and a way to note a removal
    in a message's own audit trail. A pass never calls back into its creator."""

    store: Store
    replays: Replays
    queue: QueueBatches
    sleep: Callable[[float], None]
    note: Callable[[DlqMessage, str, dict[str, Any]], None]


class RedrivePass:
    """One redrive pass: what it moved, what waits to be sent or removed, what it leaves alone."""

    def __init__(
        self,
        ops: RedriveTools,
        source: Source,
        report: RedriveReport,
        limiter: RateLimiter | None,
        progress: Callable[[RedriveItem], None] | None,
    ) -> None:
        self.ops = ops
        self.source = source
        self.report = report
        self.limiter = limiter
        self.progress = progress
        self.moved: set[str] = set()
        """Runs this pass replayed (or found replayed from the message in hand)."""
        self.accepted = 0
        self.to_send: list[_Pending] = []
        self.to_remove: list[_Pending] = []
        self.leave: list[DlqMessage] = []

    def done(self, msg: DlqMessage, run_id: str | None, outcome: str, detail: str) -> None:
        item = RedriveItem(msg.message_id, run_id, msg.task_id, outcome, detail)
        self.report.add(item)
        if self.progress:
            self.progress(item)

    def _skip(self, msg: DlqMessage, run_id: str | None, detail: str) -> None:
        self.leave.append(msg)
        self.done(msg, run_id, SKIPPED, detail)

    def take(self, batch: list[DlqMessage], filters: DlqFilter, limit: int | None, dry_run: bool) -> None:
        """Decide about one received batch, and record its replays (one transaction for the batch)."""
        runs = self.ops.store.get_runs([m.run_id for m in batch if m.run_id])
        moves: list[_Pending] = []
        planned: set[str] = set()
        seconds: list[DlqMessage] = []
        for msg in batch:
            self.report.examined += 1
            run = runs.get(msg.run_id) if msg.run_id else None
            if not filters.matches(msg, run):
                self.leave.append(msg)
                continue
            self.report.matched += 1
            if run is not None and run.run_id in planned:
                seconds.append(msg)  # decided once the first message of its run is
                continue
            verdict, detail = classify(msg, run, self.moved, self.ops.replays)
            if verdict is Verdict.SKIP or run is None:
                self._skip(msg, msg.run_id, detail)
                continue
            if verdict is Verdict.MOVE and limit is not None and self.accepted >= limit:
                self._skip(msg, run.run_id, f"beyond --limit {limit}")
                continue
            self.accepted += verdict is Verdict.MOVE
            pending = _Pending(msg, run, verdict, detail, self.report.redrive_id)
            if dry_run:
                self.moved.add(run.run_id)
                planned.add(run.run_id)
                self.leave.append(msg)
                self.done(msg, run.run_id, f"would-{verdict.value}", detail)
            elif verdict is Verdict.MOVE:
                moves.append(pending)
                planned.add(run.run_id)
            else:
                self._queue(pending)
        if moves:
            for pending, saved in self._begin_moves(moves):
                if saved is None:
                    self._skip(pending.message, pending.run.run_id, "the run changed during the redrive")
                    continue
                pending.run = saved
                self._queue(pending)
        for msg in seconds:
            run_id = msg.run_id or ""
            if run_id not in self.moved:
                self._skip(msg, run_id, "another message of this run could not be moved")
            elif dry_run:
                self.leave.append(msg)
                self.done(msg, run_id, f"would-{Verdict.DUPLICATE.value}", "a second message of the run")
            else:
                run = runs[run_id]
                detail = "this redrive already replayed the run from another message"
                self._queue(_Pending(msg, run, Verdict.DUPLICATE, detail, self.report.redrive_id))

    def _queue(self, pending: _Pending) -> None:
        """After its record is written: queue a message to be sent and removed, or only removed."""
        if pending.verdict is Verdict.DUPLICATE:
            self.ops.note(
                pending.message,
                "dlq-duplicate-removed",
                {"run_id": pending.run.run_id, "redrive_id": pending.redrive_id},
            )
        self.moved.add(pending.run.run_id)
        if pending.verdict in (Verdict.MOVE, Verdict.RESUME):
            self.to_send.append(pending)
        else:
            self.to_remove.append(pending)

    def flush(self, *, final: bool) -> None:
        """Send and remove in full batches of ten (and what is left at the end)."""
        while len(self.to_send) >= BATCH or (final and self.to_send):
            chunk, self.to_send = self.to_send[:BATCH], self.to_send[BATCH:]
            self._send_and_remove(chunk)
        while len(self.to_remove) >= BATCH or (final and self.to_remove):
            chunk, self.to_remove = self.to_remove[:BATCH], self.to_remove[BATCH:]
            self._remove(chunk)

    def _begin_moves(self, moves: list[_Pending]) -> list[tuple[_Pending, Run | None]]:
        """Record the replays of a batch in one transaction; one by one if any run changed meanwhile."""
        via = "redrive-archive" if any(p.message.archive_status for p in moves) else "redrive-dlq"
        evidence = [{"redrive_id": p.redrive_id, "message_arrival": p.message.arrival.value} for p in moves]
        together = self.ops.replays.begin_many(
            [(p.run, p.message.message_id, e) for p, e in zip(moves, evidence, strict=True)], via=via
        )
        if together is not None:
            return list(zip(moves, together, strict=True))
        out: list[tuple[_Pending, Run | None]] = []
        for pending, extra in zip(moves, evidence, strict=True):
            try:
                saved: Run | None = self.ops.replays.begin(
                    pending.run, via=via, dlq_message_id=pending.message.message_id, evidence=extra
                )
            except Conflict:
                saved = None  # someone changed it (the sweeper, another operator): left for next time
            out.append((pending, saved))
        return out

    def _send_and_remove(self, batch: list[_Pending]) -> None:
        if self.limiter is not None:
            self.limiter.acquire(len(batch))
        todo = batch
        failures: dict[str, str] = {}
        sent: list[_Pending] = []
        for attempt in range(SEND_TRIES):
            outgoing = [
                self.ops.replays.message(
                    p.run,
                    key=p.message.message_id,
                    dlq_message_id=p.message.message_id,
                    redrive_id=p.redrive_id,
                )
                for p in todo
            ]
            result = self.ops.queue.send(EXECUTION, outgoing)
            sent += [p for p in todo if p.message.message_id in result.ok]
            todo = [p for p in todo if p.message.message_id in result.failed]
            failures = result.failed
            if not todo:
                break
            self.ops.sleep(0.2 * 2**attempt)
        for pending in todo:
            self.done(
                pending.message,
                pending.run.run_id,
                FAILED,
                f"send refused ({failures.get(pending.message.message_id)}); the run is replayed and "
                "the next redrive sends it again",
            )
        self._remove(sent)

    def _remove(self, batch: list[_Pending]) -> None:
        if not batch:
            return
        result = self.source.remove([p.message for p in batch])
        removed = [p for p in batch if p.message.message_id in result.ok]
        for status in (DlqStatus.REDRIVEN, DlqStatus.DELETED):
            second = status is DlqStatus.DELETED
            ids = [p.message.message_id for p in removed if (p.verdict is Verdict.DUPLICATE) is second]
            self.source.left(ids, status)
        for pending in batch:
            msg = pending.message
            if msg.message_id in result.ok:
                outcome = (
                    DUPLICATE_REMOVED if pending.verdict is Verdict.DUPLICATE else _DONE[pending.verdict]
                )
                self.done(msg, pending.run.run_id, outcome, pending.detail)
            else:
                self.done(
                    msg,
                    pending.run.run_id,
                    FAILED,
                    f"replayed, but not removed ({result.failed.get(msg.message_id)}); "
                    "the next redrive removes it",
                )
