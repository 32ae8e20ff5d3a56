"""Rendering: tables for people, JSON for scripts, progress bars and confirmations on stderr.

JSON output is one document on stdout with sorted keys; timestamps are ISO 8601 UTC with
milliseconds (``2026-03-07T09:00:00.000Z``). Each command's ``--help`` names its fields.
Progress bars and prompts go to stderr, so they never mix with what a script reads.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from rebound_cli.context import App

Row = Sequence[Any]


def stdout() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=int(os.environ.get("COLUMNS") or 160))
    return console


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, default=str))


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Row], empty: str = "(none)") -> None:
    console = stdout()
    if not rows:
        if title:
            console.print(f"[bold]{title}[/bold]: {empty}")
        else:
            console.print(empty)
        return
    grid = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*(cell(v) for v in row))
    console.print(grid)


def fields(title: str | None, pairs: Sequence[tuple[str, Any]]) -> None:
    """A key/value table for one object."""
    console = stdout()
    grid = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for key, value in pairs:
        grid.add_row(key, cell(value))
    console.print(grid)


def say(text: str) -> None:
    stdout().print(text)


def note(text: str) -> None:
    """A remark for the person at the terminal (stderr; never part of JSON output)."""
    stderr().print(text)


def emit(app: App, data: Any, render: Callable[[], None]) -> None:
    """JSON on stdout when ``--output json``, else the human rendering."""
    if app.json:
        emit_json(data)
    else:
        render()


YES = click.option(
    "-y", "--yes", is_flag=True, help="do not ask for confirmation (without a terminal: required)"
)
"""``--yes`` of a command that asks before it changes something (``confirm``)."""
YES_ACCEPTED = click.option(
    "-y",
    "--yes",
    is_flag=True,
    expose_value=False,
    help="accepted, so that a script may pass --yes to every command that changes something; "
    "this one asks nothing",
)
"""``--yes`` of a command that changes something without asking."""
REFUSED = "refusing without --yes"


def interactive() -> bool:
    """Whether a person can answer a prompt: standard input is a terminal (``Overrides.terminal``
    says so instead, where a test or an embedding program plays the person)."""
    ctx = click.get_current_context(silent=True)
    app = ctx.find_object(App) if ctx is not None else None
    if app is not None and app.overrides.terminal is not None:
        return app.overrides.terminal
    stdin = sys.stdin
    return stdin is not None and stdin.isatty()


def confirm(prompt: str, yes: bool) -> None:
    """Ask before a destructive change, unless ``--yes``. Declining aborts with exit code 1.
    Without a terminal to ask on, refuse with exit code 2 (bad input) before anything changed:
    a script must say ``--yes``."""
    if yes:
        return
    if not interactive():
        click.echo(f"error: {REFUSED} (no terminal to confirm on): {prompt}", err=True)
        raise click.exceptions.Exit(2)
    click.confirm(prompt, abort=True, err=True)


class Advance:
    """``advance(n)`` moves a progress bar on by ``n``; ``advance.set_total(n)`` gives a bar
    started without a total (a count learnt on the way) its total."""

    def __init__(self, bar: Progress, task: TaskID) -> None:
        self._bar, self._task = bar, task

    def __call__(self, n: int = 1) -> None:
        self._bar.advance(self._task, n)

    def set_total(self, total: int) -> None:
        self._bar.update(self._task, total=total)


@contextmanager
def progress(label: str, total: int | None) -> Iterator[Advance]:
    """A progress bar on stderr; yields ``advance(n)`` (an ``Advance``)."""
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr(),
        transient=False,
    ) as bar:
        yield Advance(bar, bar.add_task(label, total=total))
