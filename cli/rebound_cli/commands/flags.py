"""``rebound flags``: the environment's feature flags, listed and switched without a deploy."""

from __future__ import annotations

import click

from rebound.ops.authz import Environment
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.paging import emit_page, page_of, paging, paging_options


@click.group()
def flags() -> None:
    """Feature flags (AWS AppConfig): what each switches, and turning one off and on again.

    \b
    Examples:
      rebound flags list
      rebound flags set task-retry-queue off --reason "retries hammer the ledger DB" --yes
      rebound flags set task-retry-queue on --yes
    """


@flags.command("list")
@paging_options()
@click.pass_obj
@authorized("flags:read")
def list_flags(app: App, limit: int | None, after: str | None, all_pages: bool) -> None:
    """List the flags, whether each is on, and what it switches.

    \b
    Examples:
      rebound flags list
      rebound flags list -o json
    JSON: a list of {name, on, default, what}.
    """
    pages = paging(limit, after, all_pages)
    found, following = page_of(app.flags().list(), lambda f: str(f["name"]), pages)
    emit_page(
        app,
        found,
        following,
        pages,
        lambda: out.table(
            None,
            ["flag", "on", "default", "what it switches"],
            [
                [f["name"], "on" if f["on"] else "off", "on" if f["default"] else "off", f["what"]]
                for f in found
            ],
        ),
    )


@flags.command("set")
@click.argument("name")
@click.argument("value", type=click.Choice(["on", "off"]))
@click.option("--reason", default="", help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("flags:write", Environment())  # every tenant's: administrators only
def set_flag(app: App, name: str, value: str, reason: str, yes: bool) -> None:
    """Turn flag NAME on or off: a new AppConfig version, deployed at once; handlers read it within
    a minute. Audited with you as the actor.

    \b
    Examples:
      rebound flags set task-retry-queue off --reason "incident 4711" --yes
    """
    from rebound.domain.flags import known_flag

    known_flag(name)
    out.confirm(f"Turn {name} {value} in {app.env}?", yes)
    result = app.flags(writer=True).set(name, value == "on", reason or None)
    said = f"{name} is now {value}" if result["changed"] else f"{name} is {value} already; nothing changed"
    out.emit(app, result, lambda: out.say(said))
