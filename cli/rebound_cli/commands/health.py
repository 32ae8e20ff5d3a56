"""``rebound health``: is the retry and recovery loop healthy? Exit code 3 when it is not."""

from __future__ import annotations

import click

from rebound.ops.common import parse_seconds
from rebound.ops.health import Status, Thresholds
from rebound_cli import output as out
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY

_STYLE = {
    Status.OK: "[green]ok[/green]",
    Status.WARN: "[yellow]warn[/yellow]",
    Status.FAIL: "[red]FAIL[/red]",
}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output (same as --output json)")
@click.option(
    "--ack-sla",
    help="acknowledgement SLA for every severity (default: critical 5m, high 15m, medium 1h, low 4h)",
)
@click.pass_obj
def health(app: App, as_json: bool, ack_sla: str | None) -> None:
    """Check the loop: retry worker freshness, stale retry plans, replays that never started,
    failed retry executions, disabled schedules, acknowledgement gaps and DLQ age.

    Exits 0 when no check fails (warnings included), 3 when one fails: scripts and deploy
    pipelines can gate on it.

    Retry worker freshness: every invocation of the retry scheduler function records a
    heartbeat. retry_worker fails when work waits for the worker (a failed run, or a message in
    the retry queue, older than 1m) and its last heartbeat is older than 5m or missing: it is not
    being invoked, even if the sweeper covers for it. A quiet system with nothing waiting is ok
    however old the heartbeat. It also fails when a failed run has waited more than 5m for a
    retry decision, and warns when the retry queue holds 100 or more messages.

    \b
    Examples:
      rebound health
      rebound health --json | jq '.checks[] | select(.status != "ok")'
      rebound --env prod health --ack-sla 10m || page-someone

    \b
    JSON fields: environment, at, status (ok|warn|fail), healthy, checks[] (name, status,
    summary, details[], value).
    """
    thresholds = Thresholds()
    if ack_sla:
        from datetime import timedelta

        thresholds = thresholds.with_ack_sla(timedelta(seconds=parse_seconds(ack_sla, option="--ack-sla")))
    report = app.health().report(thresholds)

    def render() -> None:
        out.table(
            f"health of {report.environment} at {report.at:%Y-%m-%d %H:%M:%S} UTC",
            ["check", "status", "summary"],
            [
                [c.name, _STYLE[c.status], c.summary + "".join(f"\n  {d}" for d in c.details)]
                for c in report.checks
            ],
        )
        out.say(f"overall: {_STYLE[report.status]}")

    if as_json:
        out.emit_json(report.as_dict())
    else:
        out.emit(app, report.as_dict(), render)
    if not report.healthy:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)
