"""The ``plugin`` target (the scheduler's ``POST /plugin/runtime/{pluginId}/execute`` contract)
against a real HTTP server on 127.0.0.1: the route, the body, the trace context, the signature,
and the http target's reading of each answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError
from test_http_target import (  # the loopback receiver and its fixtures
    KEY,
    TRACE_ID,
    Receiver,
    Reply,
    a_call,
    invoker,
    receiver,
    secrets,
)

from rebound.adapters.targets.http import HttpInvoker, verify_signature
from rebound.domain.target_safety import task_problems
from rebound.domain.target_specs import PluginTarget, TargetRules
from rebound.domain.task import Task

pytestmark = pytest.mark.integration
__all__ = ["invoker", "receiver", "secrets"]  # fixtures, imported for pytest to find


def a_plugin(receiver: Receiver, **changes: Any) -> PluginTarget:
    base = receiver.url.split("/hooks")[0] + "/runtime-base/"
    data = {
        "type": "plugin",
        "url": base,
        "plugin_id": "invoice-export",
        "secret": "/rebound/test/targets/billing-hook",
    }
    return PluginTarget.model_validate({**data, **changes})


def test_a_plugin_is_run_by_its_runtimes_route_with_its_parameters_and_trace(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    call = a_call(clock)
    outcome = invoker.invoke(a_plugin(receiver), call)

    assert outcome.ok, outcome
    got = receiver.requests[0]
    assert got.path == "/runtime-base/plugin/runtime/invoice-export/execute"
    body = json.loads(got.body)
    assert body["plugin_id"] == "invoice-export"
    assert body["parameters"] == {"invoice": 42, "currency": "EUR"} and "payload" not in body
    assert body["idempotency_key"] == call.idempotency_key == got.headers["Idempotency-Key"]
    assert body["trace"]["traceparent"] == got.headers["traceparent"]
    assert got.headers["traceparent"].split("-")[1] == TRACE_ID
    now = int(clock.now().timestamp())
    assert verify_signature(KEY.encode(), got.headers["X-Rebound-Signature"], got.body, now=now)


def test_a_plugin_runtime_that_fails_or_hangs_is_retried_and_one_that_refuses_is_not(
    receiver: Receiver, invoker: HttpInvoker, clock: Any
) -> None:
    receiver.reply = Reply(500, b'{"error": "runtime down"}')
    failed = invoker.invoke(a_plugin(receiver), a_call(clock))
    assert (failed.error_code, failed.retryable) == ("HTTP_500", True)

    receiver.reply = Reply(404, b'{"error": "no such plugin"}')
    unknown = invoker.invoke(a_plugin(receiver), a_call(clock))
    assert (unknown.error_code, unknown.retryable) == ("HTTP_404", False)

    receiver.reply = Reply(200, delay_before_headers_s=1.5)
    hung = invoker.invoke(a_plugin(receiver), a_call(clock, seconds=0.5))
    assert (hung.error_code, hung.retryable) == ("TIMEOUT", True)


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"plugin_id": "../admin"}, "plugin_id"),
        ({"plugin_id": ""}, "plugin_id"),
        ({"url": "ftp://runtime.internal"}, "url"),
        ({"url": "https://runtime.internal/base?x=1"}, "url"),
    ],
)
def test_a_plugin_target_that_cannot_name_one_route_is_refused_naming_the_field(
    receiver: Receiver, changes: dict[str, Any], where: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        a_plugin(receiver, **changes)
    assert [e["loc"][-1] for e in caught.value.errors()] == [where]


def test_a_plugin_runtime_the_environment_does_not_allow_is_refused_at_registration() -> None:
    task = Task.model_validate(
        {
            "id": "acme.export",
            "tenant": "acme",
            "schedule": {"cron": "0 * * * *"},
            "target": {"type": "plugin", "url": "http://169.254.169.254/", "plugin_id": "export"},
        }
    )
    problems = dict(task_problems(task, TargetRules.defaults_for("prod"), "io.rebound"))
    assert "target.url" in problems, problems
