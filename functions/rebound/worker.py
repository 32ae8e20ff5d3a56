"""For the work behind an asynchronous target: report heartbeats and completion in two lines.

    from rebound.worker import Completion
    c = Completion.from_env()          # or Completion.from_payload(event) in a Lambda target
    c.heartbeat(progress=0.4)          # as often as the task's heartbeat_timeout needs
    c.complete(output={"rows": 1200})  # or c.fail("EXPORT_BROKEN", "disk full")

Each report is an event on Rebound's bus (``rebound.task.heartbeat|completed|failed``, source
``rebound``), which a rule sends to Rebound's reports consumer; the worker needs only
``events:PutEvents`` on the bus. The answer (accepted, or refused because the attempt timed out,
the token was already used, ...) is in the consumer's log and the run's audit trail; a worker that
needs the answer itself calls the ops API (``POST /runs/{run_id}/complete``) or ``rebound runs
complete`` instead.

``from_env`` reads ``REBOUND_COMPLETION_TOKEN`` and ``REBOUND_BUS_NAME``; an HTTP target receives
the token in its request body at ``payload.rebound.completion_token`` (so does a Lambda target's
event), which ``from_payload`` reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from rebound import resources as r
from rebound.domain.completion import ASYNC_PAYLOAD_KEY

ENV_TOKEN = "REBOUND_COMPLETION_TOKEN"


class ReportNotSent(RuntimeError):
    """The bus did not take the report; send it again (reports are answered exactly once)."""


class Completion:
    def __init__(
        self, token: str, bus_name: str, *, source: str = r.SPEC.event_source, client: Any | None = None
    ) -> None:
        if not token:
            raise ValueError("a completion token is required")
        if not bus_name:
            raise ValueError(f"Rebound's bus name is required ({r.ENV_BUS})")
        self.token = token
        self.bus_name = bus_name
        self.source = source
        self._client = client

    def __repr__(self) -> str:
        return f"Completion(bus={self.bus_name!r}, token=***)"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, client: Any | None = None) -> Completion:
        env = os.environ if environ is None else environ
        token = env.get(ENV_TOKEN, "")
        if not token:
            raise ValueError(f"{ENV_TOKEN} is not set: the completion token the task's target was given")
        return cls(token, env.get(r.ENV_BUS, ""), client=client)

    @classmethod
    def from_payload(
        cls, payload: Mapping[str, Any], bus_name: str | None = None, *, client: Any | None = None
    ) -> Completion:
        block = payload.get("payload", payload).get(ASYNC_PAYLOAD_KEY)
        if not isinstance(block, Mapping) or not isinstance(block.get("completion_token"), str):
            raise ValueError(
                f"no {ASYNC_PAYLOAD_KEY}.completion_token in the payload: is the target mode: async?"
            )
        return cls(str(block["completion_token"]), bus_name or os.environ.get(r.ENV_BUS, ""), client=client)

    def heartbeat(self, progress: float | None = None) -> None:
        self._send("rebound.task.heartbeat", {"progress": progress})

    def complete(self, output: Mapping[str, Any] | None = None, progress: float | None = None) -> None:
        self._send("rebound.task.completed", {"output": dict(output or {}), "progress": progress})

    def fail(self, error_code: str = "TASK_FAILED", message: str = "", *, retryable: bool = True) -> None:
        self._send(
            "rebound.task.failed", {"error_code": error_code, "message": message, "retryable": retryable}
        )

    def _send(self, detail_type: str, fields: dict[str, Any]) -> None:
        detail = {"token": self.token, **{k: v for k, v in fields.items() if v is not None}}
        if self._client is None:
            import boto3

            self._client = boto3.client("events")
        resp = self._client.put_events(
            Entries=[
                {
                    "Source": self.source,
                    "DetailType": detail_type,
                    "Detail": json.dumps(detail),
                    "EventBusName": self.bus_name,
                }
            ]
        )
        if resp.get("FailedEntryCount"):
            entry = (resp.get("Entries") or [{}])[0]
            raise ReportNotSent(
                f"the bus refused the report: {entry.get('ErrorCode')} {entry.get('ErrorMessage')}"
            )
