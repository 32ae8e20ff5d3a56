"""What must hold after any scenario, however hostile the cloud: the simulator's invariants.

Each invariant reads the end state straight from moto (runs, work orders, audit chains, slots,
queues, the DLQ archive) or a record the simulator kept while it ran (the fires Scheduler
delivered, every target call, every message SQS accepted, the live carriers of each run). None of
them asks the engine what happened: they judge what is there.

- ``every_fire_became_a_run``: each fire Scheduler delivered ended as a run that ran, or that an
  operator or a declared policy (overlap, pause) skipped or cancelled, or that was dead-lettered
  with a work order. A delivered fire skipped as "missed" fails: it was late, not missed.
- ``no_target_called_twice_per_attempt``.
- ``no_run_left_running`` and ``every_run_settled``: nothing ``running``, ``pending``, waiting,
  ``failed``, ``retry_scheduled`` or ``replayed`` at the end without a reason (held while its
  task is paused; a retry due after the settle window).
- ``no_slot_held_by_an_idle_run``: every slot holder is a run that is running.
- ``at_most_one_live_message_per_run``: at every moment, at most one message that could start a
  run's next step (``LiveCarriers``); the report gives the peak.
- ``audit_chains_verify`` and ``run_items_match_their_chains``.
- ``audit_records_archived`` (judged in ``simulate``, on a stack with the archive): every record
  written before the archiver's batching window and the sweeper's repair had time to pass is in
  the S3 archive, as written (docs/archive.md).
- ``dead_letters_have_one_work_order`` and ``dead_letters_have_one_dlq_message``: every
  dead-lettered run and every refused message has exactly one work order and exactly one message
  in the DLQ (or its archive).
- ``dlq_record_matches_the_queue``: the DLQ's record (``dlq_messages``, what ``rebound dlq list``
  reads) says ``in_dlq`` for exactly the messages the DLQ holds.
- ``no_message_lost`` (judged in ``simulate`` from the message ledger).
- ``work_orders_close_when_their_runs_recover``: every work order of a run that later succeeded
  (a retry, redrive or replay), or that was skipped or cancelled, is resolved, with exactly one
  ``resolved`` audit record: by the system (``escalation``, or the ``sweeper``), resolution
  ``replayed``, for a success; by whoever closed the run, with their reason, for a skip or cancel
  (an operator, or Rebound's own overlap ``cancel_other`` and workstream rollback). Every
  channel the opening reached recorded a resolved notice, and the SNS topic itself (what moto
  received) carried one for each. No order is resolved as ``replayed`` unless its run succeeded,
  and no resolved notice goes out for an order that is not resolved. Its ``counts`` say how many
  orders it checked, so a scenario can show it is not vacuous.
- ``target_work_orders_close``: a target's work order (retry budgets per target, subject
  ``target#<target>#<episode>``) is resolved by the end, once nothing is held for the target, and
  no run names it: the held runs are released, not dead-lettered one by one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rebound.domain.audit import CheckMac, verify_chain, verify_fields
from rebound.domain.audit_record import AuditRecord
from rebound.domain.ids import scheduled_run_id, work_order_id
from rebound.domain.retention import FINISHED
from rebound.domain.run import found_by_fire
from rebound.domain.timefmt import parse_utc
from rebound.engine.dispatch import WAITING_STATES
from rebound.resources import RECORD_TTL
from rebound_local.invariants_orders import (
    recovered_orders_close,
    superseded_runs_stay_closed,
    target_orders_close,
)
from rebound_local.verdict import Invariant

UNSETTLED = ("pending", "running", "failed", "retry_scheduled", "replayed")
CLAIMABLE = frozenset(s.value for s in WAITING_STATES)


@dataclass(frozen=True)
class Fire:
    task_id: str
    scheduled_time: str

    @property
    def run_id(self) -> str:
        return scheduled_run_id(self.task_id, parse_utc(self.scheduled_time))


# --------------------------------------------------------------------------- the end state


@dataclass(frozen=True)
class DlqCopy:
    """A message in the DLQ or its archive, and what it names."""

    message_id: str
    where: str
    run_id: str | None
    dead_lettered_at: str | None
    source_message_id: str | None


@dataclass(frozen=True)
class Notice:
    """A message the alerts topic received about a work order (what SNS itself holds)."""

    work_order_id: str
    state: str
    """``resolved`` for a resolved notice, ``opened`` for the opening."""


@dataclass
class World:
    """The end state the invariants judge."""

    runs: list[dict[str, Any]]
    orders: list[dict[str, Any]]
    chains: dict[str, list[dict[str, Any]]]
    slots: list[dict[str, Any]]
    dlq: list[DlqCopy]
    fires: list[Fire]
    target_calls: list[tuple[str, int]]
    paused_tasks: set[str]
    ended_at: datetime
    dlq_record: list[dict[str, Any]] = field(default_factory=list)
    """The items of the DLQ's record (``dlq_messages``)."""
    check_mac: CheckMac | None = None
    """Checks the audit records' MACs (the local cloud's KMS key); ``None``: hashes only."""
    workstream_runs: list[dict[str, Any]] = field(default_factory=list)
    """The workstream runs as stored (their steps hold the resources' slots)."""
    notices: list[Notice] | None = None
    """What the alerts topic received about work orders; ``None``: not read (no SNS check)."""


def judge(world: World, chains_verified: Callable[[], Invariant] | None = None) -> dict[str, Invariant]:
    """Every invariant of ``world``. ``chains_verified``: the answer of ``chains_verify`` for its
    chains, if something else computes it (a forked child, ``rebound_local.forked``); it is asked
    for last, so the rest is judged meanwhile."""
    by_id = {str(run["run_id"]): run for run in world.runs}
    judged = {
        "no_run_left_running": no_run_left_running(world.runs),
        "every_run_settled": every_run_settled(world.runs, world.paused_tasks, world.ended_at),
        "dead_letters_have_one_work_order": one_work_order(world.runs, world.orders, world.chains),
        "dead_letters_have_one_dlq_message": one_dlq_message(world.runs, world.chains, world.dlq),
        "dlq_record_matches_the_queue": record_matches_queue(world.dlq, world.dlq_record),
        "no_target_called_twice_per_attempt": no_double_calls(world.target_calls),
        "audit_chains_verify": Invariant(True, "(judged last)"),
        "run_items_match_their_chains": heads_match(world.runs, world.chains),
        "every_fire_became_a_run": fires_became_runs(world.fires, by_id, world.chains),
        "no_slot_held_by_an_idle_run": no_idle_holders(world.slots, by_id, world.workstream_runs),
        "one_outcome_per_attempt": one_outcome_per_attempt(world.chains),
        "refused_reports_never_reopen_a_run": refused_reports_after_the_end(world.chains),
        "target_work_orders_close": target_orders_close(world.orders, world.runs),
        "work_orders_close_when_their_runs_recover": recovered_orders_close(
            world.runs, world.orders, world.chains, world.notices
        ),
        "superseded_runs_stay_closed": superseded_runs_stay_closed(
            world.runs, world.orders, world.chains, world.dlq, world.dlq_record
        ),
    }
    judged["audit_chains_verify"] = (
        chains_verified() if chains_verified is not None else chains_verify(world.chains, world.check_mac)
    )
    return judged


def listed_with_their_tasks(runs: list[dict[str, Any]], listed: Callable[[str], list[str]]) -> Invariant:
    """Every run is listed with its task, and nothing else is (``Store.runs_for_task``): a clean
    success by its fire (``rebound.domain.fire_segments``), every other run by ``by_task_keys``.
    ``listed`` answers a task's run ids, as the store lists them."""
    by_task: dict[str, set[str]] = {}
    for run in runs:
        by_task.setdefault(str(run["task_id"]), set()).add(str(run["run_id"]))
    missing: list[str] = []
    extra: list[str] = []
    for task_id, expected in sorted(by_task.items()):
        found = listed(task_id)
        missing += sorted(expected - set(found))
        extra += sorted(set(found) - expected)
        if len(found) != len(set(found)):
            extra.append(f"{task_id}: listed twice")
    by_fire = sum(1 for run in runs if found_by_fire(run))
    if missing or extra:
        return Invariant(
            False,
            f"{len(missing)} run(s) missing from their task's list, {len(extra)} extra",
            [*missing[:5], *extra[:5]],
        )
    return Invariant(
        True,
        f"{len(runs)} run(s) of {len(by_task)} task(s), each listed with its task ({by_fire} by its fire)",
    )


def no_run_left_running(runs: list[dict[str, Any]]) -> Invariant:
    stuck = [run["run_id"] for run in runs if run["state"] == "running"]
    if stuck:
        return Invariant(False, f"{len(stuck)} run(s) still running after the settle window", stuck)
    return Invariant(True, f"none of {len(runs)} runs is running")


def every_run_settled(runs: list[dict[str, Any]], paused: set[str], ended_at: datetime) -> Invariant:
    """Runs still owed work must have a reason: held by a paused task, or due after the end."""
    open_runs: list[str] = []
    excused = 0
    for run in runs:
        if run["state"] not in UNSETTLED:
            continue
        held = run.get("held_at") is not None and run["task_id"] in paused
        later = (
            run["state"] in ("retry_scheduled", "pending")
            and run.get("next_retry_at")
            and parse_utc(str(run["next_retry_at"])) > ended_at
            and run.get("waiting_since") is None
        )
        if held or later:
            excused += 1
            continue
        waiting = " waiting" if run.get("waiting_since") else ""
        open_runs.append(f"{run['run_id']} ({run['state']}{waiting})")
    if open_runs:
        return Invariant(
            False, f"{len(open_runs)} run(s) did not reach a final state, with no reason", open_runs
        )
    tail = f" ({excused} held by a paused task or due after the window)" if excused else ""
    return Invariant(True, f"all {len(runs)} runs reached a final state{tail}")


def _dead_subjects(
    runs: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    dead = {f"run#{run['run_id']}": run for run in runs if run["state"] == "dead_lettered"}
    refused = [
        subject
        for subject, chain in chains.items()
        if subject.startswith("msg#") and any(rec["action"] == "dead-lettered" for rec in chain)
    ]
    return dead, refused


def one_work_order(
    runs: list[dict[str, Any]], orders: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]]
) -> Invariant:
    """One work order per dead-letter occurrence (its id derives from the subject and the
    occurrence's time), linked from the run; or, for a run dead-lettered again while its work
    order was open (a flapping run), that order, which lists the occurrence. One per refused
    message."""
    dead, refused = _dead_subjects(runs, chains)
    per_subject = Counter(str(order["subject"]) for order in orders)
    ids = {str(order["work_order_id"]) for order in orders}
    by_id = {str(order["work_order_id"]): order for order in orders}
    problems: list[str] = []
    for subject, run in dead.items():
        at = str(run.get("dead_lettered_at") or "")
        expected = work_order_id(subject, at)
        linked = by_id.get(str(run.get("work_order_id") or ""))
        if linked is not None and at in (linked.get("occurrences") or []):
            continue  # flapping: the dead letter is an occurrence of the open order
        if expected not in ids:
            problems.append(f"{subject}: no work order for its dead letter of {run.get('dead_lettered_at')}")
        elif run.get("work_order_id") != expected:
            problems.append(
                f"{subject}: the run names work order {run.get('work_order_id')!r}, not {expected}"
            )
    for subject in refused:
        if per_subject.get(subject, 0) != 1:
            problems.append(f"{subject}: {per_subject.get(subject, 0)} work orders")
    known = set(dead) | set(refused)
    strays = [s for s in per_subject if s not in known and s.startswith("msg#")]
    problems += [f"{s}: a work order for a message that was never dead-lettered" for s in strays]
    total = len(dead) + len(refused)
    if problems:
        return Invariant(False, f"{len(problems)} of {total} dead letters break the rule", problems)
    return Invariant(
        True, f"{len(dead)} dead-lettered runs and {len(refused)} refused messages, one work order each"
    )


def one_dlq_message(
    runs: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]], dlq: list[DlqCopy]
) -> Invariant:
    """Exactly one message in the DLQ (or its archive) for each dead letter."""
    dead, refused = _dead_subjects(runs, chains)
    by_id = {copy.message_id: copy for copy in dlq}
    problems: list[str] = []
    for subject, run in dead.items():
        at = run.get("dead_lettered_at")
        copies = {
            c.message_id
            for c in dlq
            if (c.run_id == run["run_id"] and c.dead_lettered_at == at)
            or c.message_id == run.get("dlq_message_id")
        }
        if len(copies) != 1 or run.get("dlq_message_id") not in copies:
            problems.append(
                f"{subject}: {len(copies)} DLQ message(s); the run names {run.get('dlq_message_id')!r}"
            )
    for subject in refused:
        source = subject.removeprefix("msg#")
        copies = {c.message_id for c in dlq if c.source_message_id == source or c.message_id == source}
        if len(copies) != 1:
            problems.append(f"{subject}: {len(copies)} DLQ message(s)")
    total = len(dead) + len(refused)
    if problems:
        return Invariant(False, f"{len(problems)} of {total} dead letters break the rule", problems)
    where = Counter(by_id[c].where for c in by_id)
    return Invariant(
        True,
        f"{len(dead)} dead-lettered runs and {len(refused)} refused messages, one DLQ message each "
        f"({dict(where) or 'none'})",
    )


def record_matches_queue(dlq: list[DlqCopy], record: list[dict[str, Any]]) -> Invariant:
    """What ``rebound dlq list`` shows (the record's ``in_dlq`` items) is what the DLQ holds."""
    queued = {c.message_id for c in dlq if c.where == "dlq"}
    listed = {str(item["message_id"]) for item in record if item.get("status") == "in_dlq"}
    problems = [f"{m}: in the DLQ, not in its record" for m in sorted(queued - listed)]
    problems += [f"{m}: in the record as in_dlq, not in the DLQ" for m in sorted(listed - queued)]
    if problems:
        return Invariant(
            False, f"the DLQ's record disagrees with the DLQ on {len(problems)} message(s)", problems
        )
    left = Counter(str(item.get("status")) for item in record if item.get("status") != "in_dlq")
    return Invariant(
        True, f"{len(queued)} message(s) in the DLQ, each recorded in_dlq; {dict(left) or 'none'} left it"
    )


def no_double_calls(calls: list[tuple[str, int]]) -> Invariant:
    counts = Counter(calls)
    twice = [f"{run_id} attempt {attempt}: {n} calls" for (run_id, attempt), n in counts.items() if n > 1]
    if twice:
        return Invariant(False, f"{len(twice)} (run, attempt) pairs called the target more than once", twice)
    return Invariant(True, f"{len(counts)} (run, attempt) pairs, each called once")


def chains_verify(chains: dict[str, list[dict[str, Any]]], check_mac: CheckMac | None = None) -> Invariant:
    broken: list[str] = []
    records = 0
    for subject, chain in chains.items():
        records += len(chain)
        # The records as stored first (no model of each; it never passes a chain the models would
        # fail), then, for a chain that fails that way, the models, whose verdict and words count.
        check = verify_fields(subject, chain, check_mac)
        if not check.ok:
            check = verify_chain(subject, [AuditRecord.model_validate(rec) for rec in chain], check_mac)
        if not check.ok:
            broken.append(f"{subject}: {check.detail}")
    if broken:
        return Invariant(False, f"{len(broken)} of {len(chains)} audit chains do not verify", broken)
    return Invariant(True, f"{len(chains)} chains, {records} records verified")


def archived_as_written(
    chains: dict[str, list[dict[str, Any]]],
    archived: dict[str, list[dict[str, Any]]],
    due_before: datetime,
) -> Invariant:
    """Every audit record written before ``due_before`` is in the archive, and every archived record
    is the table's record, field for field (a record edited in the table after it was written no
    longer matches its copy; the archive holds nothing the table does not: no scenario expires
    records). A record written later may still wait in the archiver's batch."""
    copies: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for subject, trail in archived.items():
        for record in trail:
            copies.setdefault((subject, int(record["seq"])), []).append(record)
    missing: list[str] = []
    differ: list[str] = []
    due = 0
    in_table: set[tuple[str, int]] = set()
    for subject, chain in chains.items():
        for record in chain:
            key = (subject, int(record["seq"]))
            in_table.add(key)
            found = copies.get(key)
            written = {k: v for k, v in record.items() if k != RECORD_TTL}  # storage, not archived
            if found is not None and any(copy != written for copy in found):
                differ.append(f"{subject} #{key[1]}: the table's record is not the one archived")
            if parse_utc(str(record["at"])) < due_before:
                due += 1
                if found is None:
                    missing.append(f"{subject} #{key[1]} (written {record['at']})")
    extra = [f"{s} #{n}: archived, not in the table" for s, n in sorted(set(copies) - in_table)]
    counts = {"due": due, "archived": len(copies)}
    wrong = missing + differ + extra
    if wrong:
        detail = f"{len(missing)} record(s) not archived, {len(differ)} differ, {len(extra)} only archived"
        return Invariant(False, detail, wrong, counts)
    return Invariant(True, f"{due} records due in the archive are there, as written", counts=counts)


def heads_match(runs: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]]) -> Invariant:
    wrong: list[str] = []
    for run in runs:
        chain = chains.get(f"run#{run['run_id']}", [])
        head = chain[-1] if chain else None
        if head is None or int(run["audit_seq"]) != int(head["seq"]) or run["audit_head"] != head["hash"]:
            wrong.append(f"{run['run_id']}: item at seq {run['audit_seq']}, chain at {len(chain)}")
    # A claim may commit its record alone (``item_may_wait``); its item must follow: a run whose
    # chain says it is not finished has one.
    ids = {f"run#{run['run_id']}" for run in runs}
    for subject, chain in chains.items():
        unfinished = bool(chain) and chain[-1].get("to_state") not in FINISHED
        if subject.startswith("run#") and subject not in ids and unfinished:
            wrong.append(f"{subject.removeprefix('run#')}: chain at {len(chain)}, no item")
    if wrong:
        return Invariant(False, f"{len(wrong)} run(s) do not point at the head of their chain", wrong)
    return Invariant(True, f"{len(runs)} runs point at the head of their audit chain")


DECLARED_SKIPS = frozenset({"overlap", "task_paused"})


def _skip_reason(chain: list[dict[str, Any]]) -> str | None:
    for record in reversed(chain):
        if record["action"] == "skipped":
            evidence = record.get("evidence") or {}
            return str(evidence.get("reason"))
    return None


def fires_became_runs(
    fires: list[Fire], runs: dict[str, dict[str, Any]], chains: dict[str, list[dict[str, Any]]]
) -> Invariant:
    missing: list[str] = []
    skipped_as_missed: list[str] = []
    for fire in fires:
        run = runs.get(fire.run_id)
        if run is None:
            missing.append(f"{fire.task_id} @ {fire.scheduled_time}: no run")
            continue
        if run["state"] == "skipped":
            reason = _skip_reason(chains.get(f"run#{fire.run_id}", []))
            if reason not in DECLARED_SKIPS and not _by_operator(chains.get(f"run#{fire.run_id}", [])):
                skipped_as_missed.append(f"{fire.run_id}: delivered, but skipped as {reason!r}")
    problems = missing + skipped_as_missed
    if problems:
        return Invariant(
            False,
            f"{len(missing)} delivered fire(s) have no run, {len(skipped_as_missed)} were skipped though "
            f"they were delivered (of {len(fires)})",
            problems,
        )
    return Invariant(
        True, f"each of {len(fires)} delivered fires ran, or a declared policy or an operator skipped it"
    )


def _by_operator(chain: list[dict[str, Any]]) -> bool:
    """A skip an operator asked for (the CLI or API writes ``via`` ... and a person's reason)."""
    for record in reversed(chain):
        if record["action"] == "skipped":
            return str(record.get("actor", "")) not in {"executor", "ledger", "sweeper", "simulator"}
    return False


def no_idle_holders(
    slots: list[dict[str, Any]],
    runs: dict[str, dict[str, Any]],
    workstream_runs: list[dict[str, Any]] | None = None,
) -> Invariant:
    """Every slot holder is a run that is running; a resource's holder (``<workstream run>/<step>``)
    a workstream step that is running."""
    steps = {
        f"{run['run_id']}/{step['step']}": str(step["state"])
        for run in workstream_runs or []
        for step in run["steps"]
    }
    idle: list[str] = []
    held = 0
    for item in slots:
        for holder in item.get("holders") or []:
            held += 1
            if str(holder) in steps:
                if steps[str(holder)] != "running":
                    idle.append(f"{item['pk']}: held by step {holder} ({steps[str(holder)]})")
                continue
            run = runs.get(str(holder))
            if run is None or run["state"] != "running":
                state = run["state"] if run else "no such run"
                idle.append(f"{item['pk']}: held by {holder} ({state})")
    if idle:
        return Invariant(False, f"{len(idle)} slot place(s) held by runs that are not running", idle)
    return Invariant(True, f"{len(slots)} slots, {held} holder(s), each running")


OUTCOME_ACTIONS = frozenset({"attempt-succeeded", "attempt-failed", "lease-expired"})
"""The records that end an attempt with its outcome (a call that returned, a report of an
asynchronous attempt, a lease or heartbeat timeout)."""
REPORTS_PREFIX = "reports#"


def _outcomes(chain: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    for record in chain:
        if record["action"] in OUTCOME_ACTIONS:
            attempt = int(record.get("evidence", {}).get("attempt") or 0)
            by_attempt.setdefault(attempt, []).append(record)
    return by_attempt


def one_outcome_per_attempt(chains: dict[str, list[dict[str, Any]]]) -> Invariant:
    """No attempt ends twice: not a duplicate completion, not a completion and its timeout."""
    twice: list[str] = []
    attempts = 0
    for subject, chain in chains.items():
        if not subject.startswith("run#"):
            continue
        for attempt, records in _outcomes(chain).items():
            attempts += 1
            if len(records) > 1:
                twice.append(f"{subject} attempt {attempt}: {[r['action'] for r in records]}")
    if twice:
        return Invariant(False, f"{len(twice)} attempt(s) ended more than once", twice)
    return Invariant(True, f"{attempts} ended attempts, each with one outcome")


def refused_reports_after_the_end(chains: dict[str, list[dict[str, Any]]]) -> Invariant:
    """A report refused as ``used`` or ``timed_out`` names an attempt that had already ended then,
    and the run's chain records no outcome for that attempt after the refusal (nothing reopened)."""
    wrong: list[str] = []
    refused = 0
    for subject, chain in chains.items():
        if not subject.startswith(REPORTS_PREFIX):
            continue
        run_chain = chains.get(f"run#{subject.removeprefix(REPORTS_PREFIX)}", [])
        outcomes = _outcomes(run_chain)
        for record in chain:
            evidence = record.get("evidence", {})
            if evidence.get("reason") not in ("used", "timed_out"):
                continue
            refused += 1
            ended = outcomes.get(int(evidence.get("attempt") or 0), [])
            if not ended:
                wrong.append(
                    f"{subject} seq {record['seq']}: refused {evidence['reason']}, attempt never ended"
                )
            elif any(str(o["at"]) > str(record["at"]) for o in ended):
                wrong.append(f"{subject} seq {record['seq']}: the attempt ended after it was refused")
    if wrong:
        return Invariant(False, f"{len(wrong)} refused report(s) do not match their run", wrong)
    return Invariant(True, f"{refused} late or repeated reports refused, each after its attempt ended")
