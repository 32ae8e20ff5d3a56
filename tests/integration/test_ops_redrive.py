"""The redrive's exactly-once argument, case by case, against moto in-process.

Dead letters come from the engine itself (executor, then retry scheduler, on a terminal error);
faults are injected into the operations layer's SQS calls; the executor then takes whatever the
redrive put on the execution queue, so the tests can count how often each fresh budget started.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from rebound.domain.errors import Conflict
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.ports import BatchResult
from rebound.ops.dlq import REDRIVE_VISIBILITY_S, DlqFilter, DlqOps
from rebound.ops.runs import RunOps
from rebound_local.instrument import RecordingTargets
from support import dead_letters

pytestmark = pytest.mark.integration
OPERATOR = "arn:aws:sts::123456789012:assumed-role/oncall/alice"


class Crash(Exception):
    pass


def pending(deps: Deps, queue: str) -> list[dict[str, Any]]:
    from moto.sqs.models import sqs_backends

    backend = sqs_backends["123456789012"]["us-east-1"]
    return [json.loads(m.body) for m in backend.get_queue(deps.settings.queue(queue).name)._messages]


def execute_replays(deps: Deps) -> None:
    """The executor takes every message on the execution queue (duplicates included)."""
    queue = deps.queues.batches()
    while batch := queue.receive("execution", visibility_s=600):
        for msg in batch:
            Executor(deps).process(QueueMessage(msg.message_id, msg.body), 120)
        queue.delete("execution", [(m.message_id, m.receipt_handle) for m in batch])


def replays_of(deps: Deps, run_id: str) -> list[Any]:
    return [r for r in deps.store.audit_trail(f"run#{run_id}") if r.action == "replayed"]


@pytest.fixture
def recording(deps: Deps) -> RecordingTargets:
    deps.targets = RecordingTargets(deps.targets, deps.clock)
    return deps.targets  # type: ignore[return-value]


def fail_once(method: Callable[..., Any], on_call: int = 1, after: bool = False) -> Callable[..., Any]:
    calls = Counter[str]()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == on_call and not after:
            raise Crash("before")
        result = method(*args, **kwargs)
        if calls["n"] == on_call and after:
            raise Crash("after")
        return result

    return wrapper


def test_a_crash_between_recording_and_sending_is_resumed_without_duplicates(
    deps: Deps, clock: Any, recording: RecordingTargets
) -> None:
    run_ids = dead_letters(deps, 25)
    ops = DlqOps(deps, OPERATOR, wait_s=0)
    ops.queue.send = fail_once(ops.queue.send, on_call=2)  # type: ignore[method-assign]

    with pytest.raises(Crash):
        ops.redrive(DlqFilter())
    states = Counter(deps.store.get_run(r).state for r in run_ids)  # type: ignore[union-attr]
    assert states == {RunState.REPLAYED: 20, RunState.DEAD_LETTERED: 5}  # two batches recorded, one sent

    clock.advance(REDRIVE_VISIBILITY_S + 1)
    report = DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter())

    assert report.outcomes == {"moved": 5, "resumed": 10}
    assert pending(deps, "dlq") == []
    assert Counter(b["run_id"] for b in pending(deps, "execution")) == dict.fromkeys(run_ids, 1)
    assert all(len(replays_of(deps, r)) == 1 for r in run_ids)


def test_a_crash_between_sending_and_deleting_sends_again_and_the_claim_keeps_one(
    deps: Deps, clock: Any, recording: RecordingTargets
) -> None:
    run_ids = dead_letters(deps, 12)
    ops = DlqOps(deps, OPERATOR, wait_s=0)
    ops.queue.delete = fail_once(ops.queue.delete, on_call=1)  # type: ignore[method-assign]

    with pytest.raises(Crash):
        ops.redrive(DlqFilter())
    clock.advance(REDRIVE_VISIBILITY_S + 1)
    report = DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter())
    execute_replays(deps)

    assert report.outcomes == {"resumed": 10, "moved": 2}
    runs = [deps.store.get_run(r) for r in run_ids]
    assert {(r.state, r.attempt, r.budget_start) for r in runs if r} == {(RunState.SUCCEEDED, 2, 1)}
    replayed = Counter(c.run_id for c in recording.calls if c.attempt == 2)
    assert replayed == dict.fromkeys(run_ids, 1)  # ten runs had two replay messages; each ran once


def test_a_message_left_behind_after_its_run_moved_on_is_only_cleaned_up(
    deps: Deps, clock: Any, recording: RecordingTargets
) -> None:
    run_ids = dead_letters(deps, 3)
    ops = DlqOps(deps, OPERATOR, wait_s=0)
    ops.queue.delete = lambda queue, messages: BatchResult(  # type: ignore[method-assign]
        failed={key: "ReceiptHandleIsInvalid: expired" for key, _ in messages}
    )

    first = ops.redrive(DlqFilter())
    execute_replays(deps)  # the replays run before anyone redrives again
    clock.advance(REDRIVE_VISIBILITY_S + 1)
    second = DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter())

    assert first.outcomes == {"failed": 3}
    assert "the next redrive removes it" in first.items[0].detail
    assert second.outcomes == {"cleaned-up": 3}
    assert pending(deps, "dlq") == [] and pending(deps, "execution") == []
    assert all(len(replays_of(deps, r)) == 1 for r in run_ids)


def test_runs_retry_leaves_the_dlq_message_for_redrive_to_clean_up(deps: Deps, clock: Any) -> None:
    (run_id,) = dead_letters(deps, 1)

    outcome = RunOps(deps, OPERATOR).retry(run_id)
    execute_replays(deps)
    report = DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter())

    assert outcome.action == "replayed"
    assert [i.outcome for i in report.items] == ["cleaned-up"]
    assert len(replays_of(deps, run_id)) == 1 and replays_of(deps, run_id)[0].actor == OPERATOR


def test_a_run_that_changes_during_the_redrive_keeps_its_message(deps: Deps, clock: Any) -> None:
    run_ids = dead_letters(deps, 2)
    ops = DlqOps(deps, OPERATOR, wait_s=0)
    ops.replays.begin_many = lambda runs, via: None  # type: ignore[method-assign]

    def conflict(*_: Any, **__: Any) -> Any:
        raise Conflict("changed underneath")

    ops.replays.begin = conflict  # type: ignore[method-assign]

    report = ops.redrive(DlqFilter())

    assert [i.outcome for i in report.items] == ["skipped", "skipped"]
    assert {deps.store.get_run(r).state for r in run_ids} == {RunState.DEAD_LETTERED}  # type: ignore[union-attr]
    clock.advance(1)
    assert len(pending(deps, "dlq")) == 2


def test_the_rate_limit_paces_the_sends(deps: Deps, clock: Any) -> None:
    dead_letters(deps, 25)
    slept: list[float] = []
    # The limiter paces in wall-clock time; a frozen one makes the pacing independent of how busy
    # the machine running the test is (only the sleeps move time on).
    ops = DlqOps(deps, OPERATOR, wait_s=0, sleep=slept.append, monotonic=lambda: sum(slept))

    report = ops.redrive(DlqFilter(), rate=5)

    assert report.outcomes == {"moved": 25}
    # Ten, ten and five messages at five per second, the first ten at once: about 3.2 s asleep.
    assert 2.5 <= sum(slept) <= 3.3


def test_requests_stay_within_the_bound_for_a_full_pass(deps: Deps, clock: Any) -> None:
    dead_letters(deps, 40)

    report = DlqOps(deps, OPERATOR, wait_s=0).redrive(DlqFilter())

    assert report.moved == 40
    assert report.sqs_requests <= 0.35 * 40  # 4 receives + 1 empty, 4 sends, 4 deletes
