"""``rebound workstreams`` and ``rebound resources``: dependent tasks, their runs, checkpoints,
rollback and recovery, and the resources their steps hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rebound.domain import workstream_runs as wr
from rebound.domain.timefmt import iso
from rebound.ops.authz import Documents, Environment, WorkstreamOf, document_tenants
from rebound.ops.workstreams import WorkstreamOps, progress_view, render, run_view
from rebound_cli import output as out
from rebound_cli.authz import authorized, draws_graph
from rebound_cli.context import App
from rebound_cli.files import INPUT_FILE
from rebound_cli.paging import emit_page, page_of, paging, paging_options

ON_RUN = WorkstreamOf("run_id", kind="run")


def _ops(app: App, writer: bool = False) -> WorkstreamOps:
    """The operations, for the operator the command's rule let through (``@authorized``)."""
    return WorkstreamOps(app.deps, app.actor if writer else "reader", app.guard)


def _show_change(app: App, run: wr.WorkstreamRun, progress: wr.Progress, done: str) -> None:
    view = progress_view(run, progress)

    def human() -> None:
        out.say(done)
        if progress.start:
            out.say("started: " + ", ".join(s.step for s in progress.start))
        if progress.cancel:
            out.say("cancelled runs: " + ", ".join(progress.cancel))
        for step, why in progress.not_rolled_back.items():
            out.say(f"not rolled back: {step}: {why}")
        click.echo(render(run), nl=False)

    out.emit(app, view, human)


@click.group()
def workstreams() -> None:
    """Workstreams: tasks that depend on each other, run as one graph.

    \b
    Examples:
      rebound workstreams apply config/tasks/nightly.yaml
      rebound workstreams run nightly-ledger
      rebound workstreams show nightly-ledger --output mermaid
      rebound workstreams retry-failed RUN_ID
      rebound workstreams rollback RUN_ID --to 3 --yes
      rebound workstreams resume RUN_ID --from transform
    """


@workstreams.command("apply")
@click.argument("path", type=INPUT_FILE)
@out.YES_ACCEPTED
@click.pass_obj
@authorized("workstreams:register", Documents("path", document_tenants))
def apply(app: App, path: Path) -> None:
    """Register the workstreams and resources of a task file (its tasks with `rebound tasks apply`).

    A cycle, an unknown task or resource, or a step listed twice is refused with the file and the
    key path, and the cycle's path (extract → transform → extract).

    \b
    Example:
      rebound workstreams apply config/demo/workstream.yaml
    """
    result = _ops(app, writer=True).apply(path)

    def human() -> None:
        names = ", ".join(result["workstreams"]) or "none"
        out.say(f"workstreams: {names}; changed: {', '.join(result['changed']) or 'none'}")
        if result["tasks_not_registered"]:
            out.note("tasks of this file not registered yet: " + ", ".join(result["tasks_not_registered"]))

    out.emit(app, result, human)


@workstreams.command("list")
@paging_options()
@click.pass_obj
@authorized("workstreams:read")
def list_workstreams(app: App, limit: int | None, after: str | None, all_pages: bool) -> None:
    """List workstreams with their last run's state.

    \b
    JSON: a list of workstream_id, tenant, steps, trigger, last_run, last_state.

    \b
    Example:
      rebound workstreams list --output json
    """
    pages = paging(limit, after, all_pages)
    rows, following = page_of(
        [r for r in _ops(app).overview() if app.sees(r["tenant"])], lambda r: str(r["workstream_id"]), pages
    )
    emit_page(
        app,
        rows,
        following,
        pages,
        lambda: out.table(
            None,
            ["workstream", "tenant", "steps", "trigger", "last run", "state"],
            [
                [
                    r["workstream_id"],
                    r["tenant"],
                    " → ".join(r["steps"]),
                    r["trigger"],
                    r["last_run"],
                    r["last_state"],
                ]
                for r in rows
            ],
            empty="no workstreams",
        ),
    )


@workstreams.command("show")
@click.argument("ref")
@click.pass_obj
@authorized("workstreams:read", WorkstreamOf("ref"))
@draws_graph
def show(app: App, ref: str) -> None:
    """Draw a workstream run's graph with each step's state (REF: a run id, or a workstream id for
    its latest run); the global --output dot or mermaid for documents (table and text: the graph
    as text).

    \b
    Examples:
      rebound workstreams show nightly-ledger
      rebound workstreams show nightly-ledger --output mermaid

    \b
    JSON (--output json, or yaml): the run with each step's state, task run, tries and times.
    """
    run = _ops(app).show(ref)
    fmt = out.output_format(app)
    if fmt in out.GRAPHS:
        click.echo(render(run, fmt), nl=False)
    else:
        out.emit(app, run_view(run), lambda: click.echo(render(run, "text"), nl=False))


@workstreams.command("run")
@click.argument("workstream_id")
@click.option("--token", help="the same token names the same run (a retried request starts one run)")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("workstreams:run", WorkstreamOf("workstream_id", kind="workstream"))
def run(app: App, workstream_id: str, token: str | None) -> None:
    """Start a run of a workstream now: its root steps start.

    \b
    Example:
      rebound workstreams run nightly-ledger
    """
    started = _ops(app, writer=True).run(workstream_id, token)
    out.emit(app, run_view(started), lambda: click.echo(render(started), nl=False))


@workstreams.command("retry")
@click.argument("run_id")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("workstreams:retry", ON_RUN)
def retry(app: App, run_id: str) -> None:
    """Retry the whole workstream: a new run of every step.

    \b
    Example:
      rebound workstreams retry RUN_ID
    """
    new = _ops(app, writer=True).retry(run_id)
    out.emit(app, run_view(new), lambda: click.echo(render(new), nl=False))


@workstreams.command("retry-failed")
@click.argument("run_id")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("workstreams:retry", ON_RUN)
def retry_failed(app: App, run_id: str) -> None:
    """Run the failed and cancelled steps again; their blocked dependents follow.

    \b
    Example:
      rebound workstreams retry-failed RUN_ID
    """
    after, progress = _ops(app, writer=True).retry_failed(run_id)
    _show_change(app, after, progress, f"retrying the failed steps of {run_id}")


@workstreams.command("resume")
@click.argument("run_id")
@click.option("--from", "from_step", help="run this step and every step after it again")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("workstreams:resume", ON_RUN)
def resume(app: App, run_id: str, from_step: str | None) -> None:
    """Carry on after a rollback, or re-run from a step (the steps it needs must be completed).

    \b
    Example:
      rebound workstreams resume RUN_ID --from transform
    """
    after, progress = _ops(app, writer=True).resume(run_id, from_step)
    _show_change(app, after, progress, f"resumed {run_id}" + (f" from {from_step}" if from_step else ""))


@workstreams.command("rollback")
@click.argument("run_id")
@click.option("--to", "to", type=int, help="checkpoint version (default: the one before the latest)")
@out.YES
@click.pass_obj
@authorized("workstreams:rollback", ON_RUN)
def rollback(app: App, run_id: str, to: int | None, yes: bool) -> None:
    """Roll back to a checkpoint: running steps are cancelled, queued ones reset, step states
    restored, every resource released. Completed steps are never rolled back: the command says
    which steps kept their state and why. Then `resume`.

    \b
    Example:
      rebound workstreams rollback RUN_ID --to 3 --yes
    """
    out.confirm(f"Roll back {run_id} to checkpoint {to if to is not None else '(previous)'}?", yes)
    after, progress = _ops(app, writer=True).rollback(run_id, to)
    _show_change(
        app, after, progress, f"rolled back {run_id}; resume it with `rebound workstreams resume {run_id}`"
    )


@workstreams.command("skip")
@click.argument("run_id")
@click.argument("step")
@click.option("--reason", required=True, help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("workstreams:skip", ON_RUN)
def skip(app: App, run_id: str, step: str, reason: str, yes: bool) -> None:
    """Mark a step completed without running it (with a warning and your reason).

    \b
    Example:
      rebound workstreams skip RUN_ID report --reason "report server retired" --yes
    """
    out.confirm(f"Mark step {step} of {run_id} completed without running it?", yes)
    after, progress = _ops(app, writer=True).skip(run_id, step, reason)
    _show_change(app, after, progress, f"skipped {step}")


@workstreams.command("cancel-step")
@click.argument("run_id")
@click.argument("step")
@click.option("--reason", required=True, help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("workstreams:cancel", ON_RUN)
def cancel_step(app: App, run_id: str, step: str, reason: str, yes: bool) -> None:
    """Cancel a step (and its running task run) and unblock its dependents.

    \b
    Example:
      rebound workstreams cancel-step RUN_ID load --reason "warehouse frozen" --yes
    """
    out.confirm(f"Cancel step {step} of {run_id}, and its running task run?", yes)
    after, progress = _ops(app, writer=True).cancel_step(run_id, step, reason)
    _show_change(app, after, progress, f"cancelled {step}; its dependents no longer need it")


@workstreams.command("remove-dependency")
@click.argument("run_id")
@click.argument("step")
@click.argument("need")
@out.YES
@click.pass_obj
@authorized("workstreams:edit", ON_RUN)
def remove_dependency(app: App, run_id: str, step: str, need: str, yes: bool) -> None:
    """Let STEP run without NEED in this run.

    \b
    Example:
      rebound workstreams remove-dependency RUN_ID report load --yes
    """
    out.confirm(f"Let {step} run without {need} in {run_id}?", yes)
    after, progress = _ops(app, writer=True).remove_dependency(run_id, step, need)
    _show_change(app, after, progress, f"{step} no longer needs {need}")


@workstreams.command("checkpoints")
@click.argument("run_id")
@click.pass_obj
@authorized("workstreams:read", ON_RUN)
def checkpoints(app: App, run_id: str) -> None:
    """The run's checkpoints (the last 100), oldest first.

    \b
    JSON: a list of version, at, cause, state, completed, failed, pending, running, blocked,
    resources_held, steps.

    \b
    Example:
      rebound workstreams checkpoints RUN_ID
    """
    found = _ops(app).checkpoints(run_id)
    data: list[dict[str, Any]] = [c.model_dump(mode="json") for c in found]
    out.emit(
        app,
        data,
        lambda: out.table(
            None,
            ["version", "at (UTC)", "cause", "state", "completed", "failed", "running"],
            [
                [
                    c.version,
                    iso(c.at),
                    c.cause,
                    c.state.value,
                    ", ".join(c.completed),
                    ", ".join(c.failed),
                    ", ".join(c.running),
                ]
                for c in found
            ],
            empty="no checkpoints",
        ),
    )


@click.group()
def resources() -> None:
    """Resources: what only max_holders workstream steps may hold at once.

    \b
    Examples:
      rebound resources list
      rebound resources set-limit warehouse-write 2
    """


@resources.command("list")
@paging_options()
@click.pass_obj
@authorized("resources:read")
def list_resources(app: App, limit: int | None, after: str | None, all_pages: bool) -> None:
    """Each resource, its limit and who holds it now.

    \b
    Example:
      rebound resources list
    """
    pages = paging(limit, after, all_pages)
    rows, following = page_of(_ops(app).resources(), lambda r: str(r["resource"]), pages)
    emit_page(
        app,
        rows,
        following,
        pages,
        lambda: out.table(
            None,
            ["resource", "max holders", "holders"],
            [[r["resource"], r["max_holders"], ", ".join(r["holders"])] for r in rows],
            empty="no resources",
        ),
    )


@resources.command("set-limit")
@click.argument("resource")
@click.argument("max_holders", type=click.IntRange(min=1))
@out.YES_ACCEPTED
@click.pass_obj
@authorized("resources:write", Environment())
def set_limit(app: App, resource: str, max_holders: int) -> None:
    """Change a resource's max_holders (audited); steps holding it keep it.

    \b
    Example:
      rebound resources set-limit warehouse-write 2
    """
    limits = _ops(app, writer=True).set_limit(resource, max_holders)
    out.emit(app, limits, lambda: out.say(f"{resource}: at most {limits[resource]} holders"))
