"""The simulation's report: building it from the tables and the ledgers, and printing the verdict.

The report is JSON (``SimulationResult.report``, written by ``rebound_local.reports.write_report``);
``print_verdict`` prints its invariants, summary and timing for ``rebound local simulate`` and
gives the command's exit code. ``dispatch_latency`` measures how late scheduled runs started.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebound import resources as r
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine.telemetry import ON_TIME_WINDOW_S
from rebound_local import budgets, motopatch, observe, pricing, reports
from rebound_local import invariants as inv
from rebound_local.clock import VirtualClock
from rebound_local.forked import Forked
from rebound_local.simulate.invariants import UNSETTLED, SimulationChecks, _on_time, judge_workstreams
from rebound_local.simulate.workstreams import checkpoint_counts, run_entries, workstream_items
from rebound_local.stack import LocalStack
from rebound_local.workers import RuntimeHung

if TYPE_CHECKING:
    from rich.console import Console


ARCHIVE_DUE = timedelta(seconds=r.SPEC.function("archiver").batch_window_s + 600)
"""How long after it is written an audit record must be in the archive: the archiver's batching
window, then ten minutes for a failed batch's retries, its bisection and the sweeper's repair from
the control DLQ (``Sweeper.work_control_dlq``)."""


@dataclass
class SimulationResult:
    report: dict[str, Any]

    @property
    def ok(self) -> bool:
        return bool(self.report["ok"])

    @property
    def failed(self) -> list[str]:
        return [name for name, held in self.report["invariants"].items() if not held["ok"]]


class SimulationReport(SimulationChecks):
    """The ``Simulation``'s report: of a finished run (``_report``) or of one that hung (``_unfinished``)."""

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
        check_mac = stack.deps.store.audit_keys.check
        # Reading and checking every audit chain is a third of the report: a forked child does it
        # on the other core while this process judges the rest (``rebound_local.forked``).
        with Forked(
            lambda: inv.chains_verify(_chains_in_child(stack), check_mac),
            here=lambda: inv.chains_verify(chains, check_mac),
        ) as chains_verified:
            runs = observe.table_items(cloud, s.table("runs"))
            orders = observe.table_items(cloud, s.table("workorders"))
            chains = observe.audit_chains(cloud, s)
            depths = observe.queue_depths(cloud, s)

            slots = [
                i for i in observe.table_items(cloud, s.table("control")) if str(i["pk"]).startswith("slots#")
            ]
            workstream_runs, checkpoints_kept = workstream_items(stack)
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
                dlq_record=observe.table_items(cloud, s.table("dlq_messages")),
                check_mac=check_mac,
                workstream_runs=workstream_runs,
                notices=[inv.Notice(*notice) for notice in observe.topic_notices(cloud, s.topic_arn)],
            )
            invariants = inv.judge(world, chains_verified.result)
        if self.loaded.workstreams:
            invariants.update(
                judge_workstreams(
                    workstream_runs,
                    chains,
                    {str(run["run_id"]): run for run in runs},
                    {r.id: r.max_holders for r in self.loaded.resources},
                    self.workstream_fires,
                    self.operations,
                )
            )
        archive = stack.deps.audit_archive
        if archive is not None:
            due_before = clock.now() - ARCHIVE_DUE
            invariants["audit_records_archived"] = inv.archived_as_written(
                chains, archive.trails(), due_before
            )
        invariants["no_message_lost"] = self._no_message_lost(stack)
        with stack.meter.unbilled():  # the judge's reads are not the system's
            invariants["runs_listed_with_their_tasks"] = inv.listed_with_their_tasks(
                runs, lambda task_id: [r.run_id for r in stack.deps.store.runs_for_task(task_id)]
            )
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
            "async_reports": reports.async_section(stack, chains),
            "collisions": reports.collisions_section(chains),
            "target_budgets": budgets.section(runs, orders, chains, stack.targets.calls),
            "workstream_runs": run_entries(workstream_runs, checkpoints_kept),
            "checkpoints": checkpoint_counts(workstream_runs, checkpoints_kept),
            "operations": self.operations,
            "invariants": {name: held.to_json() for name, held in invariants.items()},
            "metrics": stack.metrics.snapshot(),
            "aws_calls": stack.aws_calls.snapshot(),
            "billing": self._billing(stack, clock, len(runs)),
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

    def _billing(self, stack: LocalStack, clock: VirtualClock, runs: int) -> dict[str, Any]:
        """Billable units from the window's start (after the tasks were applied) to the end."""
        started, meter_then, sent_then = self.window_start or (self.scenario.start, {}, 0)
        units = pricing.difference(stack.meter.snapshot(), meter_then)
        units["metrics.distinct"] = stack.meter.snapshot()["metrics.distinct"]
        sent = sum(self.ledger.sent.values()) - sent_then
        others = (
            sent
            - units.get("sqs.messages_sent_by_clients", 0)
            - units.get("sqs.requests.scheduler_delivery", 0)
        )
        billed = pricing.section(
            units,
            seconds=(clock.now() - started).total_seconds(),
            runs=runs,
            other_sqs_sends=int(others),
            esm_queues=sum(1 for f in r.SPEC.functions if f.queue),
        )
        billed["stored_bytes"] = observe.stored_bytes(
            stack.cloud, stack.settings, pricing.ITEM_OVERHEAD_BYTES
        )
        billed["archived_bytes"] = observe.archived_bytes(stack.cloud, stack.settings)
        return billed

    def _message_summary(self, stack: LocalStack) -> dict[str, Any]:
        peak = max(self.live.peak.values(), default=0)
        return {
            "sent_per_queue": dict(self.ledger.sent),
            "moved_to_dlq": dict(self.ledger.moved),
            "live_per_run_peak": peak,
            "runs_with_more_than_one_live": sum(1 for n in self.live.peak.values() if n > 1),
        }


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


def print_verdict(console: Console, result: SimulationResult, report_path: Path) -> int:
    """Print the report's verdict for ``rebound local simulate``; returns the command's exit code."""
    from rich.table import Table

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


def _chains_in_child(stack: LocalStack) -> dict[str, list[dict[str, Any]]]:
    """The audit chains, read in a forked child: only if no thread held the local cloud's lock at
    the fork (the child has only its own thread, so a lock held then is held for good); else an
    error, and the parent answers."""
    if not motopatch.LOCK.acquire(blocking=False):
        raise RuntimeError("the local cloud's lock was held at the fork")
    try:
        return observe.audit_chains(stack.cloud, stack.settings)
    finally:
        motopatch.LOCK.release()
