"""The SLA-breach webhook: ``POST {url}/notifications/sla-breach`` for each SLA breach, beside the
alerts topic, PagerDuty and Slack (``notifications.sla_webhook_url`` in the environment file).

What the receiver gets:

- the body: ``{"breach": {...}, "environment", "severity", "subject", "sent_at"}``, where
  ``breach`` is the ``task.sla.breached`` event's detail (task, run, tenant, kind, the limit and
  what was measured);
- ``Idempotency-Key: sla#<run id>#<kind>``: the same breach delivered again (a retry after a
  failure of this or another channel) carries the same key;
- when ``notifications.sla_webhook_secret`` names a key, ``X-Rebound-Signature: t=<unix>,v1=<hex>``
  (HMAC-SHA256 of ``"<t>.<raw body>"``), the http target's contract: a receiver checks it with
  ``rebound.adapters.targets.http.verify_signature``.

An answer other than 2xx, no answer within the timeout, or an unreadable key is a failed
delivery (``DeliveryFailed``); the escalation handler records which channels delivered the breach
and retries only the others (``Escalation.on_sla_breached``).
"""

from __future__ import annotations

from typing import Any

from rebound.adapters.notify import HTTP_TIMEOUT_S, MAX_DETAIL, _answer, _post_json
from rebound.adapters.secrets import SecretResolver
from rebound.adapters.targets.http import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature_header,
)
from rebound.domain.errors import OperationalError
from rebound.domain.jsonutil import dumps
from rebound.domain.notification import SLA_BREACH_ALERT
from rebound.engine.ports import Clock, DeliveryFailed

SLA_BREACH_PATH = "/notifications/sla-breach"


class SlaWebhookChannel:
    """Alerts of kind ``sla-breach`` only; not a work-order channel (it has no ``send``)."""

    name = "sla_webhook"

    def __init__(
        self,
        url: str,
        secrets: SecretResolver,
        secret: str | None,
        clock: Clock,
        timeout_s: float = HTTP_TIMEOUT_S,
    ) -> None:
        self.endpoint = url.rstrip("/") + SLA_BREACH_PATH
        self.secrets = secrets
        self.secret = secret
        self.clock = clock
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"SlaWebhookChannel({self.endpoint!r})"  # never the key

    def takes(self, kind: str) -> bool:
        return kind == SLA_BREACH_ALERT

    def alert(self, subject: str, body: dict[str, Any], severity: str) -> str:
        document = {
            "breach": {k: v for k, v in body.items() if k not in ("environment", "next_step")},
            "environment": body.get("environment"),
            "severity": severity,
            "subject": subject,
            "sent_at": self.clock.now().isoformat().replace("+00:00", "Z"),
        }
        raw = dumps(document).encode()
        timestamp = int(self.clock.now().timestamp())
        headers = {
            TIMESTAMP_HEADER: str(timestamp),
            IDEMPOTENCY_HEADER: f"sla#{body.get('run_id')}#{body.get('kind')}",
        }
        known: list[str] = []
        if self.secret:
            try:
                key = self.secrets.get(self.secret)
            except OperationalError as exc:
                raise DeliveryFailed(self.name, f"signing key unavailable: {exc.message}") from exc
            known.append(key)
            headers[SIGNATURE_HEADER] = signature_header(key.encode(), timestamp, raw)
        status, answer = _post_json(self.name, self.endpoint, raw, self.timeout_s, known, headers=headers)
        if 200 <= status < 300:
            return f"HTTP {status}"
        raise DeliveryFailed(self.name, f"HTTP {status}: {_answer(answer, known)}"[:MAX_DETAIL])
