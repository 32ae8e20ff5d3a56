"""``rebound sla report``: on time, missed fires, SLA breaches and start delays per task and tenant,
from the run ledger; ``--rebuild`` recomputes them from the runs and rewrites the SLA counters."""

from __future__ import annotations

from typing import Any

import click

from rebound.ops.authz import Environment, FirstOf, TaskOf, TenantFilter, TenantOf, When
from rebound.ops.sla_report import SlaReport, SlaReportOps
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY


@click.group()
def sla() -> None:
    """Service level agreements: what ran on time, what was missed, what breached.

    \b
    Examples:
      rebound sla report --since 7d
      rebound sla report --since 24h --tenant acme
      rebound sla report --since 7d --rebuild --yes
    """


def _cell(value: Any, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}" if isinstance(value, float) else f"{value}{suffix}"


def _flag(row: dict[str, Any]) -> str:
    missed = [
        what
        for what, met in (("on time", row["on_time_met"]), ("p99", row["start_delay_met"]))
        if met is False
    ]
    return "[red]" + ", ".join(missed) + " missed[/red]" if missed else "[green]ok[/green]"


def _rows(rows: list[dict[str, Any]], *, with_tenant: bool = False) -> list[list[Any]]:
    return [
        [
            *([row["tenant"]] if with_tenant else []),
            row["name"],
            row["scheduled"],
            _cell(row["on_time_percent"], " %"),
            row["missed_fires"],
            row["sla_breaches"].get("start_delay", 0),
            row["sla_breaches"].get("duration", 0),
            _cell(row["start_delay_p50_s"], " s"),
            _cell(row["start_delay_p99_s"], " s"),
            _flag(row),
        ]
        for row in rows
    ]


COLUMNS = [
    "scheduled",
    "on time",
    "missed",
    "start breaches",
    "duration breaches",
    "delay p50",
    "delay p99",
    "",
]


def _render(report: SlaReport, data: dict[str, Any]) -> None:
    o = data["objectives"]
    out.say(
        f"SLA {data['since']} .. {data['until']} ({data['source']}): on time = started within "
        f"{o['on_time_within_s']:g} s; objectives {o['on_time_target_percent']:g} % on time, "
        f"p99 start delay <= {o['start_delay_p99_objective_s']:g} s"
    )
    out.table("by tenant", ["tenant", *COLUMNS], _rows(data["tenants"]), empty="no runs")
    out.table(
        "by task", ["tenant", "task", *COLUMNS], _rows(data["tasks"], with_tenant=True), empty="no runs"
    )
    out.table("total", ["", *COLUMNS], _rows([data["total"]]))
    for counter in report.counters:
        verb = "rewritten" if counter.rewritten else "already right"
        out.say(f"SLA counter of {counter.task_id}: {counter.before} -> {counter.after} ({verb})")


@sla.command("report")
@click.option("--since", default="7d", show_default=True, help="a duration ago (24h, 7d) or a timestamp")
@click.option("--tenant", help="only this tenant's tasks")
@click.option("--task", "task_id", help="only this task")
@click.option(
    "--rebuild",
    is_flag=True,
    help="recompute the breaches from the runs and rewrite the SLA streak counters (audited)",
)
@click.option("-y", "--yes", is_flag=True, help="with --rebuild: do not ask for confirmation")
@click.pass_obj
@authorized(
    "sla:read",
    FirstOf(
        (
            When("rebuild", FirstOf((TenantOf("tenant"), Environment())), action="sla:rebuild"),
            TaskOf("task_id"),
            TenantFilter("tenant"),
        )
    ),
)
def report(app: App, since: str, tenant: str | None, task_id: str | None, rebuild: bool, yes: bool) -> None:
    """On-time rate, missed fires, SLA breaches by task and tenant, start delay p50/p99.

    Read from the run ledger: each task's runs due since --since (a query per task, never a
    scan). On time: the first attempt started within `sla.on_time_within` of when it was due
    (config/tasks/default_policy.yaml; 60 s, as the on-time metric). Missed fires are those the run
    ledger found missed (caught up or recorded skipped). Breaches are what the engine recorded on
    the runs, or with --rebuild what the runs show against each task's `sla` limits now; --rebuild
    also rewrites each SLA task's streak counter (the consecutive breaches that open a work order
    at three), with an audit record naming you. Exits 3 when the total misses an objective.

    \b
    Examples:
      rebound sla report
      rebound sla report --since 24h --tenant acme
      rebound -o json sla report --since 7d | jq '.tasks[] | select(.on_time_met == false)'
      rebound sla report --since 7d --rebuild --yes

    \b
    JSON fields: since, until, source (recorded|rebuilt), objectives, total, tasks[] and tenants[]
    (name, tenant, scheduled, on_time, late, missed_fires, on_time_percent, on_time_met,
    start_delay_p50_s, start_delay_p99_s, start_delay_met, sla_breaches{start_delay, duration},
    breaching_runs), counters[] (task_id, before, after, rewritten).
    """
    task_id = app.task_key(task_id)
    if rebuild:  # without --tenant, every tenant's: an administrator
        out.confirm("Rewrite the SLA counters from the run ledger?", yes)
    elif task_id is None:
        tenant = app.decided_tenant
    ops = SlaReportOps(app.deps, app.actor if rebuild else "sla-report")
    found = ops.report(since, tenant=tenant, task_id=task_id, rebuild=rebuild, option="--since")
    data = found.as_dict()
    out.emit(app, data, lambda: _render(found, data))
    total = data["total"]
    if total["on_time_met"] is False or total["start_delay_met"] is False:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)
