"""Bad queue messages never crash a consumer and are never lost (issue 14).

Every kind of message the executor, the retry scheduler, escalation and the sweeper's DLQ check
consume, as hypothesis mangles it: text that is not JSON, JSON that is not an object, events
with a detail-type the queue does not take, details with fields missing, of the wrong type or
absurd. Each record is
either handled, or refused to a DLQ with its reason; none raises, none is logged with a
traceback, and none is silently dropped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebound.engine.control_messages import parse_control_event
from rebound.engine.deps import Deps
from rebound.engine.messages import parse_execution_message
from rebound.handlers import escalation, executor, retry_scheduler
from support import Context, bus_event, queue_messages, sqs_event

pytestmark = pytest.mark.property_based

FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
KINDS = ["task.execution.failed", "task.dead_lettered", "task.sla.breached", "task.execution.updated"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
odd = json_values | st.just("") | st.just(-1) | st.just(10**30) | st.text(min_size=300, max_size=600)


@st.composite
def details(draw: st.DrawFn) -> dict[str, Any]:
    fields = ["run_id", "attempt", "subject", "task_id", "kind", "dead_lettered_at", "message_id", "tenant"]
    chosen = draw(st.lists(st.sampled_from(fields), unique=True, max_size=len(fields)))
    return {name: draw(odd) for name in chosen}


@st.composite
def control_bodies(draw: st.DrawFn) -> str:
    shape = draw(st.sampled_from(["text", "json", "event", "event-odd-detail"]))
    if shape == "text":
        return draw(st.text(max_size=200))
    if shape == "json":
        return json.dumps(draw(json_values))
    kind = draw(st.sampled_from(KINDS) | st.text(max_size=12))
    event = bus_event(kind, draw(details()))
    if shape == "event-odd-detail":
        event["detail"] = draw(json_values)
    return json.dumps(event)


@st.composite
def execution_bodies(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["fire", "event", "attempt", "replay", "manual"]) | st.text(max_size=8))
    fields = ["v", "task_id", "scheduled_time", "run_id", "attempt", "event_id", "time", "detail", "dispatch"]
    body: dict[str, Any] = {"v": 1, "kind": kind}
    for name in draw(st.lists(st.sampled_from(fields), unique=True, max_size=5)):
        body[name] = draw(odd)
    return draw(st.sampled_from([json.dumps(body), json.dumps(body)[:-1], json.dumps([body])]))


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


def check(
    deps: Deps,
    handler: Any,
    body: str,
    dlq: str,
    parse: Callable[[str], object],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Deliver ``body``: no traceback; a body ``parse`` refuses is in ``dlq`` with its reason."""
    caplog.clear()
    caplog.set_level(logging.INFO)
    before = len(queue_messages(deps, dlq))
    try:
        parse(body)
        well_formed = True
    except Exception:
        well_formed = False

    result = handler.lambda_handler(sqs_event(body), Context())

    assert tracebacks(caplog) == []
    if not well_formed:
        assert result == {"batchItemFailures": []}
        [refused] = queue_messages(deps, dlq)[before:]
        assert refused["raw"] == body
        assert refused["attributes"]["reason"]


@FUZZ
@given(body=control_bodies())
def test_the_retry_scheduler_refuses_what_it_cannot_use(
    wired: Deps, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    accepted = ("task.execution.failed",)
    check(wired, retry_scheduler, body, "control_dlq", lambda b: parse_control_event(b, accepted), caplog)


@FUZZ
@given(body=control_bodies())
def test_escalation_refuses_what_it_cannot_use(
    wired: Deps, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    accepted = ("task.dead_lettered", "task.sla.breached")
    check(wired, escalation, body, "control_dlq", lambda b: parse_control_event(b, accepted), caplog)


@FUZZ
@given(body=execution_bodies() | st.text(max_size=200))
def test_the_executor_dead_letters_what_it_cannot_run_with_its_reason(
    wired: Deps, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    check(wired, executor, body, "dlq", parse_execution_message, caplog)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(execution_bodies() | control_bodies() | st.text(max_size=100), min_size=1, max_size=4))
def test_the_sweeper_records_whatever_lands_in_the_dlq(
    wired: Deps, bodies: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Messages put in the DLQ by hand or by SQS's redrive, whatever they hold: the sweeper's
    check never raises and leaves every one of them recorded (``rebound dlq list`` shows it)."""
    from rebound.handlers import sweeper

    caplog.clear()
    sqs = wired.queues.client  # type: ignore[attr-defined]
    url = wired.settings.queue("dlq").url
    sent = [sqs.send_message(QueueUrl=url, MessageBody=body or " ")["MessageId"] for body in bodies]
    wired.clock.advance(11 * 60)  # type: ignore[attr-defined]

    sweeper.lambda_handler({}, Context())

    assert tracebacks(caplog) == []
    entries = wired.store.get_dlq_entries(sent)
    assert set(entries) == set(sent)
