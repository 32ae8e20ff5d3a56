"""The executor handler: SQS batch in, partial batch failures out, exactly one target call per attempt."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from rebound.domain.errors import Throttled
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.engine.ports.targets import Invocation, Outcome
from rebound.handlers import executor
from rebound_local.instrument import RecordingTargets
from support import (
    Context,
    delete_done,
    detail_types,
    fire,
    outbox_events,
    queue_messages,
    receive_event,
    register,
    sqs_event,
    sqs_record,
    task,
    visible_at_ms,
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
    # No rule of the stack consumes task.execution.updated: a clean run puts nothing in the outbox.
    assert detail_types(wired) == []


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


def test_too_little_time_left_releases_the_attempt_to_a_fresh_message(
    wired: Deps, calls: RecordingTargets
) -> None:
    """A message it has no time for is not handed back (that would count towards maxReceiveCount):
    the run is recorded pending under a new dispatch token and a fresh message carries it."""
    register(wired, task("job"))
    wired.queues.send("execution", fire("job"))
    event = receive_event(wired)
    response = executor.lambda_handler(event, Context(remaining_ms=8_000))
    assert response == {"batchItemFailures": []}  # the original is deleted: it is stale now
    delete_done(wired, event, response)
    assert calls.calls == []
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.PENDING and run.releases == 1 and run.dispatch == 1
    [fresh] = queue_messages(wired, "execution")
    assert fresh["body"] == {"v": 1, "kind": "attempt", "run_id": RUN_ID, "attempt": 1, "dispatch": 1}
    assert fresh["receive_count"] == 0
    wired.clock.sleep(2)
    again = receive_event(wired)
    delete_done(wired, again, executor.lambda_handler(again, Context()))
    assert wired.store.get_run(RUN_ID).state is RunState.SUCCEEDED  # type: ignore[union-attr]
    assert [(c.run_id, c.attempt) for c in calls.calls] == [(RUN_ID, 1)]


def test_a_run_that_never_gets_enough_time_is_dead_lettered_after_three_releases(
    wired: Deps, calls: RecordingTargets
) -> None:
    register(wired, task("job"))
    wired.queues.send("execution", fire("job"))
    for _ in range(4):
        wired.clock.sleep(2)
        event = receive_event(wired)
        delete_done(wired, event, executor.lambda_handler(event, Context(remaining_ms=8_000)))
    run = wired.store.get_run(RUN_ID)
    assert run is not None and run.state is RunState.DEAD_LETTERED
    assert run.dead_letter_reason == "not_enough_time" and run.last_error_code == "NOT_ENOUGH_TIME"
    assert calls.calls == [] and queue_messages(wired, "execution") == []
    assert len(queue_messages(wired, "dlq")) == 1


def test_the_attempt_deadline_is_never_cut_to_the_invocation_time_left(wired: Deps) -> None:
    register(wired, task("job", timeout_s=200))
    executor.lambda_handler(sqs_event(fire("job")), Context(remaining_ms=60_000))
    assert [r.action for r in wired.store.audit_trail(f"run#{RUN_ID}")] == ["released"]
    executor.lambda_handler(
        sqs_event({"v": 1, "kind": "attempt", "run_id": RUN_ID, "attempt": 1, "dispatch": 1}), Context()
    )
    [started] = [r for r in wired.store.audit_trail(f"run#{RUN_ID}") if r.action == "attempt-started"]
    assert started.evidence["deadline_s"] == 200  # the task's whole timeout


def test_the_messages_of_a_batch_run_at_once_each_with_the_whole_timeout(wired: Deps) -> None:
    """Three 100-second attempts in a 300-second invocation: one after the other, the third would
    start with 100 s left and be cut short (or released). Side by side, each has its own 150 s."""
    register(wired, *(task(f"job{i}", timeout_s=150) for i in range(3)))
    started = threading.Barrier(3, timeout=10)
    t0 = wired.clock.now()

    class Slow:
        def invoke(self, target: object, call: Invocation) -> Outcome:
            started.wait()  # all three are claimed before any of them takes its time
            wired.clock.sleep(100)
            return Outcome.success()

    wired.targets.invokers["sim"] = Slow()

    class Invocation300(Context):
        def get_remaining_time_in_millis(self) -> int:
            return int(300_000 - (wired.clock.now() - t0).total_seconds() * 1000)

    event = sqs_event(*(fire(f"job{i}") for i in range(3)))
    assert executor.lambda_handler(event, Invocation300()) == {"batchItemFailures": []}
    for i in range(3):
        run = wired.store.get_run(f"job{i}:20260307T090000Z")
        assert run is not None and run.state is RunState.SUCCEEDED
        [claim] = [r for r in wired.store.audit_trail(f"run#{run.run_id}") if r.action == "attempt-started"]
        assert claim.evidence["deadline_s"] == 150 and claim.at == t0


def test_a_transient_failure_brings_the_message_back_within_seconds(wired: Deps) -> None:
    register(wired, task("job"))
    wired.queues.send("execution", fire("job"))
    event = receive_event(wired)
    [record] = event["Records"]
    real = wired.store.get_task

    def throttled(task_id: str) -> object:
        raise Throttled("read tasks: throttled (injected)")

    wired.store.get_task = throttled  # type: ignore[method-assign,assignment]
    try:
        response = executor.lambda_handler(event, Context())
    finally:
        wired.store.get_task = real  # type: ignore[method-assign]
    assert response == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
    back_in_ms = visible_at_ms(wired, "execution", record["messageId"]) - wired.clock.now().timestamp() * 1000
    assert 2_500 <= back_in_ms <= 5_000  # receive 1: 5 s, jittered down to half; not 30 minutes
    wired.clock.sleep(6)
    again = receive_event(wired)
    delete_done(wired, again, executor.lambda_handler(again, Context()))
    assert wired.store.get_run(RUN_ID).state is RunState.SUCCEEDED  # type: ignore[union-attr]


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
    from rebound.domain.task import TaskState
    from rebound.ops.tasks import TaskOps

    TaskOps(wired, "test").set_state("job", TaskState.PAUSED)  # paused at 09:10
    executor.lambda_handler(sqs_event(fire("job", "2026-03-07T09:05:00Z")), Context())
    run = wired.store.get_run("job:20260307T090500Z")
    assert run is not None and run.state is RunState.SUCCEEDED and len(calls.calls) == 1
