"""``rebound runs``: find runs, see what happened to one, retry, skip or cancel."""

from __future__ import annotations

from typing import Any

import click

from rebound.domain.run import Run, RunState
from rebound.domain.timefmt import iso
from rebound.engine.async_reports import AsyncReports, Report, ReportAnswer, ReportKind
from rebound.ops.authz import RunOf
from rebound.ops.common import parse_when
from rebound.ops.runs import RetryOutcome, run_view
from rebound.ops.state import restore_missing
from rebound_cli import output as out
from rebound_cli import watch
from rebound_cli.authz import authorized
from rebound_cli.commands.state import render_report
from rebound_cli.context import App
from rebound_cli.errors import EXIT_CONFLICT, EXIT_UNHEALTHY
from rebound_cli.paging import emit_page, paging, paging_options

STATES = [s.value for s in RunState]


@click.group()
def runs() -> None:
    """Runs: what happened, and recovering them.

    \b
    Examples:
      rebound runs list --status dead_lettered --since 6h
      rebound runs show export-ledger:20260307T090500Z
      rebound runs retry export-ledger:20260307T090500Z --reason "target fixed"
      rebound runs skip export-ledger:20260307T090500Z --reason "booked by hand"
      rebound runs retry-failed --task export-ledger --reason "target fixed"
      rebound runs heartbeat nightly-export:20260307T020000Z --token "$TOKEN" --progress 0.4
      rebound runs complete nightly-export:20260307T020000Z --token "$TOKEN"
      rebound runs restore export-ledger:20260307T090500Z --dry-run
    """


@runs.command("list")
@click.option("--task", "task_id", help="only this task's runs")
@click.option(
    "--status",
    type=click.Choice(STATES),
    help="only runs in this state (without --task, succeeded lists the runs that succeeded after a "
    "retry, and running those running for more than 10 s)",
)
@click.option("--since", help="scheduled at or after: ISO 8601, or a duration ago (2h, 1d)")
@click.option("--until", help="scheduled at or before: ISO 8601, or a duration ago")
@paging_options(100, after_help="the page after this cursor: a run id, as the previous page printed")
@click.pass_obj
@authorized("runs:read")
def list_runs(
    app: App,
    task_id: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    after: str | None,
    all_pages: bool,
) -> None:
    """List runs, newest first.

    \b
    Examples:
      rebound runs list --status dead_lettered
      rebound runs list --task export-ledger --since 24h
      rebound runs list --task export-ledger --limit 20   # then --after RUN_ID, as printed on stderr
      rebound -o json runs list --status failed | jq -r '.[].run_id'

    \b
    JSON: a list of runs: run_id, task_id, tenant, state, trigger, scheduled_for, attempt,
    attempts_in_budget, last_error_code, next_retry_at, dead_lettered_at, work_order_id, updated_at.
    """
    task_id = app.task_key(task_id)
    now = app.deps.clock.now()
    pages = paging(limit, after, all_pages)
    ops = app.runs()
    last = ops.get(after) if after else None
    found = ops.find(
        task_id=task_id,
        state=RunState(status) if status else None,
        since=parse_when(since, now) if since else None,
        until=parse_when(until, now, option="--until") if until else None,
        # one more than a page tells whether another follows; without a task, `after` is applied here
        limit=None if pages.limit is None or (last and not task_id) else pages.limit + 1,
        after=last,
    )
    if last is not None:
        found = [r for r in found if (r.scheduled_for, r.run_id) < (last.scheduled_for, last.run_id)]
    following = None
    if pages.limit is not None and len(found) > pages.limit:
        found = found[: pages.limit]
        following = found[-1].run_id
    views = [run_view(r) for r in found if app.sees(r.tenant)]
    emit_page(
        app,
        views,
        following,
        pages,
        lambda: out.table(
            None,
            ["run", "state", "scheduled (UTC)", "attempt", "error", "work order"],
            [
                [
                    v["run_id"],
                    v["state"],
                    v["scheduled_for"],
                    v["attempt"],
                    v["last_error_code"],
                    v["work_order_id"],
                ]
                for v in views
            ],
            empty="no runs",
        ),
    )


@runs.command("show")
@click.argument("run_id")
@click.option("--no-dlq", is_flag=True, help="do not look for the run's message in the DLQ")
@click.option(
    "--watch",
    "watching",
    is_flag=True,
    help="print the timeline as it grows until the run settles: exit 0 if it succeeded, 1 if not",
)
@watch.INTERVAL
@watch.TIMEOUT
@click.pass_obj
@authorized("runs:read", RunOf("run_id"))
def show(app: App, run_id: str, no_dlq: bool, watching: bool, interval: float, wait_timeout: float) -> None:
    """One correlated timeline of a run.

    The trigger (schedule fire or event), every attempt with its error, retry decisions, the
    dead letter, the DLQ message, the work order and its notifications, and operator actions,
    in time order, from the audit trail (whose hash chain is verified on the way). A run that
    expired from the table (retention) is rebuilt from its audit chain in the archive.

    \b
    Examples:
      rebound runs show export-ledger:20260307T090500Z
      rebound -o json runs show export-ledger:20260307T090500Z | jq '.timeline[].action'
      rebound runs show export-ledger:20260307T090500Z --watch   # until it settles

    \b
    JSON fields: archived (rebuilt from the archive), run (the stored run), timeline[] (at,
    source: trigger|run|workorder|dlq, action, actor, state, detail), work_order, dlq_message,
    audit (ok, records, detail).
    """
    settled = _watch(app, run_id, interval, wait_timeout) if watching else None
    timeline = app.runs().timeline(run_id, look_in_dlq=not no_dlq, archive=True)
    if settled is not None and not out.structured(app):
        out.say(f"run {run_id} {settled.state.value} after {settled.attempt} attempt(s)")
        watch.exit_with_outcome(settled)
        return

    def render() -> None:
        run = timeline.run
        out.fields(
            f"run {run_id}",
            [
                ("task", run.task_id),
                ("tenant", run.tenant),
                ("state", run.state.value),
                ("attempts", f"{run.attempt} ({run.attempts_in_budget} in the current budget)"),
                (
                    "last error",
                    f"{run.last_error_code}: {run.last_error_message}" if run.last_error_code else None,
                ),
                ("work order", run.work_order_id),
                ("progress", f"{run.progress:.0%}" if run.progress is not None else None),
                (
                    "last heartbeat",
                    f"{iso(run.heartbeat_at)} ({run.heartbeats} so far)" if run.heartbeat_at else None,
                ),
                ("lease until", iso(run.lease_expires_at) if run.lease_expires_at else None),
                (
                    "audit chain",
                    timeline.chain.detail if timeline.chain.ok else f"BROKEN: {timeline.chain.detail}",
                ),
                (
                    "stored",
                    "expired from the table; rebuilt from its audit chain in the archive"
                    if timeline.archived
                    else None,
                ),
            ],
        )
        out.table(
            "timeline",
            ["at (UTC)", "source", "action", "actor", "state", "detail"],
            [
                [e.at.strftime("%Y-%m-%d %H:%M:%S"), e.source, e.action, e.actor, e.state, e.detail]
                for e in timeline.entries
            ],
        )

    out.emit(app, timeline.as_dict(), render)
    if settled is not None:
        watch.exit_with_outcome(settled)


def _watch(app: App, run_id: str, interval: float, timeout: float) -> Run:
    """Print each new timeline entry (for people; JSON waits for the settled run) until the run
    settles."""
    printed = 0

    def look(run: Run | None) -> None:
        nonlocal printed
        if run is None or out.structured(app):
            return
        entries = app.runs().timeline(run_id, look_in_dlq=False).entries
        for e in entries[printed:]:
            out.say(f"{e.at.strftime('%Y-%m-%d %H:%M:%S')}  {e.source:<9} {e.action:<22} {e.state or ''}")
        printed = max(printed, len(entries))

    return watch.follow(app, run_id, interval, timeout, look)


def _outcome_line(outcome: RetryOutcome) -> str:
    overrides = f" with {outcome.overrides}" if outcome.overrides else ""
    return f"{outcome.run_id}: {outcome.action}{overrides}; now {outcome.state} ({outcome.detail})"


@runs.command("retry")
@click.argument("run_id")
@click.option("--timeout", "timeout_s", type=int, help="attempt timeout in seconds, for this budget only")
@click.option("--max-attempts", type=int, help="attempts in this budget, instead of the policy's")
@click.option("--reason", default="", help="why, for the audit trail")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("runs:retry", RunOf("run_id"))
def retry(app: App, run_id: str, timeout_s: int | None, max_attempts: int | None, reason: str) -> None:
    """Retry a run now.

    A dead-lettered run is replayed with a fresh attempt budget; --timeout and --max-attempts
    apply to that budget only and are recorded in its audit record. A failed or retry_scheduled
    run has its next attempt dispatched now. A replayed run that never started is sent again.

    \b
    Examples:
      rebound runs retry export-ledger:20260307T090500Z
      rebound runs retry export-ledger:20260307T090500Z --timeout 120 --max-attempts 5 \\
          --reason "upstream fixed; slow first sync"

    JSON fields: run_id, action (replayed|resent|dispatched), state, detail, overrides.
    """
    outcome = app.runs(writer=True).retry(
        run_id, timeout_s=timeout_s, max_attempts=max_attempts, reason=reason
    )
    out.emit(app, outcome.as_dict(), lambda: out.say(_outcome_line(outcome)))


def _close(app: App, run_id: str, reason: str, yes: bool, verb: str) -> None:
    ops = app.runs(writer=True)
    out.confirm(f"{verb.capitalize()} run {run_id}? It will not run again.", yes)
    run = ops.skip(run_id, reason) if verb == "skip" else ops.cancel(run_id, reason)
    out.emit(
        app,
        run_view(run),
        lambda: out.say(
            f"run {run_id} is {run.state.value}"
            + (f"; work order {run.work_order_id} resolved" if run.work_order_id else "")
        ),
    )


@runs.command("skip")
@click.argument("run_id")
@click.option("--reason", required=True, help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("runs:skip", RunOf("run_id"))
def skip(app: App, run_id: str, reason: str, yes: bool) -> None:
    """Skip a run: it will not run (again). Its open work order is resolved as `skipped`.

    \b
    Examples:
      rebound runs skip export-ledger:20260307T090500Z --reason "superseded by the 10:05 run" --yes

    JSON: the run, as in `runs list`.
    """
    _close(app, run_id, reason, yes, "skip")


@runs.command("cancel")
@click.argument("run_id")
@click.option("--reason", required=True, help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("runs:cancel", RunOf("run_id"))
def cancel(app: App, run_id: str, reason: str, yes: bool) -> None:
    """Cancel a run, even a running one (its outcome is then discarded).

    Its open work order is resolved as `cancelled`.

    \b
    Examples:
      rebound runs cancel export-ledger:20260307T090500Z --reason "wrong ledger; would double-book" --yes

    JSON: the run, as in `runs list`.
    """
    _close(app, run_id, reason, yes, "cancel")


@runs.command("restore")
@click.argument("run_id")
@click.option("--dry-run", is_flag=True, help="say what would change; write nothing")
@click.option("--reason", default="", help="why, for the audit record of the repair")
@out.YES
@click.pass_obj
@authorized("runs:restore", RunOf("run_id", missing=restore_missing))
def restore(app: App, run_id: str, dry_run: bool, reason: str, yes: bool) -> None:
    """Write a run back as its audit chain says (recreated if its item is gone).

    One transaction: the run and one audit record on its chain (action state-repaired, you as
    actor). Exits 3 when its chain does not verify (restore it from a backup instead:
    docs/runbooks/restore.md).

    \b
    Examples:
      rebound runs restore export-ledger:20260307T090500Z --dry-run
      rebound runs restore export-ledger:20260307T090500Z --reason "INC-4711" --yes

    JSON: as in `state check`.
    """
    if not dry_run:
        out.confirm(f"Write run {run_id} back as its audit chain says?", yes)
    report = app.state(writer=not dry_run).restore_run(run_id, dry_run=dry_run, reason=reason)
    out.emit(app, report.as_dict(), lambda: render_report(report))
    if report.failed:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)


@runs.command("retry-failed")
@click.option("--task", "task_id", help="only this task's runs")
@click.option("--since", help="runs scheduled at or after: ISO 8601, or a duration ago (2h, 1d)")
@click.option("--reason", default="", help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("runs:retry")
def retry_failed(app: App, task_id: str | None, since: str | None, reason: str, yes: bool) -> None:
    """Replay every dead-lettered run of a task, or since a time, with a fresh budget each.

    Their DLQ messages stay in the DLQ; a later `rebound dlq redrive` recognises them as
    replayed and removes them.

    \b
    Examples:
      rebound runs retry-failed --task export-ledger --yes
      rebound runs retry-failed --since 6h --reason "after the database failover"

    JSON: a list of run_id, action (replayed|failed), state, detail, overrides.
    """
    task_id = app.task_key(task_id)
    ops = app.runs(writer=True)
    start = parse_when(since, app.deps.clock.now()) if since else None
    chosen = [r for r in ops.failed_runs(task_id=task_id, since=start) if app.sees(r.tenant)]
    if not chosen:
        out.emit(app, [], lambda: out.say("no dead-lettered runs match"))
        return
    out.confirm(f"Replay {len(chosen)} dead-lettered run(s) with a fresh budget each?", yes)
    with out.progress("replaying", total=len(chosen)) as advance:
        outcomes = ops.retry_failed(chosen, reason=reason, progress=lambda _o: advance(1))
    failed = [o for o in outcomes if o.action == "failed"]
    out.emit(
        app,
        [o.as_dict() for o in outcomes],
        lambda: out.say(
            f"replayed {len(outcomes) - len(failed)} run(s)"
            + "".join(f"\n  failed: {_outcome_line(o)}" for o in failed)
        ),
    )


# --------------------------------------------------------------------------- asynchronous attempts
TOKEN_HELP = "the attempt's completion token (default: $REBOUND_COMPLETION_TOKEN)"


def _report(app: App, report: Report) -> None:
    """Send one report; a refusal is shown with its reason and exits 5 (conflict)."""
    answer: ReportAnswer = AsyncReports(app.deps, app.actor).report(report)
    verdict = "accepted" if answer.accepted else f"refused ({answer.reason})"
    out.emit(app, answer.as_dict(), lambda: out.say(f"{report.kind.value} {verdict}: {answer.message}"))
    if not answer.accepted:
        raise click.exceptions.Exit(EXIT_CONFLICT)


def _token_options(fn: Any) -> Any:
    fn = click.option("--progress", type=click.FloatRange(0.0, 1.0), help="how far the work is, 0..1")(fn)
    fn = click.option("--token", envvar="REBOUND_COMPLETION_TOKEN", required=True, help=TOKEN_HELP)(fn)
    return click.argument("run_id")(fn)


@runs.command("heartbeat")
@_token_options
@out.YES_ACCEPTED
@click.pass_obj
@authorized("runs:report", RunOf("run_id"))
def heartbeat(app: App, run_id: str, token: str, progress: float | None) -> None:
    """Report that an asynchronous attempt is alive (and how far it is).

    Each heartbeat moves the attempt's heartbeat lease on by the task's heartbeat_timeout, never
    past its max_duration. Exits 5 when refused (the attempt timed out, the token was used ...).

    \b
    Examples:
      rebound runs heartbeat nightly-export:20260307T020000Z --token "$TOKEN" --progress 0.4

    JSON fields: accepted, kind, run_id, attempt, state, reason, message, progress, lease_expires_at.
    """
    _report(app, Report(ReportKind.HEARTBEAT, token, run_id=run_id, progress=progress))


@runs.command("complete")
@_token_options
@out.YES_ACCEPTED
@click.pass_obj
@authorized("runs:report", RunOf("run_id"))
def complete(app: App, run_id: str, token: str, progress: float | None) -> None:
    """Report that an asynchronous attempt succeeded: the run succeeds, the token is used.

    A second completion, or one after the attempt timed out, is refused (exit 5) and audited;
    it never reopens the run.

    \b
    Examples:
      rebound runs complete nightly-export:20260307T020000Z --token "$TOKEN"

    JSON fields: as for `runs heartbeat`.
    """
    _report(app, Report(ReportKind.COMPLETE, token, run_id=run_id, progress=progress))


@runs.command("fail")
@_token_options
@click.option("--error-code", default="TASK_FAILED", show_default=True, help="CAPITALS_AND_DIGITS")
@click.option("--message", default="", help="what went wrong")
@click.option("--no-retry", is_flag=True, help="a terminal failure: dead-letter without retrying")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("runs:report", RunOf("run_id"))
def fail(
    app: App,
    run_id: str,
    token: str,
    progress: float | None,
    error_code: str,
    message: str,
    no_retry: bool,
) -> None:
    """Report that an asynchronous attempt failed; the retry policy decides what follows.

    \b
    Examples:
      rebound runs fail nightly-export:20260307T020000Z --token "$TOKEN" --error-code EXPORT_BROKEN \\
          --message "disk full"

    JSON fields: as for `runs heartbeat`.
    """
    report = Report(
        ReportKind.FAIL,
        token,
        run_id=run_id,
        progress=progress,
        error_code=error_code,
        message=message or None,
        retryable=not no_retry,
    )
    _report(app, report)
