"""``rebound audit``: verify the audit trail's hash chains."""

from __future__ import annotations

import click

from rebound_cli import output as out
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY


@click.group()
def audit() -> None:
    """The audit trail: an append-only hash chain per run, work order, task and policy.

    \b
    Examples:
      rebound audit verify export-ledger:20260307T090500Z
      rebound audit verify --all
    """


@audit.command("verify")
@click.argument("subject", required=False)
@click.option("--all", "check_all", is_flag=True, help="every chain in the environment")
@click.pass_obj
def verify(app: App, subject: str | None, check_all: bool) -> None:
    """Verify a run's hash chain (or any SUBJECT such as workorder#wo-...), or --all of them.

    Each record's MAC must verify with the environment's audit key (a record edited, inserted or
    moved from another chain by someone without the key fails it). Records written before the
    chain was keyed verify by hash alone and are reported as unkeyed. A run must also rebuild
    from its trail into exactly the stored run. Exits 3 if any chain is broken or any run differs
    from its trail.

    \b
    Examples:
      rebound audit verify export-ledger:20260307T090500Z
      rebound audit verify policy#critical
      rebound audit verify --all

    JSON: a list of subject, ok, records, detail, mismatched_fields[], unkeyed_records, keying
    (keyed, partly-unkeyed or unkeyed).
    """
    if bool(subject) == check_all:
        raise click.UsageError("give a RUN_ID (or subject), or --all")
    ops = app.audit()
    if subject:
        results = [ops.verify(subject)]
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
