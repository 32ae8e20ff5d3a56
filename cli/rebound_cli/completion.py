"""``rebound completion bash|zsh|fish``: the shell's completion script, completing commands,
options and the ids operators type: task ids, run ids and work order ids, read from the
environment the command line names (``--env``, ``--profile``, ``--region``), as far as the
operator may see them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click
from click.shell_completion import CompletionItem, get_completion_class

from rebound_cli.authz import local_only
from rebound_cli.context import App

SHELLS = ("bash", "zsh", "fish")
VARIABLE = "_REBOUND_COMPLETE"
SHOWN = 200
"""At most this many ids offered at once."""


def _app(ctx: click.Context) -> App:
    root = ctx.find_root()
    app = App(str(root.params.get("env") or "dev"), "json", False)
    app.profile, app.region = root.params.get("profile"), root.params.get("region")
    return app


def _offer(
    found: Callable[[App, str], Iterable[tuple[str, str | None]]],
) -> Callable[..., list[CompletionItem]]:
    """A completion of ids starting with what was typed, from ``found`` (id, help), which is told
    what was typed; nothing when the environment cannot be reached: completion never prints an
    error into the shell."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        try:
            items = [
                CompletionItem(value, help=help)
                for value, help in found(_app(ctx), incomplete)
                if value.startswith(incomplete)
            ]
        except Exception:  # no credentials, no environment, throttled: offer nothing
            return []
        return items[:SHOWN]

    return complete


def _tasks(app: App, typed: str = "") -> Iterable[tuple[str, str | None]]:
    for stored in app.tasks().find():
        task = stored.task
        if app.sees(task.tenant):
            yield task.id, task.state.value


ACTED_ON = ("dead_lettered", "failed", "running", "retry_scheduled")
"""The states whose runs are offered before a task is typed: those an operator acts on."""


def _runs(app: App, typed: str) -> Iterable[tuple[str, str | None]]:
    """Never a scan. A run id is ``<task id>:<when, event or manual id>``: once the task's id is
    typed up to the colon, that task's latest runs (``by_task_keys``); before, the runs an
    operator acts on (``ACTED_ON``, latest first, from ``by_state``) and each task's id with its
    colon, to go on typing."""
    from rebound.domain.run import RunState

    task_id, colon, _ = typed.rpartition(":")
    ops = app.runs()
    if colon:
        found = ops.find(task_id=task_id, limit=SHOWN)
    else:
        found = [
            r for state in ACTED_ON for r in ops.store.runs_in_state_page(RunState(state), limit=SHOWN).runs
        ]
    for run in found:
        if app.sees(run.tenant):
            yield run.run_id, run.state.value
    if not colon:
        for task_id, _state in _tasks(app):
            yield f"{task_id}:", "runs of this task"


def _work_orders(app: App, typed: str = "") -> Iterable[tuple[str, str | None]]:
    from rebound.domain.work_order import WorkOrderState

    for order in app.workorders().find(state=WorkOrderState.OPEN):
        if app.sees(order.tenant):
            yield order.work_order_id, order.reason


COMPLETERS = {"task_id": _offer(_tasks), "run_id": _offer(_runs), "work_order_id": _offer(_work_orders)}
"""Which parameters (by name) complete which ids."""


def install_completion(root: click.Group) -> None:
    """Give every ``task_id``, ``run_id`` and ``work_order_id`` parameter below ``root`` its
    completion of ids."""

    def walk(group: click.Group) -> None:
        for command in group.commands.values():
            if isinstance(command, click.Group):
                walk(command)
                continue
            for param in command.params:
                completer = COMPLETERS.get(param.name or "")
                if completer is not None:
                    param._custom_shell_complete = completer

    walk(root)


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
@local_only
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL: commands, options, and task, run and work order
    ids from the environment the command line names.

    \b
    Examples:
      eval "$(rebound completion bash)"                     # in ~/.bashrc
      eval "$(rebound completion zsh)"                      # in ~/.zshrc
      rebound completion fish > ~/.config/fish/completions/rebound.fish
    """
    root = ctx.find_root()
    complete_class: Any = get_completion_class(shell)
    click.echo(complete_class(root.command, {}, root.info_name or "rebound", VARIABLE).source())
