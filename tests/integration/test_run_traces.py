"""With ``tracing: true``, one run is one trace: the target call, the failure event the relay
publishes, and the retry the retry scheduler sends all name the trace the run's id and time give
(``rebound.domain.tracing``), through the real handlers on the local cloud's moto."""

from __future__ import annotations

import json
from typing import Any

import pytest
from moto.sqs.models import sqs_backends

from rebound.adapters.dynamo import from_item
from rebound.adapters.streams import outbox_events
from rebound.domain import tracing
from rebound.domain.timefmt import parse_utc
from rebound.engine.deps import Deps
from rebound.engine.ports.targets import Invocation
from rebound.handlers import executor, retry_scheduler
from support import Context, bus_event, register, sqs_event, task

pytestmark = pytest.mark.integration

RUN_ID = "job:20260307T090000Z"
FIRE = {"v": 1, "kind": "fire", "task_id": "job", "scheduled_time": "2026-03-07T09:00:00Z"}


def root(header: str) -> str:
    """The W3C form of an X-Ray header's root (``Root=1-<8>-<24>``)."""
    fields = dict(part.split("=", 1) for part in header.split(";"))
    _, epoch, rest = fields["Root"].split("-")
    return epoch + rest


def outbox_records(deps: Deps) -> list[dict[str, Any]]:
    """The outbox's items as its stream hands them to the relay (inserts, in write order)."""
    items = deps.store.client.scan(TableName=deps.settings.table("outbox"))["Items"]
    items.sort(key=lambda i: (from_item(i)["created_at"], from_item(i)["event_id"]))
    return [
        {"eventName": "INSERT", "dynamodb": {"NewImage": item, "SequenceNumber": str(n)}}
        for n, item in enumerate(items, start=1)
    ]


def test_the_target_call_the_failure_event_and_the_retry_name_one_trace(
    wired: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    wired.settings = wired.settings.model_copy(update={"tracing": True})
    calls: list[Invocation] = []
    invoke = wired.targets.invoke
    monkeypatch.setattr(
        wired.targets, "invoke", lambda target, call: calls.append(call) or invoke(target, call)
    )
    register(wired, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    expected = tracing.trace_id(RUN_ID, parse_utc("2026-03-07T09:00:00Z"))

    executor.lambda_handler(sqs_event(FIRE), Context())  # the first attempt fails
    [failed] = [
        e
        for e in outbox_events(outbox_records(wired), traced=True)
        if e.detail_type == "task.execution.failed"
    ]
    assert failed.trace is not None and root(failed.trace) == expected
    assert "Sampled=1" in failed.trace

    retry_scheduler.lambda_handler(
        sqs_event(bus_event("task.execution.failed", json.loads(failed.detail))), Context()
    )
    queue = sqs_backends["123456789012"]["us-east-1"].get_queue(wired.settings.queue("execution").name)
    [retry] = list(queue._messages)
    assert root(retry.system_attributes["AWSTraceHeader"]["StringValue"]) == expected

    wired.clock.sleep(300)  # type: ignore[attr-defined]
    executor.lambda_handler(sqs_event(retry.body), Context())  # the retry succeeds
    assert [c.attempt for c in calls] == [1, 2]
    assert {c.trace_id for c in calls} == {expected}, "each attempt's target call is in the run's trace"
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state.value == "succeeded"


def test_without_tracing_nothing_carries_a_trace_header(wired: Deps) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"fail_first": 1}}))
    executor.lambda_handler(sqs_event(FIRE), Context())
    events = outbox_events(outbox_records(wired), traced=wired.settings.tracing)
    assert events and all(e.trace is None for e in events)
    [failed] = [e for e in events if e.detail_type == "task.execution.failed"]
    retry_scheduler.lambda_handler(
        sqs_event(bus_event("task.execution.failed", json.loads(failed.detail))), Context()
    )
    queue = sqs_backends["123456789012"]["us-east-1"].get_queue(wired.settings.queue("execution").name)
    assert all("AWSTraceHeader" not in m.system_attributes for m in queue._messages)
