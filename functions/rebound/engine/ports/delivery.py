"""The delivery ports: notification channels and the DLQ archive."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol

from rebound.domain.errors import NotFound, OperationalError
from rebound.domain.notification import Notification


class DeliveryFailed(Exception):
    def __init__(self, channel: str, detail: str) -> None:
        super().__init__(f"{channel}: {detail}")
        self.channel = channel
        self.detail = detail


class Sent(str):
    """What a channel answered, and (``ref``) how the receiver named the message, when a later
    notice about the same work order needs it (Slack's channel and ``ts``)."""

    ref: str | None

    def __new__(cls, detail: str, ref: str | None = None) -> Sent:
        sent = super().__new__(cls, detail)
        sent.ref = ref
        return sent


class Channel(Protocol):
    name: str

    def send(self, note: Notification) -> str:
        """Deliver ``note``; returns what the channel answered (a ``Sent`` to name the message).
        Raises ``DeliveryFailed``."""
        ...

    def resolve(self, note: Notification, opened: str | None) -> str:
        """Tell the receiver ``note``'s work order is resolved; ``opened`` is the ``ref`` of the
        opening message, if the channel named one. Raises ``DeliveryFailed``."""
        ...


class Notifier(Protocol):
    @property
    def channels(self) -> Sequence[Channel]: ...

    @property
    def names(self) -> list[str]: ...

    def alert(self, subject: str, body: dict[str, Any], severity: str) -> list[str]: ...

    def alert_each(
        self,
        subject: str,
        body: dict[str, Any],
        severity: str,
        *,
        kind: str = "alert",
        done: Collection[str] = (),
    ) -> tuple[dict[str, str], dict[str, str]]:
        """``alert`` through every channel that takes ``kind`` but those ``done``: (sent, failed)."""
        ...


class CompletionKeys(Protocol):
    """The environment's key for signing and verifying completion tokens
    (``rebound.domain.completion``). Raises ``OperationalError`` when the environment has none."""

    def key(self) -> bytes: ...


class NoCompletionKey:
    """An environment without a completion key: asynchronous targets are refused with a reason."""

    def key(self) -> bytes:
        raise OperationalError(
            "no completion key is configured for asynchronous targets (REBOUND_COMPLETION_KEY names "
            "the SSM parameter or Secrets Manager secret that holds it)"
        )


# -------------------------------------------------------------------------- the DLQ archive
ARCHIVED = "archived"
REDRIVEN = "redriven"
DEFAULT_KEEP_DAYS = 400
ARCHIVE_TABLE = "dlq_archive"
"""Logical name of the archive table in ``rebound.resources.SPEC``."""


class ArchiveUnavailable(NotFound):
    code = "ARCHIVE_UNAVAILABLE"

    def __init__(self) -> None:
        super().__init__(
            f"this environment has no DLQ archive table ({ARCHIVE_TABLE}); "
            "deploy the stack version that creates it",
            table=ARCHIVE_TABLE,
        )


@dataclass(frozen=True)
class ArchivedItem:
    message_id: str
    body: str
    attributes: dict[str, str]
    sent_at_ms: int
    receive_count: int
    status: str
    archived_at: str
    archived_by: str
    redriven_at: str | None = None
    redriven_by: str | None = None


class Archive(Protocol):
    """DLQ messages kept beyond the queue's retention, redrivable from there."""

    def put(
        self,
        *,
        message_id: str,
        body: str,
        attributes: dict[str, str],
        sent_at_ms: int,
        receive_count: int,
        at: datetime,
        actor: str,
        keep_days: int = DEFAULT_KEEP_DAYS,
        index: dict[str, Any] | None = None,
    ) -> bool:
        """Archive one message. False if it was archived before (the first copy is kept)."""
        ...

    def get(self, message_id: str) -> ArchivedItem | None: ...

    def scan(self, status: str | None = None) -> Iterator[ArchivedItem]: ...

    def mark_redriven(self, message_id: str, at: datetime, actor: str) -> bool:
        """``archived`` -> ``redriven``. False if it was not ``archived`` any more."""
        ...


class AuditArchive(Protocol):
    """Where audit records are kept once DynamoDB's TTL has deleted them (docs/archive.md)."""

    def archive_stream_records(self, records: Sequence[Mapping[str, Any]]) -> int:
        """Archive the audit records a batch of the audit table's stream inserted; returns how many.
        The same batch archived again writes the same object again (archiving is idempotent)."""
        ...

    def put_records(self, records: Sequence[Mapping[str, Any]]) -> str:
        """Archive records the stream did not (as stored, of one day); returns the object's key."""
        ...

    def trails(
        self, *, subject: str | None = None, since: date | None = None, until: date | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """The archived records of every subject (or of ``subject``), each in sequence order, as
        stored, from objects of ``since`` to ``until`` (days of the records' writing)."""
        ...
