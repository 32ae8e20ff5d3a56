"""The executor handler: SQS batch in, partial batch failures out, exactly one target call per attempt."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from rebound.domain.models import RunState
from rebound.engine.deps import Deps
from rebound.handlers import executor
from rebound_local.instrument import RecordingTargets
from support import (
    Context,
    detail_types,
    fire,
    outbox_events,
    queue_messages,
    register,
    sqs_event,
    sqs_record,
    task,
)

pytestmark = pytest.mark.integration
RUN_ID = "job:20260307T090000Z"


def test_a_scheduled_fire_runs_the_target_once_and_succeeds(wired: Deps, calls: RecordingTargets) -> None:
    register(wired, task("job"))
    response = executor.lambda_handler(sqs_event(fire("job")), Context())
    assert response == {"batchItemFailures": []}
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED and run.attempt == 1
    assert [(c.run_id, c.attempt) for c in calls.calls] == [(RUN_ID, 1)]
    assert detail_types(wired) == ["task.execution.updated", "task.execution.updated"]


def test_a_failed_attempt_is_recorded_and_announced_for_the_retry_scheduler(wired: Deps) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.FAILED
    assert run.attempts[0].error_code == "SIM_FAILURE" and run.last_error_retryable is True
    failed = [d for t, d in outbox_events(wired) if t == "task.execution.failed"]
    assert failed == [failed[0]] and failed[0]["attempt"] == 1 and failed[0]["retryable"] is True


def test_redelivered_fire_does_not_run_the_target_again(wired: Deps, calls: RecordingTargets) -> None:
    register(wired, task("job"))
    for _ in range(3):
        executor.lambda_handler(sqs_event(fire("job")), Context())
    assert len(calls.calls) == 1


def test_concurrent_duplicate_deliveries_run_the_target_once(wired: Deps, calls: RecordingTargets) -> None:
    register(wired, task("job"))
    event = sqs_event(fire("job"))
    threads = [threading.Thread(target=executor.lambda_handler, args=(event, Context())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls.calls) == 1
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.SUCCEEDED and len(run.attempts) == 1


def test_a_malformed_message_goes_to_the_dlq_with_its_reason_once(
    wired: Deps, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    event = sqs_event("this is not json")
    message_id = event["Records"][0]["messageId"]
    assert executor.lambda_handler(event, Context()) == {"batchItemFailures": []}  # deleted, never retried
    executor.lambda_handler(event, Context())  # a redelivery is recognised, not dead-lettered twice
    [dlq] = [
        m for m in queue_messages(wired, "dlq") if m["attributes"].get("source_message_id") == message_id
    ]
    assert dlq["raw"] == "this is not json"
    assert dlq["attributes"]["error_code"] == "INVALID_MESSAGE"
    assert dlq["attributes"]["reason"].startswith("not_json")
    assert [r.action for r in wired.store.audit_trail(f"msg#{message_id}")] == ["dead-lettered"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "refused" in r.getMessage()]
    assert len(errors) == 2  # once per delivery of the message, not once per retry loop
    assert detail_types(wired).count("task.dead_lettered") == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"v": 1, "kind": "fire"}', "schema_mismatch"),
        ('{"v": 1, "kind": "teleport", "task_id": "x"}', "schema_mismatch"),
        ("[1, 2, 3]", "not_an_object"),
        (
            '{"v": 1, "kind": "fire", "task_id": "BAD ID", "scheduled_time": "2026-03-07T09:00:00Z"}',
            "schema_mismatch",
        ),
    ],
)
def test_messages_that_fail_the_schema_are_refused_with_a_reason(wired: Deps, body: str, reason: str) -> None:
    executor.lambda_handler(sqs_event(body), Context())
    [dlq] = queue_messages(wired, "dlq")
    assert dlq["attributes"]["reason"].startswith(reason)


def test_an_unknown_task_is_a_terminal_failure(wired: Deps) -> None:
    executor.lambda_handler(sqs_event(fire("ghost")), Context())
    run = wired.store.get_run("ghost:20260307T090000Z")
    assert run is not None and run.state is RunState.FAILED
    assert run.last_error_code == "UNKNOWN_TASK" and run.last_error_retryable is False
    failed = [d for t, d in outbox_events(wired) if t == "task.execution.failed"]
    assert failed[0]["retryable"] is False and failed[0]["outcome"] == "refused"


def test_a_bad_message_does_not_disturb_its_neighbours_in_the_batch(
    wired: Deps, calls: RecordingTargets
) -> None:
    register(wired, task("a"), task("b"))
    event = {
        "Records": [
            sqs_record(json.dumps(fire("a"))),
            sqs_record("{broken"),
            sqs_record(json.dumps(fire("b"))),
        ]
    }
    assert executor.lambda_handler(event, Context()) == {"batchItemFailures": []}
    assert sorted(c.task_id for c in calls.calls) == ["a", "b"]
    assert len(queue_messages(wired, "dlq")) == 1


def test_too_little_time_left_hands_the_message_back_untouched(wired: Deps, calls: RecordingTargets) -> None:
    register(wired, task("job"))
    sent = wired.queues.send("execution", fire("job"))
    from moto.sqs.models import sqs_backends

    backend = sqs_backends["123456789012"]["us-east-1"]
    [msg] = backend.receive_message(wired.settings.queue("execution").name, 1, 0, 600)
    event = {"Records": [sqs_record(msg.body, message_id=sent.message_id, receipt=msg.receipt_handle)]}
    response = executor.lambda_handler(event, Context(remaining_ms=8_000))
    assert response == {"batchItemFailures": [{"itemIdentifier": sent.message_id}]}
    assert calls.calls == []
    assert wired.store.get_run(RUN_ID) is None
    # released for another invocation now, instead of after the visibility timeout
    wired.clock.sleep(0.01)  # moto needs the clock to move past the release instant
    assert backend.receive_message(wired.settings.queue("execution").name, 1, 0, 600)


def test_fires_due_after_a_pause_are_recorded_as_skipped(wired: Deps, calls: RecordingTargets) -> None:
    register(wired, task("job", state="paused"))  # paused at 09:00
    executor.lambda_handler(sqs_event(fire("job", "2026-03-07T09:05:00Z")), Context())
    run = wired.store.get_run("job:20260307T090500Z")
    assert run is not None and run.state is RunState.SKIPPED and calls.calls == []


def test_a_fire_due_before_the_pause_still_runs_when_delivered_late(
    wired: Deps, calls: RecordingTargets
) -> None:
    register(wired, task("job"))
    wired.clock.sleep(600)
    from rebound.domain.models import TaskState
    from rebound.ops.tasks import TaskOps

    TaskOps(wired, "test").set_state("job", TaskState.PAUSED)  # paused at 09:10
    executor.lambda_handler(sqs_event(fire("job", "2026-03-07T09:05:00Z")), Context())
    run = wired.store.get_run("job:20260307T090500Z")
    assert run is not None and run.state is RunState.SUCCEEDED and len(calls.calls) == 1


def test_the_attempt_deadline_is_cut_to_the_invocation_time_left(wired: Deps) -> None:
    register(wired, task("job", timeout_s=200))
    executor.lambda_handler(sqs_event(fire("job")), Context(remaining_ms=60_000))
    [started] = [r for r in wired.store.audit_trail(f"run#{RUN_ID}") if r.action == "attempt-started"]
    assert started.evidence["deadline_s"] == 50  # 60 s left minus the 10 s safety margin
