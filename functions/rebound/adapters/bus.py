"""EventBridge: publishing outbox events to the environment's bus, and the rules of event-triggered tasks.

An event-triggered task is one rule on the environment's bus with the task's event pattern. Its
one target is the execution queue; an input transformer turns the matched event into the
execution message ``{"kind": "event", "task_id", "event_id", "time", "detail"}``, so the run id
derives from the event's id and a redelivered event reuses its run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.errors import call_or_none, translate
from rebound.domain.errors import OperationalError
from rebound.domain.schedules import WORKSTREAM_START
from rebound.engine.ports import BusEvent

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

MAX_ENTRIES = 10
RULE_TARGET_ID = "execution"
RULE_RETRY_ATTEMPTS = 185  # EventBridge's maximum, as for the stack's own rules
RULE_MAX_EVENT_AGE_S = 86400


def event_input_template(task_id: str) -> dict[str, object]:
    """The rule target's input transformer: the matched event as an execution message."""
    fields = f'"v": 1, "kind": "event", "task_id": "{task_id}"'
    template = "{" + fields + ', "event_id": "<id>", "time": "<time>", "detail": <detail>}'
    paths = {"id": "$.id", "time": "$.time", "detail": "$.detail"}
    return {"InputPathsMap": paths, "InputTemplate": template}


def workstream_input_template(workstream_id: str) -> dict[str, object]:
    """A workstream rule's input transformer: the matched event as the message that starts a run
    (``rebound.domain.schedules.WORKSTREAM_START``); the run id derives from the event's id."""
    detail = f'"v": 1, "workstream_id": "{workstream_id}", "event_id": "<id>", "time": "<time>"'
    template = '{"detail-type": "' + WORKSTREAM_START + '", "detail": {' + detail + "}}"
    return {"InputPathsMap": {"id": "$.id", "time": "$.time"}, "InputTemplate": template}


class EventBridgeBus:
    def __init__(self, client: EventBridgeClient, bus_name: str) -> None:
        self.client = client
        self.bus_name = bus_name

    def publish(self, events: Sequence[BusEvent]) -> list[str]:
        """Publish in batches of ten. Returns the keys of events EventBridge did not accept."""
        failed: list[str] = []
        for start in range(0, len(events), MAX_ENTRIES):
            chunk = events[start : start + MAX_ENTRIES]
            entries: list[PutEventsRequestEntryTypeDef] = [
                {
                    "Source": e.source,
                    "DetailType": e.detail_type,
                    "Detail": e.detail,
                    "EventBusName": self.bus_name,
                    **({"TraceHeader": e.trace} if e.trace else {}),
                }
                for e in chunk
            ]
            try:
                resp = self.client.put_events(Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, "publish events") from exc
            for event, result in zip(chunk, resp.get("Entries", []), strict=False):
                if result.get("ErrorCode"):
                    failed.append(event.key)
        return failed

    # ------------------------------------------------------------------- event-triggered tasks
    def put_task_rule(
        self,
        name: str,
        task_id: str,
        pattern: str,
        queue_arn: str,
        dead_letter_arn: str,
        *,
        enabled: bool,
        description: str = "",
        starts: str = "task",
    ) -> str:
        """Create or update a task's rule and its target (with ``starts="workstream"``, the rule
        that starts workstream ``task_id``). Returns created, updated or unchanged."""
        state: Literal["ENABLED", "DISABLED"] = "ENABLED" if enabled else "DISABLED"
        target = {
            "Id": RULE_TARGET_ID,
            "Arn": queue_arn,
            "InputTransformer": (
                workstream_input_template(task_id)
                if starts == "workstream"
                else event_input_template(task_id)
            ),
            "RetryPolicy": {
                "MaximumRetryAttempts": RULE_RETRY_ATTEMPTS,
                "MaximumEventAgeInSeconds": RULE_MAX_EVENT_AGE_S,
            },
            "DeadLetterConfig": {"Arn": dead_letter_arn},
        }
        current = self.get_rule(name)
        if current is not None and current.get("EventPattern") and current.get("State") == state:
            same_pattern = json.loads(str(current["EventPattern"])) == json.loads(pattern)
            if same_pattern and self._targets(name) == [target]:
                return "unchanged"
        try:
            self.client.put_rule(
                Name=name,
                EventBusName=self.bus_name,
                EventPattern=pattern,
                State=state,
                Description=description[:512],
            )
            resp = self.client.put_targets(Rule=name, EventBusName=self.bus_name, Targets=[target])  # type: ignore[list-item]
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"write rule {name}") from exc
        if resp.get("FailedEntryCount"):
            failed = resp.get("FailedEntries", [{}])[0]
            raise OperationalError(
                f"write rule {name}: target refused ({failed.get('ErrorCode')}: {failed.get('ErrorMessage')})"
            )
        return "created" if current is None else "updated"

    def get_rule(self, name: str) -> dict[str, Any] | None:
        found = call_or_none(
            f"read rule {name}",
            lambda: self.client.describe_rule(Name=name, EventBusName=self.bus_name),
            none_on="ResourceNotFoundException",
        )
        return dict(found) if found is not None else None

    def _targets(self, name: str) -> list[dict[str, Any]]:
        try:
            resp = self.client.list_targets_by_rule(Rule=name, EventBusName=self.bus_name)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"read targets of rule {name}") from exc
        return [dict(t) for t in resp.get("Targets", [])]

    def delete_task_rule(self, name: str) -> bool:
        """Remove the rule's target, then the rule. False if there was no rule."""

        def remove() -> bool:
            self.client.remove_targets(Rule=name, EventBusName=self.bus_name, Ids=[RULE_TARGET_ID])
            self.client.delete_rule(Name=name, EventBusName=self.bus_name)
            return True

        return bool(call_or_none(f"delete rule {name}", remove, none_on="ResourceNotFoundException"))
