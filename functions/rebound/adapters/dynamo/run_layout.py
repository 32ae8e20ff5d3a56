"""Storage-only writes of the runs' items, mixed into ``DynamoStore``: what the one-time
migrations (``rebound migrate retention``, ``rebound migrate state-index``) change of an item
written by an earlier version. Neither writes an audit record or changes the run; both are guarded
by the revision the run was read at."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rebound import resources as r
from rebound.adapters.dynamo.codec import DOC, to_item
from rebound.domain.errors import Conflict
from rebound.domain.retention import Retention, run_expiry
from rebound.domain.run import Run, RunState, found_by_fire, in_state_index, item_may_wait, unlisted_running
from rebound.domain.timefmt import iso

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoRunLayout:
    """``set_run_expiry``, ``unlist_clean_success``, ``relist_running`` and ``relist_by_fire``
    (``rebound.engine.ports.Store``)."""

    if TYPE_CHECKING:  # what it uses of ``DynamoStore``
        client: DynamoDBClient
        tables: dict[str, str]
        _call: Callable[..., Any]

        retention: Retention | None

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

    def relist_running(self, run: Run) -> bool:
        # The document keeps its copy of both keys; a later write of the run stores it as the
        # version writing it does. A claim that committed its record alone has no item yet: the
        # run as claimed is its item, written listed (``_put_listed``).
        if not unlisted_running(run):
            return False
        if item_may_wait(run) and self._put_listed(run):
            return True
        try:
            self._call(
                f"put run {run.run_id} back in the by_state index",
                self.client.update_item,
                TableName=self.tables["runs"],
                Key={"run_id": {"S": run.run_id}},
                UpdateExpression="SET #s = :s, updated_at = :u",
                ConditionExpression="attribute_exists(run_id) AND attribute_not_exists(#s) AND "
                "(attribute_not_exists(rev) OR rev = :rev)",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":s": {"S": run.state.value},
                    ":u": {"S": iso(run.updated_at)},
                    ":rev": {"N": str(run.rev)},
                },
            )
        except Conflict:
            return False
        return True

    def _put_listed(self, run: Run) -> bool:
        """Write the item of a run whose claim committed its record alone, as claimed (what its
        record says) and listed in ``by_state``; False if it has an item already."""
        item = to_item(
            {**run.model_dump(mode="json"), r.RECORD_TTL: run_expiry(self.retention, False, run.updated_at)},
            "runs",
        )
        item.update({"state": {"S": run.state.value}, "updated_at": {"S": iso(run.updated_at)}})
        try:
            self._call(
                f"write run {run.run_id} as claimed, listed",
                self.client.put_item,
                TableName=self.tables["runs"],
                Item=item,
                ConditionExpression="attribute_not_exists(run_id)",
            )
        except Conflict:
            return False
        return True

    def relist_by_fire(self, run: Run) -> bool:
        # The document keeps its copy of both keys; a later write of the run stores it as the
        # version writing it does.
        if not found_by_fire(run.model_dump(mode="json")):
            return False
        try:
            self._call(
                f"put run {run.run_id} back in the {r.RUNS_BY_TASK} index",
                self.client.update_item,
                TableName=self.tables["runs"],
                Key={"run_id": {"S": run.run_id}},
                UpdateExpression="SET task_id = :t, scheduled_for = :s",
                ConditionExpression="attribute_exists(run_id) AND attribute_not_exists(task_id) AND "
                "(attribute_not_exists(rev) OR rev = :rev)",
                ExpressionAttributeValues={
                    ":t": {"S": run.task_id},
                    ":s": {"S": iso(run.scheduled_for)},
                    ":rev": {"N": str(run.rev)},
                },
            )
        except Conflict:
            return False
        return True

    def unlist_clean_success(self, run: Run) -> bool:
        # One update, no read: the index's keys go, the document that carries them comes (as the
        # store writes it, ``to_item``); the run's ``ttl`` and other attributes stay.
        data = run.model_dump(mode="json")
        if run.state is not RunState.SUCCEEDED or in_state_index(data):
            return False
        try:
            self._call(
                f"move run {run.run_id} out of the by_state index",
                self.client.update_item,
                TableName=self.tables["runs"],
                Key={"run_id": {"S": run.run_id}},
                UpdateExpression="SET #d = :d REMOVE #s, updated_at",
                ConditionExpression="attribute_exists(#s) AND (attribute_not_exists(rev) OR rev = :rev)",
                ExpressionAttributeNames={"#s": "state", "#d": DOC},
                ExpressionAttributeValues={":d": to_item(data, "runs")[DOC], ":rev": {"N": str(run.rev)}},
            )
        except Conflict:
            return False
        return True
