"""``rebound targets``: the retry budgets per target. Which dependencies Rebound has stopped
spending attempts on (unhealthy, or recovering with held runs being released), and for one of
them its held runs, next probe, work order and history. Read only: the sweeper probes, releases
and closes (``docs/runbooks/target-unhealthy.md``)."""

from __future__ import annotations

from typing import Any

import click

from rebound.ops.targets import HELD_AT_MOST, TargetsOps
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.paging import emit_page, page_of, paging, paging_options


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    if value >= 60:
        return f"{value / 60:.0f}m"
    return f"{value:.0f}s"


def _health(value: str) -> str:
    colour = {"unhealthy": "red", "recovering": "yellow"}.get(value, "green")
    return f"[{colour}]{value}[/{colour}]"


@click.group(invoke_without_command=True)
@click.pass_context
def targets(ctx: click.Context) -> None:
    """Targets whose retry budget tripped: their held runs, probes and work orders.

    A target is what tasks call: http:<host>, lambda:<function>, sim:<name>. When its failures
    cross the policy's target_budget threshold, new failures are held (waiting, reason
    target-unhealthy) instead of retried, one probe goes every probe_every, and once a probe
    succeeds the held runs are released at release_per_minute. Without a subcommand: `list`.

    \b
    Examples:
      rebound targets list
      rebound targets show http:payments.internal
      rebound targets show sim:ledger --output json | jq '.held_runs | length'
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_targets)


@targets.command("list")
@paging_options()
@click.pass_obj
@authorized("targets:read")
def list_targets(app: App, limit: int | None, after: str | None, all_pages: bool) -> None:
    """List every target that is unhealthy or recovering, the longest unhealthy first.

    \b
    Examples:
      rebound targets list
      rebound targets list --output json

    \b
    JSON fields (one object per target): target, health, episode, tripped_at, unhealthy_for_s,
    recovering_since, failures_in_window, held, probes, probe_run, next_probe_at,
    next_probe_in_s, work_order_id, changed_at.
    """
    found = TargetsOps(app.deps).listing()
    pages = paging(limit, after, all_pages)
    data, following = page_of([t.as_dict() for t in found], lambda t: str(t["target"]), pages)

    def render() -> None:
        out.table(
            "targets not healthy",
            ["target", "health", "for", "held", "probes", "next probe", "work order"],
            [
                [
                    t["target"],
                    _health(t["health"]),
                    _seconds(t["unhealthy_for_s"]),
                    t["held"],
                    t["probes"],
                    _seconds(t["next_probe_in_s"]) if t["health"] == "unhealthy" else "-",
                    t["work_order_id"] or "-",
                ]
                for t in data
            ],
            empty="every target is healthy",
        )

    emit_page(app, data, following, pages, render)


@targets.command("show")
@click.argument("target")
@click.option(
    "--at-most",
    type=click.IntRange(1, 1000),
    default=HELD_AT_MOST,
    show_default=True,
    help="held runs to list at most",
)
@click.pass_obj
@authorized("targets:read")
def show(app: App, target: str, at_most: int) -> None:
    """Show one target's retry budget: state, held runs (oldest first) and recent history.

    \b
    Examples:
      rebound targets show http:payments.internal
      rebound targets show lambda:export-worker --at-most 20

    \b
    JSON fields: those of `targets list`, plus held_runs (run_id, task_id, state, attempt,
    held_at, held_for_s, last_error_code), held_truncated and history (at, action, actor,
    evidence; newest first).
    """
    detail = TargetsOps(app.deps).show(target, at_most=at_most)
    data: dict[str, Any] = detail.as_dict()

    def render() -> None:
        out.fields(
            f"target {data['target']}",
            [
                ("health", _health(data["health"])),
                ("episode", data["episode"]),
                ("tripped at", data["tripped_at"]),
                ("recovering since", data["recovering_since"]),
                ("failures in window", data["failures_in_window"]),
                ("held in episode", data["held"]),
                ("probes", data["probes"]),
                ("probe run", data["probe_run"]),
                ("next probe at", data["next_probe_at"]),
                ("work order", data["work_order_id"]),
            ],
        )
        out.table(
            "held runs",
            ["run", "task", "state", "attempt", "held for", "last error"],
            [
                [
                    r["run_id"],
                    r["task_id"],
                    r["state"],
                    r["attempt"],
                    _seconds(r["held_for_s"]),
                    r["last_error_code"] or "-",
                ]
                for r in data["held_runs"]
            ],
            empty="no run is held",
        )
        if data["held_truncated"]:
            out.note(f"more runs are held than the {at_most} listed (--at-most)")
        out.table(
            "history (newest first)",
            ["at", "action", "actor"],
            [[h["at"], h["action"], h["actor"]] for h in data["history"]],
        )

    out.emit(app, data, render)
