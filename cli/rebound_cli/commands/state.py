"""``rebound state``: every item checked against its audit chain, and repaired from it."""

from __future__ import annotations

import click

from rebound.ops.authz import Environment
from rebound.ops.state import PHASES, StateReport
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY


@click.group()
def state() -> None:
    """Items against their audit chains (the transitions log): check, and repair.

    Every task, workstream run, work order and run is compared with what its keyed audit chain
    says. A point-in-time restore of the tables is the other way back: docs/runbooks/restore.md
    says when to use which.

    \b
    Examples:
      rebound state check
      rebound state repair --dry-run
      rebound state repair --reason "INC-4711: rows edited by hand" --yes
    """


def _short(value: object, width: int = 80) -> str:
    text = out.cell(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def render_report(report: StateReport) -> None:
    """The differences (item, field, the item's value, the chain's), then what was done."""
    out.table(
        "differences from the audit chains",
        ["kind", "item", "field", "stored", "chain says"],
        [[d.kind, d.item, d.field, _short(d.stored), _short(d.chain)] for d in report.differences],
        empty="none: every item is what its chain says",
    )
    if report.repair and not report.dry_run:
        out.say(f"{len(report.repaired)} item(s) repaired, one audit record each")
    elif report.repair:
        out.say("dry run: nothing was written")
    for failure in report.failed:
        out.say(f"not repaired: {failure['item']}: {failure['why']}")
    examined = ", ".join(f"{report.examined[p]} {p}" for p in PHASES)
    out.say(f"examined {examined}")


def _pass(app: App, *, repair: bool, dry_run: bool = False, reason: str = "") -> StateReport:
    ops = app.state(writer=repair and not dry_run)
    with out.progress("items checked", total=None) as advance:
        if not repair:
            return ops.check(progress=lambda _phase, n: advance(n))
        return ops.repair(dry_run=dry_run, reason=reason, progress=lambda _phase, n: advance(n))


@state.command("check")
@click.pass_obj
@authorized("state:check", Environment())  # every tenant's: administrators
def check(app: App) -> None:
    """Report every field of every item that is not what its audit chain says.

    Writes nothing. Exits 3 when there is any difference.

    \b
    Examples:
      rebound state check
      rebound -o json state check | jq '.differences[] | select(.kind == "run")'

    \b
    JSON: dry_run, repair, differences[] (kind, item, field, stored, chain, repairable),
    examined (per kind), repaired[], failed[] (item, why), next.
    """
    report = _pass(app, repair=False)
    out.emit(app, report.as_dict(), lambda: render_report(report))
    if report.differences:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)


@state.command("repair")
@click.option("--dry-run", is_flag=True, help="say what would be repaired; write nothing")
@click.option("--reason", default="", help="why, for the audit record of each repair")
@out.YES
@click.pass_obj
@authorized("state:repair", Environment())
def repair(app: App, dry_run: bool, reason: str, yes: bool) -> None:
    """Write every item that differs from its audit chain back as the chain says.

    Each repair is one transaction: the item and one audit record on its own chain (action
    state-repaired, you as actor, each field with what it was and what it is now). No audit
    record is ever changed or removed. An item whose chain does not verify is left alone and
    listed (restore it from a backup: docs/runbooks/restore.md). Exits 3 when an item could not
    be repaired.

    \b
    Examples:
      rebound state repair --dry-run
      rebound state repair --reason "INC-4711: rows edited by hand" --yes

    JSON: as in `state check`.
    """
    if not dry_run:
        out.confirm("Write every item that differs from its audit chain back as the chain says?", yes)
    report = _pass(app, repair=True, dry_run=dry_run, reason=reason)
    out.emit(app, report.as_dict(), lambda: render_report(report))
    if report.failed:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)
