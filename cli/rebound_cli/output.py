"""Rendering: tables for people, tab-separated text, JSON and YAML for scripts, progress bars
and confirmations on stderr.

``--output`` (``-o``): ``table`` (the default on a terminal), ``text`` (the default otherwise:
tab-separated rows, no header, no decoration, one line per row, for ``cut`` and ``while read``),
``json`` (one document on stdout with sorted keys; timestamps ISO 8601 UTC with milliseconds,
``2026-03-07T09:00:00.000Z``), ``yaml`` (the same document as YAML), and ``dot`` or ``mermaid``
where a command draws a graph (``workstreams show``). ``--query`` applies a JMESPath expression to
the JSON document first, as the AWS CLI's does; with ``table`` or ``text`` the result is printed as
text. Each command's ``--help`` names its fields. Progress bars and prompts go to stderr, so they
never mix with what a script reads. In a table, a value without spaces (an id, a time) is never
wrapped: a table too wide for the terminal is printed wider instead.
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
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from rebound_cli.context import App

FORMATS = ("table", "text", "json", "yaml")
GRAPHS = ("dot", "mermaid")
"""Formats only a command that draws a graph takes (``workstreams show``)."""

Row = Sequence[Any]


def stdout() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=int(os.environ.get("COLUMNS") or 160))
    return console


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _app() -> App | None:
    ctx = click.get_current_context(silent=True)
    return ctx.find_object(App) if ctx is not None else None


def output_format(app: App | None = None) -> str:
    """The format asked for with ``--output``; without one, ``table`` on a terminal, else ``text``."""
    app = app or _app()
    if app is not None and app.output:
        return app.output
    return "table" if stdout().is_terminal else "text"


def _plain() -> bool:
    return output_format() == "text"


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, default=str))


def emit_yaml(data: Any) -> None:
    import yaml

    click.echo(
        yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=True, allow_unicode=True),
        nl=False,
    )


def _text_cell(value: Any) -> str:
    """A value on one line, without rich markup (``[green]ok[/green]`` is ``ok``)."""
    text = Text.from_markup(value).plain if isinstance(value, str) else cell(value)
    return " ".join(text.split())


def emit_text(data: Any) -> None:
    """``data`` (a JSON document, or what ``--query`` made of it) as lines of tab-separated values:
    a list is one line per item; an object's values (keys sorted) are one line, or with nested
    values one ``key<TAB>value`` line each; a scalar is itself."""
    lines: list[str] = []
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict):
                lines.append("\t".join(_text_cell(item[k]) for k in sorted(item)))
            elif isinstance(item, list):
                lines.append("\t".join(_text_cell(v) for v in item))
            else:
                lines.append(_text_cell(item))
    elif isinstance(data, dict):
        lines += [f"{k}\t{_text_cell(data[k])}" for k in sorted(data)]
    elif data is not None:
        lines.append(_text_cell(data))
    for line in lines:
        click.echo(line)


def query(expression: str, data: Any) -> Any:
    """``data`` as JSON, searched with the JMESPath ``expression`` (a bad one is bad input)."""
    import jmespath
    from jmespath.exceptions import JMESPathError

    try:
        return jmespath.search(expression, json.loads(json.dumps(data, default=str)))
    except JMESPathError as exc:
        raise click.BadParameter(" ".join(str(exc).split()), param_hint="--query") from None


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Row], empty: str = "(none)") -> None:
    if _plain():
        if not rows:
            note(f"{title}: {empty}" if title else empty)  # for the person; the script reads no line
        for row in rows:
            click.echo("\t".join(_text_cell(v) for v in row))
        return
    console = stdout()
    if not rows:
        if title:
            console.print(f"[bold]{title}[/bold]: {empty}")
        else:
            console.print(empty)
        return
    texts = [[cell(v) for v in row] for row in rows]
    grid = Table(title=title, title_justify="left", show_lines=False)
    for i, column in enumerate(columns):
        tokens = all(not any(ch.isspace() for ch in row[i]) for row in texts)
        grid.add_column(column, no_wrap=tokens, overflow="fold", min_width=len(column) if tokens else None)
    for row in texts:
        grid.add_row(*row)
    _print_whole(console, grid)


def _print_whole(console: Console, grid: Table) -> None:
    """Print ``grid`` at the console's width, or wider where its unwrappable cells need it."""
    need = Measurement.get(console, console.options.update_width(10_000), grid).minimum
    if need > console.width:
        console = Console(highlight=False, width=need, file=console.file)
    console.print(grid)


def fields(title: str | None, pairs: Sequence[tuple[str, Any]]) -> None:
    """A key/value table for one object."""
    if _plain():
        for key, value in pairs:
            click.echo(f"{key}\t{_text_cell(value)}")
        return
    console = stdout()
    grid = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in pairs:
        text = cell(value)
        token = not any(ch.isspace() for ch in text)
        grid.add_row(key, Text(text, no_wrap=True) if token else text)  # an id stays on its line
    _print_whole(console, grid)


def say(text: str) -> None:
    if _plain():
        click.echo(Text.from_markup(text).plain)
        return
    stdout().print(text)


def note(text: str) -> None:
    """A remark for the person at the terminal (stderr; never part of JSON output), never wrapped:
    a cursor or an id in it stays whole."""
    stderr().print(text, soft_wrap=True)


def structured(app: App) -> bool:
    """Whether the output is one document (``json`` or ``yaml``) rather than lines for people."""
    return output_format(app) in ("json", "yaml")


def emit(app: App, data: Any, render: Callable[[], None]) -> None:
    """``data`` as the document ``--output json|yaml`` asks for (after ``--query``), else the
    human rendering (``table``, or ``text``: the same without decoration)."""
    fmt = output_format(app)
    if fmt in GRAPHS:
        raise click.UsageError(f"--output {fmt} draws a graph: only `workstreams show` takes it")
    if app.query:
        data = query(app.query, data)
    if fmt == "json":
        emit_json(data)
    elif fmt == "yaml":
        emit_yaml(data)
    elif app.query:
        emit_text(data)
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
