"""The audit archive: audit records copied to S3 as they are written, kept after TTL deletes them.

The archiver function reads the audit table's stream and writes each batch of new records as one
object (docs/archive.md has the format):

    audit/v1/<yyyy>/<mm>/<dd>/<hhmmss>-<first sequence number>-<last sequence number>.jsonl.gz

gzip of JSON Lines, one record a line, each exactly as ``rebound audit verify`` reads it from the
table (its hash and MAC verify the same). The day is that of the batch's first record. The name
comes from the stream's sequence numbers, so a batch delivered again writes the same object again;
a record archived twice in two objects (a split batch) reads as one. One object per batch keeps
the S3 requests to about one per thousand records. ``rebound audit archive`` writes what the
stream missed as ``backfill-<digest>.jsonl.gz`` objects of the same format.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.dynamo.codec import from_item
from rebound.adapters.errors import translate

PREFIX = "audit/v1/"
FORMAT = "rebound-audit-archive/1"
"""The ``format`` metadata of every object (docs/archive.md)."""


def object_key(first_at: str, first_seq: str, last_seq: str) -> str:
    """Where a batch whose first record was written at ``first_at`` (ISO 8601) is archived."""
    day, clock = first_at[:10], first_at[11:19].replace(":", "")
    return f"{PREFIX}{day.replace('-', '/')}/{clock}-{first_seq}-{last_seq}.jsonl.gz"


def encode(records: Sequence[Mapping[str, Any]]) -> bytes:
    lines = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records)
    return gzip.compress(lines.encode(), mtime=0)


def decode(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(body).decode().splitlines() if line.strip()]


def inserted(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The audit records a batch of stream records inserted (TTL deletions are not records)."""
    return [
        from_item(record["dynamodb"]["NewImage"], plain=True)
        for record in records
        if record.get("eventName") == "INSERT"
    ]


def _days(since: date, until: date) -> Iterator[date]:
    day = since
    while day <= until:
        yield day
        day += timedelta(days=1)


class S3AuditArchive:
    """The ``AuditArchive`` port on an S3 bucket. ``client`` is a factory (made on first use)."""

    def __init__(self, client: Callable[[], Any], bucket: str) -> None:
        self._factory = client
        self._client: Any = None
        self.bucket = bucket

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def archive_stream_records(self, records: Sequence[Mapping[str, Any]]) -> int:
        fields = inserted(records)
        if not fields:
            return 0
        sequence = [str(r["dynamodb"]["SequenceNumber"]) for r in records]
        self._put(object_key(str(fields[0]["at"]), sequence[0], sequence[-1]), encode(fields), len(fields))
        return len(fields)

    def put_records(self, records: Sequence[Mapping[str, Any]]) -> str:
        """Archive ``records`` (as stored) that the stream did not: one object, named by the day of
        the first and a digest of the whole (``backfill-<digest>``), so the same records again
        write the same object. Returns its key."""
        body = encode(records)
        first = str(records[0]["at"])
        digest = hashlib.sha256(body).hexdigest()[:16]
        key = f"{PREFIX}{first[:10].replace('-', '/')}/backfill-{digest}.jsonl.gz"
        self._put(key, body, len(records))
        return key

    def _put(self, key: str, body: bytes, count: int) -> None:
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ContentType="application/x-ndjson",
                ContentEncoding="gzip",
                Metadata={"format": FORMAT, "records": str(count)},
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"archive {count} audit records to s3://{self.bucket}/{key}") from exc

    def keys(self, since: date | None = None, until: date | None = None) -> Iterator[str]:
        """The archive's objects, oldest day first, of ``since`` to ``until`` (None: every day)."""
        prefixes = (
            [PREFIX]
            if since is None
            else [f"{PREFIX}{d.strftime('%Y/%m/%d')}/" for d in _days(since, until or date.today())]
        )
        last = until.strftime("%Y/%m/%d") if until is not None else None
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for prefix in prefixes:
                for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                    for item in page.get("Contents", []):
                        key = str(item["Key"])
                        if last is None or key[len(PREFIX) : len(PREFIX) + 10] <= last:
                            yield key
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"list the audit archive s3://{self.bucket}/{PREFIX}") from exc

    def read(self, key: str) -> list[dict[str, Any]]:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"read s3://{self.bucket}/{key}") from exc
        return decode(body)

    def trails(
        self, *, subject: str | None = None, since: date | None = None, until: date | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        # A record archived twice (a batch split and delivered again) is one record: kept once if
        # the copies are the same, twice (and the chain fails verification) if they differ.
        seen: dict[tuple[str, int, str], dict[str, Any]] = {}
        for key in self.keys(since, until):
            for record in self.read(key):
                if subject is not None and record.get("subject") != subject:
                    continue
                seen.setdefault((str(record["subject"]), int(record["seq"]), str(record["hash"])), record)
        out: dict[str, list[dict[str, Any]]] = {}
        for (name, _, _), record in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            out.setdefault(name, []).append(record)
        return out
