"""``rebound policies``: the named retry policies, and changing one at run time."""

from __future__ import annotations

import click

from rebound.ops.policies import parse_assignments, policy_view
from rebound_cli import output as out
from rebound_cli.context import App

SUMMARY = ("max_attempts", "base_delay", "multiplier", "max_delay", "max_age", "jitter", "severity")


@click.group()
def policies() -> None:
    """Retry policies: list, show, and change them (validated, versioned, audited).

    \b
    Examples:
      rebound policies list
      rebound policies show default
      rebound policies set default max_attempts=5 base_delay=30s --dry-run
    """


@policies.command("list")
@click.pass_obj
def list_policies(app: App) -> None:
    """List the effective retry policies (the file's, or the latest stored version).

    \b
    Examples:
      rebound policies list

    \b
    JSON: a list of policies: name, version, max_attempts, base_delay, multiplier, max_delay,
    max_age, jitter, retryable_errors, terminal_errors, severity, runbook_url (durations in seconds).
    """
    found = app.policies().find()
    views = [policy_view(p) for p in found]
    out.emit(
        app,
        views,
        lambda: out.table(
            None,
            ["name", "version", *SUMMARY],
            [[v["name"], v["version"], *(v[k] for k in SUMMARY)] for v in views],
        ),
    )


@policies.command("show")
@click.argument("name")
@click.pass_obj
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
            f"policy {name} (v{detail.policy.version}, from {detail.source})", sorted(data["policy"].items())
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
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
@click.pass_obj
def set_policy(app: App, name: str, assignments: tuple[str, ...], dry_run: bool, yes: bool) -> None:
    """Change a policy at run time: a new version, used from the next retry decision on.

    The whole new policy is validated before anything is stored. Values are YAML: numbers,
    durations (30s, 5m, 1h), names, lists ([A, B]), null.

    \b
    Examples:
      rebound policies set default max_attempts=5 base_delay=1m
      rebound policies set critical terminal_errors=[BAD_ACCOUNT, CLOSED] --dry-run
      rebound policies set patient max_age=null --yes

    JSON fields: name, from_version, to_version, changes, diff{key: {from, to}}, stored.
    """
    ops = app.policies(writer=not dry_run)
    change = ops.plan(name, parse_assignments(assignments))
    data = {**change.as_dict(), "stored": False}
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
