"""The workstream part of ``make demo``: a step fails, is retried and dead-letters, the workstream
fails with a critical work order; the operator fixes the step's target, rolls back and resumes, and
the workstream completes. Everything runs through the same local cloud as the rest of the demo."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from rich.console import Console

from rebound.domain.target_specs import SimBehavior, SimTarget
from rebound.domain.tenancy import short_id
from rebound.domain.workstream_runs import WorkstreamRun, WorkstreamState
from rebound.ops.tasks import TaskOps
from rebound.ops.workstreams import WorkstreamOps, render
from rebound_local.shipped import demo_file
from rebound_local.stack import LocalStack

DEMO_WORKSTREAM = demo_file("workstream.yaml")


@dataclass
class WorkstreamDemo:
    run: WorkstreamRun
    failed_first: bool
    transform_attempts: int
    not_rolled_back: dict[str, str]


def run_workstream_demo(console: Console, stack: LocalStack, file: Path = DEMO_WORKSTREAM) -> WorkstreamDemo:
    deps = stack.deps
    tasks = TaskOps(deps, actor="demo")
    ops = WorkstreamOps(deps, actor="demo-operator")
    # as `rebound tasks apply -f config/demo/workstream.yaml` does: the tasks, then the workstream
    document = tasks.load_document(file)
    tasks.apply(tasks.plan(document.tasks))
    ops.register(document.workstreams, document.resources)
    console.print("\n[bold]A workstream[/bold] (config/demo/workstream.yaml): extract → transform → load")
    run = ops.run("nightly-ledger", token="demo")
    stack.runtime.run_virtual(deps.clock.now() + timedelta(hours=2))
    failed = ops.show(run.run_id)
    transform = next(s for s in failed.steps if s.step == "ledger-transform")
    task_run = deps.store.get_run(transform.run_id or "")
    attempts = task_run.attempt if task_run else 0
    console.print(render(failed), end="")
    console.print(
        f"  ledger-transform ran {attempts} attempts and dead-lettered; the workstream is "
        f"[bold]{failed.state.value}[/bold] with a critical work order"
    )

    fixed = next(t for t in document.tasks if short_id(t.id) == "ledger-transform")
    fixed = fixed.model_copy(update={"target": SimTarget(type="sim", behavior=SimBehavior(ok=True))})
    tasks.apply(tasks.plan([fixed]))
    console.print("  the operator fixes ledger-transform's target, then rolls back to checkpoint 1:")
    _, progress = ops.rollback(run.run_id, to=1)
    for step, why in progress.not_rolled_back.items():
        console.print(f"    not rolled back: {step}: {why}")
    console.print(f"  and resumes: started {', '.join(s.step for s in ops.resume(run.run_id)[1].start)}")
    stack.runtime.run_virtual(deps.clock.now() + timedelta(minutes=30))
    done = ops.show(run.run_id)
    console.print(render(done), end="")
    colour = "green" if done.state is WorkstreamState.COMPLETED else "red"
    console.print(f"  the workstream is [bold {colour}]{done.state.value}[/bold {colour}]")
    return WorkstreamDemo(done, failed.state is WorkstreamState.FAILED, attempts, progress.not_rolled_back)
