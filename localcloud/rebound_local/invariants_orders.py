"""The work orders' invariants: an order closes when its run recovers (or a target's when the
target does), every channel told of the opening is told of the resolution, and a superseded run
stays closed."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from rebound_local.verdict import EXAMPLES, Invariant

if TYPE_CHECKING:
    from rebound_local.invariants import DlqCopy, Notice


SYSTEM_RESOLVERS = frozenset({"escalation", "sweeper"})
"""Who resolves the work order of a run that recovered: escalation (``task.recovered``), or the
sweeper handling what escalation gave up on."""


def _closing_record(chain: list[dict[str, Any]], state: str) -> dict[str, Any] | None:
    """The record that closed a run as ``state`` (skipped, cancelled), if one did: an operator's,
    or Rebound's own (an overlap policy's ``cancel_other``, a workstream's rollback)."""
    return next((record for record in reversed(chain) if record["action"] == state), None)


def _delivered(order: dict[str, Any], key: str) -> set[str]:
    return {str(d.get("channel")) for d in order.get(key) or [] if d.get("status") == "delivered"}


def recovered_orders_close(
    runs: list[dict[str, Any]],
    orders: list[dict[str, Any]],
    chains: dict[str, list[dict[str, Any]]],
    notices: list[Notice] | None = None,
) -> Invariant:
    """A run's work order is resolved once its run recovered or an operator closed it: exactly
    once, by the right actor, with the reason, and every channel that announced it heard it close."""
    by_run = {str(run["run_id"]): run for run in runs}
    sent = Counter((n.work_order_id, n.state) for n in notices or [])
    counts: Counter[str] = Counter()
    problems: list[str] = []
    for order in orders:
        subject = str(order.get("subject", ""))
        run = by_run.get(subject.removeprefix("run#")) if subject.startswith("run#") else None
        if run is None:
            continue
        order_id = str(order["work_order_id"])
        state = str(run["state"])
        closing = _closing_record(chains.get(f"run#{run['run_id']}", []), state)
        if state == "succeeded":
            resolvers, resolution, because = SYSTEM_RESOLVERS, "replayed", str(run["run_id"])
        elif closing is not None:
            actor = str(closing.get("actor"))
            resolvers, resolution = frozenset({actor}), state
            because = str((closing.get("evidence") or {}).get("reason") or "")
        else:
            if order.get("resolution") == "replayed" and order.get("state") == "resolved":
                problems.append(f"{order_id}: resolved as replayed, but run {run['run_id']} is {state}")
            continue
        counts[state] += 1
        problems += _resolution_problems(order, chains, resolvers, resolution, because)
        announced = sent[(order_id, "opened")] or "sns" in _delivered(order, "deliveries")
        if notices is not None and announced:
            if sent[(order_id, "resolved")] < 1:
                problems.append(f"{order_id}: the topic announced it, but received no resolved notice")
            counts["duplicate_resolved_notices"] += max(0, sent[(order_id, "resolved")] - 1)
    states = {str(o["work_order_id"]): o.get("state") for o in orders}
    problems += [
        f"{order_id}: a resolved notice went out, but the order is {states.get(order_id)}"
        for (order_id, kind), _n in sent.items()
        if kind == "resolved" and states.get(order_id) != "resolved"
    ]
    checked = sum(n for kind, n in counts.items() if kind != "duplicate_resolved_notices")
    counts["checked"] = checked
    if problems:
        return Invariant(
            False, f"{len(problems)} problem(s) with the {checked} orders of recovered runs", problems, counts
        )
    return Invariant(
        True,
        f"{checked} work order(s) of runs that recovered or an operator closed, each resolved once by "
        f"the right actor with its reason, every channel told ({dict(counts)})",
        counts=counts,
    )


def _resolution_problems(
    order: dict[str, Any],
    chains: dict[str, list[dict[str, Any]]],
    resolvers: frozenset[str],
    resolution: str,
    because: str,
) -> list[str]:
    """What is wrong with one order's resolution: its state, its one ``resolved`` record (actor,
    reason), and the channels that were told it opened but not that it closed."""
    order_id = str(order["work_order_id"])
    if order.get("state") != "resolved":
        return [f"{order_id}: still {order.get('state')}, but its run {order.get('run_id')} is closed"]
    out: list[str] = []
    records = [r for r in chains.get(f"workorder#{order_id}", []) if r["action"] == "resolved"]
    if len(records) != 1:
        return [f"{order_id}: {len(records)} resolved audit records"]
    record = records[0]
    reason = str((record.get("evidence") or {}).get("reason") or "")
    if record.get("actor") not in resolvers or order.get("resolved_by") != record.get("actor"):
        out.append(f"{order_id}: resolved by {record.get('actor')!r}, expected one of {sorted(resolvers)}")
    if order.get("resolution") != resolution:
        out.append(f"{order_id}: resolution {order.get('resolution')!r}, expected {resolution!r}")
    if not reason or because not in reason or order.get("resolve_reason") != reason:
        out.append(f"{order_id}: the resolution's reason {reason!r} does not say {because!r}")
    untold = _delivered(order, "deliveries") - _delivered(order, "resolve_deliveries")
    if untold:
        out.append(f"{order_id}: {', '.join(sorted(untold))} told it opened, never that it closed")
    return out


def target_orders_close(orders: list[dict[str, Any]], runs: list[dict[str, Any]]) -> Invariant:
    """Every target's work order is resolved by the end, and it is the target's, not a run's."""
    targets = [o for o in orders if str(o.get("subject", "")).startswith("target#")]
    ids = {str(o["work_order_id"]) for o in targets}
    problems = [
        f"{o['subject']}: still {o.get('state')} at the end" for o in targets if o.get("state") != "resolved"
    ]
    problems += [
        f"run {r['run_id']} names the target work order {r['work_order_id']}"
        for r in runs
        if r.get("work_order_id") in ids
    ]
    if problems:
        return Invariant(False, f"{len(problems)} target work order problem(s)", problems[:EXAMPLES])
    return Invariant(True, f"{len(targets)} target work order(s), each resolved once its target recovered")


def superseded_runs_stay_closed(
    runs: list[dict[str, Any]],
    orders: list[dict[str, Any]],
    chains: dict[str, list[dict[str, Any]]],
    dlq: list[DlqCopy],
    record: list[dict[str, Any]],
) -> Invariant:
    """A run superseded by another (a workstream ran its step again) names its successor, and
    nothing happens to it after its ``superseded`` record (never redriven, replayed or retried);
    each of its work orders is resolved, once; no DLQ message of it is left in the DLQ, and its
    record does not list one as ``in_dlq``."""
    superseded = [run for run in runs if run["state"] == "superseded"]
    problems: list[str] = []
    for run in superseded:
        run_id = str(run["run_id"])
        if not run.get("superseded_by"):
            problems.append(f"{run_id}: superseded by nobody")
        chain = chains.get(f"run#{run_id}", [])
        at = next((i for i, r in enumerate(chain) if r["action"] == "superseded"), None)
        if at is None:
            problems.append(f"{run_id}: no superseded record in its chain")
        else:
            problems += [
                f"{run_id}: {r['action']} (seq {r['seq']}) after it was superseded" for r in chain[at + 1 :]
            ]
        for order in (o for o in orders if o.get("run_id") == run_id):
            resolved = [
                r for r in chains.get(f"workorder#{order['work_order_id']}", []) if r["action"] == "resolved"
            ]
            if order.get("state") != "resolved" or len(resolved) != 1:
                problems.append(
                    f"{run_id}: work order {order['work_order_id']} is {order.get('state')}, "
                    f"resolved {len(resolved)} time(s)"
                )
        problems += [
            f"{run_id}: DLQ message {c.message_id} still in the DLQ"
            for c in dlq
            if c.run_id == run_id and c.where == "dlq"
        ]
        problems += [
            f"{run_id}: DLQ record lists {item['message_id']} as in_dlq"
            for item in record
            if item.get("run_id") == run_id and item.get("status") == "in_dlq"
        ]
    if problems:
        return Invariant(
            False, f"{len(problems)} problem(s) with {len(superseded)} superseded run(s)", problems
        )
    return Invariant(
        True, f"{len(superseded)} superseded run(s), each closed: work order resolved once, DLQ clear"
    )
