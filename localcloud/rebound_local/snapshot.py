"""Persistence for ``rebound local up --state-dir``: moto keeps nothing on disk, so we do.

A snapshot is one JSON document (``state.json``), taken under ``motopatch.LOCK`` so it is one
consistent moment, written to a temporary file and renamed into place (a crash mid-write leaves
the previous snapshot). It holds:

- **DynamoDB**: every table's key schema, indexes and stream setting, every item (wire format),
  and the stream records the outbox relay has not consumed yet;
- **SQS**: every queue's settings and every message with its timers: sent time, receive count,
  first receive, ``DelaySeconds`` deadline and visibility deadline, in the clock's epoch
  milliseconds, so a delayed or in-flight message keeps its place in time;
- **EventBridge Scheduler**: every group and schedule, with its creation date (``rate()``
  schedules count from it);
- **EventBridge**: every bus and rule with its targets;
- the clock's time when it was taken.

Restore runs after provisioning (which creates Rebound's own resources from the spec) and before
the runtime starts: it recreates whatever else existed, then puts items, messages and schedules
back. See docs/local.md for what is not kept.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rebound import resources as r
from rebound_local import motopatch
from rebound_local.cloud import LocalCloud

FORMAT = 1
FILE_NAME = "state.json"
_MESSAGE_FIELDS = (
    "id",
    "body",
    "message_attributes",
    "sender_id",
    "sent_timestamp",
    "approximate_first_receive_timestamp",
    "approximate_receive_count",
    "deduplication_id",
    "group_id",
    "sequence_number",
    "visible_at",
    "delayed_until",
    "system_attributes",
    "receipt_handle",
)
_QUEUE_SETTINGS = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "RedrivePolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "SqsManagedSseEnabled",
)


def state_file(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def saved_time(state_dir: Path) -> datetime | None:
    """The clock time of the last snapshot in ``state_dir``, if there is one."""
    path = state_file(state_dir)
    if not path.exists():
        return None
    with path.open(encoding="utf-8") as handle:
        doc = json.load(handle)
    return datetime.fromisoformat(str(doc["taken_at"]))


# --------------------------------------------------------------------------- capture
def capture(cloud: LocalCloud, now: datetime) -> dict[str, Any]:
    with motopatch.LOCK:
        return {
            "format": FORMAT,
            "taken_at": now.astimezone(UTC).isoformat(),
            "tables": [_table(t) for t in cloud.dynamodb_backend().tables.values()],
            "queues": [_queue(q) for q in cloud.sqs_backend().queues.values()],
            "schedule_groups": [_group(g) for g in cloud.scheduler_backend().schedule_groups.values()],
            "event_buses": [_bus(b) for b in cloud.events_backend().event_buses.values()],
        }


def _table(table: Any) -> dict[str, Any]:
    from rebound_local.observe import iter_items
    from rebound_local.streams import unconsumed

    shard = getattr(table, "stream_shard", None)
    return {
        "name": table.name,
        "schema": table.schema,
        "attr": table.attr,
        "global_indexes": [
            {"IndexName": i.name, "KeySchema": i.schema, "Projection": i.projection}
            for i in table.global_indexes
        ],
        "stream": table.stream_specification,
        "items": [_item_json(item) for item in iter_items(table)],
        "stream_pending": [_plain_record(rec.record) for rec in unconsumed(shard)] if shard else [],
    }


def _item_json(item: Any) -> dict[str, Any]:
    """An item's attributes in the wire format: moto's ``Item.to_json`` leaves a binary value (a
    deflated ``doc``) as bytes, which JSON cannot hold; the wire has it in base64."""
    attributes: dict[str, Any] = item.to_json()["Attributes"]
    for name, value in attributes.items():
        raw = value.get("B") if isinstance(value, dict) else None
        if isinstance(raw, bytes):
            attributes[name] = {"B": base64.b64encode(raw).decode()}
    return attributes


def _plain_record(record: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(
        json.dumps(record, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v))
    )
    return dict(out)


def _queue(queue: Any) -> dict[str, Any]:
    attributes = queue.attributes
    settings = {k: str(attributes[k]) for k in _QUEUE_SETTINGS if attributes.get(k) not in (None, "")}
    if "RedrivePolicy" in settings and not isinstance(attributes["RedrivePolicy"], str):
        settings["RedrivePolicy"] = json.dumps(attributes["RedrivePolicy"])
    return {
        "name": queue.name,
        "settings": settings,
        "tags": dict(queue.tags),
        "messages": [{f: getattr(m, f) for f in _MESSAGE_FIELDS} for m in queue._messages],
    }


def _group(group: Any) -> dict[str, Any]:
    schedules = []
    for schedule in group.schedules.values():
        data = schedule.to_dict()
        data.pop("Arn", None)
        schedules.append(data)
    return {"name": group.name, "schedules": schedules}


def _bus(bus: Any) -> dict[str, Any]:
    rules = []
    for rule in bus.rules.values():
        rules.append(
            {
                "name": rule.name,
                "pattern": rule.event_pattern._raw_pattern,
                "schedule": rule.scheduled_expression,
                "state": rule.state,
                "description": rule.description,
                "targets": list(rule.targets),
            }
        )
    return {"name": bus.name, "rules": rules}


def save(cloud: LocalCloud, now: datetime, state_dir: Path) -> Path:
    """Write a snapshot atomically; returns its path."""
    doc = capture(cloud, now)
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_file(state_dir)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(doc, handle, separators=(",", ":"), default=str)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
    return path


# --------------------------------------------------------------------------- restore
def restore(cloud: LocalCloud, state_dir: Path) -> dict[str, int]:
    """Put a snapshot back. Returns counts of what was restored."""
    with state_file(state_dir).open(encoding="utf-8") as handle:
        doc = json.load(handle)
    if doc.get("format") != FORMAT:
        raise ValueError(f"{state_file(state_dir)}: snapshot format {doc.get('format')!r}, expected {FORMAT}")
    counts = {"items": 0, "messages": 0, "schedules": 0, "rules": 0}
    with motopatch.LOCK:
        counts["items"] = _restore_tables(cloud, doc["tables"])
        counts["messages"] = _restore_queues(cloud, doc["queues"])
        counts["schedules"] = _restore_schedules(cloud, doc["schedule_groups"])
        counts["rules"] = _restore_rules(cloud, doc["event_buses"])
    motopatch.versions["scheduler"] += 1
    return counts


def _current_table_name(name: str) -> str:
    """State saved before a table was renamed (``rebound-dev-idempotency``) restores into the
    table's current name (``rebound-dev-control``), as the stack keeps the same table on AWS."""
    for former, logical in r.renamed_tables().items():
        suffix = "-" + former.replace("_", "-")
        if name.endswith(suffix):
            return name.removesuffix(suffix) + "-" + logical.replace("_", "-")
    return name


def _restore_tables(cloud: LocalCloud, tables: list[dict[str, Any]]) -> int:
    from moto.dynamodb.models.table import StreamRecord

    backend = cloud.dynamodb_backend()
    restored = 0
    for saved in tables:
        saved = {**saved, "name": _current_table_name(saved["name"])}
        if saved["name"] not in backend.tables:
            backend.create_table(
                saved["name"],
                schema=saved["schema"],
                throughput=None,
                attr=saved["attr"],
                global_indexes=saved["global_indexes"] or None,
                indexes=None,
                streams=saved["stream"],
                billing_mode="PAY_PER_REQUEST",
                sse_specification=None,
                tags=[],
                deletion_protection_enabled=False,
                warm_throughput=None,
            )
        table = backend.get_table(saved["name"])
        shard = getattr(table, "stream_shard", None)
        for attrs in saved["items"]:
            table.put_item(attrs)
            restored += 1
        if shard is not None:
            # Restored items are not new changes: only the records not relayed yet go back.
            shard.items = []
            shard.__dict__.pop("_rebound_checkpoint", None)  # the mapping starts at the first of them
            for record in saved["stream_pending"]:
                dynamodb = record["dynamodb"]
                created = dynamodb.get("ApproximateCreationDateTime")
                if isinstance(created, str):
                    dynamodb["ApproximateCreationDateTime"] = datetime.fromisoformat(created)
                rec: Any = StreamRecord.__new__(StreamRecord)
                rec.record = record
                shard.items.append(rec)
    return restored


def _restore_queues(cloud: LocalCloud, queues: list[dict[str, Any]]) -> int:
    from moto.sqs.models import Message

    backend = cloud.sqs_backend()
    # Dead-letter queues first: redrive policies name them.
    ordered = sorted(queues, key=lambda q: "RedrivePolicy" in q["settings"])
    restored = 0
    for saved in ordered:
        if saved["name"] not in backend.queues:
            backend.create_queue(saved["name"], tags=saved["tags"] or None, **saved["settings"])
        queue = backend.get_queue(saved["name"])
        now_ms = motopatch._unix_time_millis()
        for fields in saved["messages"]:
            message = Message(fields["id"], fields["body"], fields.get("system_attributes") or {})
            for name in _MESSAGE_FIELDS:
                if name not in ("id", "body", "system_attributes"):
                    setattr(message, name, fields.get(name))
            message.message_attributes = fields.get("message_attributes") or {}
            message.approximate_receive_count = int(fields.get("approximate_receive_count") or 0)
            message.visible_at = float(fields.get("visible_at") or 0.0)
            message.delayed_until = float(fields.get("delayed_until") or 0.0)
            queue._messages.append(message)
            if message.visible_at > now_ms:
                queue.pending_messages.add(message)
            restored += 1
    return restored


def _restore_schedules(cloud: LocalCloud, groups: list[dict[str, Any]]) -> int:
    from moto.scheduler.models import Schedule, ScheduleGroup

    backend = cloud.scheduler_backend()
    restored = 0
    for saved in groups:
        group = backend.schedule_groups.get(saved["name"])
        if group is None:
            group = ScheduleGroup(
                region=backend.region_name, account_id=backend.account_id, name=saved["name"]
            )
            backend.schedule_groups[saved["name"]] = group
        for data in saved["schedules"]:
            schedule = Schedule(
                region=backend.region_name,
                account_id=backend.account_id,
                group_name=saved["name"],
                name=data["Name"],
                description=data.get("Description"),
                schedule_expression=data["ScheduleExpression"],
                schedule_expression_timezone=data.get("ScheduleExpressionTimezone"),
                flexible_time_window=data.get("FlexibleTimeWindow") or {"Mode": "OFF"},
                target=data["Target"],
                state=data.get("State"),
                kms_key_arn=data.get("KmsKeyArn"),
                start_date=None,
                end_date=data.get("EndDate"),
                action_after_completion=data.get("ActionAfterCompletion"),
            )
            schedule.start_date = data.get("StartDate")
            schedule.creation_date = data.get("CreationDate") or schedule.creation_date
            schedule.last_modified_date = data.get("LastModificationDate") or schedule.last_modified_date
            group.schedules[data["Name"]] = schedule
            restored += 1
    return restored


def _restore_rules(cloud: LocalCloud, buses: list[dict[str, Any]]) -> int:
    backend = cloud.events_backend()
    restored = 0
    for saved in buses:
        if saved["name"] not in backend.event_buses:
            backend.create_event_bus(name=saved["name"], event_source_name=None, tags=[])
        bus = backend.event_buses[saved["name"]]
        for rule in saved["rules"]:
            if rule["name"] in bus.rules:
                continue
            backend.put_rule(
                rule["name"],
                description=rule.get("description"),
                event_bus_arn=saved["name"],
                event_pattern=rule.get("pattern"),
                role_arn=None,
                scheduled_expression=rule.get("schedule"),
                state=rule.get("state"),
                tags=[],
            )
            if rule["targets"]:
                backend.put_targets(rule["name"], saved["name"], rule["targets"])
            restored += 1
    return restored
