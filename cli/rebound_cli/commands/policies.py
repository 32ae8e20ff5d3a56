"""``rebound policies``: the named retry policies, and changing one at run time."""

from __future__ import annotations

from typing import Any

import click

from rebound.config.loader import merge_spec
from rebound.domain.durations import format_duration
from rebound.domain.prediction.whatif import WhatIf
from rebound.ops.authz import Environment
from rebound.ops.policies import parse_assignments, policy_view, whatif_window
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.paging import emit_page, page_of, paging, paging_options

SUMMARY = ("max_attempts", "base_delay", "multiplier", "max_delay", "max_age", "jitter", "severity")
DURATIONS = ("base_delay", "max_delay", "max_age")


def _as_written(app: App, view: dict[str, Any]) -> dict[str, Any]:
    """``view`` with its durations as the policy files write them (``120s``, ``1d``), for people;
    JSON keeps seconds."""
    book = app.deps.policies.book
    written = merge_spec(book.defaults, book.named.get(str(view["name"]), {}))
    return {
        k: format_duration(v, written.get(k)) if k in DURATIONS and v is not None else v
        for k, v in view.items()
    }


@click.group()
def policies() -> None:
    """Retry policies: list, show, and change them (validated, versioned, audited).

    \b
    Examples:
      rebound policies list
      rebound policies show default
      rebound policies set default max_attempts=5 base_delay=30s --dry-run
      rebound policies whatif default max_attempts=5 --since 7d
    """


@policies.command("list")
@paging_options()
@click.pass_obj
@authorized("policies:read")
def list_policies(app: App, limit: int | None, after: str | None, all_pages: bool) -> None:
    """List the effective retry policies (the file's, or the latest stored version).

    \b
    Examples:
      rebound policies list

    \b
    JSON: a list of policies: name, version, max_attempts, base_delay, multiplier, max_delay,
    max_age, jitter, retryable_errors, terminal_errors, severity, runbook_url (durations in seconds).
    """
    found = app.policies().find()
    pages = paging(limit, after, all_pages)

    def written(view: dict[str, Any]) -> dict[str, Any]:
        return _as_written(app, view)

    views, following = page_of([policy_view(p) for p in found], lambda v: str(v["name"]), pages)
    emit_page(
        app,
        views,
        following,
        pages,
        lambda: out.table(
            None,
            ["name", "version", *SUMMARY],
            [
                [w["name"], w["version"], *(w[k] for k in SUMMARY)]
                for w in (_as_written(app, v) for v in views)
            ],
        ),
    )


@policies.command("show")
@click.argument("name")
@click.pass_obj
@authorized("policies:read")
def show(app: App, name: str) -> None:
    """Show a policy, its stored versions and its audit trail.

    \b
    Examples:
      rebound policies show critical

    JSON fields: policy (as in `policies list`), source, versions[] (version, updated_at,
    updated_by, spec), audit[] (seq, at, actor, action, evidence), audit_verified.
    """
    detail = app.policies().show(name)
    data = detail.as_dict()

    def render() -> None:
        out.fields(
            f"policy {name} (v{detail.policy.version}, from {detail.source})",
            sorted(_as_written(app, data["policy"]).items()),
        )
        out.table(
            "versions",
            ["version", "at", "by", "spec"],
            [[v["version"], v["updated_at"], v["updated_by"], v["spec"]] for v in data["versions"]],
            empty="none stored: the file's version 0 is in force",
        )

    out.emit(app, data, render)


@policies.command("set")
@click.argument("name")
@click.argument("assignments", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--dry-run", is_flag=True, help="validate and show the change, store nothing")
@click.option(
    "--whatif",
    "show_whatif",
    is_flag=True,
    help="first show what the change would have done to the last 7 days' failures (policies whatif)",
)
@out.YES
@click.pass_obj
@authorized("policies:write", Environment())  # every tenant's: administrators only
def set_policy(
    app: App, name: str, assignments: tuple[str, ...], dry_run: bool, show_whatif: bool, yes: bool
) -> None:
    """Change a policy at run time: a new version, used from the next retry decision on.

    The whole new policy is validated before anything is stored. Values are YAML: numbers,
    durations (30s, 5m, 1h), names, lists ([A, B]), null.

    \b
    Examples:
      rebound policies set default max_attempts=5 base_delay=1m
      rebound policies set critical terminal_errors=[BAD_ACCOUNT, CLOSED] --dry-run
      rebound policies set patient max_age=null --yes
      rebound policies set default max_attempts=5 --whatif

    JSON fields: name, from_version, to_version, changes, diff{key: {from, to}}, stored; with
    --whatif also whatif (as `policies whatif` prints it).
    """
    ops = app.policies(writer=not dry_run)
    changes = parse_assignments(assignments)
    change = ops.plan(name, changes)
    data: dict[str, Any] = {**change.as_dict(), "stored": False}
    if show_whatif:
        report = ops.whatif(name, changes)
        data["whatif"] = report.model_dump(mode="json")
        if not app.json:
            render_whatif(report)
    if not change.diff:
        out.emit(app, data, lambda: out.say(f"policy {name} would not change; nothing stored"))
        return
    if not app.json:
        for key, (old, new) in change.diff.items():
            out.say(f"  {key}: {out.cell(old)} -> {out.cell(new)}")
    if dry_run:
        out.emit(app, data, lambda: out.say(f"dry run: policy {name} would become v{change.after.version}"))
        return
    out.confirm(f"Store policy {name} v{change.after.version}? The next retry decisions use it.", yes)
    stored = ops.set(change)
    out.emit(
        app,
        {**data, "stored": True, "to_version": stored.version},
        lambda: out.say(f"policy {name} is now v{stored.version}"),
    )


WHATIF_ROWS = (
    ("runs with a failure", "runs", "{}"),
    ("would have recovered", "recovered", "{}"),
    ("would have dead-lettered", "dead_lettered", "{}"),
    ("retries (messages)", "retries", "{}"),
    ("retries per hour", "retries_per_hour", "{:.2f}"),
    ("retries in the busiest hour", "peak_retries_per_hour", "{}"),
    ("time to recovery p50, s", "recovery_p50_s", "{:.0f}"),
    ("time to recovery p99, s", "recovery_p99_s", "{:.0f}"),
    ("cost, $", "cost_usd", "{:.6f}"),
)


def render_whatif(report: WhatIf) -> None:
    now, then = report.current.model_dump(), report.proposed.model_dump()

    def show(value: Any, fmt: str) -> str:
        return "-" if value is None else fmt.format(value)

    out.table(
        f"what-if for policy {report.policy}: {report.since} to {report.until}",
        ["", "current", "proposed"],
        [[label, show(now[key], fmt), show(then[key], fmt)] for label, key, fmt in WHATIF_ROWS],
    )
    out.say(f"added cost: {report.added_cost_usd:+.6f} $ over the window")
    for note in report.notes:
        out.say(f"note: {note}")


@policies.command("whatif")
@click.argument("name")
@click.argument("assignments", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--since", default="7d", show_default=True, help="how far back to replay (1m to 30d)")
@click.pass_obj
@authorized("policies:read")
def whatif(app: App, name: str, assignments: tuple[str, ...], since: str) -> None:
    """Replay the recorded failures of the runs that use a policy under proposed values.

    Every task that uses the policy (by name, or extending it) has its runs of the window
    replayed twice: under the policy as it is and with the proposed values. A retry's outcome is
    what the task's target answered at that moment, as its recorded attempts show. Nothing is
    stored.

    \b
    Examples:
      rebound policies whatif default max_attempts=5
      rebound policies whatif critical base_delay=5m max_delay=1h --since 30d

    JSON fields: policy, since, until, changes, current and proposed (runs, recovered,
    dead_lettered, retries, retries_per_hour, peak_retries_per_hour, recovery_p50_s,
    recovery_p99_s, cost_usd), added_cost_usd, notes.
    """
    report = app.policies().whatif(name, parse_assignments(assignments), whatif_window(since))
    out.emit(app, report.model_dump(mode="json"), lambda: render_whatif(report))
