"""Archiving DLQ messages: copying them into the archive port before the queue's retention ends.

An archive pass puts each matching message into the archive (the first copy is kept) and, with
``delete``, then removes it from the DLQ: put before delete, as in a redrive, so a message leaves
the DLQ only once the archive holds it, and each removal leaves an audit record in the message's
own trail (the DLQ's record says ``archived``). Archived messages are listed, shown and redriven
from the archive through ``sources.ArchiveSource``, which marks each one it gives up ``redriven``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rebound.engine.ports import BATCH, Archive, DlqStatus
from rebound.ops.dlq.message import DlqFilter, DlqMessage, Examined
from rebound.ops.dlq.sources import Source

if TYPE_CHECKING:
    from rebound.ops.dlq.operations import DlqOps


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


class ArchivePass:
    """One archiving pass over the DLQ: what it archived, what waits to be removed, what it leaves alone."""

    def __init__(
        self,
        ops: DlqOps,
        source: Source,
        archive: Archive,
        now: datetime,
        *,
        delete: bool,
        keep_days: int,
        progress: Callable[[DlqMessage, str], None] | None,
    ) -> None:
        self.ops = ops
        self.source = source
        self.archive = archive
        self.now = now
        self.delete = delete
        self.keep_days = keep_days
        self.progress = progress
        self.report = ArchiveReport()
        self.leave: list[DlqMessage] = []
        self.removing: list[DlqMessage] = []

    def take(self, batch: list[DlqMessage], filters: DlqFilter, older_than_s: float | None) -> None:
        """Archive the matching messages of one received batch; remove them in batches of ten."""
        runs = self.ops.store.get_runs([m.run_id for m in batch if m.run_id])
        for msg in batch:
            self.report.examined += 1
            examined = Examined(msg, runs.get(msg.run_id) if msg.run_id else None)
            old_enough = older_than_s is None or (self.now - msg.at).total_seconds() >= older_than_s
            if not (old_enough and filters.matches(msg, examined.run)):
                self.leave.append(msg)
                continue
            self.report.matched += 1
            view = examined.as_dict()
            new = self.archive.put(
                message_id=msg.message_id,
                body=msg.body,
                attributes=msg.attributes,
                sent_at_ms=int(msg.sent_at.timestamp() * 1000),
                receive_count=msg.receive_count,
                at=self.now,
                actor=self.ops.actor,
                keep_days=self.keep_days,
                index={k: view[k] for k in ("run_id", "task_id", "tenant", "error_code") if view[k]},
            )
            self.report.archived += new
            self.report.already_archived += not new
            if self.progress:
                self.progress(msg, "archived" if new else "already-archived")
            if not self.delete:
                self.leave.append(msg)
                continue
            self.ops._note(msg, "archived", {"run_id": msg.run_id, "removed_from_dlq": True})
            self.removing.append(msg)
            if len(self.removing) >= BATCH:
                self.flush()

    def flush(self) -> None:
        """Remove from the DLQ what the archive now holds."""
        messages, self.removing = self.removing, []
        if not messages:
            return
        result = self.source.remove(messages)
        self.source.left(list(result.ok), DlqStatus.ARCHIVED)
        self.report.deleted += len(result.ok)
        self.report.failed.update(result.failed)
