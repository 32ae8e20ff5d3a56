"""Operating the execution DLQ: list, show, redrive and archive its messages.

``redrive`` does what the console's ``StartMessageMoveTask`` cannot: it filters, can dry-run,
keeps a rate, skips messages whose run has already succeeded, starts a fresh attempt budget with
an audit record for every message moved, and is batched (one ``ReceiveMessage``, one
``SendMessageBatch`` and one ``DeleteMessageBatch`` per ten messages: 0.3 requests per message).

Exactly once, under interruption
--------------------------------
For each message whose run is ``dead_lettered`` the redrive (1) commits ``dead_lettered ->
replayed`` with a fresh budget and an audit record naming the message, (2) sends a ``replay``
message to the execution queue, and (3) only after SQS accepted that send, deletes the DLQ
message. A message is therefore never lost: until (3) it is still in the DLQ, and it becomes
visible again when the redrive's visibility timeout runs out.

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

import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from rebound.domain.errors import Conflict, MessageNotFound, ReboundError, ValidationFailed
from rebound.domain.ids import message_subject
from rebound.domain.models import Run, RunState, WorkOrder
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine.deps import Deps
from rebound.engine.messages import (
    parse_execution_message,
)
from rebound.engine.ports import (
    ARCHIVED,
    BATCH,
    DEFAULT_KEEP_DAYS,
    Archive,
    ArchiveUnavailable,
    BatchResult,
    QueueBatches,
    QueueCounts,
    Received,
)
from rebound.ops.common import when
from rebound.ops.replay import Replays
from rebound.ops.throttle import RateLimiter

log = logging.getLogger(__name__)

DLQ = "dlq"
EXECUTION = "execution"
REDRIVE_VISIBILITY_S = 120
"""How long a redrive hides the messages it received; an interrupted redrive resumes after it."""
SCAN_VISIBILITY_S = 60
"""How long list, show and dry runs hide what they read; they make it visible again when done."""
DEFAULT_WAIT_S = 1
"""Long polling: SQS then answers from every server, so batches come back full."""
SEND_TRIES = 3


class Arrival(StrEnum):
    """How a message reached the DLQ."""

    EXPLICIT = "explicit"
    """Rebound dead-lettered the run (attempts, age or a terminal error) and sent the message."""
    REDRIVE_POLICY = "redrive_policy"
    """SQS moved an execution message after ``maxReceiveCount`` receives (the crash path)."""
    REFUSED = "refused"
    """Rebound refused a message it cannot run (malformed, unknown run)."""


@dataclass(frozen=True)
class DlqMessage:
    message_id: str
    body: str
    attributes: dict[str, str]
    sent_at: datetime
    receive_count: int
    arrival: Arrival
    kind: str | None
    run_id: str | None
    task_id: str | None
    tenant: str | None
    error_code: str | None
    reason: str | None
    dead_lettered_at: datetime | None
    receipt_handle: str | None = None
    archive_status: str | None = None

    @property
    def at(self) -> datetime:
        """When it was dead-lettered (or, for the crash path, when SQS last received it)."""
        return self.dead_lettered_at or self.sent_at

    def as_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "tenant": self.tenant,
            "error_code": self.error_code,
            "reason": self.reason,
            "arrival": self.arrival.value,
            "kind": self.kind,
            "dead_lettered_at": when(self.dead_lettered_at),
            "sent_at": iso(self.sent_at),
            "receive_count": self.receive_count,
            "attempts": _int(self.attributes.get("attempts")),
            "archive_status": self.archive_status,
        }


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def describe(
    *,
    message_id: str,
    body: str,
    attributes: dict[str, str],
    sent_at_ms: int,
    receive_count: int,
    receipt_handle: str | None = None,
    archive_status: str | None = None,
) -> DlqMessage:
    """What a DLQ message is about, from its attributes, or from its body on the crash path."""
    run_id = attributes.get("run_id")
    task_id = attributes.get("task_id")
    kind = None
    try:
        parsed = parse_execution_message(body)
    except ValidationFailed:
        parsed = None
    if parsed is not None:
        kind = parsed.kind
        run_id = run_id or parsed.run_id
        task_id = task_id or getattr(parsed, "task_id", None)
    if "reason" not in attributes:
        arrival = Arrival.REDRIVE_POLICY
    else:
        arrival = Arrival.EXPLICIT if attributes.get("run_id") else Arrival.REFUSED
    dead_lettered_at = None
    with contextlib.suppress(ValueError):
        dead_lettered_at = (
            parse_utc(attributes["dead_lettered_at"]) if "dead_lettered_at" in attributes else None
        )
    code = attributes.get("error_code")
    return DlqMessage(
        message_id=message_id,
        body=body,
        attributes=dict(attributes),
        sent_at=datetime.fromtimestamp(sent_at_ms / 1000, tz=UTC),
        receive_count=receive_count,
        arrival=arrival,
        kind=kind,
        run_id=run_id,
        task_id=task_id,
        tenant=attributes.get("tenant"),
        error_code=None if code in (None, "NONE") else code,
        reason=attributes.get("reason"),
        dead_lettered_at=dead_lettered_at,
        receipt_handle=receipt_handle,
        archive_status=archive_status,
    )


def _from_received(msg: Received) -> DlqMessage:
    return describe(
        message_id=msg.message_id,
        body=msg.body,
        attributes=msg.attributes,
        sent_at_ms=msg.sent_at_ms,
        receive_count=msg.receive_count,
        receipt_handle=msg.receipt_handle,
    )


@dataclass(frozen=True)
class DlqFilter:
    """Which DLQ messages an operation applies to. A message's run fills in what it does not say."""

    task_id: str | None = None
    tenant: str | None = None
    error_code: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def matches(self, msg: DlqMessage, run: Run | None) -> bool:
        task = msg.task_id or (run.task_id if run else None)
        tenant = msg.tenant or (run.tenant if run else None)
        code = msg.error_code or (run.last_error_code if run else None)
        at = msg.at
        return (
            (self.task_id is None or task == self.task_id)
            and (self.tenant is None or tenant == self.tenant)
            and (self.error_code is None or code == self.error_code)
            and (self.since is None or at >= self.since)
            and (self.until is None or at <= self.until)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "tenant": self.tenant,
            "error_code": self.error_code,
            "since": when(self.since),
            "until": when(self.until),
        }


@dataclass(frozen=True)
class Examined:
    message: DlqMessage
    run: Run | None

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.message.as_dict(),
            "task_id": self.message.task_id or (self.run.task_id if self.run else None),
            "tenant": self.message.tenant or (self.run.tenant if self.run else None),
            "error_code": self.message.error_code or (self.run.last_error_code if self.run else None),
            "run_state": self.run.state.value if self.run else None,
            "work_order_id": self.run.work_order_id if self.run else None,
        }


@dataclass(frozen=True)
class MessageDetail:
    examined: Examined
    location: str
    work_order: WorkOrder | None

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.examined.as_dict(),
            "location": self.location,
            "body": self.examined.message.body,
            "attributes": self.examined.message.attributes,
            "work_order": self.work_order.model_dump(mode="json") if self.work_order else None,
        }


# --------------------------------------------------------------------------- redrive verdicts


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
class ArchiveReport:
    examined: int = 0
    matched: int = 0
    archived: int = 0
    already_archived: int = 0
    deleted: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "matched": self.matched,
            "archived": self.archived,
            "already_archived": self.already_archived,
            "deleted": self.deleted,
            "failed": self.failed,
        }


# --------------------------------------------------------------------------- where messages come from


class Source(Protocol):
    name: str

    def batches(self) -> Iterator[list[DlqMessage]]: ...

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult: ...

    def release(self, messages: Sequence[DlqMessage]) -> None: ...


class QueueSource:
    """The DLQ itself. Every message is received at most once per pass (duplicates are dropped)."""

    name = "queue"

    def __init__(self, batches: QueueBatches, visibility_s: int, wait_s: int) -> None:
        self.queue = batches
        self.visibility_s = visibility_s
        self.wait_s = wait_s

    def batches(self) -> Iterator[list[DlqMessage]]:
        seen: set[str] = set()
        stale = 0
        while True:
            received = self.queue.receive(DLQ, visibility_s=self.visibility_s, wait_s=self.wait_s)
            if not received:
                return
            fresh = [m for m in received if m.message_id not in seen]
            if not fresh:
                # Only messages seen before (their visibility ran out in a long pass): done twice over.
                stale += 1
                if stale >= 2:
                    return
                continue
            stale = 0
            seen.update(m.message_id for m in fresh)
            yield [_from_received(m) for m in fresh]

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult:
        return self.queue.delete(DLQ, [(m.message_id, m.receipt_handle or "") for m in messages])

    def release(self, messages: Sequence[DlqMessage]) -> None:
        handles = [(m.message_id, m.receipt_handle or "") for m in messages if m.receipt_handle]
        for start in range(0, len(handles), BATCH):
            self.queue.set_visibility(DLQ, handles[start : start + BATCH], 0)


class ArchiveSource:
    """Archived messages with ``status`` (a redrive takes only those not redriven yet; ``None``: all).

    Removing one marks it ``redriven``.
    """

    name = "archive"

    def __init__(
        self, archive: Archive, clock: Callable[[], datetime], actor: str, status: str | None = ARCHIVED
    ) -> None:
        self.archive = archive
        self.clock = clock
        self.actor = actor
        self.status = status

    def batches(self) -> Iterator[list[DlqMessage]]:
        chunk: list[DlqMessage] = []
        for item in self.archive.scan(self.status):
            chunk.append(
                describe(
                    message_id=item.message_id,
                    body=item.body,
                    attributes=item.attributes,
                    sent_at_ms=item.sent_at_ms,
                    receive_count=item.receive_count,
                    archive_status=item.status,
                )
            )
            if len(chunk) == BATCH:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def remove(self, messages: Sequence[DlqMessage]) -> BatchResult:
        result = BatchResult()
        for msg in messages:
            if self.archive.mark_redriven(msg.message_id, self.clock(), self.actor):
                result.ok.append(msg.message_id)
            else:
                result.failed[msg.message_id] = "no longer archived (redriven by someone else?)"
        return result

    def release(self, messages: Sequence[DlqMessage]) -> None:
        return None


# --------------------------------------------------------------------------- the operations


@dataclass
class _Pending:
    message: DlqMessage
    run: Run
    verdict: Verdict
    detail: str
    redrive_id: str


class _Pass:
    """One redrive pass: what it moved, what waits to be sent or removed, what it leaves alone."""

    def __init__(
        self,
        ops: DlqOps,
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
            for pending, saved in self.ops._begin_moves(moves):
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
            self.ops._note(
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
            self.ops._send_and_remove(self.source, chunk, self.limiter, self.done)
        while len(self.to_remove) >= BATCH or (final and self.to_remove):
            chunk, self.to_remove = self.to_remove[:BATCH], self.to_remove[BATCH:]
            self.ops._remove(self.source, chunk, self.done)


class DlqOps:
    def __init__(
        self,
        deps: Deps,
        actor: str,
        *,
        wait_s: int = DEFAULT_WAIT_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor
        self.wait_s = wait_s
        self.sleep = sleep
        self.queue = deps.queues.batches()
        self.replays = Replays(deps, actor)

    @property
    def archive(self) -> Archive:
        """The DLQ archive; ``ArchiveUnavailable`` where the environment has no archive table."""
        if self.deps.archive is None:
            raise ArchiveUnavailable()
        return self.deps.archive

    # --------------------------------------------------------------------------- reading
    def depth(self) -> QueueCounts:
        return self.queue.depth(DLQ)

    def _examine(self, msg: DlqMessage) -> Examined:
        return Examined(msg, self.store.get_run(msg.run_id) if msg.run_id else None)

    def _source(self, archived: bool, visibility_s: int, *, redrivable_only: bool = True) -> Source:
        if archived:
            status = ARCHIVED if redrivable_only else None
            return ArchiveSource(self.archive, self.deps.clock.now, self.actor, status)
        return QueueSource(self.queue, visibility_s, self.wait_s)

    def find(self, filters: DlqFilter, *, limit: int | None = None, archived: bool = False) -> list[Examined]:
        """Matching messages, oldest first. Reading hides messages briefly; they are released after."""
        source = self._source(archived, SCAN_VISIBILITY_S, redrivable_only=False)
        found: list[Examined] = []
        read: list[DlqMessage] = []
        try:
            for batch in source.batches():
                read.extend(batch)
                runs = self.store.get_runs([m.run_id for m in batch if m.run_id])
                for msg in batch:
                    examined = Examined(msg, runs.get(msg.run_id) if msg.run_id else None)
                    if filters.matches(msg, examined.run):
                        found.append(examined)
                if limit is not None and len(found) >= limit:
                    break
        finally:
            self._release_quietly(source, read)
        found.sort(key=lambda e: e.message.at)
        return found[:limit] if limit is not None else found

    def show(self, message_id: str, *, scan_limit: int = 5000) -> MessageDetail:
        location = ""
        message: DlqMessage | None = None
        if self.deps.archive is not None:
            item = self.archive.get(message_id)
            if item is not None:
                location = f"archive ({item.status})"
                message = describe(
                    message_id=item.message_id,
                    body=item.body,
                    attributes=item.attributes,
                    sent_at_ms=item.sent_at_ms,
                    receive_count=item.receive_count,
                    archive_status=item.status,
                )
        source = QueueSource(self.queue, SCAN_VISIBILITY_S, self.wait_s)
        read: list[DlqMessage] = []
        try:
            for batch in source.batches():
                read.extend(batch)
                hit = next((m for m in batch if m.message_id == message_id), None)
                if hit is not None:
                    location = "dlq" + (f" and {location}" if location else "")
                    message = hit
                    break
                if len(read) >= scan_limit:
                    break
        finally:
            self._release_quietly(source, read)
        if message is None:
            raise MessageNotFound(
                f"no message {message_id} in the DLQ (looked at {len(read)}) or its archive",
                message_id=message_id,
            )
        examined = self._examine(message)
        order = None
        if examined.run is not None and examined.run.work_order_id:
            order = self.store.get_work_order(examined.run.work_order_id)
        return MessageDetail(examined, location, order)

    # --------------------------------------------------------------------------- redrive
    def redrive(
        self,
        filters: DlqFilter,
        *,
        dry_run: bool = False,
        rate: float | None = None,
        limit: int | None = None,
        archived: bool = False,
        progress: Callable[[RedriveItem], None] | None = None,
    ) -> RedriveReport:
        """Move matching dead-lettered runs back to the execution queue (see the module docstring)."""
        if limit is not None and limit < 1:
            raise ValidationFailed("--limit must be at least 1", key_path="limit")
        source = self._source(archived, SCAN_VISIBILITY_S if dry_run else REDRIVE_VISIBILITY_S)
        report = RedriveReport(uuid.uuid4().hex[:12], dry_run, source.name, filters)
        redrive = _Pass(self, source, report, RateLimiter(rate, sleep=self.sleep) if rate else None, progress)
        requests_before = self.queue.requests
        try:
            for batch in source.batches():
                redrive.take(batch, filters, limit, dry_run)
                redrive.flush(final=False)
            redrive.flush(final=True)
        finally:
            self._release_quietly(source, redrive.leave)
            report.sqs_requests = self.queue.requests - requests_before
        return report

    def _begin_moves(self, moves: list[_Pending]) -> list[tuple[_Pending, Run | None]]:
        """Record the replays of a batch in one transaction; one by one if any run changed meanwhile."""
        via = "redrive-archive" if any(p.message.archive_status for p in moves) else "redrive-dlq"
        evidence = [{"redrive_id": p.redrive_id, "message_arrival": p.message.arrival.value} for p in moves]
        together = self.replays.begin_many(
            [(p.run, p.message.message_id, e) for p, e in zip(moves, evidence, strict=True)], via=via
        )
        if together is not None:
            return list(zip(moves, together, strict=True))
        out: list[tuple[_Pending, Run | None]] = []
        for pending, extra in zip(moves, evidence, strict=True):
            try:
                saved: Run | None = self.replays.begin(
                    pending.run, via=via, dlq_message_id=pending.message.message_id, evidence=extra
                )
            except Conflict:
                saved = None  # someone changed it (the sweeper, another operator): left for next time
            out.append((pending, saved))
        return out

    def _send_and_remove(
        self,
        source: Source,
        batch: list[_Pending],
        limiter: RateLimiter | None,
        done: Callable[[DlqMessage, str | None, str, str], None],
    ) -> None:
        if limiter is not None:
            limiter.acquire(len(batch))
        todo = batch
        failures: dict[str, str] = {}
        sent: list[_Pending] = []
        for attempt in range(SEND_TRIES):
            outgoing = [
                self.replays.message(
                    p.run,
                    key=p.message.message_id,
                    dlq_message_id=p.message.message_id,
                    redrive_id=p.redrive_id,
                )
                for p in todo
            ]
            result = self.queue.send(EXECUTION, outgoing)
            sent += [p for p in todo if p.message.message_id in result.ok]
            todo = [p for p in todo if p.message.message_id in result.failed]
            failures = result.failed
            if not todo:
                break
            self.sleep(0.2 * 2**attempt)
        for pending in todo:
            done(
                pending.message,
                pending.run.run_id,
                FAILED,
                f"send refused ({failures.get(pending.message.message_id)}); the run is replayed and "
                "the next redrive sends it again",
            )
        self._remove(source, sent, done)

    def _remove(
        self,
        source: Source,
        batch: list[_Pending],
        done: Callable[[DlqMessage, str | None, str, str], None],
    ) -> None:
        if not batch:
            return
        result = source.remove([p.message for p in batch])
        for pending in batch:
            msg = pending.message
            if msg.message_id in result.ok:
                outcome = (
                    DUPLICATE_REMOVED if pending.verdict is Verdict.DUPLICATE else _DONE[pending.verdict]
                )
                done(msg, pending.run.run_id, outcome, pending.detail)
            else:
                done(
                    msg,
                    pending.run.run_id,
                    FAILED,
                    f"replayed, but not removed ({result.failed.get(msg.message_id)}); "
                    "the next redrive removes it",
                )

    def _note(self, msg: DlqMessage, action: str, evidence: dict[str, Any]) -> None:
        """An audit record in the message's own trail (for removals that change no run)."""
        uow = self.store.unit_of_work(self.actor, self.deps.clock.now())
        uow.append_audit(
            message_subject(msg.message_id),
            action=action,
            evidence={**evidence, "message": msg.as_dict()},
        )
        uow.commit()

    def _release_quietly(self, source: Source, messages: Sequence[DlqMessage]) -> None:
        """Make what we only looked at visible again; if that fails, it reappears by itself."""
        try:
            source.release(messages)
        except ReboundError as exc:
            log.warning("could not release DLQ messages early: %s", exc.message)

    # --------------------------------------------------------------------------- archive
    def archive_messages(
        self,
        filters: DlqFilter,
        *,
        older_than_s: float | None = None,
        delete: bool = False,
        keep_days: int = DEFAULT_KEEP_DAYS,
        progress: Callable[[DlqMessage, str], None] | None = None,
    ) -> ArchiveReport:
        """Copy matching DLQ messages into the archive table; with ``delete``, then remove them.

        Put before delete, as in a redrive: a message leaves the DLQ only once the archive holds it.
        """
        archive = self.archive  # fails early, before touching the queue, if there is no table
        now = self.deps.clock.now()
        report = ArchiveReport()
        source = QueueSource(self.queue, REDRIVE_VISIBILITY_S, self.wait_s)
        leave: list[DlqMessage] = []
        removing: list[DlqMessage] = []
        try:
            for batch in source.batches():
                runs = self.store.get_runs([m.run_id for m in batch if m.run_id])
                for msg in batch:
                    report.examined += 1
                    examined = Examined(msg, runs.get(msg.run_id) if msg.run_id else None)
                    old_enough = older_than_s is None or (now - msg.at).total_seconds() >= older_than_s
                    if not (old_enough and filters.matches(msg, examined.run)):
                        leave.append(msg)
                        continue
                    report.matched += 1
                    view = examined.as_dict()
                    new = archive.put(
                        message_id=msg.message_id,
                        body=msg.body,
                        attributes=msg.attributes,
                        sent_at_ms=int(msg.sent_at.timestamp() * 1000),
                        receive_count=msg.receive_count,
                        at=now,
                        actor=self.actor,
                        keep_days=keep_days,
                        index={k: view[k] for k in ("run_id", "task_id", "tenant", "error_code") if view[k]},
                    )
                    report.archived += new
                    report.already_archived += not new
                    if progress:
                        progress(msg, "archived" if new else "already-archived")
                    if not delete:
                        leave.append(msg)
                        continue
                    self._note(msg, "archived", {"run_id": msg.run_id, "removed_from_dlq": True})
                    removing.append(msg)
                    if len(removing) >= BATCH:
                        self._archive_delete(source, removing, report)
                        removing = []
            self._archive_delete(source, removing, report)
        finally:
            self._release_quietly(source, leave)
        return report

    def _archive_delete(self, source: Source, messages: list[DlqMessage], report: ArchiveReport) -> None:
        if not messages:
            return
        result = source.remove(messages)
        report.deleted += len(result.ok)
        report.failed.update(result.failed)
