"""``rebound health``: is the retry and recovery loop healthy? Exit code 3 when it is not."""

from __future__ import annotations

from datetime import timedelta

import click

from rebound.engine.health.checks import RetryHealthQuery, Status, Thresholds
from rebound.ops.common import parse_seconds
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY
from rebound_cli.model_options import model_options, request

_STYLE = {
    Status.OK: "[green]ok[/green]",
    Status.WARN: "[yellow]warn[/yellow]",
    Status.FAIL: "[red]FAIL[/red]",
}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output (same as --output json)")
@model_options(RetryHealthQuery, RetryHealthQuery.model_fields, generated_by="rebound-cli")
@click.option(
    "--ack-sla",
    help="acknowledgement SLA for every severity (default: critical 5m, high 15m, medium 1h, low 4h)",
)
@click.pass_obj
@authorized("health:read")
def health(
    app: App,
    as_json: bool,
    expected_interval_minutes: int,
    stale_metadata_minutes: int,
    generated_by: str,
    ack_sla: str | None,
) -> None:
    """Check the loop: retry worker freshness, stale retry plans, replays that never started,
    failed retry executions, disabled or paused schedules, acknowledgement gaps and DLQ age.

    Exits 0 when no check fails (warnings included), 3 when one fails: scripts and deploy
    pipelines can gate on it.

    --expected-interval-minutes (default 30) is how often the retry loop is expected to act.
    Every invocation of the retry scheduler function records a heartbeat; retry_worker warns
    when work waits for the worker (a failed run, or a message in the retry queue, older than 1m)
    and its last heartbeat is older than 5m, and fails when it is older than the expected interval
    or missing: the worker is not being invoked, even if the sweeper covers for it. A quiet
    system with nothing waiting is ok however old the heartbeat. A failed run waiting for its
    retry decision warns after 5m and fails after the expected interval. A retry queue of 100 or
    more messages warns.

    --stale-metadata-minutes (default 120) is how old a retry's bookkeeping may get:
    stale_retry_plans warns for a retry overdue by 2m and fails past this; stuck_replays warns
    for a replay not started after 10m and fails past this.

    disabled_schedules fails for a schedule disabled or missing while its task is active, and
    lists paused tasks (warning when a paused task's schedule is still enabled).

    \b
    Examples:
      rebound health
      rebound health --output json | jq '.checks[] | select(.status != "ok")'
      rebound health --expected-interval-minutes 10 --stale-metadata-minutes 30 --generated-by deploy-gate
      rebound --env prod health --ack-sla 10m || page-someone

    \b
    JSON fields: environment, generated_at, generated_by, expected_interval_minutes,
    stale_metadata_minutes, status (ok|warn|fail), healthy, checks[] (name, status, summary,
    details[], value).
    """
    query = request(
        RetryHealthQuery,
        {
            "expected_interval_minutes": expected_interval_minutes,
            "stale_metadata_minutes": stale_metadata_minutes,
            "generated_by": generated_by,
        },
    )
    thresholds = Thresholds.from_query(query)
    if ack_sla:
        thresholds = thresholds.with_ack_sla(timedelta(seconds=parse_seconds(ack_sla, option="--ack-sla")))
    report = app.health().report(thresholds, generated_by=query.generated_by)

    def render() -> None:
        out.table(
            f"health of {report.environment} at {report.generated_at:%Y-%m-%d %H:%M:%S} UTC "
            f"(expected interval {report.expected_interval_minutes}m, "
            f"stale metadata {report.stale_metadata_minutes}m)",
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
