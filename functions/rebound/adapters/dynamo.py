"""DynamoDB persistence: tasks, runs, audit chains, the outbox, work orders, idempotency keys, policies.

Every change to a run or a work order is written by ``UnitOfWork.commit`` as one
``TransactWriteItems``: the item itself (guarded by its audit sequence number, an optimistic
lock), the next record of its audit chain (a conditional put, so the chain can only grow), and
the outbox events that announce the change. The state, its audit record and its events therefore
commit together or not at all.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import translate
from rebound.domain.audit import GENESIS, next_record, run_changes
from rebound.domain.errors import TRANSIENT, Conflict, OperationalError
from rebound.domain.events import DomainEvent
from rebound.domain.ids import outbox_event_id, run_subject
from rebound.domain.jsonutil import dumps
from rebound.domain.models import (
    AuditRecord,
    Run,
    RunState,
    Task,
    TaskState,
    TenantSettings,
    WorkOrder,
    WorkOrderState,
)
from rebound.domain.timefmt import iso, parse_utc

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

Item = dict[str, Any]
T = TypeVar("T")

_SER = TypeSerializer()
_DESER = TypeDeserializer()
MAX_TRANSACTION_ITEMS = 100
WRITE_ATTEMPTS = 8
"""Tries of one write that meets transient contention or throttling (~2.5 s of backoff in all)."""
BACKOFF_BASE_S = 0.025
BACKOFF_CAP_S = 1.0
TASKS_EPOCH = "tasks#epoch"
OUTBOX_TTL = timedelta(days=2)


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(_plain(v) for v in value)
    return value


# Items keep as top-level attributes only what DynamoDB itself uses: keys, index keys, and the
# attributes conditions and TTL read. Everything else travels in one JSON document, ``doc``.
# Attribute names count towards item size and write units, so small flat items are also the
# cheap ones; nothing ever queries inside the document.
DOC = "doc"
TOP_LEVEL: dict[str, frozenset[str]] = {
    "tasks": frozenset({"task_id", "tenant", "state", "version"}),
    "runs": frozenset({"run_id", "task_id", "scheduled_for", "state", "updated_at", "audit_seq", "rev"}),
    "audit": frozenset({"subject", "seq"}),
    "outbox": frozenset(
        {"event_id", "detail_type", "source", "detail", "subject", "created_at", "expires_at"}
    ),
    "workorders": frozenset({"work_order_id", "state", "opened_at", "audit_seq"}),
    "idempotency": frozenset({"pk", "expires_at"}),
    "policies": frozenset({"name", "version"}),
    "tenants": frozenset({"tenant"}),
}


def _dynamo_value(value: Any) -> Any:
    """JSON-compatible value -> what TypeSerializer accepts (Decimal instead of float)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: _dynamo_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_dynamo_value(v) for v in value]
    return value


def to_item(data: Mapping[str, Any], table: str | None = None) -> Item:
    """A DynamoDB item; with ``table``, the attributes DynamoDB does not use go into ``doc``.

    ``None`` values are left out, so sparse indexes stay sparse.
    """
    flat: dict[str, Any] = {key: value for key, value in data.items() if value is not None}
    keep = TOP_LEVEL.get(table) if table is not None else None
    if keep is not None:
        doc = {key: value for key, value in flat.items() if key not in keep}
        flat = {key: value for key, value in flat.items() if key in keep}
        if doc:
            flat[DOC] = dumps(doc)
    return {key: _SER.serialize(_dynamo_value(value)) for key, value in flat.items()}


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    out = {key: _plain(_DESER.deserialize(value)) for key, value in item.items()}
    doc = out.pop(DOC, None)
    if isinstance(doc, str):
        out.update(json.loads(doc))
    return out


@dataclass(frozen=True)
class StoredTask:
    task: Task
    version: int
    updated_at: str
    schedule_names: tuple[str, ...] = ()
    audit_seq: int = 0
    audit_head: str = GENESIS
    paused_at: datetime | None = None
    active_since: datetime | None = None
    """When the task last became active (registered or resumed): the run ledger looks from here."""

    @property
    def paused(self) -> bool:
        return self.task.state is TaskState.PAUSED

    def paused_for(self, scheduled_for: datetime) -> bool:
        """Whether a fire for ``scheduled_for`` falls in the pause (a fire due earlier still runs)."""
        return self.paused and (self.paused_at is None or scheduled_for > self.paused_at)


def _conditioned(
    op: dict[str, Any],
    condition: str | None,
    values: Mapping[str, Any] | None,
    names: Mapping[str, str] | None,
) -> None:
    """Add a transaction item's condition and expression attributes, where given."""
    if condition:
        op["ConditionExpression"] = condition
    if values:
        op["ExpressionAttributeValues"] = to_item(values)
    if names:
        op["ExpressionAttributeNames"] = dict(names)


@dataclass
class UnitOfWork:
    """Collects changes and commits them as one transaction."""

    store: DynamoStore
    actor: str
    at: datetime
    items: list[TransactWriteItemTypeDef] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    audit_records: list[AuditRecord] = field(default_factory=list)
    _events: int = 0
    _owned: dict[tuple[str, str], int] = field(default_factory=dict)

    # --- owned subjects: the item holds its chain head --------------------------------------
    def save_run(
        self,
        before: Run | None,
        after: Run,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
        from_state: RunState | None = None,
    ) -> Run:
        """Stage ``after`` and its audit record; returns ``after`` with its new chain head.

        ``from_state`` names the state left when ``before`` is ``None`` (a run created and moved
        on in one write).

        Saving the same run again in this unit of work (create, then claim) adds another audit
        record and replaces the staged item; the write stays guarded by the first ``before``.
        """
        staged = after.model_copy(update={"updated_at": self.at})
        record = self._audit(
            run_subject(after.run_id),
            before.audit_seq if before else 0,
            before.audit_head if before else GENESIS,
            action,
            before.state.value if before else (from_state.value if from_state else None),
            staged.state.value,
            {**(evidence or {}), "changes": run_changes(before, staged)},
        )
        saved = staged.model_copy(
            update={"audit_seq": record.seq, "audit_head": record.hash, "rev": self._rev(before)}
        )
        self._stage_owned("runs", "run_id", after.run_id, saved.model_dump(mode="json"), before)
        return saved

    def touch_run(self, before: Run, after: Run) -> Run:
        """Stage a bookkeeping write of a run that changes no state (a waiting run's next poll):
        guarded like any write, without an audit record, so the item still names its chain head."""
        if after.state is not before.state or after.attempt != before.attempt:
            raise ValueError(f"touch_run cannot change the state of {before.run_id}")
        saved = after.model_copy(
            update={
                "updated_at": self.at,
                "audit_seq": before.audit_seq,
                "audit_head": before.audit_head,
                "rev": self._rev(before),
            }
        )
        self._stage_owned("runs", "run_id", after.run_id, saved.model_dump(mode="json"), before)
        return saved

    def _rev(self, before: Run | None) -> int:
        """The revision a staged run write gets (one more than what it replaces, once per commit)."""
        return (before.rev if before is not None else 0) + 1

    def save_work_order(
        self,
        before: WorkOrder | None,
        after: WorkOrder,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
    ) -> WorkOrder:
        record = self._audit(
            f"workorder#{after.work_order_id}",
            before.audit_seq if before else 0,
            before.audit_head if before else GENESIS,
            action,
            before.state.value if before else None,
            after.state.value,
            evidence or {},
        )
        saved = after.model_copy(update={"audit_seq": record.seq, "audit_head": record.hash})
        self._stage_owned(
            "workorders", "work_order_id", after.work_order_id, saved.model_dump(mode="json"), before
        )
        return saved

    # --- unowned subjects (a malformed message, a policy): the chain itself is the guard ------
    def append_audit(
        self,
        subject: str,
        *,
        action: str,
        evidence: dict[str, Any] | None = None,
        head: tuple[int, str] | None = None,
        from_state: str | None = None,
        to_state: str | None = None,
    ) -> AuditRecord:
        seq, prev = head if head is not None else self.store.audit_head(subject)
        return self._audit(subject, seq, prev, action, from_state, to_state, evidence or {})

    def emit(self, event: DomainEvent, subject: str) -> None:
        seq = self.audit_records[-1].seq if self.audit_records else 0
        event_id = outbox_event_id(subject, seq, self._events)
        self._events += 1
        item = {
            "event_id": event_id,
            "detail_type": event.detail_type.value,
            "source": self.store.event_source,
            "detail": dumps({**event.detail, "event_id": event_id}),
            "subject": subject,
            "created_at": iso(self.at),
            "expires_at": int((self.at + OUTBOX_TTL).timestamp()),
        }
        self._stage(
            {
                "Put": {
                    "TableName": self.store.tables["outbox"],
                    "Item": to_item(item, "outbox"),
                    "ConditionExpression": "attribute_not_exists(event_id)",
                }
            },
            f"event {event.detail_type.value}",
        )

    def put_unique(self, table: str, data: Mapping[str, Any], key_attr: str) -> None:
        """Stage a put that fails the transaction if the key exists already."""
        self._stage(
            {
                "Put": {
                    "TableName": self.store.tables[table],
                    "Item": to_item(data, table),
                    "ConditionExpression": f"attribute_not_exists({key_attr})",
                }
            },
            f"{table} {data.get(key_attr)}",
        )

    def put(
        self,
        table: str,
        data: Mapping[str, Any],
        label: str,
        condition: str | None = None,
        values: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> None:
        op: dict[str, Any] = {"TableName": self.store.tables[table], "Item": to_item(data, table)}
        _conditioned(op, condition, values, names)
        self._stage({"Put": op}, label)  # type: ignore[typeddict-item]

    def update(
        self,
        table: str,
        key: Mapping[str, Any],
        expression: str,
        label: str,
        condition: str | None = None,
        values: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> None:
        op: dict[str, Any] = {
            "TableName": self.store.tables[table],
            "Key": to_item(key),
            "UpdateExpression": expression,
        }
        _conditioned(op, condition, values, names)
        self._stage({"Update": op}, label)  # type: ignore[typeddict-item]

    def commit(self, attempts: int = WRITE_ATTEMPTS) -> None:
        """Write everything in one transaction. ``Conflict``: a condition failed (someone changed
        the record first); nothing was written. A transaction that met a concurrent write or a
        throttle is sent again, up to ``attempts`` times, before its error is raised."""
        if not self.items:
            return
        if len(self.items) > MAX_TRANSACTION_ITEMS:
            raise OperationalError(f"a change of {len(self.items)} items exceeds the transaction limit")
        self.store.transact(self.items, self.labels, attempts=attempts)

    # --- internals ----------------------------------------------------------------------------
    def _audit(
        self,
        subject: str,
        prev_seq: int,
        prev_hash: str,
        action: str,
        from_state: str | None,
        to_state: str | None,
        evidence: dict[str, Any],
    ) -> AuditRecord:
        staged = [a for a in self.audit_records if a.subject == subject]
        if staged:
            prev_seq, prev_hash = staged[-1].seq, staged[-1].hash
        record = next_record(
            subject=subject,
            prev_seq=prev_seq,
            prev_hash=prev_hash,
            at=self.at,
            actor=self.actor,
            action=action,
            from_state=from_state,
            to_state=to_state,
            evidence=evidence,
        )
        self.audit_records.append(record)
        self._stage(
            {
                "Put": {
                    "TableName": self.store.tables["audit"],
                    "Item": to_item(record.model_dump(mode="json"), "audit"),
                    "ConditionExpression": "attribute_not_exists(subject)",
                }
            },
            f"audit {subject} #{record.seq}",
        )
        return record

    def _stage_owned(
        self, table: str, key_attr: str, key: str, data: dict[str, Any], before: Run | WorkOrder | None
    ) -> None:
        slot = (table, key)
        if slot in self._owned:
            put = self.items[self._owned[slot]]["Put"]
            put["Item"] = to_item(data, table)
            return
        op: dict[str, Any] = {"TableName": self.store.tables[table], "Item": to_item(data, table)}
        if before is None:
            op["ConditionExpression"] = f"attribute_not_exists({key_attr})"
        elif isinstance(before, Run):
            # ``rev`` changes on every write, bookkeeping included; items written before it
            # existed are guarded by their audit sequence number alone.
            op["ConditionExpression"] = "audit_seq = :seq AND (attribute_not_exists(rev) OR rev = :rev)"
            op["ExpressionAttributeValues"] = {
                ":seq": {"N": str(before.audit_seq)},
                ":rev": {"N": str(before.rev)},
            }
        else:
            op["ConditionExpression"] = "audit_seq = :seq"
            op["ExpressionAttributeValues"] = {":seq": {"N": str(before.audit_seq)}}
        self._owned[slot] = len(self.items)
        self._stage({"Put": op}, f"{table} {key}")  # type: ignore[typeddict-item]

    def _stage(self, op: TransactWriteItemTypeDef, label: str) -> None:
        self.items.append(op)
        self.labels.append(label)


class DynamoStore:
    """Every read and write Rebound makes to DynamoDB."""

    def __init__(
        self,
        client: DynamoDBClient,
        tables: Mapping[str, str],
        event_source: str = "rebound",
        on_failed_commit: Callable[[], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.tables = dict(tables)
        self.event_source = event_source
        self.sleep = sleep
        """How to wait between tries of a contended write (the engine's clock locally)."""
        self._rng = rng or random.Random()
        # Every commit carries an audit record, so a commit that fails for any reason but a
        # conflict is a failed audit write: an operational error, counted here.
        self.on_failed_commit = on_failed_commit
        self._parsed_tasks: dict[tuple[str, int], StoredTask] = {}

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
        except Conflict:
            raise
        except OperationalError:
            if self.on_failed_commit is not None:
                self.on_failed_commit()
            raise

    def _transact_once(self, items: list[TransactWriteItemTypeDef], labels: list[str], doing: str) -> None:
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            err = translate(exc, doing)
            if isinstance(err, Conflict):
                reasons = exc.response.get("CancellationReasons", [])
                err.details["failed"] = [
                    labels[i]
                    for i, reason in enumerate(reasons)
                    if reason.get("Code") == "ConditionalCheckFailed"
                ]
            raise err from exc
        except BotoCoreError as exc:
            raise translate(exc, doing) from exc

    def retrying(self, attempts: int, call: Callable[[], T]) -> T:
        """``call()``, tried again after a transient error (contention, throttling) with full-jitter
        exponential backoff, up to ``attempts`` tries; the last transient error is raised."""
        for n in range(1, attempts + 1):
            try:
                return call()
            except TRANSIENT:
                if n == attempts:
                    raise
                self.sleep(self._rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**n)))
        raise AssertionError("unreachable")

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

    def _scan(self, table: str, doing: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        kwargs["TableName"] = self.tables[table]
        while True:
            resp = self._call(doing, self.client.scan, **kwargs)
            for item in resp.get("Items", []):
                yield from_item(item)
            if "LastEvaluatedKey" not in resp:
                return
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    # --- tasks ------------------------------------------------------------------------------
    def get_task(self, task_id: str) -> StoredTask | None:
        data = self._get("tasks", {"task_id": task_id})
        return _stored_task(data) if data else None

    def list_tasks(self) -> list[StoredTask]:
        """Every task. A definition is validated once per version (the sweeper lists often)."""
        tasks: list[StoredTask] = []
        parsed: dict[tuple[str, int], StoredTask] = {}
        for data in self._scan("tasks", "list tasks"):
            key = (str(data["task_id"]), int(data["version"]))
            stored = self._parsed_tasks.get(key) or _stored_task(data)
            parsed[key] = stored
            tasks.append(stored)
        self._parsed_tasks = parsed
        return sorted(tasks, key=lambda s: s.task.id)

    def tasks_epoch(self) -> int:
        """A counter every task write increments: an unchanged epoch means an unchanged task list."""
        item = self.get_key(TASKS_EPOCH)
        return int(item.get("epoch", 0)) if item else 0

    def _batch_get(self, table: str, key_attr: str, ids: list[str]) -> Iterator[dict[str, Any]]:
        name = self.tables[table]
        for start in range(0, len(ids), 100):
            keys: list[Any] = [to_item({key_attr: i}) for i in dict.fromkeys(ids[start : start + 100])]
            while keys:
                resp = self._call(
                    f"read {table}",
                    self.client.batch_get_item,
                    RequestItems={name: {"Keys": keys, "ConsistentRead": True}},
                )
                for item in resp.get("Responses", {}).get(name, []):
                    yield from_item(item)
                keys = list(resp.get("UnprocessedKeys", {}).get(name, {}).get("Keys", []))

    def save_task(
        self,
        task: Task,
        *,
        previous: StoredTask | None,
        actor: str,
        at: datetime,
        action: str,
        schedule_names: tuple[str, ...] = (),
        evidence: dict[str, Any] | None = None,
    ) -> StoredTask:
        """Create or replace a task definition, guarded by its version, with an audit record."""
        uow = self.unit_of_work(actor, at)
        subject = f"task#{task.id}"
        record = uow.append_audit(
            subject,
            action=action,
            head=(previous.audit_seq, previous.audit_head) if previous else (0, GENESIS),
            from_state=previous.task.state.value if previous else None,
            to_state=task.state.value,
            evidence={**(evidence or {}), "definition": task.model_dump(mode="json", exclude_defaults=True)},
        )
        paused_at: datetime | None = None
        if task.state is TaskState.PAUSED:
            paused_at = previous.paused_at if previous is not None and previous.paused else at
        if previous is None or (previous.paused and task.state is TaskState.ACTIVE):
            active_since = at
        else:
            active_since = previous.active_since or at
        stored = StoredTask(
            task=task,
            version=(previous.version + 1) if previous else 1,
            updated_at=iso(at),
            schedule_names=schedule_names,
            audit_seq=record.seq,
            audit_head=record.hash,
            paused_at=paused_at,
            active_since=active_since,
        )
        data = {
            "task_id": task.id,
            "tenant": task.tenant,
            "state": task.state.value,
            "definition": task.model_dump(mode="json"),
            "version": stored.version,
            "updated_at": stored.updated_at,
            "schedule_names": list(schedule_names),
            "audit_seq": stored.audit_seq,
            "audit_head": stored.audit_head,
            "paused_at": iso(paused_at) if paused_at else None,
            "active_since": iso(active_since),
        }
        if previous is None:
            uow.put("tasks", data, f"task {task.id}", "attribute_not_exists(task_id)")
        else:
            uow.put("tasks", data, f"task {task.id}", "version = :v", {":v": previous.version})
        uow.update("idempotency", {"pk": TASKS_EPOCH}, "ADD epoch :one", "tasks epoch", values={":one": 1})
        uow.commit()
        return stored

    # --- runs -------------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run | None:
        data = self._get("runs", {"run_id": run_id})
        return Run.model_validate(data) if data else None

    def runs_for_task(
        self,
        task_id: str,
        since: datetime | None = None,
        until: datetime | None = None,
        newest_first: bool = True,
        limit: int | None = None,
    ) -> list[Run]:
        cond = "task_id = :t"
        values: dict[str, Any] = {":t": task_id}
        if since and until:
            cond += " AND scheduled_for BETWEEN :a AND :b"
            values.update({":a": iso(since), ":b": iso(until)})
        elif since:
            cond += " AND scheduled_for >= :a"
            values[":a"] = iso(since)
        elif until:
            cond += " AND scheduled_for <= :b"
            values[":b"] = iso(until)
        items = self._query(
            "runs",
            f"list runs of {task_id}",
            IndexName="by_task",
            KeyConditionExpression=cond,
            ExpressionAttributeValues=to_item(values),
            ScanIndexForward=not newest_first,
            max_items=limit,
        )
        return [Run.model_validate(d) for d in items]

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

    def get_runs(self, run_ids: list[str]) -> dict[str, Run]:
        """The runs that exist among ``run_ids`` (BatchGetItem, 100 keys a call, unprocessed keys retried)."""
        runs = (Run.model_validate(data) for data in self._batch_get("runs", "run_id", run_ids))
        return {run.run_id: run for run in runs}

    def scan_runs(self) -> Iterator[Run]:
        for data in self._scan("runs", "scan runs"):
            yield Run.model_validate(data)

    # --- audit ------------------------------------------------------------------------------
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

    # --- work orders ------------------------------------------------------------------------
    def get_work_order(self, work_order_id: str) -> WorkOrder | None:
        data = self._get("workorders", {"work_order_id": work_order_id})
        return WorkOrder.model_validate(data) if data else None

    def work_orders(self, state: WorkOrderState | None = None) -> list[WorkOrder]:
        if state is None:
            items = self._scan("workorders", "list work orders")
        else:
            items = self._query(
                "workorders",
                f"list {state.value} work orders",
                IndexName="by_state",
                KeyConditionExpression="#s = :s",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={":s": {"S": state.value}},
            )
        return sorted((WorkOrder.model_validate(d) for d in items), key=lambda w: w.opened_at)

    # --- idempotency keys -------------------------------------------------------------------
    def claim_key(
        self, key: str, at: datetime, ttl: timedelta, data: Mapping[str, Any] | None = None
    ) -> bool:
        """Record ``key`` unless it exists and has not expired. True if this call recorded it."""
        item = {"pk": key, "created_at": iso(at), "expires_at": int((at + ttl).timestamp()), **(data or {})}

        def put() -> bool:
            try:
                self.client.put_item(
                    TableName=self.tables["idempotency"],
                    Item=to_item(item, "idempotency"),
                    ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                    ExpressionAttributeValues={":now": {"N": str(int(at.timestamp()))}},
                )
            except ClientError as exc:
                err = translate(exc, f"claim {key}")
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
            TableName=self.tables["idempotency"],
            Item=to_item({"pk": key, **data}),
        )

    def get_key(self, key: str) -> dict[str, Any] | None:
        return self._get("idempotency", {"pk": key})

    def release_key(self, key: str) -> None:
        self._call(
            "release key",
            self.client.delete_item,
            TableName=self.tables["idempotency"],
            Key=to_item({"pk": key}),
        )

    # --- tenants ----------------------------------------------------------------------------
    def get_tenant(self, tenant: str) -> TenantSettings | None:
        data = self._get("tenants", {"tenant": tenant})
        return TenantSettings.model_validate(data["settings"]) if data else None

    def put_tenant(self, tenant: str, settings: TenantSettings, *, actor: str, at: datetime) -> None:
        uow = self.unit_of_work(actor, at)
        uow.append_audit(
            f"tenant#{tenant}", action="tenant-settings", evidence=settings.model_dump(mode="json")
        )
        uow.put(
            "tenants",
            {"tenant": tenant, "settings": settings.model_dump(mode="json"), "updated_at": iso(at)},
            f"tenant {tenant}",
        )
        uow.commit()

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


def _stored_task(data: dict[str, Any]) -> StoredTask:
    return StoredTask(
        task=Task.model_validate(data["definition"]),
        version=int(data["version"]),
        updated_at=str(data["updated_at"]),
        schedule_names=tuple(data.get("schedule_names") or ()),
        audit_seq=int(data.get("audit_seq", 0)),
        audit_head=str(data.get("audit_head", GENESIS)),
        paused_at=parse_utc(data["paused_at"]) if data.get("paused_at") else None,
        active_since=parse_utc(data["active_since"]) if data.get("active_since") else None,
    )
