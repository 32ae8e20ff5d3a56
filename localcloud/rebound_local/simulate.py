"""``rebound local simulate``: run a scenario under the virtual clock and judge it by its invariants.

1. **Start.** The stand-in, the resources and the runtime start on a ``VirtualClock`` at the
   scenario's start; the scenario's tasks are registered through ``TaskOps`` (as the CLI does).
2. **Run.** Schedule time passes until the end of the window, with the scenario's faults:
   duplicate deliveries, executor crashes at named points, throttled AWS calls.
3. **Settle.** Recurring schedules stop firing; retries, leases and redeliveries that are
   already under way get up to ``settle`` more schedule time, checked once a minute, to finish.
   Then the runtime takes no new work and serves the clock until every invocation under way
   has returned (``LocalRuntime.finish``).
4. **Judge.** Runs, work orders and audit chains are read straight from moto's tables, every
   queued message is reconciled against the message ledger, and each invariant is checked.

The report is JSON; ``ok`` is true iff every invariant held and the simulation finished. A run
that cannot finish (a worker busy off the clock, or virtual time standing still, for
``stall_wall_s`` of wall time; or invocations still running past every Lambda timeout at the
end) never hangs: its report has ``ok: false`` and ``hung`` (why, when, and each invocation still
running: function, since when, its deadline, its messages), and ``rebound local simulate`` exits 3.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rebound.domain.audit import verify_chain
from rebound.domain.ids import scheduled_run_id
from rebound.domain.models import AuditRecord
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine.telemetry import ON_TIME_WINDOW_S
from rebound.ops.tasks import TaskOps
from rebound_local import hostile, motopatch, observe, reports
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.instrument import MessageLedger
from rebound_local.reports import write_report
from rebound_local.runtime import STALL_WALL_S
from rebound_local.scenario import LoadedScenario
from rebound_local.stack import Faults, LocalStack, start_local
from rebound_local.workers import RuntimeHung

log = logging.getLogger(__name__)

UNSETTLED = ("pending", "running", "failed", "retry_scheduled", "replayed")
SETTLE_STEP = timedelta(minutes=1)
EXAMPLES = 10


@dataclass
class Invariant:
    ok: bool
    detail: str
    examples: list[Any] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "detail": self.detail}
        if self.examples:
            out["examples"] = self.examples[:EXAMPLES]
        return out


@dataclass
class Fire:
    task_id: str
    scheduled_time: str


@dataclass
class SimulationResult:
    report: dict[str, Any]

    @property
    def ok(self) -> bool:
        return bool(self.report["ok"])

    @property
    def failed(self) -> list[str]:
        return [name for name, inv in self.report["invariants"].items() if not inv["ok"]]


Progress = Callable[[str, datetime], None]


class Simulation:
    def __init__(
        self,
        loaded: LoadedScenario,
        *,
        seed: int | None = None,
        transport: str = "direct",
        log_file: Path | None = None,
        progress: Progress | None = None,
        stall_wall_s: float = STALL_WALL_S,
    ) -> None:
        self.loaded = loaded
        self.scenario = loaded.scenario
        self.seed = self.scenario.seed if seed is None else seed
        self.transport = transport
        self.log_file = log_file
        self.progress = progress
        self.ledger = MessageLedger()
        self.fires: list[Fire] = []
        self.dropped: list[dict[str, str]] = []
        self.tampered: list[str] = []
        self.timing: dict[str, float] = {}
        self.stall_wall_s = stall_wall_s
        self._drops_left = self.scenario.sabotage.drop_messages

    # --------------------------------------------------------------------------- the run
    def run(self) -> SimulationResult:
        started = time.monotonic()
        sc = self.scenario
        reset_moto()
        motopatch.install()
        from moto.moto_api._internal import mock_random

        mock_random.seed(self.seed)
        motopatch.track_messages(self.ledger)
        clock = VirtualClock(sc.start)
        stack = start_local(
            clock,
            faults=Faults.from_config(sc.faults, self.seed),
            jitter_seed=self.seed,
            transport=self.transport,
            log_file=self.log_file,
            log_level=logging.WARNING,
            latency=sc.model.latency() if sc.model.latency().active else None,
            concurrency=sc.model.concurrency,
            executor_max_concurrency=sc.model.executor_max_concurrency,
            stall_wall_s=self.stall_wall_s,
        )
        try:
            self._watch_fires(stack)
            # Registering the scenario's tasks is setup, not part of what is judged: moto's faults
            # (conflicts, index lag) start with the window.
            hostile.activate(None)
            ops = TaskOps(stack.deps, actor="simulator")
            ops.apply(ops.plan(self.loaded.tasks))
            hostile.activate(stack.moto_faults)
            self.timing["startup_s"] = time.monotonic() - started

            mark = time.monotonic()
            try:
                self._run_window(stack, clock)
                self.timing["run_s"] = time.monotonic() - mark
                mark = time.monotonic()
                settled_at = self._settle(stack, clock)
                self.timing["settle_s"] = time.monotonic() - mark
            except RuntimeHung as hung:  # mid-run: the tables may be mid-change; no invariants
                log.error("the simulation did not finish: %s", hung)
                out = self._unfinished(stack, clock, hung)
            else:
                hung_at_end: RuntimeHung | None = None
                try:
                    stack.runtime.finish()
                except RuntimeHung as hung:
                    log.error("the simulation did not finish: %s", hung)
                    hung_at_end = hung
                self._tamper(stack)
                mark = time.monotonic()
                out = self._report(stack, clock, settled_at, hung_at_end)
                self.timing["report_s"] = time.monotonic() - mark
        finally:
            motopatch.track_messages(None)
            stack.stop()
            reset_moto()
        self.timing["total_s"] = time.monotonic() - started
        out["timing"] = {k: round(v, 3) for k, v in self.timing.items()}
        return SimulationResult(out)

    def _watch_fires(self, stack: LocalStack) -> None:
        engine = stack.runtime.scheduler
        deliver = engine.deliver
        execution_queue = stack.settings.queue("execution").name

        def watched(arn: str, body: str) -> None:
            deliver(arn, body)
            try:
                message = json.loads(body)
            except ValueError:
                message = {}
            if message.get("kind") == "fire":
                self.fires.append(Fire(str(message["task_id"]), str(message["scheduled_time"])))
            if self._drops_left > 0 and arn.endswith(":" + execution_queue):
                self._drop_last(stack, execution_queue)

        engine.deliver = watched

    def _drop_last(self, stack: LocalStack, queue_name: str) -> None:
        """Sabotage: the message just sent vanishes from the queue, as if SQS had lost it."""
        with motopatch.LOCK:
            queue = stack.cloud.sqs_backend().get_queue(queue_name)
            if not queue._messages:
                return
            message = queue._messages.pop()
        self._drops_left -= 1
        self.dropped.append({"queue": queue_name, "message_id": message.id, "body": message.body[:200]})

    def _run_window(self, stack: LocalStack, clock: VirtualClock) -> None:
        sc = self.scenario
        runtime = stack.runtime
        injections = sorted(sc.messages, key=lambda m: m.at)
        on_step = self._on_step(clock)
        for injected in injections:
            when = sc.start + timedelta(seconds=injected.at)
            if when > clock.now():
                runtime.run_virtual(min(when, sc.end), on_step=on_step)
            if when <= sc.end:
                ref = stack.settings.queue(injected.queue)
                stack.cloud.client("sqs").send_message(
                    QueueUrl=ref.url, MessageBody=injected.body, DelaySeconds=injected.delay_s
                )
        runtime.run_virtual(sc.end, on_step=on_step)

    def _on_step(self, clock: VirtualClock) -> Callable[[], None] | None:
        if self.progress is None:
            return None
        progress = self.progress
        last = [0.0]

        def step() -> None:
            now = time.monotonic()
            if now - last[0] >= 0.5:
                last[0] = now
                progress("run", clock.now())

        return step

    def _settle(self, stack: LocalStack, clock: VirtualClock) -> datetime | None:
        """Let work under way finish; returns when everything had settled, or None if it never did."""
        stack.runtime.scheduler.freeze_recurring()
        deadline = clock.now() + timedelta(seconds=self.scenario.settle)
        while True:
            if self._quiet(stack):
                return clock.now()
            if clock.now() >= deadline:
                return None
            stack.runtime.run_virtual(min(clock.now() + SETTLE_STEP, deadline))
            if self.progress is not None:
                self.progress("settle", clock.now())

    def _quiet(self, stack: LocalStack) -> bool:
        s = stack.settings
        states = observe.count_by_index(stack.cloud, s.table("runs"), "by_state")
        if any(states.get(state) for state in UNSETTLED):
            return False
        if any(d.total for d in observe.queue_depths(stack.cloud, s) if not d.is_dlq):
            return False
        if observe.pending_stream_records(stack.cloud, s):
            return False
        return observe.schedule_counts(stack.cloud).one_time == 0

    def _tamper(self, stack: LocalStack) -> None:
        """Sabotage: edit stored audit records after the fact, as a tamperer with table access would."""
        wanted = self.scenario.sabotage.tamper_audit_records
        if not wanted:
            return
        from moto.dynamodb.models.dynamo_type import DynamoType

        with motopatch.LOCK:
            table = stack.cloud.dynamodb_backend().get_table(stack.settings.table("audit"))
            for by_range in table.items.values():
                if len(self.tampered) >= wanted:
                    break
                item = next(iter(by_range.values()))
                doc = json.loads(item.attrs["doc"].value)
                doc["actor"] = "someone-else"
                item.attrs["doc"] = DynamoType({"S": json.dumps(doc)})
                self.tampered.append(f"{item.attrs['subject'].value} #{item.attrs['seq'].value}")

    # --------------------------------------------------------------------------- the report
    def _unfinished(self, stack: LocalStack, clock: VirtualClock, hung: RuntimeHung) -> dict[str, Any]:
        """The report of a simulation that could not go on: what was still running, what was injected."""
        return {
            "ok": False,
            "hung": hung.to_json(),
            "scenario": reports.scenario_section(self.loaded, self.seed, self.transport),
            "virtual_time": {
                "start": iso(self.scenario.start),
                "window_end": iso(self.scenario.end),
                "settled_at": None,
                "ended_at": iso(clock.now()),
            },
            "faults": reports.faults_section(self.scenario, stack, self.dropped, self.tampered),
            "runtime": reports.runtime_section(stack),
            "invariants": {},
            "aws_calls": stack.aws_calls.snapshot(),
        }

    def _report(
        self,
        stack: LocalStack,
        clock: VirtualClock,
        settled_at: datetime | None,
        hung: RuntimeHung | None = None,
    ) -> dict[str, Any]:
        s = stack.settings
        cloud = stack.cloud
        runs = observe.table_items(cloud, s.table("runs"))
        orders = observe.table_items(cloud, s.table("workorders"))
        chains = observe.audit_chains(cloud, s)
        depths = observe.queue_depths(cloud, s)

        invariants = {
            "no_run_left_running": self._no_run_running(runs),
            "every_run_settled": self._every_run_settled(runs),
            "dead_letters_have_one_work_order": self._one_work_order(runs, orders, chains),
            "no_target_called_twice_per_attempt": self._no_double_calls(stack),
            "audit_chains_verify": self._chains_verify(chains),
            "run_items_match_their_chains": self._heads_match(runs, chains),
            "no_message_lost": self._no_message_lost(stack),
            "every_fire_became_a_run": self._fires_became_runs(runs),
        }
        windows = {
            t.id: float(t.schedule.jitter_window)
            for t in self.loaded.tasks
            if t.schedule is not None and t.schedule.jitter_window
        }
        latency = dispatch_latency(runs, windows)
        if self.scenario.expect.on_time_pct is not None:
            invariants["dispatch_on_time"] = _on_time(latency, self.scenario.expect.on_time_pct)
        states = Counter(str(run["state"]) for run in runs)
        report: dict[str, Any] = {
            "ok": hung is None and all(inv.ok for inv in invariants.values()),
            "hung": hung.to_json() if hung is not None else None,
            "scenario": reports.scenario_section(self.loaded, self.seed, self.transport),
            "virtual_time": {
                "start": iso(self.scenario.start),
                "window_end": iso(self.scenario.end),
                "settled_at": iso(settled_at) if settled_at else None,
                "ended_at": iso(clock.now()),
            },
            "summary": {
                "runs": len(runs),
                "runs_by_state": dict(sorted(states.items())),
                "attempts": sum(len(run.get("attempts") or []) for run in runs),
                "target_calls": len(stack.targets.calls),
                "schedule_fires": len(self.fires),
                "work_orders": len(orders),
                "audit_subjects": len(chains),
                "audit_records": sum(len(chain) for chain in chains.values()),
            },
            "pending": {
                "settled": settled_at is not None,
                "runs_by_state": {k: v for k, v in states.items() if k in UNSETTLED},
                "queues": {
                    d.logical: {"visible": d.visible, "in_flight": d.in_flight, "delayed": d.delayed}
                    for d in depths
                    if d.total
                },
                "one_time_schedules": observe.schedule_counts(cloud).one_time,
                "outbox_stream_records": observe.pending_stream_records(cloud, s),
            },
            "faults": reports.faults_section(self.scenario, stack, self.dropped, self.tampered),
            "runtime": reports.runtime_section(stack),
            "dispatch_latency": latency,
            "messages": self._message_summary(stack),
            "invariants": {name: inv.to_json() for name, inv in invariants.items()},
            "metrics": stack.metrics.snapshot(),
            "aws_calls": stack.aws_calls.snapshot(),
            "runs": [
                reports.run_entry(run) for run in sorted(runs, key=lambda r: (r["task_id"], r["run_id"]))
            ],
            "work_orders": [
                reports.work_order_entry(order) for order in sorted(orders, key=lambda o: o["opened_at"])
            ],
            "target_calls": [
                {
                    "run_id": c.run_id,
                    "attempt": c.attempt,
                    "at": iso(c.at),
                    "ok": c.ok,
                    "error_code": c.error_code,
                }
                for c in stack.targets.calls
            ],
        }
        return report

    # --------------------------------------------------------------------------- invariants
    @staticmethod
    def _no_run_running(runs: list[dict[str, Any]]) -> Invariant:
        stuck = [run["run_id"] for run in runs if run["state"] == "running"]
        if stuck:
            return Invariant(False, f"{len(stuck)} run(s) still running after the settle window", stuck)
        return Invariant(True, f"none of {len(runs)} runs is running")

    @staticmethod
    def _every_run_settled(runs: list[dict[str, Any]]) -> Invariant:
        open_runs = [f"{run['run_id']} ({run['state']})" for run in runs if run["state"] in UNSETTLED]
        if open_runs:
            return Invariant(False, f"{len(open_runs)} run(s) did not reach a final state", open_runs)
        return Invariant(True, f"all {len(runs)} runs reached a final state")

    @staticmethod
    def _one_work_order(
        runs: list[dict[str, Any]], orders: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]]
    ) -> Invariant:
        per_subject = Counter(str(order["subject"]) for order in orders)
        by_subject = {str(order["subject"]): order for order in orders}
        dead = {f"run#{run['run_id']}": run for run in runs if run["state"] == "dead_lettered"}
        messages = [
            subject
            for subject, chain in chains.items()
            if subject.startswith("msg#") and any(rec["action"] == "dead-lettered" for rec in chain)
        ]
        problems: list[str] = []
        for subject in [*dead, *messages]:
            count = per_subject.get(subject, 0)
            if count != 1:
                problems.append(f"{subject}: {count} work orders")
                continue
            run = dead.get(subject)
            if run is not None and run.get("work_order_id") != by_subject[subject]["work_order_id"]:
                problems.append(f"{subject}: the run names work order {run.get('work_order_id')!r}")
        known = set(dead) | set(messages)
        strays = [s for s in per_subject if s not in known and s.startswith("msg#")]
        problems += [f"{s}: a work order for a message that was never dead-lettered" for s in strays]
        total = len(dead) + len(messages)
        if problems:
            return Invariant(False, f"{len(problems)} of {total} dead letters break the rule", problems)
        return Invariant(
            True, f"{len(dead)} dead-lettered runs and {len(messages)} refused messages, one work order each"
        )

    @staticmethod
    def _no_double_calls(stack: LocalStack) -> Invariant:
        counts = Counter((call.run_id, call.attempt) for call in stack.targets.calls)
        twice = [f"{run_id} attempt {attempt}: {n} calls" for (run_id, attempt), n in counts.items() if n > 1]
        if twice:
            return Invariant(
                False, f"{len(twice)} (run, attempt) pairs called the target more than once", twice
            )
        return Invariant(True, f"{len(counts)} (run, attempt) pairs, each called once")

    @staticmethod
    def _chains_verify(chains: dict[str, list[dict[str, Any]]]) -> Invariant:
        broken: list[str] = []
        records = 0
        for subject, chain in chains.items():
            parsed = [AuditRecord.model_validate(rec) for rec in chain]
            records += len(parsed)
            check = verify_chain(subject, parsed)
            if not check.ok:
                broken.append(f"{subject}: {check.detail}")
        if broken:
            return Invariant(False, f"{len(broken)} of {len(chains)} audit chains do not verify", broken)
        return Invariant(True, f"{len(chains)} chains, {records} records verified")

    @staticmethod
    def _heads_match(runs: list[dict[str, Any]], chains: dict[str, list[dict[str, Any]]]) -> Invariant:
        wrong: list[str] = []
        for run in runs:
            chain = chains.get(f"run#{run['run_id']}", [])
            head = chain[-1] if chain else None
            if head is None or int(run["audit_seq"]) != int(head["seq"]) or run["audit_head"] != head["hash"]:
                wrong.append(f"{run['run_id']}: item at seq {run['audit_seq']}, chain at {len(chain)}")
        if wrong:
            return Invariant(False, f"{len(wrong)} run(s) do not point at the head of their chain", wrong)
        return Invariant(True, f"{len(runs)} runs point at the head of their audit chain")

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

    def _message_summary(self, stack: LocalStack) -> dict[str, Any]:
        return {
            "sent_per_queue": dict(self.ledger.sent),
            "moved_to_dlq": dict(self.ledger.moved),
        }

    def _fires_became_runs(self, runs: list[dict[str, Any]]) -> Invariant:
        ids = {str(run["run_id"]) for run in runs}
        missing = [
            f"{fire.task_id} @ {fire.scheduled_time}"
            for fire in self.fires
            if scheduled_run_id(fire.task_id, parse_utc(fire.scheduled_time)) not in ids
        ]
        if missing:
            return Invariant(
                False, f"{len(missing)} of {len(self.fires)} schedule fires have no run", missing
            )
        return Invariant(True, f"each of {len(self.fires)} schedule fires has its run")


def _percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def dispatch_latency(
    runs: list[dict[str, Any]], jitter_windows: dict[str, float] | None = None
) -> dict[str, Any]:
    """How late scheduled runs started: first attempt start minus the planned start.

    The planned start is the run's ``due_at`` (its scheduled time plus the task's stagger offset)
    or else its scheduled time, plus the task's jitter window (``jitter_windows``, by task id):
    Scheduler may deliver anywhere inside it. This is how the executor's
    ``task.scheduler.on_time_rate`` measures it. A run counts as on time if it started within
    ``ON_TIME_WINDOW_S`` (60 s).
    """
    jitter_windows = jitter_windows or {}
    delays: list[float] = []
    not_started = 0
    for run in runs:
        if run.get("trigger") != "schedule" or not run.get("scheduled_for"):
            continue
        attempts = run.get("attempts") or []
        first = attempts[0].get("started_at") if attempts else None
        if not first:
            not_started += 1  # skipped by its overlap policy or a pause, or never claimed
            continue
        planned = parse_utc(str(run.get("due_at") or run["scheduled_for"]))
        window = jitter_windows.get(str(run.get("task_id")), 0.0)
        delays.append((parse_utc(str(first)) - planned).total_seconds() - window)
    out: dict[str, Any] = {
        "scheduled_runs": len(delays) + not_started,
        "started": len(delays),
        "not_started": not_started,
        "on_time_window_s": ON_TIME_WINDOW_S,
    }
    if not delays:
        return out
    delays.sort()
    on_time = sum(1 for d in delays if d <= ON_TIME_WINDOW_S)
    out.update(
        p50_s=round(_percentile(delays, 50), 3),
        p90_s=round(_percentile(delays, 90), 3),
        p99_s=round(_percentile(delays, 99), 3),
        max_s=round(delays[-1], 3),
        on_time=on_time,
        on_time_pct=round(100.0 * on_time / len(delays), 3),
    )
    return out


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


def run_simulate(
    scenario_file: Path,
    report_path: Path,
    *,
    seed: int | None = None,
    transport: str = "direct",
    quiet: bool = False,
) -> int:
    """The ``rebound local simulate`` command: run, write the report, print the verdict. Exit code."""
    from rich.console import Console
    from rich.table import Table

    from rebound_local.scenario import load_scenario

    console = Console(stderr=False, highlight=False)
    loaded = load_scenario(scenario_file)
    sc = loaded.scenario
    log_file = report_path.with_name(report_path.stem + ".handlers.log")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        console.print(
            f"Simulating [bold]{scenario_file}[/bold]: {len(loaded.tasks)} tasks, "
            f"{sc.duration / 3600:g} h from {iso(sc.start)} (settle up to {sc.settle / 3600:g} h), "
            f"transport {transport}"
        )
    last_line = [0.0]

    def progress(phase: str, now: datetime) -> None:
        if quiet or not console.is_terminal:
            return
        if time.monotonic() - last_line[0] >= 1.0:
            last_line[0] = time.monotonic()
            console.print(f"  {phase}: schedule time {now:%Y-%m-%d %H:%M}", end="\r")

    result = Simulation(loaded, seed=seed, transport=transport, log_file=log_file, progress=progress).run()
    write_report(result.report, report_path)

    report = result.report
    if report.get("hung"):
        hung = report["hung"]
        console.print(f"[red]the simulation did not finish: {hung['reason']} at {hung['at']}[/red]")
        for running in hung["running"][:10]:
            console.print(
                f"  still running: {running['function']} #{running['invocation']} since {running['since']} "
                f"(deadline {running['deadline']}), messages {', '.join(running['messages']) or '-'}"
            )
        console.print(f"report: {report_path}")
        if not report["invariants"]:
            return 3
    table = Table(title="Invariants", show_lines=False)
    table.add_column("invariant")
    table.add_column("held")
    table.add_column("detail")
    for name, inv in report["invariants"].items():
        verdict = "[green]yes[/green]" if inv["ok"] else "[red]NO[/red]"
        detail = inv["detail"]
        if not inv["ok"] and inv.get("examples"):
            detail += "\n  e.g. " + "\n  e.g. ".join(str(e) for e in inv["examples"][:3])
        table.add_row(name, verdict, detail)
    console.print(table)
    summary = report["summary"]
    timing = report["timing"]
    console.print(
        f"{summary['runs']} runs {summary['runs_by_state']}, {summary['work_orders']} work orders, "
        f"{summary['target_calls']} target calls, {sum(report['aws_calls'].values())} AWS calls"
    )
    console.print(
        f"wall time {timing['total_s']:.1f} s (startup {timing['startup_s']:.1f}, run {timing['run_s']:.1f}, "
        f"settle {timing['settle_s']:.1f}, report {timing['report_s']:.1f}); report: {report_path}"
    )
    if not report["pending"]["settled"]:
        console.print(f"[yellow]still pending after the settle window:[/yellow] {report['pending']}")
    console.print(
        "[green]every invariant held[/green]"
        if result.ok
        else f"[red]failed: {', '.join(result.failed) or 'the simulation did not finish'}[/red]"
    )
    if report.get("hung"):
        return 3
    return 0 if result.ok else 1
