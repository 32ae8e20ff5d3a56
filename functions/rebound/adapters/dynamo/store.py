"""Every read and write Rebound makes to DynamoDB outside a unit of work: tasks, runs, audit
chains, work orders, control records (keys, watermarks, heartbeats, slots), tenants, policies;
the DLQ's record in ``rebound.adapters.dynamo.dlq_record``, the audit chains' reads in
``rebound.adapters.dynamo.audit_reads``.

Transient errors (contention, throttling) are tried again with seeded full-jitter backoff.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound import resources as r
from rebound.adapters.dynamo.audit_reads import DynamoAuditReads, page_limit
from rebound.adapters.dynamo.codec import CONTROL, from_item, to_item
from rebound.adapters.dynamo.dlq_record import DynamoDlqRecord
from rebound.adapters.dynamo.run_layout import DynamoRunLayout
from rebound.adapters.dynamo.task_runs import DynamoTaskRuns
from rebound.adapters.dynamo.unit_of_work import WRITE_ATTEMPTS, UnitOfWork
from rebound.adapters.dynamo.write_ahead import DynamoWriteAhead, runs_behind
from rebound.adapters.errors import translate
from rebound.adapters.staging import StagingStore
from rebound.domain.errors import Conflict, OperationalError, Throttled
from rebound.domain.retention import Retention
from rebound.domain.run import Run, RunState
from rebound.domain.stored import StoredTask
from rebound.domain.task import TenantSettings
from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder, WorkOrderState
from rebound.engine.ports import AuditKeys, CrashPoints, NoCrashes
from rebound.engine.ports.store import RunPage, parse_run_cursor, run_cursor

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

BACKOFF_BASE_S = 0.025
BACKOFF_CAP_S = 1.0


READ_TASKS_KEPT = 1024
"""Stored forms of tasks a store keeps parsed for ``get_task`` (emptied when full)."""


FlatKey = tuple[tuple[str, str, str | bytes], ...]


def _flat_key(item: Mapping[str, Any]) -> FlatKey | None:
    """An item of string, number and binary attributes (a deflated ``doc``) as a hashable value
    (``None`` for any other)."""
    out: list[tuple[str, str, str | bytes]] = []
    for name, value in item.items():
        if len(value) != 1:
            return None
        ((kind, inner),) = value.items()
        if (kind in ("S", "N") and isinstance(inner, str)) or (
            kind == "B" and isinstance(inner, bytes | str)
        ):
            out.append((name, kind, inner))
        else:
            return None
    return tuple(sorted(out))


class DynamoStore(
    DynamoWriteAhead, DynamoTaskRuns, DynamoDlqRecord, DynamoAuditReads, DynamoRunLayout, StagingStore
):
    """Every read and write Rebound makes to DynamoDB (the DLQ's record: ``DynamoDlqRecord``)."""

    def __init__(
        self,
        client: DynamoDBClient,
        tables: Mapping[str, str],
        event_source: str = r.SPEC.event_source,
        on_failed_commit: Callable[[], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        *,
        audit_keys: AuditKeys,
        published: frozenset[str] | None = None,
        faults: CrashPoints | None = None,
        runs_by_task: str = r.RUNS_BY_TASK,
        retention: Retention | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.retention = retention
        """How long finished runs and runs' audit records stay (``rebound.domain.retention``): each is
        written with its ``ttl``; None: nothing expires."""
        self.runs_by_task = runs_by_task
        """The index a task's runs are listed from (``Settings.runs_by_task``)."""
        index = {i.name: i for i in (*r.RUNS.indexes, *r.RUNS.retired_indexes)}[runs_by_task]
        self._by_task_keys_only = index.projection == "KEYS_ONLY"
        self.faults = faults or NoCrashes()
        """Where the local cloud may stop a write half-way (``AFTER_AUDIT_RECORD``); a no-op on AWS."""
        self.published = published
        self.audit_keys = audit_keys
        """Keys every audit record this store writes (``rebound.domain.audit``)."""
        self.tables = dict(tables)
        self.event_source = event_source
        self.sleep = sleep
        self.now = now or (lambda: datetime.now(UTC))
        """What time it is (the engine's clock locally): how far a task's fires are enumerated."""
        """How to wait between tries of a contended write (the engine's clock locally)."""
        self._rng = rng or random.Random()
        # Every commit carries an audit record, so a commit that fails for any reason but a
        # conflict is a failed audit write: an operational error, counted here.
        self.on_failed_commit = on_failed_commit
        self._parsed_tasks: dict[tuple[str, int], StoredTask] = {}
        self._read_tasks: dict[FlatKey, StoredTask] = {}
        self._raw_installed = False

    def unit_of_work(self, actor: str, at: datetime) -> UnitOfWork:
        return UnitOfWork(self, actor, at)

    # --- low level --------------------------------------------------------------------------
    def _call(self, doing: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        def once() -> Any:
            try:
                return fn(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, doing) from exc

        return self.retrying(WRITE_ATTEMPTS, once)

    def transact(
        self, items: list[TransactWriteItemTypeDef], labels: list[str], attempts: int = WRITE_ATTEMPTS
    ) -> None:
        doing = "commit " + ", ".join(labels[:4]) + (" ..." if len(labels) > 4 else "")
        try:
            self.retrying(attempts, lambda: self._transact_once(items, labels, doing))
        except Conflict as exc:
            # A run's next record exists already: its item is behind its chain (a change written
            # without a transaction stopped half-way); bring it up before the caller reads it again.
            for run_id in runs_behind(exc.details.get("failed", [])):
                self.roll_forward(run_id)
            raise
        except OperationalError:
            if self.on_failed_commit is not None:
                self.on_failed_commit()
            raise

    def _transact_once(self, items: list[TransactWriteItemTypeDef], labels: list[str], doing: str) -> None:
        single = _single_write(items)
        try:
            if single is None:
                self.client.transact_write_items(TransactItems=items)
            else:
                single(self.client)
        except ClientError as exc:
            err = translate(exc, doing)
            if isinstance(err, Conflict):
                reasons = exc.response.get("CancellationReasons", [])  # a transaction's only
                failed = [i for i, why in enumerate(reasons) if why.get("Code") == "ConditionalCheckFailed"]
                err.details["failed"] = [labels[i] for i in failed] if single is None else list(labels)
            raise err from exc
        except BotoCoreError as exc:
            raise translate(exc, doing) from exc

    def _pause(self, n: int) -> None:
        """Full-jitter exponential backoff before try ``n + 1``."""
        self.sleep(self._rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**n)))

    def _get(self, table: str, key: Mapping[str, Any], consistent: bool = True) -> dict[str, Any] | None:
        resp = self._call(
            f"read {table}",
            self.client.get_item,
            TableName=self.tables[table],
            Key=to_item(key),
            ConsistentRead=consistent,
        )
        item = resp.get("Item")
        return from_item(item) if item else None

    def _query(self, table: str, doing: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        kwargs["TableName"] = self.tables[table]
        limit = kwargs.pop("max_items", None)
        seen = 0
        while True:
            resp = self._call(doing, self.client.query, **kwargs)
            for item in resp.get("Items", []):
                yield from_item(item)
                seen += 1
                if limit is not None and seen >= limit:
                    return
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _scan(
        self, table: str, doing: str, *, plain: bool = False, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        for page in self._scan_pages(table, doing, plain=plain, **kwargs):
            yield from page

    def _scan_pages(
        self, table: str, doing: str, *, plain: bool = False, **kwargs: Any
    ) -> Iterator[list[dict[str, Any]]]:
        """Each page of a scan, its items decoded (``from_item``)."""
        kwargs["TableName"] = self.tables[table]
        while True:
            resp = self._call(doing, self.client.scan, **kwargs)
            yield [from_item(item, plain=plain) for item in resp.get("Items", [])]
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    # --- tasks ------------------------------------------------------------------------------
    def get_task(self, task_id: str) -> StoredTask | None:
        """One task. Every run reads its task; a warm function parses each stored form of a task
        once (the item as read is the cache's key, so any change to it is parsed anew)."""
        resp = self._call(
            "read tasks",
            self.client.get_item,
            TableName=self.tables["tasks"],
            Key=to_item({"task_id": task_id}),
            ConsistentRead=True,
        )
        item = resp.get("Item")
        if not item:
            return None
        key = _flat_key(item)
        stored = self._read_tasks.get(key) if key is not None else None
        if stored is None:
            stored = StoredTask.from_record(from_item(item))
            if key is not None:
                if len(self._read_tasks) >= READ_TASKS_KEPT:
                    self._read_tasks.clear()
                self._read_tasks[key] = stored
        return stored

    def list_tasks(self) -> list[StoredTask]:
        """Every task. A definition is validated once per version (the sweeper lists often)."""
        tasks: list[StoredTask] = []
        parsed: dict[tuple[str, int], StoredTask] = {}
        for data in self._scan("tasks", "list tasks"):
            key = (str(data["task_id"]), int(data["version"]))
            stored = self._parsed_tasks.get(key) or StoredTask.from_record(data)
            parsed[key] = stored
            tasks.append(stored)
        self._parsed_tasks = parsed
        return sorted(tasks, key=lambda s: s.task.id)

    def _batch_get(
        self,
        table: str,
        key_attr: str,
        ids: list[Any],
        *,
        keys_only: bool = False,
        consistent: bool = True,
        key_of: Callable[[Any], dict[str, Any]] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The items among ``ids`` (``key_of`` an id's whole key, if not ``key_attr`` alone); with
        ``keys_only``, their keys alone (read units as for the whole item, no more sent or parsed)."""
        name = self.tables[table]
        request: dict[str, Any] = {"ConsistentRead": consistent}
        key = key_of or (lambda i: {key_attr: i})
        if keys_only and ids:  # every attribute of the key (``key_attr`` alone, or ``key_of``'s)
            names = {f"#k{n}": name for n, name in enumerate(key(ids[0]))}
            request |= {"ProjectionExpression": ", ".join(names), "ExpressionAttributeNames": names}
        for start in range(0, len(ids), 100):
            keys: list[Any] = [to_item(key(i)) for i in dict.fromkeys(ids[start : start + 100])]
            for attempt in range(WRITE_ATTEMPTS + 1):
                if not keys:
                    break
                if attempt == WRITE_ATTEMPTS:
                    raise Throttled(f"read {table}: {len(keys)} keys left unprocessed after {attempt} tries")
                if attempt:  # DynamoDB asked us to slow down
                    self._pause(attempt)
                resp = self._call(
                    f"read {table}",
                    self.client.batch_get_item,
                    RequestItems={name: {"Keys": keys, **request}},
                )
                for item in resp.get("Responses", {}).get(name, []):
                    yield from_item(item)
                keys = list(resp.get("UnprocessedKeys", {}).get(name, {}).get("Keys", []))

    # --- runs -------------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run | None:
        """The run's item; with none, a new run whose claim committed its record alone (``item_may_wait``)
        as that record says, its item written now; else ``None`` (``runs restore`` brings one back)."""
        return self.stored_run(run_id) or self.claimed_alone(run_id)

    def stored_run(self, run_id: str) -> Run | None:
        """The run's item as stored (``None`` if there is none, whatever its chain holds)."""
        data = self._get("runs", {"run_id": run_id})
        return Run.model_validate(data) if data else None

    def runs_in_state(
        self, state: RunState, *, updated_before: datetime | None = None, limit: int | None = None
    ) -> list[Run]:
        cond = "#s = :s"
        values: dict[str, Any] = {":s": state.value}
        if updated_before is not None:
            cond += " AND updated_at < :u"
            values[":u"] = iso(updated_before)
        items = self._query(
            "runs",
            f"list {state.value} runs",
            IndexName="by_state",
            KeyConditionExpression=cond,
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues=to_item(values),
            max_items=limit,
        )
        return [Run.model_validate(d) for d in items]

    def _by_state(self, state: RunState, since: datetime | None) -> dict[str, Any]:
        cond = "#s = :s"
        values: dict[str, Any] = {":s": state.value}
        if since is not None:
            cond += " AND updated_at >= :u"
            values[":u"] = iso(since)
        return {
            "IndexName": "by_state",
            "KeyConditionExpression": cond,
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": to_item(values),
        }

    def runs_in_state_page(
        self, state: RunState, *, since: datetime | None = None, limit: int = 100, after: str | None = None
    ) -> RunPage:
        kwargs = {**self._by_state(state, since), "ScanIndexForward": False, "Limit": limit + 1}
        if after is not None:
            updated_at, run_id = parse_run_cursor(after)
            start = {"run_id": run_id, "state": state.value, "updated_at": updated_at}
            kwargs["ExclusiveStartKey"] = to_item(start)
        items = list(self._query("runs", f"list {state.value} runs", max_items=limit + 1, **kwargs))
        runs = [Run.model_validate(d) for d in items[:limit]]
        return RunPage(runs, run_cursor(runs[-1]) if len(items) > limit else None)

    def count_runs_in_state(
        self, state: RunState, *, since: datetime | None = None, at_most: int | None = None
    ) -> int:
        kwargs: dict[str, Any] = {
            "TableName": self.tables["runs"],
            "Select": "COUNT",
            **self._by_state(state, since),
        }
        if at_most is not None:
            kwargs["Limit"] = at_most + 1  # items read per page: no more than the count needs
        found = 0
        while at_most is None or found <= at_most:
            resp = self._call(f"count {state.value} runs", self.client.query, **kwargs)
            found += int(resp.get("Count", 0))
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return found

    def get_runs(self, run_ids: list[str]) -> dict[str, Run]:
        """The runs that exist among ``run_ids`` (BatchGetItem, 100 keys a call, unprocessed keys retried)."""
        runs = (Run.model_validate(data) for data in self._batch_get("runs", "run_id", run_ids))
        return {run.run_id: run for run in runs}

    def existing_runs(self, run_ids: list[str], *, consistent: bool = True) -> set[str]:
        """Which of ``run_ids`` exist: the keys alone, 100 a call (no run is read whole or parsed)."""
        found = self._batch_get("runs", "run_id", run_ids, keys_only=True, consistent=consistent)
        existing = {str(data["run_id"]) for data in found}
        unseen = [r for r in run_ids if r not in existing]  # a claim may have committed its record alone:
        return existing | (self.chains_begun(unseen) if consistent and unseen else set())

    def runs_segment_parts(
        self, segment: int, segments: int, page_size: int | None = None
    ) -> Iterator[dict[str, dict[str, Any]]]:
        """A parallel scan segment of the runs table, a part per page (``Limit=page_size``, or
        pages as large as DynamoDB answers, 1 MB), read raw (``raw_answers``)."""
        with self._raw_reads():
            for page in self._scan_pages(
                "runs",
                f"scan runs segment {segment} of {segments}",
                Segment=segment,
                TotalSegments=segments,
                ConsistentRead=True,
                **page_limit(page_size),
            ):
                yield {str(data["run_id"]): data for data in page}

    def scan_runs(self) -> Iterator[Run]:
        for data in self._scan("runs", "scan runs"):
            yield Run.model_validate(data)

    def scan_runs_page(self, *, limit: int = 100, after: str | None = None) -> tuple[list[Run], str | None]:
        items, cursor = self._scan_page("runs", "run_id", limit, after)
        return [Run.model_validate(d) for d in items], cursor

    def scan_work_orders_page(
        self, *, limit: int = 100, after: str | None = None
    ) -> tuple[list[WorkOrder], str | None]:
        items, cursor = self._scan_page("workorders", "work_order_id", limit, after)
        return [WorkOrder.model_validate(d) for d in items], cursor

    def _scan_page(
        self, table: str, key: str, limit: int, after: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a scan, resumed after the item keyed ``after`` (a scan resumes from any
        key of the table, ``ExclusiveStartKey``); strongly consistent, like every read before a write."""
        kwargs: dict[str, Any] = {"TableName": self.tables[table], "Limit": limit, "ConsistentRead": True}
        if after is not None:
            kwargs["ExclusiveStartKey"] = {key: {"S": after}}
        resp = self._call(f"scan {table}", self.client.scan, **kwargs)
        last = resp.get("LastEvaluatedKey")
        return [from_item(item) for item in resp.get("Items", [])], (str(last[key]["S"]) if last else None)

    # --- work orders ------------------------------------------------------------------------
    def get_work_order(self, work_order_id: str) -> WorkOrder | None:
        data = self._get("workorders", {"work_order_id": work_order_id})
        return WorkOrder.model_validate(data) if data else None

    def work_orders(
        self, state: WorkOrderState | None = None, *, opened_since: datetime | None = None
    ) -> list[WorkOrder]:
        if state is None:
            items = self._scan("workorders", "list work orders")
        else:
            key, values = "#s = :s", {":s": {"S": state.value}}
            if opened_since is not None:
                key, values[":since"] = f"{key} AND opened_at >= :since", {"S": iso(opened_since)}
            items = self._query(
                "workorders",
                f"list {state.value} work orders",
                IndexName="by_state",
                KeyConditionExpression=key,
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues=values,
            )
        orders = (WorkOrder.model_validate(d) for d in items)
        return sorted(
            (o for o in orders if opened_since is None or o.opened_at >= opened_since),
            key=lambda w: w.opened_at,
        )

    # --- control records ----------------------------------------------------------------------
    def claim_key(
        self, key: str, at: datetime, ttl: timedelta, data: Mapping[str, Any] | None = None
    ) -> bool:
        """Record ``key`` unless it exists and has not expired. True if this call recorded it."""
        item = {"pk": key, "created_at": iso(at), "expires_at": int((at + ttl).timestamp()), **(data or {})}
        return self._put_new(
            CONTROL,
            item,
            f"claim {key}",
            "attribute_not_exists(pk) OR expires_at < :now",
            {":now": {"N": str(int(at.timestamp()))}},
        )

    def _put_new(
        self,
        table: str,
        item: Mapping[str, Any],
        doing: str,
        condition: str,
        values: Mapping[str, Any] | None = None,
    ) -> bool:
        """Put ``item`` if ``condition`` holds; False (nothing written) if it does not."""
        extra: dict[str, Any] = {"ExpressionAttributeValues": dict(values)} if values else {}

        def put() -> bool:
            try:
                self.client.put_item(
                    TableName=self.tables[table],
                    Item=to_item(item, table),
                    ConditionExpression=condition,
                    **extra,
                )
            except ClientError as exc:
                err = translate(exc, doing)
                if isinstance(err, Conflict):
                    return False
                raise err from exc
            return True

        return self.retrying(WRITE_ATTEMPTS, put)

    def put_key(self, key: str, data: Mapping[str, Any]) -> None:
        """Write a small record with no expiry (a watermark, a counter's baseline)."""
        self._call(
            f"write {key}",
            self.client.put_item,
            TableName=self.tables[CONTROL],
            Item=to_item({"pk": key, **data}),
        )

    def get_key(self, key: str) -> dict[str, Any] | None:
        return self._get(CONTROL, {"pk": key})

    def get_keys(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The records that exist among ``keys`` (BatchGetItem, 100 keys a call)."""
        return {str(data["pk"]): data for data in self._batch_get(CONTROL, "pk", keys)}

    def release_key(self, key: str) -> None:
        self._call(
            "release key",
            self.client.delete_item,
            TableName=self.tables[CONTROL],
            Key=to_item({"pk": key}),
        )

    # --- tenants ----------------------------------------------------------------------------
    def get_tenant(self, tenant: str) -> TenantSettings | None:
        data = self._get("tenants", {"tenant": tenant})
        return TenantSettings.model_validate(data["settings"]) if data else None

    # --- policies ---------------------------------------------------------------------------
    def latest_policy(self, name: str) -> dict[str, Any] | None:
        items = list(
            self._query(
                "policies",
                f"read policy {name}",
                KeyConditionExpression="#n = :n",
                ExpressionAttributeNames={"#n": "name"},
                ExpressionAttributeValues={":n": {"S": name}},
                ScanIndexForward=False,
                Limit=1,
                max_items=1,
            )
        )
        return items[0] if items else None

    def policy_versions(self, name: str) -> list[dict[str, Any]]:
        return list(
            self._query(
                "policies",
                f"read policy history of {name}",
                KeyConditionExpression="#n = :n",
                ExpressionAttributeNames={"#n": "name"},
                ExpressionAttributeValues={":n": {"S": name}},
            )
        )

    def stored_policy_names(self) -> list[str]:
        return sorted(
            {
                str(d["name"])
                for d in self._scan(
                    "policies",
                    "list policies",
                    ProjectionExpression="#n",
                    ExpressionAttributeNames={"#n": "name"},
                )
            }
        )


_SINGLE_WRITES = {"Put": "put_item", "Update": "update_item", "Delete": "delete_item"}


def _single_write(items: list[TransactWriteItemTypeDef]) -> Callable[[Any], Any] | None:
    """A unit of work of one write, as that write on its own: the same item, condition and
    errors (``ConditionalCheckFailedException`` is a ``Conflict``; a write that meets a
    transaction in flight on its item is ``TransactionConflictException``, retried as a
    cancelled transaction's conflict is), at half the write units, since DynamoDB bills every
    item of a transaction twice. ``None`` for two or more items, or a condition check alone."""
    if len(items) != 1:
        return None
    ((kind, op),) = items[0].items()
    method = _SINGLE_WRITES.get(kind)
    if method is None:
        return None
    params: dict[str, Any] = dict(op)  # type: ignore[call-overload]
    return lambda client: getattr(client, method)(**params)
