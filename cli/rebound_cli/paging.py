"""One pagination model for every list: ``--limit N``, ``--after CURSOR``, ``--all``.

A page shows at most ``--limit`` items; when more follow, the cursor of the next page is printed
on stderr (``--after '<cursor>'``). ``--after`` continues after the item the cursor names (a
cursor is the last shown item's key: a task id, a run id...). ``--all`` lists every page.
With ``--limit`` or ``--after`` given, the JSON (and YAML) document is ``{"items": [...],
"next": CURSOR or null}``; without them it is the list itself, as before paging, so a script that
asks for a page reads its cursor where it reads the page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from rebound_cli import output as out
from rebound_cli.context import App

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Paging:
    limit: int | None
    """At most this many items (None: every page)."""
    after: str | None
    paged: bool
    """``--limit`` or ``--after`` was given: the JSON is ``{items, next}``."""


def paging_options(default: int | None = None, after_help: str | None = None) -> Callable[[F], F]:
    """``--limit`` (``default``: None lists everything), ``--after CURSOR`` and ``--all``; the
    command receives them as one ``paging`` argument (a ``Paging``)."""

    def decorate(fn: F) -> F:
        options = [
            click.option(
                "--limit",
                type=click.IntRange(1),
                default=default,
                show_default=default is not None,
                help="at most this many items; the next page's cursor goes to stderr"
                + ("" if default is not None else " (default: all)"),
            ),
            click.option(
                "--after",
                "after",
                metavar="CURSOR",
                help=after_help or "the page after this cursor (printed by the previous page)",
            ),
            click.option("--all", "all_pages", is_flag=True, help="every page, whatever --limit"),
        ]
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def paging(limit: int | None, after: str | None, all_pages: bool) -> Paging:
    """The options as given, read with the current context (whether ``--limit`` was given)."""
    ctx = click.get_current_context()
    given = ctx.get_parameter_source("limit") is ParameterSource.COMMANDLINE
    return Paging(limit=None if all_pages else limit, after=after, paged=given or after is not None)


def page_of(items: Sequence[Any], key: Callable[[Any], str], paging: Paging) -> tuple[list[Any], str | None]:
    """The page of ``items`` (in the listing's order) and the next page's cursor, if any."""
    start = 0
    if paging.after is not None:
        keys = [key(item) for item in items]
        if paging.after not in keys:
            raise click.BadParameter(
                f"{paging.after!r} is not in this listing (gone since, or another filter): list again",
                param_hint="--after",
            )
        start = keys.index(paging.after) + 1
    rest = list(items[start:])
    if paging.limit is None or len(rest) <= paging.limit:
        return rest, None
    shown = rest[: paging.limit]
    return shown, key(shown[-1])


def emit_page(
    app: App, items: list[Any], following: str | None, paging: Paging, render: Callable[[], None]
) -> None:
    """``items`` as ``output.emit`` shows a list (``{items, next}`` when paged), and the next
    page's cursor on stderr."""
    out.emit(app, {"items": items, "next": following} if paging.paged else items, render)
    if following is not None:
        out.note(f"more match: the next page is --after '{following}' (or --all for every page)")
