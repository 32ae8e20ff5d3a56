"""Notifications for work orders: an SNS topic, and optionally PagerDuty and Slack.

Each channel either delivers or raises ``DeliveryFailed``; the escalation records every attempt
on the work order and retries the channels that failed. Secrets never reach a log line.

- ``SnsChannel`` publishes the notification body as JSON; a resolved work order, a resolved notice.
- ``PagerDutyChannel`` sends an Events API v2 ``trigger`` whose ``dedup_key`` is the work order id,
  so a retried delivery updates the same alert instead of paging twice, and ``resolve`` with the
  same key once the work order is resolved. The routing key comes from a secret (SSM or Secrets
  Manager, see ``rebound.adapters.secrets``).
- ``SlackChannel`` posts a short Block Kit message. The secret is either an incoming webhook's URL
  or a bot token and channel (``{"token": "xoxb-...", "channel": "C..."}``). With a bot token the
  message is posted with ``chat.postMessage``, its ``ts`` is recorded on the delivery, and the
  resolution updates that message (``chat.update``) and replies in its thread. An incoming webhook
  answers only ``ok`` (no ``ts``), so there the resolution is a new message naming the work order.

A delivery's ``detail`` (and a ``DeliveryFailed``'s) is stored on the work order: it carries the
status and the receiver's short answer, with any secret value replaced by ``[redacted]``.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from rebound.adapters.secrets import SecretResolver
from rebound.domain.basics import Severity
from rebound.domain.errors import OperationalError
from rebound.domain.jsonutil import dumps
from rebound.domain.notification import Notification
from rebound.domain.timefmt import iso
from rebound.engine.ports import Channel, DeliveryFailed, Sent

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient


log = logging.getLogger(__name__)

DEFAULT_PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
DEFAULT_SLACK_API = "https://slack.com/api"
PAGERDUTY_SEVERITY = {
    Severity.LOW: "info",
    Severity.MEDIUM: "warning",
    Severity.HIGH: "error",
    Severity.CRITICAL: "critical",
}
"""Rebound severity to the Events API v2 ``payload.severity``."""
HTTP_TIMEOUT_S = 10.0
REDACTED = "[redacted]"
MAX_DETAIL = 300


class SnsChannel:
    name = "sns"

    def __init__(self, client: SNSClient, topic_arn: str) -> None:
        self.client = client
        self.topic_arn = topic_arn

    def send(self, note: Notification) -> str:
        o = note.order
        return self._publish(
            note.subject, note.body(), severity=o.severity.value, work_order_id=o.work_order_id
        )

    def resolve(self, note: Notification, opened: str | None = None) -> str:
        o = note.order
        return self._publish(
            note.resolved_subject,
            note.resolved_body(),
            severity=o.severity.value,
            work_order_id=o.work_order_id,
            state="resolved",
        )

    def alert(self, subject: str, body: dict[str, Any], severity: str) -> str:
        """A notification that is not about a work order (an SLA breach)."""
        return self._publish(subject, body, severity=severity)

    def _publish(self, subject: str, body: dict[str, Any], **attributes: str) -> str:
        try:
            resp = self.client.publish(
                TopicArn=self.topic_arn,
                Subject=subject[:100],
                Message=dumps(body),
                MessageAttributes={
                    k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
                },
            )
        except (ClientError, BotoCoreError) as exc:
            raise DeliveryFailed(self.name, type(exc).__name__) from exc
        return f"message {resp['MessageId']}"


class ChannelNotifier:
    def __init__(self, channels: Sequence[Channel], alert_channels: Sequence[Any] = ()) -> None:
        self.channels = list(channels)
        self.alert_channels = list(alert_channels)
        """Channels that carry alerts only, never work orders (the SLA-breach webhook)."""

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.channels]

    def channel(self, name: str) -> Channel:
        return next(c for c in self.channels if c.name == name)

    def alert(self, subject: str, body: dict[str, Any], severity: str) -> list[str]:
        """Send an alert through every channel that takes alerts; raises if one failed."""
        sent, failed = self.alert_each(subject, body, severity)
        if failed:
            name, detail = next(iter(failed.items()))
            raise DeliveryFailed(name, detail)
        return list(sent.values())

    def alert_each(
        self,
        subject: str,
        body: dict[str, Any],
        severity: str,
        *,
        kind: str = "alert",
        done: Collection[str] = (),
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Send an alert of ``kind`` through every channel that takes it, except those in ``done``
        (delivered already): what each answered, and why each that failed did."""
        sent: dict[str, str] = {}
        failed: dict[str, str] = {}
        for channel in self.channels + self.alert_channels:
            alert = getattr(channel, "alert", None)
            takes = getattr(channel, "takes", None)
            if alert is None or channel.name in done or (takes is not None and not takes(kind)):
                continue
            try:
                sent[channel.name] = str(alert(subject, body, severity))
            except DeliveryFailed as exc:
                failed[channel.name] = exc.detail
        return sent, failed


# --------------------------------------------------------------------------- webhooks


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer to report, not a place to re-send a secret to."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def _post_json(
    channel: str,
    url: str,
    document: dict[str, Any] | bytes,
    timeout_s: float,
    secrets: Sequence[str],
    bearer: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """POST ``document`` (JSON, or its bytes as they are to be sent and signed; with ``bearer`` as
    the Authorization token and ``headers``, if given); the status and up to 64 KiB of the
    answer, whatever the status.

    Raises ``DeliveryFailed`` with ``TIMEOUT`` or ``CONNECTION_ERROR`` when there is no answer.
    """
    data = document if isinstance(document, bytes) else dumps(document).encode()
    headers = {
        **(headers or {}),
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": "Rebound-Notify/1",
    }
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        request = urllib.request.Request(url, data=data, method="POST", headers=headers)
        with opener.open(request, timeout=timeout_s) as response:
            return int(response.status), response.read(65536)
    except urllib.error.HTTPError as exc:
        try:
            return int(exc.code), exc.read(65536)
        except (OSError, http.client.HTTPException):
            return int(exc.code), b""
        finally:
            exc.close()
    except TimeoutError as exc:
        raise DeliveryFailed(channel, f"TIMEOUT after {timeout_s:g}s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise DeliveryFailed(channel, f"TIMEOUT after {timeout_s:g}s") from exc
        reason = _redact(str(exc.reason), secrets)[:MAX_DETAIL]
        raise DeliveryFailed(channel, f"CONNECTION_ERROR: {reason}") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryFailed(channel, f"CONNECTION_ERROR: {type(exc).__name__}") from exc
    except ValueError as exc:  # a malformed URL
        raise DeliveryFailed(channel, f"invalid endpoint: {type(exc).__name__}") from exc


def _answer(raw: bytes, secrets: Sequence[str]) -> str:
    return _redact(raw.decode(errors="replace").strip(), secrets)[:MAX_DETAIL]


def _is_link(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("https://", "http://"))


class PagerDutyChannel:
    """Events API v2: one ``trigger`` per work order, deduplicated by the work order id."""

    name = "pagerduty"

    def __init__(
        self,
        secrets: SecretResolver,
        routing_key_secret: str,
        *,
        url: str = DEFAULT_PAGERDUTY_URL,
        source: str | None = None,
        timeout_s: float = HTTP_TIMEOUT_S,
    ) -> None:
        self.secrets = secrets
        self.routing_key_secret = routing_key_secret
        self.url = url
        self.source = source
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"PagerDutyChannel(url={self.url!r}, secret={self.routing_key_secret!r})"

    def event(self, note: Notification, routing_key: str) -> dict[str, Any]:
        o = note.order
        payload: dict[str, Any] = {
            "summary": note.summary[:1024],
            "source": self.source or f"rebound-{note.environment}",
            "severity": PAGERDUTY_SEVERITY[o.severity],
            "timestamp": iso(o.opened_at),
            "component": o.task_id or "rebound",
            "class": o.reason,
            "custom_details": note.body(),
        }
        if o.tenant:
            payload["group"] = o.tenant
        event: dict[str, Any] = {
            "routing_key": routing_key,
            "event_action": "trigger",
            "dedup_key": o.work_order_id,
            "client": "Rebound",
            "payload": payload,
        }
        if _is_link(o.runbook_url):
            event["links"] = [{"href": o.runbook_url, "text": "Runbook"}]
        return event

    def resolve_event(self, note: Notification, routing_key: str) -> dict[str, Any]:
        """``resolve`` for the alert the work order's ``trigger`` opened (same ``dedup_key``)."""
        return {
            "routing_key": routing_key,
            "event_action": "resolve",
            "dedup_key": note.order.work_order_id,
            "client": "Rebound",
        }

    def send(self, note: Notification) -> str:
        return self._post(note, self.event)

    def resolve(self, note: Notification, opened: str | None = None) -> str:
        return self._post(note, self.resolve_event)

    def _post(self, note: Notification, build: Any) -> str:
        try:
            routing_key = self.secrets.get(self.routing_key_secret)
        except OperationalError as exc:
            raise DeliveryFailed(self.name, f"routing key unavailable: {exc.message}") from None
        event = build(note, routing_key)
        status, raw = _post_json(self.name, self.url, event, self.timeout_s, [routing_key])
        if 200 <= status < 300:
            log.info(
                "pagerduty event accepted",
                extra={
                    "work_order_id": note.order.work_order_id,
                    "status": status,
                    "event_action": event["event_action"],
                },
            )
            return f"HTTP {status}, {event['event_action']} dedup_key {note.order.work_order_id}"
        if status in (400, 401, 403, 404):
            self.secrets.forget(self.routing_key_secret)  # a rotated key is read again next time
        detail = _pagerduty_error(raw, [routing_key]) or _answer(raw, [routing_key])
        raise DeliveryFailed(self.name, f"HTTP {status}" + (f": {detail}" if detail else ""))


def _pagerduty_error(raw: bytes, secrets: Sequence[str]) -> str:
    try:
        answer = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(answer, dict):
        return ""
    parts = [str(answer.get("message") or ""), *map(str, answer.get("errors") or [])]
    return _redact("; ".join(p for p in parts if p), secrets)[:MAX_DETAIL]


def _mrkdwn(text: object) -> str:
    """Slack's three control characters, escaped."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackChannel:
    """An incoming webhook (the secret is its URL, which holds the token) or a bot token and a
    channel (the secret is ``{"token": ..., "channel": ...}``)."""

    name = "slack"

    def __init__(
        self,
        secrets: SecretResolver,
        webhook_secret: str,
        *,
        timeout_s: float = HTTP_TIMEOUT_S,
        api_url: str = DEFAULT_SLACK_API,
    ) -> None:
        self.secrets = secrets
        self.webhook_secret = webhook_secret
        self.timeout_s = timeout_s
        self.api_url = api_url

    def __repr__(self) -> str:
        return f"SlackChannel(secret={self.webhook_secret!r})"

    def message(self, note: Notification) -> dict[str, Any]:
        o = note.order
        what = o.task_id or "unparseable message"
        fields = [
            ("Severity", o.severity.value),
            ("Environment", note.environment),
            ("Task", what),
            ("Tenant", o.tenant or "-"),
            ("Reason", o.reason),
            ("Error", o.error_code or "-"),
            ("Attempts", str(o.attempts)),
            ("Run", o.run_id or "-"),
        ]
        runbook = (
            f"<{o.runbook_url}|Runbook>"
            if _is_link(o.runbook_url)
            else f"Runbook: `{_mrkdwn(o.runbook_url)}`"
            if o.runbook_url
            else "No runbook"
        )
        return {
            "text": note.summary,
            "blocks": [
                {
                    "type": "header",
                    "text": {
                        "type": "plain_text",
                        "text": f"{o.severity.value.upper()}: {what} dead-lettered"[:150],
                    },
                },
                {
                    "type": "section",
                    "fields": [
                        {"type": "mrkdwn", "text": f"*{label}*\n{_mrkdwn(value)[:1900]}"}
                        for label, value in fields
                    ],
                },
                {
                    "type": "section",
                    "text": {
                        "type": "mrkdwn",
                        "text": f"{runbook}  |  next: `rebound workorders show {_mrkdwn(o.work_order_id)}`",
                    },
                },
                {
                    "type": "context",
                    "elements": [
                        {
                            "type": "mrkdwn",
                            "text": f"Work order `{_mrkdwn(o.work_order_id)}` opened {iso(o.opened_at)}",
                        }
                    ],
                },
            ],
        }

    def resolved_message(self, note: Notification) -> dict[str, Any]:
        o = note.order
        text = _mrkdwn(note.resolved_summary)
        return {
            "text": note.resolved_summary,
            "blocks": [
                {
                    "type": "header",
                    "text": {
                        "type": "plain_text",
                        "text": f"RESOLVED: {o.task_id or o.subject} ({note.resolution})"[:150],
                    },
                },
                {"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}},
                {
                    "type": "context",
                    "elements": [
                        {
                            "type": "mrkdwn",
                            "text": f"Work order `{_mrkdwn(o.work_order_id)}` opened {iso(o.opened_at)}, "
                            f"resolved {iso(o.resolved_at) if o.resolved_at else '-'}",
                        }
                    ],
                },
            ],
        }

    def send(self, note: Notification) -> str:
        secret = self._secret()
        if isinstance(secret, _SlackApp):
            answer = secret.call(self, "chat.postMessage", {"channel": secret.channel, **self.message(note)})
            ref = f"{answer.get('channel') or secret.channel}/{answer.get('ts')}"
            log.info("slack message posted", extra={"work_order_id": note.order.work_order_id})
            return Sent(f"posted ts {answer.get('ts')}", ref=ref if answer.get("ts") else None)
        return self._webhook(secret, self.message(note), note)

    def resolve(self, note: Notification, opened: str | None = None) -> str:
        """Update the opening message and reply in its thread (bot token), or post a resolved
        message (incoming webhook, which names no message to follow up)."""
        secret = self._secret()
        if not isinstance(secret, _SlackApp):
            return self._webhook(secret, self.resolved_message(note), note)
        message = self.resolved_message(note)
        if opened and "/" in opened:
            channel, ts = opened.split("/", 1)
            secret.call(self, "chat.update", {"channel": channel, "ts": ts, **message})
            secret.call(
                self, "chat.postMessage", {"channel": channel, "thread_ts": ts, "text": message["text"]}
            )
            return f"updated ts {ts} and replied in its thread"
        answer = secret.call(self, "chat.postMessage", {"channel": secret.channel, **message})
        return f"posted ts {answer.get('ts')} (the opening message was not recorded)"

    def _secret(self) -> str | _SlackApp:
        try:
            value = self.secrets.get(self.webhook_secret)
        except OperationalError as exc:
            raise DeliveryFailed(self.name, f"webhook URL unavailable: {exc.message}") from None
        if value.lstrip().startswith("{"):
            return _SlackApp.parse(value, self.webhook_secret, self.api_url, self.timeout_s)
        if not _is_link(value):
            raise DeliveryFailed(self.name, f"the secret {self.webhook_secret} does not hold an http(s) URL")
        return value

    def _webhook(self, url: str, message: dict[str, Any], note: Notification) -> str:
        # The URL is the secret; its last path segment is the token, so hide that on its own too.
        token = url.rstrip("/").rsplit("/", 1)[-1]
        hidden = [url, token] if len(token) >= 8 else [url]
        status, raw = _post_json(self.name, url, message, self.timeout_s, hidden)
        answer = _answer(raw, hidden)
        if 200 <= status < 300:
            log.info("slack message posted", extra={"work_order_id": note.order.work_order_id})
            return f"HTTP {status}" + (f": {answer}" if answer else "")
        if status in (403, 404, 410):
            self.secrets.forget(self.webhook_secret)  # a revoked webhook may have been replaced
        raise DeliveryFailed(self.name, f"HTTP {status}" + (f": {answer}" if answer else ""))


@dataclass(frozen=True)
class _SlackApp:
    """A bot token and the channel to post in: Slack's Web API, which names each message."""

    token: str
    channel: str
    api_url: str
    timeout_s: float

    @classmethod
    def parse(cls, value: str, secret: str, api_url: str, timeout_s: float) -> _SlackApp:
        try:
            doc = json.loads(value)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not doc.get("token") or not doc.get("channel"):
            raise DeliveryFailed(
                "slack", f'the secret {secret} is JSON but not {{"token": ..., "channel": ...}}'
            )
        return cls(str(doc["token"]), str(doc["channel"]), api_url.rstrip("/"), timeout_s)

    def call(self, channel: SlackChannel, method: str, document: dict[str, Any]) -> dict[str, Any]:
        """One Web API call; Slack answers HTTP 200 with ``ok: false`` for most errors."""
        status, raw = _post_json(
            channel.name, f"{self.api_url}/{method}", document, self.timeout_s, [self.token], self.token
        )
        try:
            answer = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError):
            answer = {}
        if 200 <= status < 300 and isinstance(answer, dict) and answer.get("ok"):
            return answer
        if isinstance(answer, dict) and answer.get("error") in ("invalid_auth", "token_revoked"):
            channel.secrets.forget(channel.webhook_secret)
        error = answer.get("error") if isinstance(answer, dict) else None
        raise DeliveryFailed(channel.name, f"{method}: HTTP {status}" + (f", {error}" if error else ""))


def notification_channels(
    *,
    sns: SNSClient | None,
    topic_arn: str | None,
    secrets: SecretResolver,
    pagerduty_secret: str | None,
    slack_secret: str | None,
) -> list[Channel]:
    """The channels that are configured, in delivery order: SNS, PagerDuty, Slack."""
    channels: list[Channel] = []
    if sns is not None and topic_arn:
        channels.append(SnsChannel(sns, topic_arn))
    if pagerduty_secret:
        channels.append(PagerDutyChannel(secrets, pagerduty_secret))
    if slack_secret:
        channels.append(SlackChannel(secrets, slack_secret))
    return channels
