"""What AWS would bill for a simulation: billable units per service, and dollars from a price table.

The simulator already sees every AWS call the handlers make (``AwsCalls``); a bill needs more than
calls. ``Meter`` counts the units each service bills by:

- **SQS** requests: every call a client makes (one per batch, not per message), every Scheduler
  delivery and every bus-rule delivery to a queue (each is a ``SendMessage`` billed to the queue's
  owner), and what the Lambda event source mappings do: one ``ReceiveMessage`` per batch they
  hand to a function, one ``DeleteMessageBatch`` per batch with a message to delete, and the empty
  receives of their long polls, by the model in ``esm_empty_receives``.
- **DynamoDB** write and read units from the real item sizes (``item_size``): a write costs one unit
  per started 1 KB of the larger of the item before and after it; a read one unit per started 4 KB
  (half for an eventually consistent read); every item inside a ``TransactWriteItems`` costs twice.
  Each global secondary index the write changes costs its own units (of the projected item), at
  the standard rate: an index is updated after the transaction, not inside it.
- **Scheduler** invocations (each delivery), and one-time schedules created.
- **EventBridge** events published (each ``PutEvents`` entry).
- **Lambda** requests, and GB-seconds: each invocation's measured handler time, rounded up to
  the millisecond, times the function's configured memory (``functions/rebound/resources.py``).
- **CloudWatch** log bytes ingested (the handlers' own log lines, captured at ``INFO`` as deployed,
  plus Lambda's platform lines) and the EMF documents the handlers' metrics would print.

``price`` turns units into dollars with ``PRICES`` (us-east-1 list prices, dated; the sources are
in ``docs/cost.md``). What the units leave out is listed there too.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rebound_local import invocations
from rebound_local.bill_units import (
    PLATFORM_LOG_BYTES,
    TRANSACTION_FACTOR,
    IndexShape,
    emf_document_bytes,
    item_size,
    lambda_gb_seconds,
    number_size,
    read_units,
    utf8_len,
    write_units,
)
from rebound_local.call_sites import call_site
from rebound_local.logformat import ByFunction


# --------------------------------------------------------------------------- the meter
@dataclass
class _Usage:
    function: str
    memory_mb: int
    log_bytes: int = 0
    metrics: dict[str, str] = field(default_factory=dict)


class Meter:
    """Billable units, counted as the local cloud works. Thread-safe.

    ``dynamodb_backend`` gives moto's DynamoDB backend, to read items' sizes before and after a
    write (``before`` and ``after`` run around each DynamoDB call, under moto's lock on the
    direct transport).
    """

    def __init__(self, dynamodb_backend: Callable[[], Any], namespace: str = "Rebound") -> None:
        self._backend = dynamodb_backend
        self._lock = threading.Lock()
        self.units: defaultdict[str, float] = defaultdict(float)
        self.metric_names: set[tuple[str, str]] = set()
        self.namespace = namespace
        self._usage: dict[int, _Usage] = {}
        self._index_cache: dict[str, list[tuple[str, IndexShape]]] = {}
        self.sites = False
        """Also count DynamoDB units by call site (``dynamodb.write_units.site.<site>``, ...)."""
        self._key_cache: dict[str, list[str]] = {}

    # ---- generic
    def add(self, unit: str, amount: float = 1) -> None:
        with self._lock:
            self.units[unit] += amount

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            out: dict[str, float] = {k: round(v, 6) for k, v in sorted(self.units.items())}
            out["metrics.distinct"] = len(self.metric_names)
            return out

    @contextmanager
    def unbilled(self) -> Iterator[None]:
        """What runs inside is left out of the bill: the judge's own reads of a settled simulation
        (``invariants.listed_with_their_tasks`` lists each task's runs through the store)."""
        with self._lock:
            kept = dict(self.units)
        try:
            yield
        finally:
            with self._lock:
                self.units = defaultdict(float, kept)

    # ---- AWS calls
    def attach(self, session: Any) -> None:
        """Meter every call of a botocore session's clients (the direct transport calls ``before``
        and ``after`` itself)."""
        session.events.register("provide-client-params", self._provide)
        session.events.register("after-call", self._after_call)

    def _provide(self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        service = model.service_model.service_name
        context["rebound_billing"] = (dict(params), self.before(service, model.name, params))

    def _after_call(
        self, http_response: Any, parsed: Mapping[str, Any], model: Any, context: Any, **_: Any
    ) -> None:
        params, token = (context or {}).get("rebound_billing", ({}, None))
        ok = http_response is not None and int(getattr(http_response, "status_code", 500)) < 300
        self.after(model.service_model.service_name, model.name, params, parsed if ok else None, token)

    def before(self, service: str, operation: str, params: Mapping[str, Any]) -> Any:
        """What must be read before the call (the items a DynamoDB write will change)."""
        if service != "dynamodb" or operation not in _WRITES:
            return None
        try:
            targets = list(_write_targets(self, operation, params))
            # An item of a table with indexes as it is (its index entries are compared); of any
            # other table, only its size.
            return targets, [
                self._stored(table, key) if self._indexes(table) else self._stored_size(table, key)
                for table, key, _ in targets
            ]
        except Exception:  # an unknown table or a bad key: the call itself will say so
            return None

    def after(
        self,
        service: str,
        operation: str,
        params: Mapping[str, Any],
        response: Mapping[str, Any] | None,
        token: Any,
    ) -> None:
        """Count the call's units; ``response`` is ``None`` if the call failed (still billed)."""
        try:
            if service == "sqs":
                self._sqs(operation, params)
            elif service == "dynamodb":
                self._dynamodb(operation, params, response, token)
            elif service == "events" and operation == "PutEvents":
                self.add("events.published", len(params.get("Entries") or ()))
            elif service == "s3" and operation == "PutObject":
                self.add("s3.put_requests")
            elif (
                service == "scheduler"
                and operation == "CreateSchedule"
                and response is not None
                and str(params.get("ScheduleExpression", "")).startswith("at(")
            ):
                self.add("scheduler.one_time_created")
        except Exception:  # metering must never change what a call does
            logging.getLogger(__name__).exception("could not meter %s:%s", service, operation)

    def _sqs(self, operation: str, params: Mapping[str, Any]) -> None:
        self.add("sqs.requests")
        self.add(f"sqs.requests.{operation}")
        if operation == "SendMessage":
            self.add("sqs.messages_sent_by_clients")
        elif operation == "SendMessageBatch":
            self.add("sqs.messages_sent_by_clients", len(params.get("Entries") or ()))

    def _dynamodb(
        self, operation: str, params: Mapping[str, Any], response: Mapping[str, Any] | None, token: Any
    ) -> None:
        if operation in _WRITES:
            if isinstance(token, tuple):  # read by ``before``: the items it touches, and as they were
                targets, before = token
            else:
                targets = list(_write_targets(self, operation, params))
                before = [None] * len(targets)
            factor = TRANSACTION_FACTOR if operation == "TransactWriteItems" else 1
            counted: defaultdict[str, float] = defaultdict(float)  # added under the lock once
            if operation == "TransactWriteItems":
                counted["dynamodb.transactions"] += 1
                counted["dynamodb.transaction_items"] += len(targets)
            sizes: dict[int, tuple[Any, int]] = {}  # by identity; holds the item, so no id is reused

            def size(item: dict[str, Any] | None) -> int:
                known = sizes.get(id(item))
                if known is None:
                    known = sizes[id(item)] = (item, item_size(item))
                return known[1]

            site = f"dynamodb.write_units.site.{call_site()}" if self.sites else ""
            written = _put_items(operation, params, len(targets), succeeded=response is not None)
            for (table, key, kind), old, put in zip(targets, before, written, strict=True):
                # A put that succeeded stored its item as sent (moto keeps every value as given),
                # so it is sized as sent, not read back; an item with a binary value is read back
                # all the same (its encoding is the transport's).
                indexes = self._indexes(table)
                new: dict[str, Any] | None
                if put is not None and _without_binary(put):
                    new, new_size = put, size(put)
                elif indexes:
                    new = self._stored(table, key)
                    new_size = size(new)
                else:
                    new, new_size = None, self._stored_size(table, key)
                old_size = old if old.__class__ is int else size(old)
                table_units = factor * write_units(max(old_size, new_size))
                counted["dynamodb.write_units"] += table_units
                counted["dynamodb.write_units.table"] += table_units
                if site:
                    counted[site] += table_units
                # Where the units go: by table and request (a transaction's items at their factor).
                counted[_by_request(table, operation)] += table_units
                if kind != "ConditionCheck":
                    for name, index in indexes:
                        indexed = index_write_units(index, old, new, size)
                        counted["dynamodb.write_units"] += indexed
                        counted["dynamodb.write_units.indexes"] += indexed
                        counted[_by_index(table, name)] += indexed
                        if site:
                            counted[site] += indexed
            with self._lock:
                for unit, amount in counted.items():
                    self.units[unit] += amount
            return
        if operation not in _READS:
            return
        consistent = bool(params.get("ConsistentRead"))
        site = call_site() if self.sites else ""
        if operation == "GetItem":  # the whole item bills, whatever the projection returns
            whole = self._stored_size(params["TableName"], params["Key"]) if response is not None else 0
            self._read(operation, site, read_units(whole, consistent))
        elif operation in ("Query", "Scan"):
            items = (response or {}).get("Items") or []
            self._read(operation, site, read_units(sum(item_size(i) for i in items), consistent))
        elif operation == "BatchGetItem":
            requests = params.get("RequestItems") or {}
            for table, items in ((response or {}).get("Responses") or {}).items():
                request = requests.get(table) or {}
                projected = "ProjectionExpression" in request
                # A batch read asks for consistency table by table, not for the whole request.
                consistent_here = bool(request.get("ConsistentRead"))
                for item in items:
                    # DynamoDB bills the whole item, whatever the projection returns.
                    whole = (
                        self._stored_size(table, _key_of(self, table, {"Item": item}))
                        if projected
                        else item_size(item)
                    )
                    self._read(operation, site, read_units(whole, consistent_here))
        elif operation == "TransactGetItems":
            for entry in (response or {}).get("Responses") or []:
                self._read(
                    operation, site, TRANSACTION_FACTOR * read_units(item_size(entry.get("Item")), True)
                )

    def _read(self, operation: str, site: str, units: float) -> None:
        """Read units of one read, in the total, in its request's own line and in its call site's
        (each item sized once)."""
        with self._lock:
            self.units["dynamodb.read_units"] += units
            self.units[f"dynamodb.read_units.{operation}"] += units
            if site:
                self.units[f"dynamodb.read_units.site.{site}"] += units

    def _stored(self, table: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
        backend = self._backend()
        try:
            item = backend.get_item(table, dict(key))
        except Exception:
            return None
        return item.to_json()["Attributes"] if item is not None else None

    def _stored_size(self, table: str, key: Mapping[str, Any]) -> int:
        """``item_size`` of the stored item (0 if there is none), without its JSON form when every
        attribute is a string or a number (a read bills the size alone)."""
        backend = self._backend()
        try:
            item = backend.get_item(table, dict(key))
        except Exception:
            return 0
        if item is None:
            return 0
        total = 0
        for name, value in item.attrs.items():
            kind, inner = value.type, value.value
            if kind == "S" and inner.__class__ is str:
                total += utf8_len(inner)
            elif kind == "N" and inner.__class__ is str:
                total += number_size(inner)
            else:  # sets, lists, maps, binaries, booleans, null: as their JSON is sized
                return item_size(item.to_json()["Attributes"])
            total += utf8_len(name)
        return total

    def _indexes(self, table: str) -> list[tuple[str, IndexShape]]:
        """Each global index: its name, and (its key attributes, the table's key attributes,
        projection, included)."""
        cached = self._index_cache.get(table)
        if cached is not None:
            return cached
        try:
            moto_table = self._backend().get_table(table)
        except Exception:
            return []
        table_keys = [a for a in (moto_table.hash_key_attr, moto_table.range_key_attr) if a]
        out = []
        for index in moto_table.global_indexes:
            projection = index.projection or {}
            shape = (
                list(index.schema_key_attrs),
                table_keys,
                str(projection.get("ProjectionType", "ALL")),
                list(projection.get("NonKeyAttributes") or []),
            )
            out.append((str(index.name), shape))
        self._index_cache[table] = out
        return out

    # ---- what the runtime does for AWS
    def scheduler_delivered(self) -> None:
        """Scheduler invoked its target: a Scheduler invocation, and an SQS ``SendMessage``."""
        self.add("scheduler.invocations")
        self.add("sqs.requests")
        self.add("sqs.requests.scheduler_delivery")

    def esm_received(self, messages: int) -> None:
        """An event source mapping received a batch (it then deletes it with one batch request)."""
        self.add("sqs.requests")
        self.add("sqs.requests.esm_receive")
        self.add("sqs.esm_batches")
        self.add("sqs.esm_messages", messages)

    def esm_deleted(self) -> None:
        self.add("sqs.requests")
        self.add("sqs.requests.esm_delete_batch")

    # ---- Lambda
    @contextmanager
    def invocation(self, function: str, memory_mb: int) -> Iterator[None]:
        """Measure one invocation (call in the thread that runs the handler, inside its lane)."""
        usage = _Usage(function, memory_mb)
        current = invocations.current()
        if current is not None:
            with self._lock:
                self._usage[id(current)] = usage
        started = time.perf_counter()
        try:
            yield
        finally:
            billed_ms = max(1, math.ceil((time.perf_counter() - started) * 1000))
            if current is not None:
                with self._lock:
                    self._usage.pop(id(current), None)
            emf = 0
            if usage.metrics:
                emf = emf_document_bytes(self.namespace, f"rebound-{function}", usage.metrics)
            with self._lock:
                self.units["lambda.requests"] += 1
                self.units[f"lambda.requests.{function}"] += 1
                self.units["lambda.billed_ms"] += billed_ms
                self.units["lambda.gb_seconds"] += lambda_gb_seconds(billed_ms, memory_mb)
                self.units["logs.bytes_ingested"] += usage.log_bytes + PLATFORM_LOG_BYTES + emf
                self.units["logs.handler_bytes"] += usage.log_bytes
                self.units[f"logs.handler_bytes.{function}"] += usage.log_bytes
                self.units[f"lambda.billed_ms.{function}"] += billed_ms
                self.units["metrics.emf_documents"] += 1 if emf else 0
                self.units["metrics.emf_bytes"] += emf
                for name in usage.metrics:
                    self.metric_names.add((function, name))

    def _current_usage(self) -> _Usage | None:
        current = invocations.current()
        if current is None:
            return None
        return self._usage.get(id(current))

    def metric(self, name: str, unit: str) -> None:
        """The handler recorded a metric (it would be in its EMF document)."""
        usage = self._current_usage()
        if usage is not None:
            usage.metrics.setdefault(name, unit)

    def logged(self, nbytes: int) -> None:
        usage = self._current_usage()
        if usage is not None:
            usage.log_bytes += nbytes


def index_write_units(
    index: IndexShape,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    size: Callable[[dict[str, Any] | None], int] = item_size,
) -> int:
    """A global secondary index's write units for one item changing from ``old`` to ``new``.

    An item is in the index when it has every key attribute of the index. Changing the index key
    deletes the old entry and writes the new one; changing only projected attributes rewrites the
    entry; changing nothing projected costs nothing.
    """
    keys, table_keys, projection, included = index

    def projected(item: dict[str, Any] | None) -> dict[str, Any] | None:
        if item is None or any(k not in item for k in keys):
            return None
        if projection == "ALL":
            return item
        names = set(keys) | set(table_keys) | (set(included) if projection == "INCLUDE" else set())
        return {k: v for k, v in item.items() if k in names}

    before, after = projected(old), projected(new)
    if before is None and after is None:
        return 0
    if before is None:
        return write_units(size(after))
    if after is None:
        return write_units(size(before))
    if any(before.get(k) != after.get(k) for k in keys):
        return write_units(size(before)) + write_units(size(after))
    if before == after:
        return 0
    return write_units(size(after))


@functools.lru_cache(maxsize=256)
def logical_table(physical: str) -> str:
    """A table's logical name (``runs``) from its physical one (``rebound-dev-runs``, or an
    AWS-sized ``Rebound-dev-StateRuns<hash>-<suffix>``, ``provision.aws_sized_name``)."""
    from rebound import resources as r
    from rebound_local.provision import camel

    parts = physical.split("-")
    for spec in r.SPEC.tables:
        if len(parts) == 4 and parts[0] == "Rebound" and parts[2][:-8] == f"State{camel(spec.logical)}":
            return spec.logical
    local = [
        spec.logical for spec in r.SPEC.tables if physical.endswith("-" + spec.logical.replace("_", "-"))
    ]
    return max(local, key=len) if local else physical.rsplit("-", 1)[-1]


@functools.lru_cache(maxsize=256)
def _by_request(table: str, operation: str) -> str:
    """The line of a table's write units by request (``dynamodb.write_units.by.runs.PutItem``)."""
    return f"dynamodb.write_units.by.{logical_table(table)}.{operation}"


@functools.lru_cache(maxsize=256)
def _by_index(table: str, index: str) -> str:
    """The line of an index's write units (``dynamodb.write_units.by.runs.index.by_state``)."""
    return f"dynamodb.write_units.by.{logical_table(table)}.index.{index}"


_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
_READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}


def _write_targets(
    meter: Meter, operation: str, params: Mapping[str, Any]
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(table, key, kind) of every item a write request touches."""
    if operation == "TransactWriteItems":
        for entry in params.get("TransactItems") or []:
            ((kind, body),) = entry.items()
            yield body["TableName"], _key_of(meter, body["TableName"], body), kind
    elif operation == "BatchWriteItem":
        for table, requests in (params.get("RequestItems") or {}).items():
            for request in requests:
                ((kind, body),) = request.items()
                yield table, _key_of(meter, table, body), kind
    else:
        table = params["TableName"]
        yield table, _key_of(meter, table, params), operation


def _put_items(
    operation: str, params: Mapping[str, Any], count: int, *, succeeded: bool
) -> list[dict[str, Any] | None]:
    """For each of the ``count`` items a write touches: the item it put, if it is a ``PutItem``
    or a ``TransactWriteItems`` put that succeeded; ``None`` for every other."""
    if succeeded and operation == "PutItem":
        return [params["Item"]]
    if succeeded and operation == "TransactWriteItems":
        return [entry["Put"]["Item"] if "Put" in entry else None for entry in params["TransactItems"]]
    return [None] * count


def _without_binary(item: Mapping[str, Any]) -> bool:
    """An item with no binary value anywhere in it (maps and lists looked into)."""
    pending = list(item.values())
    while pending:
        value = pending.pop()
        if "S" in value or "N" in value:
            continue
        if "B" in value or "BS" in value:
            return False
        if "M" in value:
            pending.extend(value["M"].values())
        elif "L" in value:
            pending.extend(value["L"])
    return True


def _key_of(meter: Meter, table: str, body: Mapping[str, Any]) -> dict[str, Any]:
    if "Key" in body:
        return dict(body["Key"])
    item = body["Item"]
    names = meter._key_cache.get(table)
    if names is None:  # a table's key schema never changes (as its indexes, ``_indexes``)
        moto_table = meter._backend().get_table(table)
        names = meter._key_cache[table] = [
            a for a in (moto_table.hash_key_attr, moto_table.range_key_attr) if a
        ]
    return {name: item[name] for name in names}


class LogBytes(logging.Handler):
    """Counts the bytes each invocation's log lines would ingest into CloudWatch Logs."""

    def __init__(self, meter: Meter, formatter: logging.Formatter | None) -> None:
        super().__init__(logging.INFO)
        self.meter = meter
        if formatter is not None:
            self.setFormatter(measuring(formatter))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.meter.logged(len(self.format(record).encode()) + 1)
        except Exception:
            self.handleError(record)


def measuring(formatter: logging.Formatter) -> logging.Formatter:
    """``formatter`` as ``LogBytes`` uses it: the same object's state (its attribute dict is
    shared, so keys appended to the formatter later are in every line), formatting each line as
    the formatter does, except that a line's time is formatted once per wall-clock second and
    reused within it. A time format writes fractions of a second at a fixed width (milliseconds as
    three digits), so a line measures the same bytes either way; formatting the time was a third
    of measuring a line (``tests/unit/test_billing_units.py``). A ``ByFunction`` formatter is
    measured through a view of each function's formatter."""
    if isinstance(formatter, ByFunction):
        return ByFunction(
            {service: measuring(f) for service, f in formatter.by_service.items()},
            measuring(formatter.default),
        )
    base = type(formatter)
    last: list[tuple[int, str] | None] = [None]

    def format_time(self: logging.Formatter, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        known = last[0]
        if known is None or known[0] != second:
            known = last[0] = (second, base.formatTime(self, record, datefmt))
        return known[1]

    view: logging.Formatter = object.__new__(
        type(f"Measuring{base.__name__}", (base,), {"formatTime": format_time})
    )
    view.__dict__ = formatter.__dict__
    return view
