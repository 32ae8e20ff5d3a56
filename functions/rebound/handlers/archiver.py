"""Archiver: the audit table's stream in, one S3 object per batch of new records out.

A batch that fails (S3 refused it, the function timed out) is retried by the event source mapping,
split in two, and finally handed to the control DLQ as a failure record; the sweeper reads that
range of the stream again and archives it (``rebound.engine.sweeper``). The records stay in
DynamoDB for ``retention.audit_days``, long after the stream's 24 hours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rebound import wiring
from rebound.handlers.observability import invocation_keys, logger_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = logger_for("archiver")


@invocation_keys(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    deps = wiring.deps()
    if deps.audit_archive is None:
        raise RuntimeError("the archiver runs without an archive bucket (REBOUND_ARCHIVE_BUCKET is not set)")
    # No metric of its own (each distinct one bills $0.30 a month): Lambda's Errors and IteratorAge
    # of the mapping say whether it keeps up (the ArchiverErrors and ArchiveLag alarms).
    return {"archived": deps.audit_archive.archive_stream_records(event.get("Records", []))}
