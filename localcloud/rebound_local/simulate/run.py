"""Driving a scenario: start the local cloud on a virtual clock, run the window, settle, judge.

``Simulation.run`` does the four steps (see the package); ``run_simulate`` is the ``rebound local
simulate`` command around it. The checks are in ``invariants``, the report in ``report``, the
scenario's sabotage in ``sabotage``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from rebound.domain.schedules import WORKSTREAM_START
from rebound.domain.timefmt import iso
from rebound.ops.tasks import TaskOps
from rebound.ops.workstreams import WorkstreamOps
from rebound_local import budgets, hostile, motopatch, observe
from rebound_local.clock import VirtualClock
from rebound_local.cloud import reset_moto
from rebound_local.heap import HeapKeeper
from rebound_local.instrument import MessageLedger
from rebound_local.invariants import Fire
from rebound_local.live_carriers import LiveCarriers, Tee
from rebound_local.reports import write_report
from rebound_local.runtime import STALL_WALL_S
from rebound_local.scenario import BUS, FlagSwitch, InjectedMessage, LoadedScenario, Operation, Recovery
from rebound_local.simulate.invariants import UNSETTLED
from rebound_local.simulate.recovery import recover, switch_flag
from rebound_local.simulate.report import SimulationReport, SimulationResult, print_verdict
from rebound_local.simulate.sabotage import SimulationSabotage
from rebound_local.simulate.workstreams import Races, operate, workstream_items
from rebound_local.stack import Faults, LocalStack, start_local
from rebound_local.workers import RuntimeHung

log = logging.getLogger("rebound_local.simulate")

SETTLE_STEP = timedelta(minutes=1)
T = TypeVar("T", bound=Any)


Progress = Callable[[str, datetime], None]


class Simulation(SimulationSabotage, SimulationReport):
    def __init__(
        self,
        loaded: LoadedScenario,
        *,
        seed: int | None = None,
        transport: str = "direct",
        log_file: Path | None = None,
        progress: Progress | None = None,
        stall_wall_s: float = STALL_WALL_S,
        aws_sized: bool = False,
        call_sites: bool = False,
    ) -> None:
        self.loaded = loaded
        self.aws_sized = aws_sized
        self.call_sites = call_sites
        """Attribute the bill's DynamoDB units to call sites too (``rebound_local.call_sites``):
        the cost bench's tables; a frame walk on every DynamoDB call, so off unless asked."""
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
        self._tokens_to_ignore = self.scenario.sabotage.ignore_start_tokens
        self.sabotaged: dict[str, list[str]] = {}
        self._stack: LocalStack | None = None
        self.window_start: tuple[datetime, dict[str, float], int] | None = None
        """When the window began (after the tasks were applied): the clock, the meter, messages sent."""
        self.live = LiveCarriers("", self._read_run)
        self.workstream_fires: list[Fire] = []
        """Every start a workstream's schedule delivered (its id, its fire's time)."""
        self.operations: list[dict[str, Any]] = []
        """What the scenario's operator did (``operations``), one entry each."""
        self.races: Races | None = None
        """The operations waiting for a step's end (``on_end_of``)."""

    # --------------------------------------------------------------------------- the run
    def run(self) -> SimulationResult:
        with own_cloud():
            return self._run()

    def _run(self) -> SimulationResult:
        started = time.monotonic()
        sc = self.scenario
        reset_moto()
        motopatch.install()
        from moto.moto_api._internal import mock_random

        mock_random.seed(self.seed)
        motopatch.track_messages(self.ledger)
        clock = VirtualClock(sc.start)
        # This process is the local cloud: its tables grow with every run, and full collections
        # would walk them all again and again (rebound_local.heap). Kept from before the stack is
        # built, so that building it (the handlers' imports) runs under the keeper's thresholds.
        keeper = HeapKeeper().start()
        try:
            stack = self._start_stack(clock)
        except BaseException:
            keeper.stop()
            raise
        self._stack = stack
        stack.meter.sites = self.call_sites
        self.live.queue = stack.settings.queue("execution").name
        motopatch.track_messages(Tee(self.ledger, self.live))
        try:
            self._watch_fires(stack)
            self._double_target_calls(stack)
            # Registering the scenario's tasks is setup, not part of what is judged: moto's faults
            # (conflicts, index lag) and the clients' throttling start with the window.
            hostile.activate(None)
            stack.throttler.paused = True
            ops = TaskOps(stack.deps, actor="simulator")
            ops.apply_tenants(dict(self.scenario.tenants))
            ops.apply(ops.plan(ending_with(self.loaded.tasks, sc.end)))
            if self.loaded.workstreams or self.loaded.resources:  # as `rebound tasks apply` does
                WorkstreamOps(stack.deps, "simulator").register(
                    ending_with(self.loaded.workstreams, sc.end), self.loaded.resources
                )
            hostile.activate(stack.moto_faults)
            stack.throttler.paused = False
            self.window_start = (clock.now(), stack.meter.snapshot(), sum(self.ledger.sent.values()))
            self.timing["startup_s"] = time.monotonic() - started

            mark = time.monotonic()
            try:
                self._run_window(stack, clock)
                self.timing["run_s"] = time.monotonic() - mark
                mark = time.monotonic()
                settled_at = self._settle(stack, clock)
                self.timing["settle_s"] = time.monotonic() - mark
                self.operations += self.races.unfired() if self.races is not None else []
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
            keeper.stop()
        self.timing["total_s"] = time.monotonic() - started
        out["timing"] = {k: round(v, 3) for k, v in self.timing.items()}
        return SimulationResult(out)

    def _start_stack(self, clock: VirtualClock) -> LocalStack:
        sc = self.scenario
        return start_local(
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
            aws_sized=self.aws_sized,
        )

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
            elif message.get("detail-type") == WORKSTREAM_START:
                detail = message["detail"]
                self.workstream_fires.append(
                    Fire(str(detail["workstream_id"]), str(detail["scheduled_time"]))
                )
            if self._drops_left > 0 and arn.endswith(":" + execution_queue):
                self._drop_last(stack, execution_queue)

        engine.deliver = watched

    def _run_window(self, stack: LocalStack, clock: VirtualClock) -> None:
        """Run the window; the injected messages and the operator's actions happen at their times
        (in the order the scenario lists them when two share a time)."""
        sc = self.scenario
        runtime = stack.runtime
        timeline: list[tuple[float, int, InjectedMessage | Operation | Recovery | FlagSwitch]] = sorted(
            [(m.at, i, m) for i, m in enumerate(sc.messages)]
            + [(o.at, len(sc.messages) + i, o) for i, o in enumerate(sc.operations)],
            key=lambda entry: (entry[0], entry[1]),
        )
        on_step = self._on_step(clock)
        races = self.races = Races(stack.deps, self.operations)
        runtime.before_relay = races.before_relay
        for at, _, what in timeline:
            when = sc.start + timedelta(seconds=at)
            if when > clock.now():
                runtime.run_virtual(min(when, sc.end), on_step=on_step)
            if when > sc.end:
                continue
            if isinstance(what, Operation) and what.on_end_of is not None:
                races.arm(what)
                continue
            if isinstance(what, Operation):
                ignore = what.token is not None and self._tokens_to_ignore > 0
                self._tokens_to_ignore -= int(ignore)
                self.operations.append(operate(stack.deps, what, ignore_token=ignore))
                if ignore:
                    self.sabotaged.setdefault("ignore_start_tokens", []).append(str(what.token))
                continue
            if isinstance(what, Recovery):
                task_ids = [t.id for t in self.loaded.tasks]
                self.operations.append(recover(stack.deps, what, task_ids, sc.start))
                continue
            if isinstance(what, FlagSwitch):
                self.operations.append(switch_flag(stack.deps, what))
                continue
            if what.queue == BUS:  # an outside service's event
                event = json.loads(what.body)
                stack.cloud.client("events").put_events(
                    Entries=[
                        {
                            "Source": event["source"],
                            "DetailType": event["detail-type"],
                            "Detail": json.dumps(event["detail"]),
                            "EventBusName": stack.settings.bus_name,
                        }
                    ]
                )
                continue
            ref = stack.settings.queue(what.queue)
            stack.cloud.client("sqs").send_message(
                QueueUrl=ref.url, MessageBody=what.body, DelaySeconds=what.delay_s
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
        workers = stack.runtime.sim_workers
        if workers is not None and workers.pending():  # a late report still to come
            return False
        if self._targets_not_healthy(stack):  # a target's work order still to close
            return False
        if self.loaded.workstreams and any(run["state"] == "running" for run in workstream_items(stack)[0]):
            return False  # a step still to start (waiting for a resource: the sweeper polls it)
        return observe.schedule_counts(stack.cloud).one_time == 0

    def _targets_not_healthy(self, stack: LocalStack) -> bool:
        """Whether a target is still listed unhealthy or recovering (retry budgets per target):
        the sweeper still owes it its close, which resolves its work order."""
        from rebound.engine.target_budgets import INDEX_KEY

        try:
            item = stack.deps.store.get_key(INDEX_KEY)
        except Exception:  # a hostile throttle: look again at the next step
            return True
        return bool(item and json.loads(item["body"]).get("targets"))

    def _read_run(self, run_id: str) -> dict[str, Any] | None:
        """The run as moto holds it now (called from inside moto, under its lock)."""
        stack = self._stack
        if stack is None:
            return None
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = stack.cloud.dynamodb_backend().get_table(stack.settings.table("runs"))
        item = table.items.get(DynamoType({"S": run_id}))
        return observe.decode_item(item) if item is not None else None


@contextmanager
def own_cloud() -> Iterator[None]:
    """Clients find the embedded cloud, whatever ``AWS_ENDPOINT_URL`` (or a service's own
    ``AWS_ENDPOINT_URL_<SERVICE>``) says: boto3 would send the clients made without an endpoint
    (the in-process transports) there, to a ``rebound local up`` that may not even run."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("AWS_ENDPOINT_URL")}
    try:
        yield
    finally:
        os.environ.update(saved)


def ending_with(tasks: list[T], end: datetime) -> list[T]:
    """The scenario's tasks (or workstreams) with their recurring schedules ending with its window
    (Scheduler's EndDate): in the settle phase no fire is due, so the run ledger expects none either."""
    out = []
    for task in tasks:
        spec = task.schedule
        if spec is not None and spec.at is None and spec.end is None:
            task = task.model_copy(update={"schedule": spec.model_copy(update={"end": end})})
        out.append(task)
    return out


def run_simulate(
    scenario_file: Path,
    report_path: Path,
    *,
    seed: int | None = None,
    transport: str = "direct",
    quiet: bool = False,
    compare_budgets: bool = False,
) -> int:
    """The ``rebound local simulate`` command: run, write the report, print the verdict. Exit code.

    ``compare_budgets``: run the scenario a second time with every task's retry budget off, put
    both runs' ``target_budgets`` sections in the report (``compare_budgets``) and print them side
    by side. The verdict is the first run's (with budgets, as the scenario says)."""
    from rich.console import Console

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
    if compare_budgets:
        if not quiet:
            console.print("Simulating it again with every retry budget turned off")
        off = Simulation(
            budgets.without_budgets(loaded),
            seed=seed,
            transport=transport,
            log_file=log_file,
            progress=progress,
        ).run()
        compared = budgets.comparison(result.report["target_budgets"], off.report["target_budgets"])
        result.report["compare_budgets"] = compared
    write_report(result.report, report_path)
    code = print_verdict(console, result, report_path)
    if compare_budgets:
        budgets.print_comparison(console, result.report["compare_budgets"])
    return code
