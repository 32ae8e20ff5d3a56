"""``rebound audit``: verify the audit trail's hash chains, and hand an auditor the day keys."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import click

from rebound.ops.authz import Environment, FirstOf, Public, When
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY


@click.group()
def audit() -> None:
    """The audit trail: an append-only hash chain per run, work order, task and policy.

    \b
    Examples:
      rebound audit verify export-ledger:20260307T090500Z
      rebound audit verify --all
      rebound audit day-keys --since 2026-03-01 --out march.keys.json
      rebound audit verify --all --day-keys march.keys.json
      rebound audit archive --since 2026-03-01 --yes
    """


@audit.command("verify")
@click.argument("subject", required=False)
@click.option("--all", "check_all", is_flag=True, help="every chain in the environment")
@click.option(
    "--archive",
    is_flag=True,
    help="also read the audit archive (S3): each chain is verified from #1, records expired from "
    "the table included",
)
@click.option(
    "--day-keys",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="verify as an auditor: the day keys a writer exported (`rebound audit day-keys`); "
    "each is confirmed with KMS VerifyMac, and GenerateMac is never called",
)
@click.pass_obj
@authorized(
    "audit:verify",
    FirstOf(
        (
            When(
                "day_keys", Public("an auditor holding exported day keys: bounded by the auditor role's IAM")
            ),
            Environment(),
        )
    ),
)
def verify(app: App, subject: str | None, check_all: bool, archive: bool, day_keys: Path | None) -> None:
    """Verify a run's hash chain (or any SUBJECT such as workorder#wo-...), or --all of them.

    Each record's MAC must verify with the environment's audit key (a record edited, inserted or
    moved from another chain by someone without the key fails it). Records written before the
    chain was keyed verify by hash alone and are reported as unkeyed. A run must also rebuild
    from its trail into exactly the stored run. Exits 3 if any chain is broken or any run differs
    from its trail.

    Where runs' records expire (retention), a chain whose first records expired verifies from its
    first record in the table, and a finished run whose item expired verifies by its trail; with
    --archive each chain is read from the archive and the table together and verified from #1.

    \b
    Examples:
      rebound audit verify export-ledger:20260307T090500Z
      rebound audit verify policy#critical
      rebound audit verify --all
      rebound audit verify --all --archive

    JSON: a list of subject, ok, records, detail, mismatched_fields[], unkeyed_records, keying
    (keyed, partly-unkeyed or unkeyed).
    """
    if bool(subject) == check_all:
        raise click.UsageError("give a RUN_ID (or subject), or --all")
    # Any chain, any tenant: for administrators, as the API's POST /audit/verify. An auditor
    # (--day-keys) is bounded by the auditor role's IAM policy instead: it reads the audit and runs
    # tables and nothing else, not even the grants the rule would read.
    ops = app.audit(day_keys)
    if subject:
        results = [ops.verify(subject, archive=archive)]
    elif archive:
        with out.progress("chains verified", total=None) as advance:
            results = ops.verify_archive(progress=lambda _r: advance(1))
    else:
        # The bar's total is the number of chains, known once every scan segment is in.
        with out.progress("chains verified", total=None) as advance:
            results = ops.verify_all(progress=lambda _r: advance(1), on_total=advance.set_total)
    broken = [r for r in results if not r.ok]
    unkeyed = [r for r in results if r.ok and r.unkeyed]

    def render() -> None:
        shown = results if subject else broken
        out.table(
            None if subject else "broken chains",
            ["subject", "ok", "records", "keying", "detail"],
            [[r.subject, r.ok, r.records, r.keying, r.detail] for r in shown],
            empty="none",
        )
        if not subject:
            out.say(
                f"{len(results)} chain(s) verified, {len(broken)} broken, "
                f"{len(unkeyed)} with unkeyed records (written before the chain was keyed)"
            )

    out.emit(app, [r.as_dict() for r in results], render)
    if broken:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)


@audit.command("archive")
@click.option(
    "--since",
    type=click.DateTime(["%Y-%m-%d"]),
    help="only records written on this day (YYYY-MM-DD) or after; default: every record",
)
@click.option("--dry-run", is_flag=True, help="count what is missing, write nothing")
@out.YES
@click.pass_obj
@authorized("audit:archive", Environment())  # every tenant's records
def archive(app: App, since: datetime | None, dry_run: bool, yes: bool) -> None:
    """Archive the audit records the archive does not hold.

    The archiver copies each record to the archive bucket from the audit table's stream when it is
    written. A record the stream lost (the archiver failed for longer than the stream's 24 hours)
    or wrote before the stream existed is archived here, one object per day and thousand records,
    before its TTL deletes it. Safe to run again: what is archived is left as it is.

    \b
    Examples:
      rebound audit archive --dry-run
      rebound audit archive --since 2026-03-01 --yes

    JSON: in_table, already_archived, archived, objects[], dry_run.
    """
    if not dry_run:
        out.confirm("Archive every audit record of the table the archive does not hold?", yes)
    with out.progress("records archived", total=None) as advance:
        fill = app.audit().archive_missing(since.date() if since else None, dry_run=dry_run, progress=advance)
    done = f"would archive {fill.archived}" if dry_run else f"archived {fill.archived}"
    objects = "" if dry_run else f" in {len(fill.objects)} object(s)"
    line = (
        f"{fill.in_table} record(s) in the table, {fill.already_archived} already archived; {done}{objects}"
    )
    out.emit(app, fill.as_dict(), lambda: out.say(line))


@audit.command("day-keys")
@click.option("--since", required=True, type=click.DateTime(["%Y-%m-%d"]), help="first day (YYYY-MM-DD)")
@click.option("--until", type=click.DateTime(["%Y-%m-%d"]), help="last day (YYYY-MM-DD); default today")
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="the file to write (created readable by you only)",
)
@click.pass_obj
@authorized("audit:verify", Environment())  # the keys verify (and could MAC) every tenant's records
def day_keys(app: App, since: datetime, until: datetime | None, out_file: Path) -> None:
    """Export the audit chain's day keys, for an auditor who may only call KMS VerifyMac.

    A writer's command: each day's key is derived with KMS GenerateMac (one call a day, in
    CloudTrail). The auditor runs `rebound audit verify --day-keys FILE`, which confirms every key
    with VerifyMac before using it, so a wrong or altered key is refused. Whoever holds the file
    can compute that day's MACs: keep it as secret as the right to GenerateMac. Days after today
    are refused.

    \b
    Examples:
      rebound audit day-keys --since 2026-03-01 --out march.keys.json
      rebound audit day-keys --since 2026-03-01 --until 2026-03-31 --out march.keys.json

    JSON: file, days, first, last.
    """
    from rebound.adapters.audit_keys import day_keys_document

    last = until.date() if until else app.deps.clock.now().date()
    labels = app.audit().day_labels(since.date(), last)
    document = day_keys_document(app.deps.store.audit_keys, labels)
    fd = os.open(out_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=2)
    first = since.date().isoformat()
    summary = {"file": str(out_file), "days": len(labels), "first": first, "last": last.isoformat()}
    line = f"{len(labels)} day key(s), {first} to {last.isoformat()}, written to {out_file}"
    out.emit(app, summary, lambda: out.say(line))
