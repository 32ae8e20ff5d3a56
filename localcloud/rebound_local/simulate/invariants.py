"""The simulator's own invariants: what only the run itself can judge.

``rebound_local.invariants`` judges the tables (``World``/``judge``); here are the checks that need
the message ledger and moto's queues (``no_message_lost``), the copies of dead-lettered messages
the judge reads (``_dlq_copies``) and the scenario's expected on-time rate (``dispatch_on_time``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rebound_local import invariants as inv
from rebound_local import motopatch, observe
from rebound_local.simulate.state import SimulationState
from rebound_local.stack import LocalStack
from rebound_local.verdict import Invariant

UNSETTLED = inv.UNSETTLED


class SimulationChecks(SimulationState):
    """The ``Simulation``'s checks of the message ledger against moto's queues."""

    def _no_message_lost(self, stack: LocalStack) -> Invariant:
        accounted = self._account(stack)
        lost = accounted.pop("_lost_examples")
        counts = {k: v for k, v in accounted.items() if v}
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        if lost:
            return Invariant(False, f"{len(lost)} message(s) unaccounted for; {detail}", lost)
        return Invariant(True, f"every message sent is accounted for: {detail}")

    def _account(self, stack: LocalStack) -> dict[str, Any]:
        tracked = self.ledger.snapshot()
        dlqs = {d.name for d in observe.queue_depths(stack.cloud, stack.settings) if d.is_dlq}
        out: dict[str, Any] = {
            "sent": len(tracked),
            "done": 0,
            "waiting": 0,
            "delayed": 0,
            "in_flight": 0,
            "in_dlq": 0,
            "purged": 0,
            "lost": 0,
        }
        lost: list[str] = []
        with motopatch.LOCK:
            now_ms = motopatch._unix_time_millis()
            present: dict[str, Any] = {}
            for queue in stack.cloud.sqs_backend().queues.values():
                for message in queue._messages:
                    present[message.id] = (queue.name, message)
        for message_id, entry in tracked.items():
            if entry.status == "deleted":
                out["done"] += 1
                continue
            if entry.status == "purged":
                out["purged"] += 1
                continue
            found = present.get(message_id)
            if found is None or found[0] != entry.queue:
                out["lost"] += 1
                lost.append(f"{message_id} (sent to {entry.origin}, last in {entry.queue})")
                continue
            queue_name, message = found
            if queue_name in dlqs:
                out["in_dlq"] += 1
            elif message.delayed_until > now_ms:
                out["delayed"] += 1
            elif message.visible_at > now_ms:
                out["in_flight"] += 1
            else:
                out["waiting"] += 1
        out["_lost_examples"] = lost
        return out

    def _dlq_copies(self, stack: LocalStack) -> list[inv.DlqCopy]:
        """Every message in the DLQ and every entry of its archive, with what it names."""
        s = stack.settings
        copies: list[inv.DlqCopy] = []
        with motopatch.LOCK:
            queue = stack.cloud.sqs_backend().get_queue(s.queue("dlq").name)
            for message in queue._messages:
                attrs = {k: v.get("StringValue") for k, v in (message.message_attributes or {}).items()}
                copies.append(
                    inv.DlqCopy(
                        message.id,
                        "dlq",
                        attrs.get("run_id"),
                        attrs.get("dead_lettered_at"),
                        attrs.get("source_message_id"),
                    )
                )
        for item in observe.table_items(stack.cloud, s.table("dlq_archive")):
            attrs = item.get("attributes") or {}
            copies.append(
                inv.DlqCopy(
                    str(item["message_id"]),
                    "archive",
                    attrs.get("run_id"),
                    attrs.get("dead_lettered_at"),
                    attrs.get("source_message_id"),
                )
            )
        return copies


def _on_time(latency: dict[str, Any], wanted_pct: float) -> Invariant:
    window = latency["on_time_window_s"]
    if not latency["scheduled_runs"]:
        return Invariant(False, "no scheduled run to judge: the scenario expects some")
    started, total = latency["started"], latency["scheduled_runs"]
    pct = 100.0 * latency.get("on_time", 0) / total
    detail = (
        f"{pct:.2f} % of {total} scheduled runs started within {window} s (wanted {wanted_pct:g} %); "
        f"{started} started, p50 {latency.get('p50_s', 0):.1f} s, p99 {latency.get('p99_s', 0):.1f} s"
    )
    return Invariant(pct >= wanted_pct, detail)


# --------------------------------------------------------------------------- workstreams
#
# Judged from what is there: each workstream run's audit chain (``workstream#<run id>``: every
# change to the run, with the state of every step after it and the steps it started), the runs
# as stored (``ws#run#<run id>``: each step's needs and resources) and the task runs of the steps.

WORKSTREAM_CHAIN = "workstream#"
DONE_STEPS = frozenset({"succeeded", "skipped"})
"""A need is met when its step succeeded, or an operator skipped it (marked completed)."""
FINAL_RUN_STATES = frozenset({"succeeded", "dead_lettered", "skipped", "cancelled"})


def _workstream_chains(
    chains: dict[str, list[dict[str, Any]]], runs: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    return [(run, chains.get(f"{WORKSTREAM_CHAIN}{run['run_id']}", [])) for run in runs]


def _steps_after(record: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (record.get("evidence", {}).get("steps") or {}).items()}


def steps_start_after_their_needs(
    workstream_runs: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]]
) -> Invariant:
    """A step never starts before every step it needs has completed (succeeded, or skipped by an
    operator): in the record of the change that started it, each of its needs is completed. A
    need an operator removed (``removed_needs``) no longer counts."""
    early: list[str] = []
    started = 0
    for run, chain in _workstream_chains(chains, workstream_runs):
        needs = {str(s["step"]): [str(n) for n in s.get("needs") or []] for s in run["steps"]}
        for record in chain:
            after = _steps_after(record)
            for step in record.get("evidence", {}).get("started") or []:
                started += 1
                unmet = [n for n in needs.get(str(step), []) if after.get(n) not in DONE_STEPS]
                if unmet:
                    states = ", ".join(f"{n} {after.get(n)}" for n in unmet)
                    early.append(f"{run['run_id']} seq {record['seq']}: {step} started while {states}")
    if early:
        return Invariant(False, f"{len(early)} step start(s) came before their needs completed", early)
    return Invariant(
        True, f"{started} step starts in {len(workstream_runs)} workstream runs, each after its needs"
    )


def rollbacks_keep_completed_steps(
    workstream_runs: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]]
) -> Invariant:
    """A rollback never reverts a completed step: every step completed (succeeded or skipped)
    just before a ``rolled-back`` record is in the same state in it."""
    reverted: list[str] = []
    rollbacks = 0
    for run, chain in _workstream_chains(chains, workstream_runs):
        before: dict[str, str] = {}
        for record in chain:
            after = _steps_after(record)
            if record["action"] == "rolled-back":
                rollbacks += 1
                where = f"{run['run_id']} seq {record['seq']}"
                reverted += [
                    f"{where}: {step} was {state}, rolled back to {after.get(step)}"
                    for step, state in before.items()
                    if state in DONE_STEPS and after.get(step) != state
                ]
            before = after
    if reverted:
        return Invariant(False, f"{len(reverted)} completed step(s) reverted by a rollback", reverted)
    return Invariant(True, f"{rollbacks} rollback(s), none reverted a completed step")


def resources_within_max_holders(
    workstream_runs: list[dict[str, Any]],
    chains: dict[str, list[dict[str, Any]]],
    limits: dict[str, int],
) -> Invariant:
    """Never more steps holding a resource than its ``max_holders``. A step holds its resources
    while it is running: from the record that starts it to the one that records it left
    ``running``, across every workstream run. Holds are half-open (a step that leaves at the
    instant another enters does not overlap it)."""
    holds: dict[str, list[tuple[str, int, str]]] = {}
    for run, chain in _workstream_chains(chains, workstream_runs):
        resources = {str(s["step"]): [str(r) for r in s.get("resources") or []] for s in run["steps"]}
        running: dict[str, str] = {}
        for record in chain:
            at = str(record["at"])
            after = _steps_after(record)
            for step, state in after.items():
                for resource in resources.get(step, []):
                    holder = f"{run['run_id']}/{step}"
                    if state == "running" and step not in running:
                        holds.setdefault(resource, []).append((at, 1, holder))
                    elif state != "running" and step in running:
                        holds.setdefault(resource, []).append((at, -1, holder))
            running = {step: at for step, state in after.items() if state == "running"}
    over: list[str] = []
    peaks: dict[str, int] = {}
    for resource, changes in holds.items():
        inside: set[str] = set()
        limit = limits.get(resource, 1)
        for at, delta, holder in sorted(changes, key=lambda c: (c[0], c[1])):  # leaves first
            if delta < 0:
                inside.discard(holder)
                continue
            inside.add(holder)
            peaks[resource] = max(peaks.get(resource, 0), len(inside))
            if len(inside) > limit:
                over.append(
                    f"{resource} at {at}: {len(inside)} holders ({', '.join(sorted(inside))}), max {limit}"
                )
    if over:
        return Invariant(False, f"{len(over)} moment(s) with more holders than max_holders", over)
    detail = ", ".join(f"{r} peak {n} of {limits.get(r, 1)}" for r, n in sorted(peaks.items()))
    return Invariant(True, f"every resource within its max_holders: {detail or 'none held'}")


def workstream_runs_settled(
    workstream_runs: list[dict[str, Any]], task_runs: dict[str, dict[str, Any]]
) -> Invariant:
    """At the end no workstream run is left ``running`` (``rolled_back`` waits for an operator's
    resume, by design), and no step is ``running`` whose task run has ended: the workstream heard
    of every step's end."""
    open_runs: list[str] = []
    states: Counter[str] = Counter()
    for run in workstream_runs:
        states[str(run["state"])] += 1
        if run["state"] == "running":
            open_runs.append(f"{run['run_id']}: still running ({', '.join(_open_steps(run))})")
        for step in run["steps"]:
            task_run = task_runs.get(str(step.get("run_id") or ""))
            if step["state"] == "running" and task_run is not None and task_run["state"] in FINAL_RUN_STATES:
                open_runs.append(
                    f"{run['run_id']}: step {step['step']} is running, its run {task_run['run_id']} "
                    f"is {task_run['state']}"
                )
    if open_runs:
        return Invariant(False, f"{len(open_runs)} workstream run(s) or step(s) left open", open_runs)
    return Invariant(True, f"{len(workstream_runs)} workstream runs settled: {dict(sorted(states.items()))}")


def _open_steps(run: dict[str, Any]) -> list[str]:
    return [
        f"{s['step']} {s['state']}" for s in run["steps"] if s["state"] in ("pending", "waiting", "running")
    ]


def workstream_fires_became_runs(workstream_runs: list[dict[str, Any]], fires: list[inv.Fire]) -> Invariant:
    """Each fire a workstream's schedule delivered started the one run it names (its id derives
    from the workstream and the fire's time, so every delivery of one fire names that run)."""
    ids = {str(run["run_id"]) for run in workstream_runs}
    named = {fire.run_id for fire in fires}
    missing = sorted(
        f"{f.task_id} @ {f.scheduled_time}: no run {f.run_id}" for f in fires if f.run_id not in ids
    )
    if missing:
        return Invariant(False, f"{len(missing)} delivered workstream fire(s) started no run", missing)
    return Invariant(True, f"{len(fires)} deliveries of {len(named)} workstream fires, one run each")


def completed_steps_run_once(
    workstream_runs: list[dict[str, Any]],
    chains: dict[str, list[dict[str, Any]]],
    task_runs: dict[str, dict[str, Any]],
) -> Invariant:
    """No completed step runs its target again: of each step of each workstream run, at most one
    task run succeeded. Only an operator's explicit ``resume --from`` runs completed steps again
    (its record names ``from_step``); such workstream runs are left out."""
    succeeded: Counter[tuple[str, str]] = Counter()
    for run in task_runs.values():
        if run.get("workstream_run") and run["state"] == "succeeded":
            succeeded[(str(run["workstream_run"]), str(run["task_id"]))] += 1
    rerun_on_purpose = {
        str(run["run_id"])
        for run, chain in _workstream_chains(chains, workstream_runs)
        if any(r["action"] == "resumed" and (r.get("evidence") or {}).get("from_step") for r in chain)
    }
    twice = sorted(
        f"{ws_run} step {task_id}: {n} task runs succeeded"
        for (ws_run, task_id), n in succeeded.items()
        if n > 1 and ws_run not in rerun_on_purpose
    )
    if twice:
        return Invariant(False, f"{len(twice)} completed step(s) ran their target again", twice)
    return Invariant(
        True,
        f"{len(succeeded)} completed steps, each run to success once"
        + (
            f" ({len(rerun_on_purpose)} workstream run(s) resumed --from left out)"
            if rerun_on_purpose
            else ""
        ),
    )


def one_run_per_start_token(
    operations: list[dict[str, Any]], workstream_runs: list[dict[str, Any]]
) -> Invariant:
    """Every start with the same token, whenever it came, named the same workstream run, and that
    run exists once."""
    named: dict[tuple[str, str], set[str]] = {}
    for entry in operations:
        if entry.get("op") == "start" and entry.get("token") and entry.get("ok"):
            named.setdefault((str(entry["workstream"]), str(entry["token"])), set()).add(str(entry["run_id"]))
    stored = Counter(str(run["run_id"]) for run in workstream_runs)
    problems = [
        f"{workstream} token {token}: runs {', '.join(sorted(ids))}"
        for (workstream, token), ids in sorted(named.items())
        if len(ids) != 1 or stored[next(iter(ids))] != 1
    ]
    if problems:
        return Invariant(False, f"{len(problems)} start token(s) named more than one run", problems)
    starts = sum(1 for e in operations if e.get("op") == "start" and e.get("token") and e.get("ok"))
    return Invariant(True, f"{starts} start(s) with {len(named)} token(s), one workstream run each")


def judge_workstreams(
    workstream_runs: list[dict[str, Any]],
    chains: dict[str, list[dict[str, Any]]],
    task_runs: dict[str, dict[str, Any]],
    limits: dict[str, int],
    fires: list[inv.Fire] | None = None,
    operations: list[dict[str, Any]] | None = None,
) -> dict[str, Invariant]:
    return {
        "workstream_completed_steps_run_once": completed_steps_run_once(workstream_runs, chains, task_runs),
        "workstream_one_run_per_start_token": one_run_per_start_token(operations or [], workstream_runs),
        "workstream_fires_became_runs": workstream_fires_became_runs(workstream_runs, fires or []),
        "workstream_steps_start_after_their_needs": steps_start_after_their_needs(workstream_runs, chains),
        "workstream_rollbacks_keep_completed_steps": rollbacks_keep_completed_steps(workstream_runs, chains),
        "workstream_resources_within_max_holders": resources_within_max_holders(
            workstream_runs, chains, limits
        ),
        "workstream_runs_settled": workstream_runs_settled(workstream_runs, task_runs),
    }
