"""The events the retry scheduler and escalation consume from their queues, parsed before use.

A body that is not such an event (not JSON, not an object, a detail-type the consumer does not
take, a detail without the fields it needs) is refused at once: it goes to the control DLQ with
its reason and source queue, logged as one warning, instead of raising on every delivery until
the queue's redrive moves it there without a word. Anything that fails after parsing (a
throttle, a conflict) still fails the record, so it comes back and is retried.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rebound.domain.errors import ValidationFailed
from rebound.domain.events import EventType
from rebound.domain.schedules import WORKSTREAM_START
from rebound.domain.timefmt import parse_utc
from rebound.engine.deps import Deps

log = logging.getLogger(__name__)

CONTROL_DLQ = "control_dlq"


class _Detail(BaseModel):
    model_config = ConfigDict(extra="allow")


class FailedDetail(_Detail):
    run_id: str = Field(min_length=1, max_length=512)
    attempt: int = Field(ge=1, le=1_000_000)


class DeadLetteredDetail(_Detail):
    subject: str = Field(min_length=1, max_length=512)


class SlaBreachedDetail(_Detail):
    run_id: str = Field(min_length=1, max_length=512)
    task_id: str = Field(min_length=1, max_length=128)
    kind: str = Field(min_length=1, max_length=64)


class StepEndedDetail(_Detail):
    run_id: str = Field(min_length=1, max_length=512)
    workstream_run_id: str = Field(min_length=1, max_length=512)
    state: str = Field(min_length=1, max_length=64)


class WorkstreamStartDetail(_Detail):
    """A workstream's schedule fired (``scheduled_time``) or its rule matched an event (``event_id``)."""

    workstream_id: str = Field(min_length=1, max_length=128)
    scheduled_time: str | None = Field(default=None, max_length=64)
    event_id: str | None = Field(default=None, min_length=1, max_length=512)

    @field_validator("scheduled_time")
    @classmethod
    def _a_time(cls, value: str | None) -> str | None:
        if value is not None:
            parse_utc(value)  # raises ValueError naming what it could not read
        return value

    @model_validator(mode="after")
    def _one_trigger(self) -> WorkstreamStartDetail:
        if (self.scheduled_time is None) == (self.event_id is None):
            raise ValueError("give scheduled_time (a schedule's fire) or event_id (an event), one of them")
        return self


class WorkstreamFailedDetail(_Detail):
    run_id: str = Field(min_length=1, max_length=512)


class ResourceExhaustedDetail(_Detail):
    workstream_id: str = Field(min_length=1, max_length=128)
    step: str = Field(min_length=1, max_length=128)
    resources: list[str]


class RecoveredDetail(_Detail):
    run_id: str = Field(min_length=1, max_length=512)
    work_order_id: str = Field(min_length=1, max_length=128)


class ResolvedDetail(_Detail):
    work_order_id: str = Field(min_length=1, max_length=128)


DETAILS: dict[str, type[_Detail]] = {
    EventType.EXECUTION_FAILED: FailedDetail,
    EventType.DEAD_LETTERED: DeadLetteredDetail,
    EventType.SLA_BREACHED: SlaBreachedDetail,
    EventType.WORKSTREAM_STEP_ENDED: StepEndedDetail,
    WORKSTREAM_START: WorkstreamStartDetail,
    EventType.WORKSTREAM_FAILED: WorkstreamFailedDetail,
    EventType.DEPENDENCY_CYCLE_DETECTED: WorkstreamFailedDetail,
    EventType.RESOURCE_EXHAUSTED: ResourceExhaustedDetail,
    EventType.RUN_RECOVERED: RecoveredDetail,
    EventType.WORKORDER_RESOLVED: ResolvedDetail,
}


def parse_control_event(body: str, accepted: tuple[str, ...]) -> tuple[str, _Detail]:
    """(detail-type, detail) of a bus event a consumer takes; ``ValidationFailed`` says what is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError) as exc:
        raise ValidationFailed(f"message body is not JSON: {exc}", reason="not_json") from None
    if not isinstance(data, dict):
        raise ValidationFailed("message body is JSON but not an object", reason="not_an_object")
    kind = data.get("detail-type")
    if kind not in accepted:
        raise ValidationFailed(
            f"detail-type is {kind!r}; this queue takes {', '.join(accepted)}", reason="unexpected_event"
        )
    detail = data.get("detail")
    if not isinstance(detail, dict):
        raise ValidationFailed("detail: expected an object", reason="schema_mismatch")
    try:
        # a detail-type without a schema here is checked by its consumer (the reports of
        # asynchronous attempts: ``rebound.engine.async_reports.report_from_event``)
        return str(kind), DETAILS.get(str(kind), _Detail).model_validate(detail)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "detail"
        raise ValidationFailed(f"detail.{where}: {err['msg']}", reason="schema_mismatch") from None


def refuse(deps: Deps, source: str, message_id: str, body: str, error: ValidationFailed) -> None:
    """Move a message its consumer cannot use to the control DLQ, with why and from where."""
    reason = str(error.details.get("reason") or "invalid")
    log.warning(
        "refused control message",
        extra={"message_id": message_id, "queue": source, "reason": reason, "detail": error.message},
    )
    deps.queues.send(
        CONTROL_DLQ,
        body,
        attributes={
            "reason": f"{reason}: {error.message}"[:256],
            "source_queue": source,
            "source_message_id": message_id,
        },
    )


def consume(
    deps: Deps,
    source: str,
    message_id: str,
    body: str,
    accepted: tuple[str, ...],
    handle: Callable[[str, dict[str, Any]], str],
) -> str:
    """Parse ``body`` and hand (detail-type, detail) to ``handle``; a bad body is refused, not raised."""
    try:
        kind, detail = parse_control_event(body, accepted)
    except ValidationFailed as exc:
        refuse(deps, source, message_id, body, exc)
        return "refused"
    return handle(kind, detail.model_dump())
