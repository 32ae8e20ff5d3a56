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
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rebound.domain.timefmt import iso, parse_utc
from rebound.engine.telemetry import ON_TIME_WINDOW_S
from rebound.ops.tasks import TaskOps
from rebound_local import hostile, motopatch, observe, reports
from rebound_local import invariants as inv
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.instrument import MessageLedger
from rebound_local.invariants import Fire, Invariant, LiveCarriers, Tee
from rebound_local.reports import write_report
from rebound_local.runtime import STALL_WALL_S
from rebound_local.scenario import LoadedScenario
from rebound_local.stack import Faults, LocalStack, start_local
from rebound_local.workers import RuntimeHung

log = logging.getLogger(__name__)

UNSETTLED = inv.UNSETTLED
SETTLE_STEP = timedelta(minutes=1)


@dataclass
class SimulationResult:
    report: dict[str, Any]

    @property
    def ok(self) -> bool:
        return bool(self.report["ok"])

    @property
    def failed(self) -> list[str]:
        return [name for name, held in self.report["invariants"].items() if not held["ok"]]


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
        self._duplicates_left = self.scenario.sabotage.duplicate_fires
        self.sabotaged: dict[str, list[str]] = {}
        self._stack: LocalStack | None = None
        self.live = LiveCarriers("", self._read_run)

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
        self._stack = stack
        self.live.queue = stack.settings.queue("execution").name
        motopatch.track_messages(Tee(self.ledger, self.live))
        try:
            self._watch_fires(stack)
            self._double_target_calls(stack)
            # Registering the scenario's tasks is setup, not part of what is judged: moto's faults
            # (conflicts, index lag) start with the window.
            hostile.activate(None)
            ops = TaskOps(stack.deps, actor="simulator")
            ops.apply_tenants(dict(self.scenario.tenants))
            ops.apply(ops.plan(ending_with(self.loaded.tasks, sc.end)))
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
                self._sabotage_end(stack)
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
            if self._duplicates_left > 0 and arn.endswith(":" + execution_queue) and '"fire"' in body:
                self._duplicates_left -= 1  # sabotage: a second live copy of the fire
                deliver(arn, body)
                self.sabotaged.setdefault("duplicate_fires", []).append(body[:120])
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

    def _read_run(self, run_id: str) -> dict[str, Any] | None:
        """The run as moto holds it now (called from inside moto, under its lock)."""
        stack = self._stack
        if stack is None:
            return None
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = stack.cloud.dynamodb_backend().get_table(stack.settings.table("runs"))
        item = table.items.get(DynamoType({"S": run_id}))
        return observe.decode_item(item) if item is not None else None

    def _double_target_calls(self, stack: LocalStack) -> None:
        """Sabotage: the first ``call_target_twice`` target calls are made twice."""
        budget = [self.scenario.sabotage.call_target_twice]
        if not budget[0]:
            return
        targets = stack.targets
        invoke = targets.invoke

        def twice(target: Any, call: Any) -> Any:
            if budget[0] > 0:
                budget[0] -= 1
                invoke(target, call)
                self.sabotaged.setdefault("call_target_twice", []).append(
                    f"{call.run_id} attempt {call.attempt}"
                )
            return invoke(target, call)

        targets.invoke = twice  # type: ignore[method-assign]

    def _sabotage_end(self, stack: LocalStack) -> None:
        """Sabotage at the end, each breaking one invariant: leaked slots, stranded runs, lost DLQ
        messages, delivered fires recorded as missed."""
        sab = self.scenario.sabotage
        if not any(
            (
                sab.leak_slots,
                sab.strand_runs,
                sab.remove_dlq_messages,
                sab.skip_delivered_fires,
                sab.remove_work_orders,
                sab.stale_heads,
            )
        ):
            return
        from moto.dynamodb.models.dynamo_type import DynamoType

        s = stack.settings
        backend = stack.cloud.dynamodb_backend()
        runs = observe.table_items(stack.cloud, s.table("runs"))
        done = [r for r in runs if r["state"] == "succeeded"]
        delivered = {f.run_id for f in self.fires}
        with motopatch.LOCK:
            for n, run in enumerate(done[: sab.leak_slots]):
                backend.put_item(
                    s.table("idempotency"),
                    {
                        "pk": {"S": f"slots#sabotage#{n}"},
                        "holders": {"SS": [run["run_id"]]},
                        "cap": {"N": "1"},
                    },
                )
                self.sabotaged.setdefault("leak_slots", []).append(run["run_id"])
            stranded = done[sab.leak_slots : sab.leak_slots + sab.strand_runs]
            for n, run in enumerate(stranded):  # the first left running, the others pending
                item = backend.get_table(s.table("runs")).items[DynamoType({"S": run["run_id"]})]
                item.attrs["state"] = DynamoType({"S": "running" if n == 0 else "pending"})
                self.sabotaged.setdefault("strand_runs", []).append(run["run_id"])
            others = done[sab.leak_slots + sab.strand_runs :][: sab.stale_heads]
            for run in others:
                item = backend.get_table(s.table("runs")).items[DynamoType({"S": run["run_id"]})]
                item.attrs["audit_seq"] = DynamoType({"N": str(int(run["audit_seq"]) + 1)})
                self.sabotaged.setdefault("stale_heads", []).append(run["run_id"])
            orders = backend.get_table(s.table("workorders"))
            linked = [
                r["work_order_id"] for r in runs if r["state"] == "dead_lettered" and r.get("work_order_id")
            ]
            for order_id in linked[: sab.remove_work_orders]:
                orders.delete_item(DynamoType({"S": order_id}), None)
                self.sabotaged.setdefault("remove_work_orders", []).append(order_id)
            dead = {r["dlq_message_id"]: r["run_id"] for r in runs if r["state"] == "dead_lettered"}
            queue = stack.cloud.sqs_backend().get_queue(s.queue("dlq").name)
            gone = [m for m in queue._messages if m.id in dead][: sab.remove_dlq_messages]
            for message in gone:  # as an operator's purge would: accounted for, but gone
                queue._messages.remove(message)
                self.ledger.purged(queue.name, [message.id])
                self.sabotaged.setdefault("remove_dlq_messages", []).append(dead[message.id])
        if sab.skip_delivered_fires:
            self._skip_delivered(
                stack, [r for r in done if r["run_id"] in delivered][-sab.skip_delivered_fires :]
            )

    def _skip_delivered(self, stack: LocalStack, runs: list[dict[str, Any]]) -> None:
        """Replace delivered fires' runs by runs the ledger records as missed (with valid chains)."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        from rebound.engine.ledger import Ledger

        s = stack.settings
        backend = stack.cloud.dynamodb_backend()
        ledger = Ledger(stack.deps, actor="ledger")
        for run in runs:
            with motopatch.LOCK:
                backend.get_table(s.table("runs")).delete_item(DynamoType({"S": run["run_id"]}), None)
                audit = backend.get_table(s.table("audit"))
                audit.items.pop(DynamoType({"S": f"run#{run['run_id']}"}), None)
                outbox = backend.get_table(s.table("outbox"))
                prefix = f"run#{run['run_id']}#"
                for key in [k for k in outbox.items if str(k.value).startswith(prefix)]:
                    outbox.delete_item(key, None)
            stored = stack.deps.store.get_task(run["task_id"])
            ledger._record_skipped(stored, parse_utc(str(run["scheduled_for"])), stack.clock.now())
            self.sabotaged.setdefault("skip_delivered_fires", []).append(run["run_id"])

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

        slots = [
            i for i in observe.table_items(cloud, s.table("idempotency")) if str(i["pk"]).startswith("slots#")
        ]
        world = inv.World(
            runs=runs,
            orders=orders,
            chains=chains,
            slots=slots,
            dlq=self._dlq_copies(stack),
            fires=self.fires,
            target_calls=[(c.run_id, c.attempt) for c in stack.targets.calls],
            paused_tasks={t.id for t in self.loaded.tasks if t.state.value == "paused"},
            ended_at=clock.now(),
        )
        invariants = inv.judge(world)
        invariants["no_message_lost"] = self._no_message_lost(stack)
        invariants["at_most_one_live_message_per_run"] = self.live.invariant()
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
            "faults": reports.faults_section(
                self.scenario, stack, self.dropped, self.tampered, self.sabotaged
            ),
            "runtime": reports.runtime_section(stack),
            "dispatch_latency": latency,
            "messages": self._message_summary(stack),
            "invariants": {name: held.to_json() for name, held in invariants.items()},
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
        peak = max(self.live.peak.values(), default=0)
        return {
            "sent_per_queue": dict(self.ledger.sent),
            "moved_to_dlq": dict(self.ledger.moved),
            "live_per_run_peak": peak,
            "runs_with_more_than_one_live": sum(1 for n in self.live.peak.values() if n > 1),
        }

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


def ending_with(tasks: list[Any], end: datetime) -> list[Any]:
    """The scenario's tasks with their recurring schedules ending with its window (Scheduler's
    EndDate): in the settle phase no fire is due, so the run ledger expects none either."""
    out = []
    for task in tasks:
        spec = task.schedule
        if spec is not None and spec.at is None and spec.end is None:
            task = task.model_copy(update={"schedule": spec.model_copy(update={"end": end})})
        out.append(task)
    return out


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
    for name, held in report["invariants"].items():
        verdict = "[green]yes[/green]" if held["ok"] else "[red]NO[/red]"
        detail = held["detail"]
        if not held["ok"] and held.get("examples"):
            detail += "\n  e.g. " + "\n  e.g. ".join(str(e) for e in held["examples"][:3])
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
