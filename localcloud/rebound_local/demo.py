"""``rebound local demo``: the whole retry loop on this machine, under a virtual clock.

It starts the AWS stand-in, provisions Rebound's resources from the same definitions as the CDK
stack, registers the demo tasks (``config/demo/tasks.yaml``), puts one malformed message on the
execution queue the way any outside client could, then lets 36 minutes of schedule time pass and
prints what happened: runs per task, attempts, final states, work orders, and the audit trail of a
dead-lettered run, verified. Then a workstream (``rebound_local.demo_workstream``): a step retried
and dead-lettered, a rollback, a resume, and the workstream completed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rebound.config.loader import load_task_file
from rebound.domain.audit import verify_chain
from rebound.domain.run import Run, RunState
from rebound.domain.work_order import WorkOrder
from rebound.ops.tasks import TaskOps
from rebound_local.clock import VirtualClock
from rebound_local.demo_workstream import WorkstreamDemo, run_workstream_demo
from rebound_local.shipped import demo_file
from rebound_local.stack import LocalStack, start_local

DEMO_START = datetime(2026, 3, 7, 8, 59, tzinfo=UTC)
DEMO_DURATION = timedelta(minutes=36)
DEMO_TASKS = demo_file("tasks.yaml")
MALFORMED = '{"kind": "fire", "task_id": "Not A Valid Id!"'


@dataclass
class DemoResult:
    runs: list[Run]
    work_orders: list[WorkOrder]
    wall_seconds: float
    virtual_seconds: float
    workstream: WorkstreamDemo | None = None


def run_demo(
    console: Console | None = None, tasks_file: Path = DEMO_TASKS, log_dir: Path | None = None
) -> DemoResult:
    console = console or Console(width=None if Console().is_terminal else 140)
    clock = VirtualClock(DEMO_START)
    log_dir = log_dir or Path(".local-state")
    log_dir.mkdir(parents=True, exist_ok=True)
    stack = start_local(clock, log_file=log_dir / "demo-handlers.log")
    try:
        return _run(console, stack, clock, tasks_file, log_dir)
    finally:
        stack.stop()


def _run(
    console: Console, stack: LocalStack, clock: VirtualClock, tasks_file: Path, log_dir: Path
) -> DemoResult:
    s = stack.settings
    console.print(
        Panel.fit(
            f"[bold]Rebound local demo[/bold]\n"
            f"AWS stand-in (moto, server mode): [cyan]{stack.cloud.endpoint_url}[/cyan]  region us-east-1\n"
            f"Queues: execution -> DLQ after {_max_receive(stack)} receives; "
            "retry and escalation queues fed by bus rules\n"
            f"Tables: {', '.join(sorted(s.tables))}\n"
            f"Bus: {s.bus_name}   Schedule group: {s.schedule_group}\n"
            f"Virtual clock starts {DEMO_START:%Y-%m-%d %H:%M} UTC "
            f"and runs {int(DEMO_DURATION.total_seconds() // 60)} min",
            title="make demo",
        )
    )
    deps = stack.deps
    tasks = load_task_file(tasks_file, deps.policies.book)
    ops = TaskOps(deps, actor="demo")
    result = ops.apply(ops.plan(tasks))
    for task in tasks:
        sched = task.schedule
        when = f"cron '{sched.cron}' {sched.timezone}" if sched and sched.cron else str(sched)
        target = task.target.model_dump(mode="json", exclude={"type"}, exclude_none=True)
        console.print(
            f"  registered [bold]{task.id}[/bold] ({task.tenant}): {when}; {task.target.type} target {target}"
        )
    console.print(
        f"  {len(result.created)} tasks, {result.schedules_written} EventBridge Scheduler schedules\n"
    )

    sqs = stack.cloud.client("sqs")
    sqs.send_message(QueueUrl=s.queue("execution").url, MessageBody=MALFORMED)
    console.print("  put one malformed message on the execution queue (as any AWS client could)\n")

    end = clock.now() + DEMO_DURATION
    started = time.monotonic()
    total = DEMO_DURATION.total_seconds()
    with Progress(
        TextColumn("schedule time"),
        BarColumn(),
        TextColumn("{task.fields[now]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task("run", total=total, now="")

        def step() -> None:
            done = (clock.now() - DEMO_START).total_seconds()
            progress.update(bar, completed=min(done, total), now=f"{clock.now():%H:%M:%S}")

        stack.runtime.run_virtual(end, on_step=step)
    wall = time.monotonic() - started

    runs = sorted(deps.store.scan_runs(), key=lambda r: (r.task_id, r.scheduled_for))
    orders = deps.store.work_orders()
    _print_summary(console, stack, runs, orders, wall)
    workstream = run_workstream_demo(console, stack)
    console.print(f"\nHandler logs: {log_dir / 'demo-handlers.log'}")
    return DemoResult(runs, orders, wall, total, workstream)


def _max_receive(stack: LocalStack) -> int:
    from rebound import resources as r

    return int(r.SPEC.queue("execution").max_receive_count or 0)


def _print_summary(
    console: Console, stack: LocalStack, runs: list[Run], orders: list[WorkOrder], wall: float
) -> None:
    deps = stack.deps
    table = Table(title="Runs", show_lines=False)
    for column in ("task", "run", "scheduled (UTC)", "attempts", "final state", "work order"):
        table.add_column(column)
    colors = {RunState.SUCCEEDED: "green", RunState.DEAD_LETTERED: "red"}
    for run in runs:
        outcomes = " ".join(
            f"{a.n}:{'ok' if a.outcome.value == 'succeeded' else a.error_code}" for a in run.attempts
        )
        color = colors.get(run.state, "yellow")
        table.add_row(
            run.task_id,
            run.run_id.split(":", 1)[1],
            f"{run.scheduled_for:%H:%M}",
            outcomes or "-",
            f"[{color}]{run.state.value}[/{color}]",
            run.work_order_id or "",
        )
    console.print(table)

    per_task = Table(title="Per task")
    for column in ("task", "runs", "attempts", "succeeded", "dead-lettered", "retry waits"):
        per_task.add_column(column)
    for task_id in sorted({r.task_id for r in runs}):
        mine = [r for r in runs if r.task_id == task_id]
        waits = []
        for run in mine:
            for prev, nxt in zip(run.attempts, run.attempts[1:], strict=False):
                if prev.ended_at:
                    waits.append(f"{(nxt.started_at - prev.ended_at).total_seconds():.0f}s")
        per_task.add_row(
            task_id,
            str(len(mine)),
            str(sum(r.attempt for r in mine)),
            str(sum(r.state is RunState.SUCCEEDED for r in mine)),
            str(sum(r.state is RunState.DEAD_LETTERED for r in mine)),
            ", ".join(waits) or "-",
        )
    console.print(per_task)

    wo = Table(title="Work orders")
    for column in ("id", "subject", "severity", "reason", "error", "state", "notified"):
        wo.add_column(column)
    for order in orders:
        wo.add_row(
            order.work_order_id,
            order.subject,
            order.severity.value,
            order.reason,
            order.error_code or "",
            order.state.value,
            ", ".join(f"{d.channel}:{d.status.value}" for d in order.deliveries) or "-",
        )
    console.print(wo)

    attrs = stack.cloud.client("sqs").get_queue_attributes(
        QueueUrl=stack.settings.queue("dlq").url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    dlq = int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])
    console.print(f"The execution DLQ holds {dlq} message(s), each with the work order above.")

    dead = next((r for r in runs if r.state is RunState.DEAD_LETTERED), None)
    if dead is not None:
        trail = deps.store.audit_trail(f"run#{dead.run_id}")
        audit = Table(title=f"Audit trail of {dead.run_id}")
        for column in ("#", "at (UTC)", "actor", "action", "state", "evidence", "hash"):
            audit.add_column(column)
        for rec in trail:
            evidence = {k: v for k, v in rec.evidence.items() if k != "changes"}
            audit.add_row(
                str(rec.seq),
                f"{rec.at:%H:%M:%S}",
                rec.actor,
                rec.action,
                f"{rec.from_state or '-'} -> {rec.to_state or '-'}",
                ", ".join(f"{k}={v}" for k, v in evidence.items())[:80],
                rec.hash[:12],
            )
        console.print(audit)
        check = verify_chain(f"run#{dead.run_id}", trail, stack.deps.store.audit_keys.check)
        verdict = "[green]verified[/green]" if check.ok else f"[red]BROKEN: {check.detail}[/red]"
        console.print(f"Hash chain: {verdict} ({check.detail})")

    calls = sum(stack.aws_calls.snapshot().values())
    console.print(
        f"\n{DEMO_DURATION.total_seconds() / 60:.0f} minutes of schedule time in {wall:.1f} s of wall time; "
        f"{stack.runtime.stats.schedules_fired} schedule fires, {calls} AWS calls by the handlers."
    )
