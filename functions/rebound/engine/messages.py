"""The messages on the execution queue. Anything else is refused to the DLQ with its reason.

Every message names its run: ``run_id`` is a field or, for a fire or an event, derived from it."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from rebound.domain.basics import TASK_KEY_PATTERN
from rebound.domain.errors import ValidationFailed
from rebound.domain.ids import event_run_id, scheduled_run_id
from rebound.domain.timefmt import UtcDatetime


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    v: Literal[1] = 1


class FireMessage(_Message):
    """A schedule fired. Scheduler fills ``scheduled_time`` from ``<aws.scheduler.scheduled-time>``."""

    kind: Literal["fire"]
    task_id: Annotated[str, Field(pattern=TASK_KEY_PATTERN)]
    scheduled_time: UtcDatetime
    catch_up: bool = Field(default=False, description="sent by the run ledger for a missed fire")
    source: Literal["scheduler", "ledger"] = "scheduler"

    @property
    def run_id(self) -> str:
        """One run per task and fire time, however often the fire is delivered."""
        return scheduled_run_id(self.task_id, self.scheduled_time)


class EventMessage(_Message):
    """An event on the bus matched an event-triggered task."""

    kind: Literal["event"]
    task_id: Annotated[str, Field(pattern=TASK_KEY_PATTERN)]
    event_id: str = Field(min_length=1, max_length=128)
    time: UtcDatetime
    detail: dict[str, Any] = Field(default_factory=dict)

    @property
    def run_id(self) -> str:
        """One run per task and bus event, however often the event is delivered."""
        return event_run_id(self.task_id, self.event_id)


class AttemptMessage(_Message):
    """Run attempt ``attempt`` of an existing run (a retry)."""

    kind: Literal["attempt"]
    run_id: str = Field(min_length=1)
    attempt: int = Field(ge=1)
    dispatch: int | None = Field(
        default=None, ge=0, description="the run's dispatch token when this message was sent"
    )


class ReplayMessage(_Message):
    """Replay a dead-lettered run with a fresh attempt budget (also what a console redrive delivers)."""

    kind: Literal["replay"]
    run_id: str = Field(min_length=1)
    actor: str | None = Field(
        default=None,
        max_length=200,
        description="who asked for the replay; believed only with actor_sig (else recorded as unverified)",
    )
    actor_sig: str | None = Field(
        default=None,
        max_length=200,
        description="the ops layer's signature of actor and run_id (rebound.domain.audit.sign_actor)",
    )
    task_id: str | None = None
    reason: str | None = None
    attempts: int | None = None
    error_code: str | None = None
    dead_lettered_at: str | None = None
    dispatch: int | None = Field(
        default=None,
        ge=0,
        description="the run's dispatch token (set when Rebound sent it; absent on a DLQ copy moved back)",
    )


class ManualMessage(_Message):
    """An operator or service asked for a run now."""

    kind: Literal["manual"]
    task_id: Annotated[str, Field(pattern=TASK_KEY_PATTERN)]
    run_id: str = Field(min_length=1)
    requested_at: UtcDatetime
    actor: str = "api"


ExecutionMessage = Annotated[
    FireMessage | EventMessage | AttemptMessage | ReplayMessage | ManualMessage, Field(discriminator="kind")
]
_ADAPTER: TypeAdapter[ExecutionMessage] = TypeAdapter(ExecutionMessage)


def parse_execution_message(body: str) -> ExecutionMessage:
    """Parse a queue message body; ``ValidationFailed`` says exactly what is wrong with it."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValidationFailed(f"message body is not JSON: {exc}", reason="not_json") from None
    if not isinstance(data, dict):
        raise ValidationFailed("message body is JSON but not an object", reason="not_an_object")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(
            str(p) for p in err["loc"] if p not in {"fire", "event", "attempt", "replay", "manual"}
        )
        raise ValidationFailed(
            f"message does not match the execution schema: {where or 'body'}: {err['msg']}",
            reason="schema_mismatch",
        ) from None


def execution_message_schema() -> dict[str, Any]:
    """JSON Schema of a message body on the execution queue (``events/schemas/``)."""
    schema = _ADAPTER.json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "rebound/events/execution-message.json"
    schema["title"] = "Rebound execution queue message"
    return schema
