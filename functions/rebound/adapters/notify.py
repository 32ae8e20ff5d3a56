"""Notifications for work orders: an SNS topic, and optionally PagerDuty and Slack.

Each channel either delivers or raises ``DeliveryFailed``; the escalation records every attempt
on the work order and retries the channels that failed. Secrets never reach a log line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from rebound.domain.jsonutil import dumps
from rebound.domain.models import WorkOrder
from rebound.domain.timefmt import iso

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient


class DeliveryFailed(Exception):
    def __init__(self, channel: str, detail: str) -> None:
        super().__init__(f"{channel}: {detail}")
        self.channel = channel
        self.detail = detail


@dataclass(frozen=True)
class Notification:
    order: WorkOrder
    environment: str

    @property
    def subject(self) -> str:
        what = self.order.task_id or "unparseable message"
        return f"[Rebound {self.environment}] {self.order.severity.value.upper()}: {what} dead-lettered ({self.order.reason})"[
            :100
        ]

    def body(self) -> dict[str, Any]:
        o = self.order
        return {
            "work_order_id": o.work_order_id,
            "environment": self.environment,
            "severity": o.severity.value,
            "run_id": o.run_id,
            "task_id": o.task_id,
            "tenant": o.tenant,
            "reason": o.reason,
            "error_code": o.error_code,
            "attempts": o.attempts,
            "runbook_url": o.runbook_url,
            "opened_at": iso(o.opened_at),
            "next_step": f"rebound workorders show {o.work_order_id}",
        }


class Channel(Protocol):
    name: str

    def send(self, note: Notification) -> str: ...


class SnsChannel:
    name = "sns"

    def __init__(self, client: SNSClient, topic_arn: str) -> None:
        self.client = client
        self.topic_arn = topic_arn

    def send(self, note: Notification) -> str:
        try:
            resp = self.client.publish(
                TopicArn=self.topic_arn,
                Subject=note.subject,
                Message=dumps(note.body()),
                MessageAttributes={
                    "severity": {"DataType": "String", "StringValue": note.order.severity.value},
                    "work_order_id": {"DataType": "String", "StringValue": note.order.work_order_id},
                },
            )
        except (ClientError, BotoCoreError) as exc:
            raise DeliveryFailed(self.name, type(exc).__name__) from exc
        return f"message {resp['MessageId']}"


class Notifier:
    def __init__(self, channels: Sequence[Channel]) -> None:
        self.channels = list(channels)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.channels]

    def channel(self, name: str) -> Channel:
        return next(c for c in self.channels if c.name == name)
