"""The audit chains as the DynamoDB store reads them: a subject's trail and head, every subject,
and a parallel scan's segment a page of whole trails at a time, read raw (``raw_answers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from rebound.adapters.dynamo import raw_answers
from rebound.adapters.dynamo.codec import from_item
from rebound.domain.audit import GENESIS, AuditFields
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import OperationalError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def page_limit(page_size: int | None) -> dict[str, Any]:
    """A scan's ``Limit`` for pages of ``page_size`` items (none: as large as DynamoDB gives)."""
    return {} if page_size is None else {"Limit": page_size}


def _whole(trails: dict[str, list[AuditFields]], done: set[str]) -> dict[str, list[AuditFields]]:
    """``trails``, each in sequence order, now whole: their subjects added to ``done``."""
    for subject, trail in trails.items():
        trail.sort(key=lambda d: d["seq"])
        done.add(subject)
    return trails


class DynamoAuditReads:
    """The audit reads of ``DynamoStore`` (a mixin)."""

    if TYPE_CHECKING:  # what it uses of ``DynamoStore``
        client: DynamoDBClient
        tables: dict[str, str]
        _raw_installed: bool
        _call: Callable[..., Any]
        _query: Callable[..., Iterator[dict[str, Any]]]
        _scan: Callable[..., Iterator[dict[str, Any]]]
        _scan_pages: Callable[..., Iterator[list[dict[str, Any]]]]

    def audit_trail(self, subject: str) -> list[AuditRecord]:
        items = self._query(
            "audit",
            f"read audit trail of {subject}",
            KeyConditionExpression="subject = :s",
            ExpressionAttributeValues={":s": {"S": subject}},
            ConsistentRead=True,
        )
        return [AuditRecord.model_validate(d) for d in items]

    def audit_head(self, subject: str) -> tuple[int, str]:
        resp = self._call(
            f"read audit head of {subject}",
            self.client.query,
            TableName=self.tables["audit"],
            KeyConditionExpression="subject = :s",
            ExpressionAttributeValues={":s": {"S": subject}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        items = resp.get("Items", [])
        if not items:
            return 0, GENESIS
        last = from_item(items[0])
        return int(last["seq"]), str(last["hash"])

    def audit_subjects(self) -> list[str]:
        seen: set[str] = set()
        for data in self._scan("audit", "list audit subjects", ProjectionExpression="subject"):
            seen.add(str(data["subject"]))
        return sorted(seen)

    def audit_segment_parts(
        self, segment: int, segments: int, page_size: int | None = None
    ) -> Iterator[dict[str, list[AuditFields]]]:
        # A parallel scan segment holds whole partitions, each partition's items together and in
        # sort key order: a subject's trail is whole once a page shows the next subject (or the
        # segment ends), so each page's part is the trails it completed.
        # Pages of ``page_size`` items (``Limit``) or as large as DynamoDB gives (1 MB), read raw
        # (``raw_answers``), no model built.
        trails: dict[str, list[AuditFields]] = {}
        done: set[str] = set()
        with self._raw_reads():
            for page in self._scan_pages(
                "audit",
                f"scan audit segment {segment} of {segments}",
                plain=True,
                Segment=segment,
                TotalSegments=segments,
                ConsistentRead=True,
                **page_limit(page_size),
            ):
                for data in page:
                    subject = str(data["subject"])
                    if subject in done:
                        raise OperationalError(f"scan audit segment {segment}: {subject} came back apart")
                    trails.setdefault(subject, []).append(data)
                last = trails.popitem() if trails else None  # may go on in the next page
                yield _whole(trails, done)
                trails = dict([last]) if last else {}
        yield _whole(trails, done)

    def _raw_reads(self) -> AbstractContextManager[None]:
        """Item reads of this thread answered raw inside (``raw_answers``)."""
        if not self._raw_installed:
            raw_answers.install(self.client)
            self._raw_installed = True
        return raw_answers.raw()
