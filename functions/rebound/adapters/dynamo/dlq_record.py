"""The DLQ's record on DynamoDB (``rebound.resources.DLQ_MESSAGES``), mixed into ``DynamoStore``.

Lists are a ``Query`` on ``by_status`` (partition ``in_dlq``, or the status a message left with)
or, for one task, on the sparse ``by_task``, both ordered by ``dlq_at``: ``--since``/``--until``
bound the key, tenant, error code and ``changed_since`` filter, and a page resumes from its cursor
(``ExclusiveStartKey``). Never a scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rebound.adapters import dlq_items as rec
from rebound.adapters.dynamo.codec import to_item
from rebound.domain.timefmt import iso
from rebound.engine.ports import DlqEntry, DlqPage, DlqQuery, DlqSpanPage, DlqStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

MARKS_PER_TRANSACTION = 25
MARK = "SET #s = :s, changed_at = :at, changed_by = :by, expires_at = :exp REMOVE dlq_task"


class DynamoDlqRecord:
    """The DLQ record's reads and writes (``rebound.engine.ports.Store``)."""

    if TYPE_CHECKING:  # what it uses of ``DynamoStore``
        client: DynamoDBClient
        tables: dict[str, str]
        _call: Callable[..., Any]
        _get: Callable[..., dict[str, Any] | None]
        _query: Callable[..., Iterator[dict[str, Any]]]
        _batch_get: Callable[..., Iterator[dict[str, Any]]]
        _put_new: Callable[..., bool]

    def add_dlq_entry(self, entry: DlqEntry) -> bool:
        """Record a DLQ message found without a record. False if it had one (kept as it is)."""
        return self._put_new(
            rec.TABLE,
            rec.to_record(entry),
            f"record DLQ message {entry.message_id}",
            "attribute_not_exists(message_id)",
        )

    def get_dlq_entry(self, message_id: str) -> DlqEntry | None:
        item = self._get(rec.TABLE, {"message_id": message_id})
        return rec.from_record(item) if item else None

    def get_dlq_entries(self, message_ids: list[str]) -> dict[str, DlqEntry]:
        entries = (rec.from_record(item) for item in self._batch_get(rec.TABLE, "message_id", message_ids))
        return {entry.message_id: entry for entry in entries}

    def dlq_entries(self, query: DlqQuery) -> DlqPage:
        """Recorded messages in ``query.status``, oldest first: a query on an index, never a scan
        (``changed_since`` filters what the query reads: the partition of a status holds what
        left that way in the last ``KEEP_AFTER_LEAVING``)."""
        return rec.page(self._dlq_query(query, "list the DLQ's record"), query.limit)

    def dlq_spans(self, query: DlqQuery) -> DlqSpanPage:
        """As ``dlq_entries``, reading only what a span needs of each item (``ProjectionExpression``)."""
        items = self._dlq_query(query, "read the DLQ's record over time", rec.SPAN_ATTRIBUTES)
        return rec.span_page(items, query.limit)

    def _dlq_query(
        self, query: DlqQuery, what: str, attributes: tuple[str, ...] | None = None
    ) -> list[dict[str, Any]]:
        if query.task_id is not None:
            index, partition = rec.BY_TASK, ("dlq_task", query.task_id)
        else:
            index, partition = rec.BY_STATUS, ("status", query.status.value)
        condition = "#p = :p"
        values: dict[str, Any] = {":p": partition[1]}
        low, high = rec.key_range(query.since, query.until)
        if low is not None and high is not None:
            condition += " AND dlq_at BETWEEN :low AND :high"
        elif low is not None:
            condition += " AND dlq_at >= :low"
        elif high is not None:
            condition += " AND dlq_at <= :high"
        values.update({k: v for k, v in ((":low", low), (":high", high)) if v is not None})
        filters = []
        for attribute, value in (("tenant", query.tenant), ("error_code", query.error_code)):
            if value is not None:
                filters.append(f"{attribute} = :{attribute}")
                values[f":{attribute}"] = value
        if query.changed_since is not None:
            filters.append("changed_at >= :changed")
            values[":changed"] = iso(query.changed_since)
        if query.present_at is not None:
            filters.append("expires_at > :now")
            values[":now"] = int(query.present_at.timestamp())
        names = {"#p": partition[0]}
        kwargs: dict[str, Any] = {
            "IndexName": index,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": to_item(values),
            "Limit": query.limit + 1,
            "max_items": query.limit + 1,
        }
        if attributes is not None:
            names.update({f"#a{n}": name for n, name in enumerate(attributes)})
            kwargs["ProjectionExpression"] = ", ".join(f"#a{n}" for n in range(len(attributes)))
        kwargs["ExpressionAttributeNames"] = names
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
        if query.after is not None:
            kwargs["ExclusiveStartKey"] = to_item(rec.cursor_key(query.after, partition))
        return list(self._query(rec.TABLE, what, **kwargs))

    def mark_dlq_entries(
        self, message_ids: list[str], status: DlqStatus, *, at: datetime, actor: str
    ) -> None:
        """The messages left the DLQ: one transaction of updates per 25 (a message never recorded
        gets a record of how it left)."""
        changes = rec.left(status, at, actor)
        values = to_item(
            {
                ":s": changes["status"],
                ":at": changes["changed_at"],
                ":by": actor,
                ":exp": changes["expires_at"],
            }
        )
        ids = list(dict.fromkeys(message_ids))
        for start in range(0, len(ids), MARKS_PER_TRANSACTION):
            updates: list[Any] = [
                {
                    "Update": {
                        "TableName": self.tables[rec.TABLE],
                        "Key": to_item({"message_id": message_id}),
                        "UpdateExpression": MARK,
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": values,
                    }
                }
                for message_id in ids[start : start + MARKS_PER_TRANSACTION]
            ]
            self._call(
                f"mark {len(updates)} DLQ message(s) {status.value} at {iso(at)}",
                self.client.transact_write_items,
                TransactItems=updates,
            )
