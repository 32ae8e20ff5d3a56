"""Asynchronous attempts against moto, through each reporting path: the ops API's routes
(``POST /runs/{run_id}/heartbeat|complete|fail``), an event on Rebound's bus (the ``task_reports``
rule to the retry queue, whose consumer answers it), and the completion key read from SSM as the
local cloud provisions it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_ops_api import call

from rebound import wiring
from rebound.domain.ids import run_subject
from rebound.domain.run import RunState
from rebound.engine.async_reports import reports_subject
from rebound.engine.deps import Deps
from rebound.engine.executor import Executor, QueueMessage
from rebound.worker import Completion
from support import Context, bus_event, fire, queue_messages, register, sqs_event, task

pytestmark = pytest.mark.integration
RUN = "exp:20260307T090000Z"


class Captured:
    """The sim target's asynchronous start, with the token it was given (no worker plays it)."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def start(self, call: Any, behavior: Any, token: str) -> None:
        self.tokens.append(token)


@pytest.fixture
def started(deps: Deps) -> Any:
    captured = Captured()
    deps.targets.invokers["sim"].workers = captured  # type: ignore[attr-defined]
    register(
        deps,
        task(
            "exp",
            target={"type": "sim", "mode": "async", "behavior": {"async": {"duration": "1h"}}},
            heartbeat_timeout="10m",
            max_duration="3h",
        ),
    )
    assert Executor(deps).process(QueueMessage("m1", json.dumps(fire("exp"))), 300) == "started-async"
    wiring.use(deps)
    yield captured.tokens[0]
    wiring.use(None)


def api() -> Any:
    from rebound.handlers import ops_api

    return ops_api


def test_the_key_comes_from_the_provisioned_ssm_parameter(deps: Deps, started: str) -> None:
    assert deps.settings.completion_key == "/rebound/test/completion-key"
    run = deps.store.get_run(RUN)
    assert run is not None and run.state is RunState.RUNNING and run.async_token_id is not None


def test_the_api_accepts_a_heartbeat_and_a_completion_and_refuses_the_second(
    deps: Deps, started: str
) -> None:
    status, body = call(api(), "POST", f"/runs/{RUN}/heartbeat", {"token": started, "progress": 0.25})
    assert status == 200 and body["accepted"] and body["progress"] == 0.25

    status, shown = call(api(), "GET", f"/runs/{RUN}")
    assert status == 200 and shown["run"]["progress"] == 0.25  # runs show and the console's timeline
    [beat] = [e for e in shown["timeline"] if e["action"] == "heartbeat"]
    assert beat["detail"]["progress"] == 0.25 and beat["detail"]["report_before"]

    status, body = call(api(), "POST", f"/runs/{RUN}/complete", {"token": started, "output": {"rows": 3}})
    assert status == 200 and body["state"] == "succeeded"

    status, body = call(api(), "POST", f"/runs/{RUN}/complete", {"token": started})
    assert status == 409 and body["reason"] == "used" and body["accepted"] is False
    status, body = call(api(), "POST", f"/runs/{RUN}/heartbeat", {"token": started})
    assert status == 409 and body["reason"] == "used"
    assert [r.evidence["reason"] for r in deps.store.audit_trail(reports_subject(RUN))] == ["used", "used"]
    _, shown = call(api(), "GET", f"/runs/{RUN}")
    refused = [e["detail"]["reason"] for e in shown["timeline"] if e["action"] == "report-refused"]
    assert refused == ["used", "used"]
    completed = deps.store.audit_trail(run_subject(RUN))[-1]
    assert completed.action == "attempt-succeeded" and completed.evidence["output"] == {"rows": 3}


def test_the_api_refuses_a_token_for_another_run_and_bad_bodies(deps: Deps, started: str) -> None:
    status, body = call(api(), "POST", "/runs/exp:20260308T090000Z/complete", {"token": started})
    assert status == 409 and body["reason"] == "other_run"
    status, body = call(api(), "POST", f"/runs/{RUN}/heartbeat", {"token": started, "progress": 2})
    assert status == 400 and body["field"] == "progress"
    status, body = call(api(), "POST", f"/runs/{RUN}/fail", {"token": started, "error_code": "bad code"})
    assert status == 400 and body["field"] == "error_code"
    assert deps.store.get_run(RUN).state is RunState.RUNNING  # type: ignore[union-attr]


def test_a_failure_event_on_the_bus_fails_the_attempt_and_a_duplicate_is_refused(
    deps: Deps, started: str
) -> None:
    from rebound.handlers import retry_scheduler

    detail = {"token": started, "error_code": "EXPORT_BROKEN", "message": "disk full"}
    event = bus_event("rebound.task.failed", detail)
    answer = retry_scheduler.lambda_handler(sqs_event(event, event), Context())
    assert answer == {"batchItemFailures": []}
    run = deps.store.get_run(RUN)
    assert run is not None and run.state is RunState.FAILED and run.last_error_code == "EXPORT_BROKEN"
    assert [r.evidence["reason"] for r in deps.store.audit_trail(reports_subject(RUN))] == ["used"]


def test_the_worker_helper_reports_on_the_bus_and_the_rule_routes_them_to_the_retry_queue(
    deps: Deps, started: str, aws: Any
) -> None:
    from rebound.handlers import retry_scheduler

    environ = {"REBOUND_COMPLETION_TOKEN": started, "REBOUND_BUS_NAME": deps.settings.bus_name}
    c = Completion.from_env(environ, client=aws.client("events"))
    c.heartbeat(progress=0.5)
    c.complete(output={"rows": 7})
    bodies = [m["body"] for m in queue_messages(deps, "retry")]
    assert [b["detail-type"] for b in bodies] == ["rebound.task.heartbeat", "rebound.task.completed"]
    assert bodies[0]["detail"] == {"token": started, "progress": 0.5}

    # the retry queue's consumer answers them, in order
    assert retry_scheduler.lambda_handler(sqs_event(*bodies), Context()) == {"batchItemFailures": []}
    run = deps.store.get_run(RUN)
    assert run is not None and run.state is RunState.SUCCEEDED and run.heartbeats == 1


def test_the_worker_helper_reads_the_token_from_a_target_payload() -> None:
    with pytest.raises(ValueError, match="completion_token"):
        Completion.from_payload({"payload": {}}, "bus")
    c = Completion.from_payload({"payload": {"rebound": {"completion_token": "t.s"}}}, "bus")
    assert c.token == "t.s" and "t.s" not in repr(c)


def test_a_report_the_retry_queues_consumer_gave_up_on_is_answered_by_the_sweeper(
    deps: Deps, started: str
) -> None:
    """SQS moves a report its consumer kept failing on to the control DLQ. It used to stay there:
    the attempt then timed out and was retried although its worker had finished."""
    from rebound.engine.async_reports import REPORT_DETAIL_TYPES
    from rebound.engine.sweeper import REPORT_PREFIX
    from rebound.handlers import sweeper

    assert all(kind.startswith(REPORT_PREFIX) for kind in REPORT_DETAIL_TYPES)
    completed = bus_event("rebound.task.completed", {"token": started, "output": {"rows": 7}})
    late = bus_event("rebound.task.failed", {"token": started, "error_code": "TOO_LATE", "message": "x"})
    not_a_report = bus_event("rebound.task.completed", {"output": {}})  # no token: stays for an operator
    for body in (completed, late, not_a_report):
        deps.queues.send("control_dlq", body)
    answer = sweeper.lambda_handler({}, Context())
    run = deps.store.get_run(RUN)
    assert run is not None and run.state is RunState.SUCCEEDED  # the late failure was refused
    assert [r.evidence["reason"] for r in deps.store.audit_trail(reports_subject(RUN))] == ["used"]
    assert len(answer["control_handled"]) == 2
    left = [m["body"] for m in queue_messages(deps, "control_dlq")]
    assert left == [not_a_report]
