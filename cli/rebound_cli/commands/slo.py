"""``rebound slo``: each service level objective, its target, its current value and the error
budget left, measured from the run ledger. Exit code 3 when one is not met."""

from __future__ import annotations

import click

from rebound.ops.slo import SloOps
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY


def _window(seconds: int) -> str:
    return (
        f"{seconds // 86400}d"
        if seconds >= 86400
        else f"{seconds // 3600}h"
        if seconds >= 3600
        else f"{seconds // 60}m"
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:g} %"


@click.command()
@click.pass_obj
@authorized("slo:read")
def slo(app: App) -> None:
    """Print each SLO: its target, its current value over its window and the error budget left.

    Measured from the runs and work orders themselves (the alarms watch the same definitions in
    CloudWatch): retry success >= 90 % and execution success >= 97 % of the attempts that ended in
    the last hour, on-time >= 98 % of the first attempts due in the last hour, scheduling failure
    <= 5 % of the fires due in the last 5 minutes (missed fires; failed retry dispatches only the
    alarm counts), manual recovery completion >= 95 % of the work orders opened in 7 days.
    An SLO with no event in its window shows '-' and counts as met. Exits 3 when one is not met.

    \b
    Examples:
      rebound slo
      rebound --env prod slo --output json | jq '.[] | select(.met == false)'

    \b
    JSON fields (one object per SLO): slo, target_percent, comparison, window_s, current_percent,
    met, error_budget_left_percent, good, bad, note.
    """
    objectives = SloOps(app.deps).objectives()
    data = [o.as_dict() for o in objectives]

    def render() -> None:
        out.table(
            "service level objectives",
            ["slo", "target", "window", "current", "budget left", "events (good/bad)", "status"],
            [
                [
                    o.name,
                    f"{o.comparison_sign} {o.target:g} %",
                    _window(int(o.window.total_seconds())),
                    _percent(o.current),
                    _percent(o.budget_left),
                    f"{o.good}/{o.bad}",
                    "[red]MISSED[/red]" if o.met is False else "[green]met[/green]",
                ]
                for o in objectives
            ],
        )
        for o in objectives:
            if o.note:
                out.note(f"{o.name}: {o.note}")

    out.emit(app, data, render)
    if any(o.met is False for o in objectives):
        raise click.exceptions.Exit(EXIT_UNHEALTHY)
