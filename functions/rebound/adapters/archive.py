"""The DLQ archive: a DynamoDB table that keeps dead-letter messages beyond SQS's 14-day retention.

One item per DLQ message, keyed by its SQS message id, written with a conditional put so that
archiving the same message twice keeps the first copy. An item holds everything needed to
redrive the message later (body, attributes, when SQS received it) and its status: ``archived``,
or ``redriven`` once a redrive from the archive has put it back on the execution queue.
Items expire through the table's TTL (``expires_at``) after the retention the operator chose.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.dynamo import from_item, to_item
from rebound.adapters.errors import call_or_none, translate
from rebound.domain.timefmt import iso
from rebound.engine.ports import (
    ARCHIVED,
    DEFAULT_KEEP_DAYS,
    REDRIVEN,
    ArchivedItem,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoArchive:
    """The ``Archive`` port on its DynamoDB table."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self.client = client
        self.table = table

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
        data = {
            **(index or {}),
            "message_id": message_id,
            "status": ARCHIVED,
            "body": body,
            "attributes": attributes,
            "sent_at_ms": sent_at_ms,
            "receive_count": receive_count,
            "archived_at": iso(at),
            "archived_by": actor,
            "expires_at": int((at + timedelta(days=keep_days)).timestamp()),
        }
        stored = call_or_none(
            f"archive DLQ message {message_id}",
            lambda: self.client.put_item(
                TableName=self.table,
                Item=to_item(data),
                ConditionExpression="attribute_not_exists(message_id)",
            ),
            none_on="ConditionalCheckFailedException",
        )
        return stored is not None

    def get(self, message_id: str) -> ArchivedItem | None:
        try:
            resp = self.client.get_item(
                TableName=self.table, Key=to_item({"message_id": message_id}), ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"read archived message {message_id}") from exc
        item = resp.get("Item")
        return _item(from_item(item)) if item else None

    def scan(self, status: str | None = None) -> Iterator[ArchivedItem]:
        kwargs: dict[str, Any] = {"TableName": self.table}
        if status is not None:
            kwargs["FilterExpression"] = "#s = :s"
            kwargs["ExpressionAttributeNames"] = {"#s": "status"}
            kwargs["ExpressionAttributeValues"] = to_item({":s": status})
        while True:
            try:
                resp = self.client.scan(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, "read the DLQ archive") from exc
            for item in resp.get("Items", []):
                yield _item(from_item(item))
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def mark_redriven(self, message_id: str, at: datetime, actor: str) -> bool:
        """``archived`` -> ``redriven``. False if it was not ``archived`` any more."""
        marked = call_or_none(
            f"mark archived message {message_id} redriven",
            lambda: self.client.update_item(
                TableName=self.table,
                Key=to_item({"message_id": message_id}),
                UpdateExpression="SET #s = :new, redriven_at = :at, redriven_by = :by",
                ConditionExpression="#s = :old",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues=to_item(
                    {":new": REDRIVEN, ":old": ARCHIVED, ":at": iso(at), ":by": actor}
                ),
            ),
            none_on="ConditionalCheckFailedException",
        )
        return marked is not None


def _item(data: dict[str, Any]) -> ArchivedItem:
    return ArchivedItem(
        message_id=str(data["message_id"]),
        body=str(data.get("body", "")),
        attributes={str(k): str(v) for k, v in (data.get("attributes") or {}).items()},
        sent_at_ms=int(data.get("sent_at_ms", 0)),
        receive_count=int(data.get("receive_count", 0)),
        status=str(data.get("status", ARCHIVED)),
        archived_at=str(data.get("archived_at", "")),
        archived_by=str(data.get("archived_by", "")),
        redriven_at=data.get("redriven_at"),
        redriven_by=data.get("redriven_by"),
    )
