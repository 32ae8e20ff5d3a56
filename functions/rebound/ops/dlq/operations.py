"""The operator's DLQ operations, shared by the CLI and the ops API: ``DlqOps``.

It reads through the engine's ports only (``deps.queues.batches()``, ``deps.archive``,
``deps.store``). Reading never hides a message: ``find`` and ``show`` read the DLQ's record
(``Store.dlq_entries``, a query ordered by time, with a cursor; ``rebound.engine.dlq_record``),
``depth`` the queue's attributes, ``history`` the depth over time from the record's arrivals and
departures; none of them receives. ``redrive`` (a dry run reads the record)
hands each batch to a ``RedrivePass`` (with the ``RedriveTools`` it works with, never itself) and
``archive_messages`` to an ``ArchivePass``; only they receive from the queue, to move or delete,
and they mark the record for what they removed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rebound.domain.approvals import REDRIVE, ApprovalRequest
from rebound.domain.errors import FeatureDisabled, MessageNotFound, ValidationFailed
from rebound.domain.flags import DLQ_INSPECTOR
from rebound.domain.ids import message_subject
from rebound.domain.tenancy import ALL_TENANTS, tenant_of
from rebound.engine.deps import Deps
from rebound.engine.ports import (
    DEFAULT_KEEP_DAYS,
    Archive,
    ArchiveUnavailable,
    DlqStatus,
    QueueCounts,
)
from rebound.ops.approvals import Approvals
from rebound.ops.common import when
from rebound.ops.dlq.archive import ArchivePass, ArchiveReport
from rebound.ops.dlq.history import DepthHistory, depth_history
from rebound.ops.dlq.message import DlqFilter, DlqMessage, Examined, MessageDetail, from_entry, from_stored
from rebound.ops.dlq.redrive import RedriveItem, RedrivePass, RedriveReport, RedriveTools
from rebound.ops.dlq.sources import (
    DEFAULT_WAIT_S,
    DLQ,
    RECORD_PAGE,
    REDRIVE_VISIBILITY_S,
    ArchiveSource,
    QueueSource,
    RecordSource,
    Source,
    record_query,
    release_quietly,
)
from rebound.ops.replay import Replays
from rebound.ops.throttle import RateLimiter

PAGE = 100
"""Messages per page of ``find``."""


@dataclass(frozen=True)
class FoundPage:
    """A page of ``find_page``: its messages, and the cursor of the next page (``None``: the last)."""

    examined: list[Examined]
    cursor: str | None


class DlqOps:
    def __init__(
        self,
        deps: Deps,
        actor: str,
        *,
        wait_s: int = DEFAULT_WAIT_S,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        approval: ApprovalRequest | None = None,
    ) -> None:
        """``sleep`` and ``monotonic`` pace a rate-limited redrive (wall-clock time: API quotas
        count real seconds); ``approval``: the approved request a redrive carries out."""
        if not deps.flags.enabled(DLQ_INSPECTOR):
            raise FeatureDisabled.of(DLQ_INSPECTOR, "the DLQ inspector")
        self.deps = deps
        self.store = deps.store
        self.actor = actor
        self.wait_s = wait_s
        self.sleep = sleep
        self.monotonic = monotonic
        self.queue = deps.queues.batches()
        self.replays = Replays(deps, actor)
        self.approval = approval

    @property
    def archive(self) -> Archive:
        """The DLQ archive; ``ArchiveUnavailable`` where the environment has no archive table."""
        if self.deps.archive is None:
            raise ArchiveUnavailable()
        return self.deps.archive

    # --------------------------------------------------------------------------- reading
    def depth(self) -> QueueCounts:
        """The queue's own counts (its attributes: nothing is received)."""
        return self.queue.depth(DLQ)

    def _examine(self, msg: DlqMessage) -> Examined:
        return Examined(msg, self.store.get_run(msg.run_id) if msg.run_id else None)

    def _queue_source(self) -> QueueSource:
        return QueueSource(self.queue, REDRIVE_VISIBILITY_S, self.wait_s, self._mark)

    def _mark(self, message_ids: list[str], status: DlqStatus) -> None:
        self.store.mark_dlq_entries(message_ids, status, at=self.deps.clock.now(), actor=self.actor)

    def find_page(self, filters: DlqFilter, *, limit: int = PAGE, after: str | None = None) -> FoundPage:
        """One page of matching messages in the DLQ, oldest first, from its record; ``after`` is the
        cursor of the page before. Reading receives nothing, so it hides nothing."""
        if limit < 1:
            raise ValidationFailed("limit must be at least 1", key_path="limit")
        page = self.store.dlq_entries(record_query(filters, self.deps.clock.now(), limit=limit, after=after))
        messages = [from_entry(entry) for entry in page.entries]
        runs = self.store.get_runs([m.run_id for m in messages if m.run_id])
        return FoundPage(
            [Examined(m, runs.get(m.run_id) if m.run_id else None) for m in messages], page.cursor
        )

    def count(self, filters: DlqFilter, *, at_most: int | None = None) -> int:
        """How many messages of the DLQ match ``filters``, from its record (nothing received);
        counting stops past ``at_most``."""
        found = 0
        after: str | None = None
        now = self.deps.clock.now()
        while at_most is None or found <= at_most:
            page = self.store.dlq_entries(record_query(filters, now, limit=RECORD_PAGE, after=after))
            found += len(page.entries)
            if page.cursor is None:
                break
            after = page.cursor
        return found

    def history(self, window: str) -> DepthHistory:
        """The DLQ's depth over ``window`` (``1h``, ``24h``), bucket by bucket, from its record:
        arrivals and departures, nothing received (``rebound.ops.dlq.history``)."""
        return depth_history(self.store, self.deps.clock.now(), window)

    def find(self, filters: DlqFilter, *, limit: int | None = None, archived: bool = False) -> list[Examined]:
        """Matching messages, oldest first: in the DLQ (its record, page by page), or in the archive."""
        if archived:
            return self._find_archived(filters, limit)
        found: list[Examined] = []
        after: str | None = None
        while limit is None or len(found) < limit:
            page = self.find_page(
                filters, limit=PAGE if limit is None else min(PAGE, limit - len(found)), after=after
            )
            found += page.examined
            if page.cursor is None:
                break
            after = page.cursor
        return found

    def _find_archived(self, filters: DlqFilter, limit: int | None) -> list[Examined]:
        found: list[Examined] = []
        for batch in ArchiveSource(self.archive, self.deps.clock.now, self.actor, None).batches():
            runs = self.store.get_runs([m.run_id for m in batch if m.run_id])
            for msg in batch:
                examined = Examined(msg, runs.get(msg.run_id) if msg.run_id else None)
                if filters.matches(msg, examined.run):
                    found.append(examined)
            if limit is not None and len(found) >= limit:
                break
        found.sort(key=lambda e: e.message.at)
        return found[:limit] if limit is not None else found

    def show(self, message_id: str) -> MessageDetail:
        """One message, in the DLQ (its record) or its archive, with its run and work order."""
        location = ""
        message: DlqMessage | None = None
        if self.deps.archive is not None:
            item = self.archive.get(message_id)
            if item is not None:
                location = f"archive ({item.status})"
                message = from_stored(item)
        entry = self.store.get_dlq_entry(message_id)
        if entry is not None and entry.status is DlqStatus.IN_DLQ:
            location = "dlq" + (f" and {location}" if location else "")
            message = from_entry(entry)
        if message is None:
            gone = ""
            if entry is not None:
                changed = f"{when(entry.changed_at)}, {entry.changed_by}"
                gone = f"; it left the DLQ ({entry.status.value} at {changed})"
            raise MessageNotFound(
                f"no message {message_id} in the DLQ or its archive{gone}", message_id=message_id
            )
        examined = self._examine(message)
        order = None
        if examined.run is not None and examined.run.work_order_id:
            order = self.store.get_work_order(examined.run.work_order_id)
        return MessageDetail(examined, location, order)

    # --------------------------------------------------------------------------- changing
    def hold_large_redrive(self, filters: DlqFilter, limit: int | None, rate: float | None = None) -> None:
        """A redrive of more messages than the environment's ``approvals.redrive_over`` waits for a
        second operator (``ApprovalRequired``), unless it carries an approval."""
        over = self.deps.settings.approval_rules().redrive_over
        if self.approval is not None or over is None or (limit is not None and limit <= over):
            return
        count = self.count(filters, at_most=over)
        if count <= over:
            return
        tenant = filters.tenant or (tenant_of(filters.task_id) if filters.task_id else None)
        Approvals(self.deps, self.actor).gate(
            REDRIVE,
            tenant or ALL_TENANTS,
            "dlq#redrive",
            {"filters": filters.as_dict(), "limit": limit, "rate": rate},
            f"redrive more than {over} messages ({count} or more match)",
        )

    def redrive(
        self,
        filters: DlqFilter,
        *,
        dry_run: bool = False,
        rate: float | None = None,
        limit: int | None = None,
        archived: bool = False,
        progress: Callable[[RedriveItem], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> RedriveReport:
        """Move matching dead-lettered runs back to the execution queue (see ``rebound.ops.dlq.redrive``).

        ``stop`` is asked after each batch: True ends the pass there (``report.stopped``), with
        what it took finished and what it left released; a redrive job does its work in such
        chunks (``rebound.ops.dlq.jobs``)."""
        if limit is not None and limit < 1:
            raise ValidationFailed("--limit must be at least 1", key_path="limit")
        if not dry_run and stop is None:  # a job's chunk was held, if at all, when the job started
            self.hold_large_redrive(filters, limit, rate)
        source: Source
        if archived:
            source = ArchiveSource(self.archive, self.deps.clock.now, self.actor)
        elif dry_run:
            source = RecordSource(self.store, filters, self.deps.clock.now())  # looking: hide nothing
        else:
            source = self._queue_source()
        report = RedriveReport(uuid.uuid4().hex[:12], dry_run, source.name, filters)
        redrive = RedrivePass(
            RedriveTools(self.store, self.replays, self.queue, self.sleep, self._note),
            source,
            report,
            RateLimiter(rate, sleep=self.sleep, monotonic=self.monotonic) if rate else None,
            progress,
        )
        requests_before = self.queue.requests
        try:
            for batch in source.batches():
                redrive.take(batch, filters, limit, dry_run)
                redrive.flush(final=False)
                if stop is not None and stop():
                    report.stopped = True
                    break
            redrive.flush(final=True)
        finally:
            release_quietly(source, redrive.leave)
            report.sqs_requests = self.queue.requests - requests_before
        return report

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
        Copying alone reads the DLQ's record; deleting receives from the queue.
        """
        archive = self.archive  # fails early, before touching the queue, if there is no table
        now = self.deps.clock.now()
        source: Source = self._queue_source() if delete else RecordSource(self.store, filters, now)
        archiving = ArchivePass(
            self, source, archive, now, delete=delete, keep_days=keep_days, progress=progress
        )
        try:
            for batch in source.batches():
                archiving.take(batch, filters, older_than_s)
            archiving.flush()
        finally:
            release_quietly(source, archiving.leave)
        return archiving.report

    def _note(self, msg: DlqMessage, action: str, evidence: dict[str, Any]) -> None:
        """An audit record in the message's own trail (for removals that change no run)."""
        uow = self.store.unit_of_work(self.actor, self.deps.clock.now())
        uow.append_audit(
            message_subject(msg.message_id),
            action=action,
            evidence={**evidence, "message": msg.as_dict()},
        )
        uow.commit()
