"""The operator's DLQ operations, shared by the CLI and the ops API: ``DlqOps``.

It reads through the engine's ports only (``deps.queues.batches()``, ``deps.archive``,
``deps.store``): ``depth``, ``find`` and ``show`` look at messages and release them;
``redrive`` hands each batch to a ``RedrivePass`` and ``archive_messages`` to an ``ArchivePass``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from rebound.domain.errors import MessageNotFound, ValidationFailed
from rebound.domain.ids import message_subject
from rebound.engine.deps import Deps
from rebound.engine.ports import ARCHIVED, DEFAULT_KEEP_DAYS, Archive, ArchiveUnavailable, QueueCounts
from rebound.ops.dlq.archive import ArchivePass, ArchiveReport
from rebound.ops.dlq.message import DlqFilter, DlqMessage, Examined, MessageDetail, from_stored
from rebound.ops.dlq.redrive import RedriveItem, RedrivePass, RedriveReport
from rebound.ops.dlq.sources import (
    DEFAULT_WAIT_S,
    DLQ,
    REDRIVE_VISIBILITY_S,
    SCAN_VISIBILITY_S,
    ArchiveSource,
    QueueSource,
    Source,
    release_quietly,
)
from rebound.ops.replay import Replays
from rebound.ops.throttle import RateLimiter


class DlqOps:
    def __init__(
        self,
        deps: Deps,
        actor: str,
        *,
        wait_s: int = DEFAULT_WAIT_S,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``sleep`` and ``monotonic`` pace a rate-limited redrive (wall-clock time: API quotas
        count real seconds)."""
        self.deps = deps
        self.store = deps.store
        self.actor = actor
        self.wait_s = wait_s
        self.sleep = sleep
        self.monotonic = monotonic
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
            release_quietly(source, read)
        found.sort(key=lambda e: e.message.at)
        return found[:limit] if limit is not None else found

    def show(self, message_id: str, *, scan_limit: int = 5000) -> MessageDetail:
        location = ""
        message: DlqMessage | None = None
        if self.deps.archive is not None:
            item = self.archive.get(message_id)
            if item is not None:
                location = f"archive ({item.status})"
                message = from_stored(item)
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
            release_quietly(source, read)
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

    # --------------------------------------------------------------------------- changing
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
        """Move matching dead-lettered runs back to the execution queue (see ``rebound.ops.dlq.redrive``)."""
        if limit is not None and limit < 1:
            raise ValidationFailed("--limit must be at least 1", key_path="limit")
        source = self._source(archived, SCAN_VISIBILITY_S if dry_run else REDRIVE_VISIBILITY_S)
        report = RedriveReport(uuid.uuid4().hex[:12], dry_run, source.name, filters)
        redrive = RedrivePass(
            self,
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
        """
        archive = self.archive  # fails early, before touching the queue, if there is no table
        now = self.deps.clock.now()
        source = QueueSource(self.queue, REDRIVE_VISIBILITY_S, self.wait_s)
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
