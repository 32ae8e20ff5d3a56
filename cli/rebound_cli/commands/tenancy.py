"""``rebound tenants``: who may act on which tenants; ``rebound migrate tenancy``: move tasks
stored before tenancy to their ``<tenant>.<id>`` keys. Both for administrators only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from rebound.ops.authz import Environment
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App

if TYPE_CHECKING:
    from rebound.ops.layout import RunsPass


@click.group()
def tenants() -> None:
    """Grants of tenants to identities (administrators only; each change audited on the tenant).

    An identity is an IAM ARN: a user, or a role (every session of it). The environment's
    `identities:` (config/environments/ENV.yaml) adds to what is granted here.

    \b
    Examples:
      rebound tenants grant arn:aws:iam::111122223333:role/AcmeOperators acme
      rebound tenants revoke arn:aws:iam::111122223333:role/AcmeOperators acme
      rebound tenants show arn:aws:iam::111122223333:role/AcmeOperators
    """


def _change(app: App, action: str, identity: str, names: tuple[str, ...]) -> None:
    from rebound.ops.access import TenantAccess

    access = TenantAccess(app.deps)
    change = access.grant if action == "tenants:grant" else access.revoke
    after = change(identity, names, actor=app.actor)
    out.emit(
        app,
        {"identity": identity, "tenants": after},
        lambda: out.say(f"{identity} now holds: {', '.join(after) or 'no tenant'} (granted here)"),
    )


@tenants.command("grant")
@click.argument("identity")
@click.argument("names", nargs=-1, required=True, metavar="TENANT...")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("tenants:grant", Environment())
def grant(app: App, identity: str, names: tuple[str, ...]) -> None:
    """Let IDENTITY act on TENANT... (`*`: every tenant, an administrator).

    \b
    Examples:
      rebound tenants grant arn:aws:iam::111122223333:role/AcmeOperators acme
      rebound tenants grant arn:aws:iam::111122223333:user/alice acme globex

    JSON fields: identity, tenants (its grants after the change).
    """
    _change(app, "tenants:grant", identity, names)


@tenants.command("revoke")
@click.argument("identity")
@click.argument("names", nargs=-1, required=True, metavar="TENANT...")
@out.YES
@click.pass_obj
@authorized("tenants:revoke", Environment())
def revoke(app: App, identity: str, names: tuple[str, ...], yes: bool) -> None:
    """Take TENANT... away from IDENTITY's grants (the environment's `identities:` stay).

    \b
    Examples:
      rebound tenants revoke arn:aws:iam::111122223333:role/AcmeOperators acme

    JSON fields: identity, tenants (its grants after the change).
    """
    out.confirm(f"Take {', '.join(names)} away from {identity}?", yes)
    _change(app, "tenants:revoke", identity, names)


@tenants.command("show")
@click.argument("identity")
@click.pass_obj
@authorized("tenants:read", Environment())
def show(app: App, identity: str) -> None:
    """The tenants IDENTITY may act on: its grants and the environment's `identities:`.

    \b
    Examples:
      rebound tenants show arn:aws:iam::111122223333:role/AcmeOperators
      rebound -o json tenants show arn:aws:iam::111122223333:user/alice | jq -r '.effective[]'

    JSON fields: identity, granted, effective.
    """
    from rebound.ops.access import TenantAccess

    access = TenantAccess(app.deps)
    granted = access.granted(identity)
    effective = access.tenants_of(identity).as_list()
    out.emit(
        app,
        {"identity": identity, "granted": granted, "effective": effective},
        lambda: out.fields(
            identity,
            [("granted here", ", ".join(granted) or "none"), ("effective", ", ".join(effective) or "none")],
        ),
    )


@click.group()
def migrate() -> None:
    """One-time migrations of stored data (administrators only).

    \b
    Examples:
      rebound migrate tenancy --dry-run
      rebound migrate tenancy --yes
      rebound migrate retention --yes
      rebound migrate state-index --yes
    """


@migrate.command("retention")
@click.option("--dry-run", is_flag=True, help="count the finished runs, change nothing")
@out.YES
@click.pass_obj
@authorized("retention:migrate", Environment())
def migrate_retention(app: App, dry_run: bool, yes: bool) -> None:
    """Give every finished run written before retention its expiry.

    A run that finished before the environment had `retention:` carries no `ttl` and would stay
    for ever. Each gets the one it would have had (retention.runs_days after it ended). No audit
    record is written and nothing of the run changes. Idempotent. Audit records written before
    retention keep theirs: `rebound audit archive` copies them to the archive (docs/archive.md).

    \b
    Examples:
      rebound migrate retention --dry-run
      rebound migrate retention --yes

    JSON fields: examined, finished, set, skipped (have one already, or changed meanwhile), dry_run.
    """
    from rebound.ops.retention import migrate_retention as migrate_runs

    question = "Give every finished run its expiry (retention.runs_days after it ended)?"
    report = _runs_pass(app, dry_run, yes, question, migrate_runs)
    line = (
        f"{report.examined} run(s) examined, {report.matched} finished: {report.changed} "
        f"{'would get' if dry_run else 'got'} their expiry, {report.skipped} had one or changed meanwhile"
    )
    out.emit(app, report.as_dict(), lambda: out.say(line))


def _runs_pass(app: App, dry_run: bool, yes: bool, question: str, run: Callable[..., RunsPass]) -> RunsPass:
    """A pass over the runs table (``rebound.ops.layout.run_pass``), confirmed unless a dry run,
    with a progress bar of the runs examined."""
    if not dry_run:
        out.confirm(question, yes)
    with out.progress("runs examined", total=None) as advance:
        return run(app.deps, dry_run=dry_run, progress=advance)


@migrate.command("state-index")
@click.option("--dry-run", is_flag=True, help="count the clean successes, change nothing")
@out.YES
@click.pass_obj
@authorized("runs:migrate-index", Environment())
def migrate_state_index(app: App, dry_run: bool, yes: bool) -> None:
    """Move runs that succeeded at their first attempt out of the by_state index.

    Since this version such a run is stored without the index's keys, which saves a write a run.
    Runs that succeeded before keep their entry until they expire or this pass moves them, one
    conditional update each, guarded by its revision: no audit record is written and nothing of
    the run changes. Optional and idempotent; run it any time after the deploy.

    \b
    Examples:
      rebound migrate state-index --dry-run
      rebound migrate state-index --yes

    JSON fields: examined, clean_successes, moved, skipped (out already, or changed meanwhile),
    dry_run.
    """
    from rebound.ops.layout import migrate_state_index as migrate_runs

    question = "Move every run that succeeded at its first attempt out of the by_state index?"
    report = _runs_pass(app, dry_run, yes, question, migrate_runs)
    line = (
        f"{report.examined} run(s) examined, {report.matched} clean success(es): {report.changed} "
        f"{'would move' if dry_run else 'moved'} out of the index, {report.skipped} out already or "
        "changed meanwhile"
    )
    out.emit(app, report.as_dict(), lambda: out.say(line))


@migrate.command("relist-running")
@click.option("--dry-run", is_flag=True, help="count the runs, change nothing")
@out.YES
@click.pass_obj
@authorized("runs:migrate-index", Environment())
def migrate_relist_running(app: App, dry_run: bool, yes: bool) -> None:
    """Put runs running a clean attempt back in the by_state index, for a rollback.

    Since this version such a run enters the index only once it has run for 10 s (its own
    message finds it if its worker dies), and a new run's claim may commit its audit record
    before its item. An earlier version finds a running run through the index alone. Run this
    before rolling back to one, and once more right after (a run claimed meanwhile): each such
    run's item is written from its record, then one conditional update a run, guarded by its
    revision; no audit record, nothing of the run changes. It reads each task's runs of the
    last two hours and scans the audit table once.

    \b
    Examples:
      rebound migrate relist-running --dry-run
      rebound migrate relist-running --yes

    JSON fields: examined, running_unlisted, relisted, skipped (listed already, or changed
    meanwhile), dry_run.
    """
    from rebound.ops.layout import relist_running

    if not dry_run:
        out.confirm("Put every run running a clean attempt back in the by_state index?", yes)
    report = relist_running(app.deps, dry_run=dry_run)
    line = (
        f"{report.matched} run(s) running a clean attempt: {report.changed} "
        f"{'would go' if dry_run else 'went'} back in the index, {report.skipped} listed already or "
        "changed meanwhile"
    )
    out.emit(app, report.as_dict(), lambda: out.say(line))


@migrate.command("relist-by-fire")
@click.option("--dry-run", is_flag=True, help="count the runs, change nothing")
@out.YES
@click.pass_obj
@authorized("runs:migrate-index", Environment())
def migrate_relist_by_fire(app: App, dry_run: bool, yes: bool) -> None:
    """Put clean scheduled successes back in the by_task_keys index, for a rollback.

    Since this version a run that succeeded at its first attempt, for a fire its task's schedule
    owed, is listed with its task by that fire, not by an index entry. An earlier version lists a
    task's runs from the index alone. Run this before rolling back to one, and once more right
    after (a run that succeeded meanwhile): a scan of the runs table, then one conditional update
    a run, guarded by its revision; no audit record, nothing of the run changes.

    \b
    Examples:
      rebound migrate relist-by-fire --dry-run
      rebound migrate relist-by-fire --yes

    JSON fields: examined, found_by_fire, relisted, skipped (listed already, or changed
    meanwhile), dry_run.
    """
    from rebound.ops.layout import relist_by_fire

    question = "Put every clean success found by its fire back in the by_task_keys index?"
    report = _runs_pass(app, dry_run, yes, question, relist_by_fire)
    line = (
        f"{report.examined} run(s) examined, {report.matched} found by their fire: {report.changed} "
        f"{'would go' if dry_run else 'went'} back in the index, {report.skipped} listed already or "
        "changed meanwhile"
    )
    out.emit(app, report.as_dict(), lambda: out.say(line))


@migrate.command("tenancy")
@click.option("--dry-run", is_flag=True, help="list what would move, change nothing")
@out.YES
@click.pass_obj
@authorized("tenants:migrate", Environment())
def migrate_tenancy(app: App, dry_run: bool, yes: bool) -> None:
    """Move every task stored under an id without its tenant to TENANT.ID.

    Idempotent: run it again after an interruption. A task whose old id still has runs Rebound
    owes work is left for a later pass (exit 5 while any is left).

    \b
    Examples:
      rebound migrate tenancy --dry-run
      rebound migrate tenancy --yes

    JSON fields: dry_run, moves[] (old, new, state: moved | would-move | waiting, unfinished), left.
    """
    from rebound.domain.errors import Conflict
    from rebound.ops.tenancy import TenancyMigration

    migration = TenancyMigration(app.deps, app.actor if not dry_run else "reader", guard=app.guard)
    todo = migration.pending()
    if todo and not dry_run:
        out.confirm(f"Move {len(todo)} task(s) to their tenant's key?", yes)
    with out.progress("migrating", total=len(todo)) as advance:
        report = migration.run(dry_run=dry_run, progress=lambda _move: advance(1))

    def render() -> None:
        out.table(
            "tasks",
            ["old", "new", "state", "unfinished runs"],
            [[m.old, m.new, m.state, m.unfinished] for m in report.moves],
            empty="every task's id carries its tenant already",
        )

    out.emit(app, report.as_dict(), render)
    if not dry_run and report.left:
        raise Conflict(f"{report.left} task(s) left: their runs are still owed work; run it again later")
