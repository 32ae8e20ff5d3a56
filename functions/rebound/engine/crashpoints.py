"""Every crash point Rebound declares, in one place.

A crash point is a place where one committed AWS write is followed by another AWS call whose
loss would matter: an invocation that dies there (a crash, a Lambda timeout) leaves the first
write without the second. Each one names how the loss is repaired. The engine marks each place
with ``deps.faults.reached(NAME)``; on AWS that is a no-op, and the local cloud's fault plan
(``faults.crash.points`` in a scenario file) may stop the invocation there.
``tests/e2e/test_crash_points.py`` crashes at the first hit of each and checks every invariant.

The first three names predate this registry and are kept: scenario files outside this
repository use them.
"""

from __future__ import annotations

from typing import Final

from rebound.engine.ports.runtime import AFTER_AUDIT_RECORD

AFTER_CLAIM: Final = "after_claim"
AFTER_TARGET: Final = "after_target"
BEFORE_OUTCOME: Final = "before_outcome"
AFTER_WAIT: Final = "after_wait"
AFTER_RELEASE: Final = "after_release"
AFTER_REFUSE_SEND: Final = "after_refuse_send"
AFTER_REPLAY_COMMIT: Final = "after_replay_commit"
AFTER_CANCEL_OTHER: Final = "after_cancel_other"
AFTER_RETRY_COMMIT: Final = "after_retry_commit"
AFTER_DEAD_LETTER_COMMIT: Final = "after_dead_letter_commit"
AFTER_DLQ_SEND: Final = "after_dlq_send"
AFTER_WORK_ORDER_COMMIT: Final = "after_work_order_commit"
AFTER_REDISPATCH_COMMIT: Final = "after_redispatch_commit"
AFTER_LEDGER_COMMIT: Final = "after_ledger_commit"
AFTER_ARRIVAL_ESCALATED: Final = "after_arrival_escalated"
AFTER_PUBLISH: Final = "after_publish"
AFTER_REPUBLISH: Final = "after_republish"

CRASH_POINTS: Final[dict[str, str]] = {
    AFTER_CLAIM: (
        "executor: the claim (run running, slots entered, lease set) committed; the target not "
        "called yet. Repaired by the lease: the sweeper fails the attempt with TIMEOUT and it is retried."
    ),
    AFTER_TARGET: (
        "executor: the target returned; its outcome not recorded yet. Repaired by the lease, as "
        "above (the target saw the attempt's idempotency key, run#attempt)."
    ),
    BEFORE_OUTCOME: "executor: the outcome transaction is about to be sent. Repaired by the lease.",
    AFTER_WAIT: (
        "executor: a wait (or one poll of it) committed with a new dispatch token; the message "
        "carrying that token not sent yet. Repaired by the sweeper's overdue-dispatch check."
    ),
    AFTER_RELEASE: (
        "executor: a message it had no time to start was recorded as released with a new "
        "dispatch token; the fresh message not sent yet. Repaired by the overdue-dispatch check."
    ),
    AFTER_REFUSE_SEND: (
        "executor: a message it cannot run was sent to the DLQ; its audit record and event not "
        "committed yet. Repaired by redelivery of the message (a second DLQ copy is removed by "
        "the sweeper's DLQ check)."
    ),
    AFTER_REPLAY_COMMIT: (
        "executor: a replay that arrived through the queue was recorded (replayed, fresh "
        "budget, a new dispatch token); its first attempt not claimed yet. The message comes back "
        "stale; repaired by the sweeper's overdue-dispatch check."
    ),
    AFTER_CANCEL_OTHER: (
        "executor: overlap cancel_other cancelled the running run; the new run not claimed yet. "
        "Repaired by redelivery of the new run's message."
    ),
    AFTER_RETRY_COMMIT: (
        "retry scheduler: retry_scheduled committed with a new dispatch token; the message (or "
        "one-time schedule) not sent yet. Repaired by the sweeper's overdue-dispatch check."
    ),
    AFTER_DEAD_LETTER_COMMIT: (
        "retry scheduler or sweeper: dead_lettered committed; its DLQ message not sent yet. "
        "Repaired by the escalation handler, which sends a dead letter's missing DLQ message."
    ),
    AFTER_DLQ_SEND: (
        "DLQ message sent; its id not recorded on the run yet. Repaired by the next sender "
        "(a second copy is removed by the sweeper's DLQ check)."
    ),
    AFTER_WORK_ORDER_COMMIT: (
        "escalation: the work order opened; notifications not sent yet. Repaired by redelivery "
        "of task.dead_lettered (only undelivered channels are tried)."
    ),
    AFTER_REDISPATCH_COMMIT: (
        "sweeper: an overdue dispatch was re-recorded with a new token; its message not sent "
        "yet. Repaired by the next sweep."
    ),
    AFTER_LEDGER_COMMIT: (
        "run ledger: a catch-up or DST run recorded pending; its message not sent yet. Repaired "
        "by the overdue-dispatch check."
    ),
    AFTER_ARRIVAL_ESCALATED: (
        "sweeper: a DLQ arrival was escalated; the note that it was seen not written yet. "
        "Repaired by the next DLQ check (escalation is idempotent)."
    ),
    AFTER_PUBLISH: (
        "outbox relay: events published to the bus; the stream batch not checkpointed yet. "
        "The batch is delivered again; consumers dedupe on event_id."
    ),
    AFTER_REPUBLISH: (
        "sweeper: events of a stream batch the relay gave up on were published again; the "
        "failure record not removed from the control DLQ yet. Published again; consumers dedupe."
    ),
    AFTER_AUDIT_RECORD: (
        "store: a run's change written without a transaction had its audit record (the commit "
        "point) written; the run's item not yet. Repaired by whoever writes the run next, who "
        "rolls it forward to its chain first: the redelivered message, the sweeper's lease check."
    ),
}


def known(point: str) -> bool:
    return point in CRASH_POINTS
