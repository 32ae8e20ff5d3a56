"""Storage-only writes of the runs' items, mixed into ``DynamoStore``: what the one-time
migrations (``rebound migrate retention``, ``rebound migrate state-index``) change of an item
written by an earlier version. Neither writes an audit record or changes the run; both are guarded
by the revision the run was read at."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rebound import resources as r
from rebound.adapters.dynamo.codec import from_item, to_item
from rebound.domain.errors import Conflict
from rebound.domain.run import in_state_index

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoRunLayout:
    """``set_run_expiry`` and ``unlist_clean_success`` (``rebound.engine.ports.Store``)."""

    if TYPE_CHECKING:  # what it uses of ``DynamoStore``
        client: DynamoDBClient
        tables: dict[str, str]
        _call: Callable[..., Any]

    def set_run_expiry(self, run_id: str, rev: int, expires_at: int) -> bool:
        try:
            self._call(
                f"set the expiry of run {run_id}",
                self.client.update_item,
                TableName=self.tables["runs"],
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET #t = :t",
                ConditionExpression="attribute_exists(run_id) AND attribute_not_exists(#t) AND "
                "(attribute_not_exists(rev) OR rev = :rev)",
                ExpressionAttributeNames={"#t": r.RECORD_TTL},
                ExpressionAttributeValues={":t": {"N": str(expires_at)}, ":rev": {"N": str(rev)}},
            )
        except Conflict:
            return False
        return True

    def unlist_clean_success(self, run_id: str) -> bool:
        # The item is rewritten in the sparse layout as is (its ``ttl`` kept), guarded by its
        # revision and by the index's key still being there.
        resp = self._call(
            f"read run {run_id}",
            self.client.get_item,
            TableName=self.tables["runs"],
            Key={"run_id": {"S": run_id}},
            ConsistentRead=True,
        )
        raw = resp.get("Item")
        if not raw or "state" not in raw:
            return False
        data = from_item(raw)
        if in_state_index(data):
            return False
        item = to_item(data, "runs")
        if r.RECORD_TTL in raw:
            item[r.RECORD_TTL] = raw[r.RECORD_TTL]
        rev = raw.get("rev", {"N": "0"})
        try:
            self._call(
                f"move run {run_id} out of the by_state index",
                self.client.put_item,
                TableName=self.tables["runs"],
                Item=item,
                ConditionExpression="#s = :s AND (attribute_not_exists(rev) OR rev = :rev)",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={":s": raw["state"], ":rev": rev},
            )
        except Conflict:
            return False
        return True
