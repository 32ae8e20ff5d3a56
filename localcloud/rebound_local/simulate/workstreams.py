"""Workstreams in a simulation: registering the scenario's, an operator acting on them at the times
the scenario says, and their runs as the report shows them.

The scenario's workstreams and resources are registered as ``rebound tasks apply`` registers a task
file's (``TaskOps.apply_workstreams``). Its ``operations`` are carried out through
``rebound.ops.workstreams.WorkstreamOps``, as the CLI's ``rebound workstreams ...`` does, under the
same hostile cloud as everything else: an operator whose command failed on a throttle or a
conflict runs it again (at most ``OPERATOR_TRIES`` times); a refusal (a rollback with nothing to
roll back) is reported, not retried.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from typing import Any

from rebound.domain.errors import Conflict, DomainError, OperationalError
from rebound.domain.events import EventType
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.ops.workstreams import WorkstreamOps
from rebound_local import observe
from rebound_local.scenario import Operation
from rebound_local.stack import LocalStack

log = logging.getLogger(__name__)

OPERATOR = "simulated-operator"
OPERATOR_TRIES = 5
RUN_PREFIX = "ws#run#"
CHECKPOINT_PREFIX = "ws#cp#"
STEP_ENDED = EventType.WORKSTREAM_STEP_ENDED.value


def operate(deps: Deps, operation: Operation, *, ignore_token: bool = False) -> dict[str, Any]:
    """Carry out one operation; the report's entry for it (what it did, or why it was refused).
    ``ignore_token`` (sabotage): a start is made without its token, its entry still naming it."""
    ops = WorkstreamOps(deps, actor=OPERATOR)
    if ignore_token and operation.token is not None:
        untokened = operate(deps, operation.model_copy(update={"token": None}))
        return {**untokened, "token": operation.token}
    entry: dict[str, Any] = {
        "at": iso(deps.clock.now()),
        "workstream": operation.workstream,
        "op": operation.op,
    }
    if operation.step is not None:
        entry["step"] = operation.step
    if operation.to is not None:
        entry["to"] = operation.to
    last: Exception | None = None
    for tries in range(1, OPERATOR_TRIES + 1):
        try:
            entry.update(_carry_out(ops, operation), ok=True, tries=tries)
            return entry
        except DomainError as exc:  # refused: the operator reads why, and does not insist
            entry.update(ok=False, tries=tries, error=f"{exc.code}: {exc.message}")
            return entry
        except (OperationalError, Conflict) as exc:  # throttled, contended or changed meanwhile: run it again
            last = exc
    entry.update(ok=False, tries=OPERATOR_TRIES, error=f"gave up: {last}")
    log.warning("a scenario operation failed %d times", OPERATOR_TRIES, extra={"entry": entry})
    return entry


def _carry_out(ops: WorkstreamOps, operation: Operation) -> dict[str, Any]:
    if operation.op == "start":
        started = {"run_id": ops.run(operation.workstream, operation.token).run_id}
        return {**started, "token": operation.token} if operation.token else started
    run_id = ops.show(operation.workstream).run_id
    if operation.op == "retry":
        return {"run_id": run_id, "new_run": ops.retry(run_id).run_id}
    if operation.op == "rollback":
        _, progress = ops.rollback(run_id, operation.to)
        return {"run_id": run_id, "not_rolled_back": progress.not_rolled_back, "cancelled": progress.cancel}
    if operation.op == "resume":
        _, progress = ops.resume(run_id, operation.step)
    elif operation.op == "retry_failed":
        _, progress = ops.retry_failed(run_id)
    elif operation.op == "skip":
        _, progress = ops.skip(run_id, str(operation.step), operation.reason)
    else:
        _, progress = ops.cancel_step(run_id, str(operation.step), operation.reason)
    return {"run_id": run_id, "started": [s.step for s in progress.start]}


class Races:
    """The operations that wait for a step's end (``on_end_of``): armed at their time, each is
    carried out by the outbox relay's mapping just before it hands over a batch holding that
    step's ``workstream.step.ended`` (the run's outcome committed, the workstream not told yet).
    ``entries`` receives the report's entry of each, with what triggered it."""

    def __init__(self, deps: Deps, entries: list[dict[str, Any]]) -> None:
        self.deps = deps
        self.entries = entries
        self.armed: list[Operation] = []
        self._lock = threading.Lock()

    def arm(self, operation: Operation) -> None:
        with self._lock:
            self.armed.append(operation)

    def before_relay(self, records: list[dict[str, Any]]) -> None:
        """The relay's hook: carry out each armed operation whose step ends in ``records``."""
        if not self.armed:
            return
        for record in records:
            image = record.get("dynamodb", {}).get("NewImage") or {}
            if record.get("eventName") != "INSERT" or image.get("detail_type", {}).get("S") != STEP_ENDED:
                continue
            detail = json.loads(image["detail"]["S"])
            workstream = str(detail.get("workstream_run_id") or "").partition(":")[0]
            step = str(detail.get("task_id") or "").rpartition(".")[2]
            with self._lock:
                due = [o for o in self.armed if o.workstream == workstream and o.on_end_of == step]
                self.armed = [o for o in self.armed if o not in due]
            for operation in due:
                entry = operate(self.deps, operation)
                entry["trigger"] = {
                    "step": step,
                    "task_run": detail.get("run_id"),
                    "state": detail.get("state"),
                    "end_event": "in the outbox, not relayed",
                }
                self.entries.append(entry)

    def unfired(self) -> list[dict[str, Any]]:
        """An entry for each operation whose step never ended after it was armed."""
        with self._lock:
            left, self.armed = self.armed, []
        return [
            {
                "workstream": o.workstream,
                "op": o.op,
                "on_end_of": o.on_end_of,
                "ok": False,
                "error": f"never carried out: step {o.on_end_of} did not end after it was armed",
            }
            for o in left
        ]


def workstream_items(stack: LocalStack) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every workstream run as stored (its body), and how many checkpoints each still keeps."""
    runs: list[dict[str, Any]] = []
    kept: dict[str, int] = defaultdict(int)
    for item in observe.table_items(stack.cloud, stack.settings.table("control")):
        pk = str(item["pk"])
        if pk.startswith(RUN_PREFIX):
            runs.append(json.loads(item["body"]))
        elif pk.startswith(CHECKPOINT_PREFIX):
            kept[json.loads(item["body"])["run_id"]] += 1
    runs.sort(key=lambda run: (str(run["started_at"]), str(run["run_id"])))
    return runs, dict(kept)


def run_entries(runs: list[dict[str, Any]], kept: dict[str, int]) -> list[dict[str, Any]]:
    """The report's ``workstream_runs``."""
    return [
        {
            "workstream_id": run["workstream_id"],
            "run_id": run["run_id"],
            "state": run["state"],
            "checkpoints": {
                "taken": int(run.get("checkpoint_version", 0)),
                "kept": kept.get(run["run_id"], 0),
            },
            "steps": [
                {
                    "step": step["step"],
                    "task_id": step["task_id"],
                    "run_id": step.get("run_id"),
                    "state": step["state"],
                    "started_at": step.get("started_at"),
                    "ended_at": step.get("ended_at"),
                }
                for step in run["steps"]
            ],
        }
        for run in runs
    ]


def checkpoint_counts(runs: list[dict[str, Any]], kept: dict[str, int]) -> dict[str, int]:
    """The report's ``checkpoints``: taken over every run, and still kept (the last 100 of each)."""
    return {
        "runs": len(runs),
        "taken": sum(int(run.get("checkpoint_version", 0)) for run in runs),
        "kept": sum(kept.values()),
    }
