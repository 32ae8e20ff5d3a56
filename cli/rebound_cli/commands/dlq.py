"""``rebound dlq``: the execution dead-letter queue: list, show, its depth over time, redrive,
follow a redrive job, archive."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from rebound.domain.timefmt import iso
from rebound.engine.ports import DEFAULT_KEEP_DAYS
from rebound.ops.authz import JobOf, MessageOf, TenantFilter
from rebound.ops.common import parse_seconds, parse_when
from rebound.ops.dlq import FAILED, WINDOWS, DlqFilter, RedriveItem
from rebound.ops.dlq.jobs import STALE_S, JobState, RedriveJob, RedriveJobs, continue_job
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_FAILED
from rebound_cli.paging import emit_page, paging, paging_options

F = TypeVar("F", bound=Callable[..., Any])


def filter_options(fn: F) -> F:
    """The filters every DLQ command shares."""
    for option in reversed(
        [
            click.option("--task", "task_id", help="only messages of this task"),
            click.option("--tenant", help="only messages of this tenant"),
            click.option("--error-code", help="only messages whose last error had this code"),
            click.option("--since", help="dead-lettered at or after: ISO 8601, or a duration ago (2h, 3d)"),
            click.option("--until", help="dead-lettered at or before: ISO 8601, or a duration ago"),
        ]
    ):
        fn = option(fn)
    return fn


BY_TENANT = TenantFilter("tenant")
"""The rule's owner of every filtered DLQ command: ``--tenant``, or the operator's one tenant."""


def _filters(app: App, kwargs: dict[str, Any]) -> DlqFilter:
    """The filters given, bound to the tenant the command's rule decided on (``BY_TENANT``)."""
    now = app.deps.clock.now()
    since, until = kwargs.pop("since"), kwargs.pop("until")
    kwargs.pop("tenant")
    return DlqFilter(
        task_id=app.task_key(kwargs.pop("task_id")),
        tenant=app.decided_tenant,
        error_code=kwargs.pop("error_code"),
        since=parse_when(since, now) if since else None,
        until=parse_when(until, now, option="--until") if until else None,
    )


@click.group()
def dlq() -> None:
    """The execution DLQ: runs that exhausted or refused their retries.

    \b
    Examples:
      rebound dlq list --task export-ledger --since 2h
      rebound dlq show MESSAGE_ID
      rebound dlq redrive --task export-ledger --dry-run
      rebound dlq redrive --task export-ledger --rate 5 --yes
      rebound dlq job JOB_ID --follow
      rebound dlq history --window 24h
      rebound dlq archive --older-than 10d --delete --yes
    """


@dlq.command("list")
@filter_options
@click.option("--archived", is_flag=True, help="list the archive instead of the queue")
@paging_options(200)
@click.pass_obj
@authorized("dlq:read", BY_TENANT)
def list_messages(
    app: App, /, archived: bool, limit: int, after: str | None, all_pages: bool, **kwargs: Any
) -> None:
    """List DLQ messages, oldest first, with the state of their runs.

    It reads the DLQ's record, which every arrival writes, never the queue itself: listing hides
    nothing from other readers or a running redrive, however often it runs. When more messages
    match than --limit, the cursor of the next page is printed on stderr.

    \b
    Examples:
      rebound dlq list
      rebound dlq list --task export-ledger --error-code SIM_FAILURE --since 24h
      rebound dlq list --limit 50 --after '2026-03-07T09:10:00.000Z#6f1c2e0a-...'
      rebound dlq list --archived
      rebound -o json dlq list | jq -r '.[] | select(.run_state=="dead_lettered") | .run_id'

    \b
    JSON: a list of message_id, run_id, task_id, tenant, error_code, reason, arrival
    (explicit|redrive_policy|refused), kind, dead_lettered_at, sent_at, receive_count, attempts,
    archive_status, run_state, work_order_id.
    """
    filters = _filters(app, kwargs)
    pages = paging(limit, after, all_pages)
    following = None
    if archived:
        if after is not None:
            raise click.UsageError("--after pages the DLQ's record; the archive is listed whole")
        found = app.dlq().find(filters, limit=pages.limit, archived=True)
    else:
        found, following = [], after
        while True:  # one page, or with --all every page
            page = app.dlq().find_page(filters, limit=pages.limit or limit, after=following)
            found, following = found + page.examined, page.cursor
            if pages.limit is not None or following is None:
                break
    views = [e.as_dict() for e in found]
    emit_page(
        app,
        views,
        following,
        pages,
        lambda: out.table(
            None,
            ["message", "run", "error", "reason", "dead-lettered (UTC)", "run state", "work order"],
            [
                [
                    v["message_id"],
                    v["run_id"],
                    v["error_code"],
                    v["reason"] or v["arrival"],
                    v["dead_lettered_at"] or v["sent_at"],
                    v["run_state"],
                    v["work_order_id"],
                ]
                for v in views
            ],
            empty="no messages" + (" in the archive" if archived else " in the DLQ"),
        ),
    )


@dlq.command("show")
@click.argument("message_id")
@click.pass_obj
@authorized("dlq:read", MessageOf("message_id"))
def show(app: App, message_id: str) -> None:
    """Show one DLQ message (from the DLQ's record or its archive), its run and its work order.

    \b
    Examples:
      rebound dlq show 6f1c2e0a-3b7d-4c55-9a43-1d2f9a0b8e11

    JSON fields: as in `dlq list`, plus location, body, attributes, work_order.
    """
    data = app.dlq().show(message_id).as_dict()
    out.emit(app, data, lambda: out.fields(f"message {message_id}", sorted(data.items())))


@dlq.command("history")
@click.option("--window", type=click.Choice(list(WINDOWS)), default="1h", show_default=True)
@click.pass_obj
@authorized("dlq:read")
def history(app: App, window: str) -> None:
    """The DLQ's depth over the last hour (a row a minute) or day (a row a quarter of an hour).

    It comes from the DLQ's record, which holds when each message arrived and when and how it
    left, so it covers the time before anyone looked; nothing is received from the queue. Each
    row: the depth at the end of the bucket, its peak, and how many arrived and left in it.

    \b
    Examples:
      rebound dlq history
      rebound dlq history --window 24h
      rebound -o json dlq history | jq '.points | map(.depth) | max'

    \b
    JSON fields: window, since, until, bucket_s, start_depth, points[] (at, depth, peak, arrived,
    left), arrived, left, read, complete (false when reading stopped at its limit), source.
    """
    found = app.dlq().history(window).as_dict()

    def render() -> None:
        out.table(
            f"DLQ depth, last {window} (from its record; {found['start_depth']} at {found['since']})",
            ["until (UTC)", "depth", "peak", "arrived", "left"],
            [[p["at"], p["depth"], p["peak"], p["arrived"], p["left"]] for p in found["points"]],
        )
        out.say(f"{found['arrived']} arrived, {found['left']} left over the last {window}")
        if not found["complete"]:
            out.note(f"reading stopped after {found['read']} records: the figures may be short")

    out.emit(app, found, render)


def _print_item(item: RedriveItem) -> None:
    out.say(f"{item.outcome:>18}  {item.message_id}  {item.run_id or '-'}  {item.detail}")


@dlq.command("redrive")
@filter_options
@click.option("--dry-run", is_flag=True, help="say what would happen, change nothing")
@click.option("--rate", type=click.FloatRange(min=0.1), help="messages per second at most")
@click.option("--limit", type=click.IntRange(1), help="move at most this many runs (try a few first)")
@click.option("--archived", is_flag=True, help="redrive from the archive table instead of the queue")
@out.YES
@click.pass_obj
@authorized("dlq:redrive", BY_TENANT)
def redrive(
    app: App,
    /,
    dry_run: bool,
    rate: float | None,
    limit: int | None,
    archived: bool,
    yes: bool,
    **kwargs: Any,
) -> None:
    """Move dead-lettered runs back to the execution queue, each with a fresh attempt budget.

    Unlike the console's redrive it filters, dry-runs, keeps a --rate, skips messages whose run
    already succeeded (or was skipped, cancelled, or replayed since), and writes an audit record,
    with you as the actor, for every message moved. It is batched (about 0.3 SQS requests per
    message) and safe to interrupt: a message leaves the DLQ only after its replay was sent, and
    running the same command again finishes what an interrupted run started (messages it held
    reappear after two minutes). A --dry-run reads the DLQ's record, not the queue, so it hides
    nothing from the redrive that follows it. Exits 1 if any message could not be moved.

    \b
    Examples:
      rebound dlq redrive --task export-ledger --dry-run
      rebound dlq redrive --task export-ledger --limit 5 --yes      # a canary first
      rebound dlq redrive --error-code TIMEOUT --since 6h --rate 20 --yes
      rebound dlq redrive --archived --task export-ledger --yes

    \b
    JSON fields: redrive_id, dry_run, source (queue|archive), filters, examined, matched,
    outcomes{outcome: count}, moved, failed, sqs_requests, items[] (message_id, run_id, task_id,
    outcome: moved|resumed|cleaned-up|duplicate-removed|skipped|failed|would-..., detail).
    """
    filters = _filters(app, kwargs)
    ops = app.dlq(writer=not dry_run)
    # The bar's total: the matching messages the DLQ's record holds (counting receives nothing).
    total = None if archived else ops.count(filters)
    if not dry_run:
        what = "the matching archived messages" if total is None else f"{total} matching DLQ message(s)"
        capped = f" (at most {limit})" if limit is not None and (total is None or total > limit) else ""
        out.confirm(f"Redrive {what}{capped}?", yes)
    with out.progress("redriving" if not dry_run else "examining", total=total) as advance:
        report = ops.redrive(
            filters,
            dry_run=dry_run,
            rate=rate,
            limit=limit,
            archived=archived,
            progress=lambda _item: advance(1),
        )

    def render() -> None:
        for item in report.items:
            _print_item(item)
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.outcomes.items())) or "nothing"
        out.say(
            f"{'dry run: ' if dry_run else ''}examined {report.examined}, matched {report.matched}: {counts} "
            f"({report.sqs_requests} SQS requests; redrive {report.redrive_id})"
        )

    out.emit(app, report.as_dict(), render)
    if report.outcomes[FAILED]:
        raise click.exceptions.Exit(EXIT_FAILED)


class _Continuations:
    """What ``RedriveJobs`` asks of a continuation, noted: with ``--follow``, a job whose own
    continuation was lost (quiet for a while) is continued by this process, one chunk at a time."""

    def __init__(self) -> None:
        self.wanted: set[str] = set()

    def __call__(self, job_id: str) -> None:
        self.wanted.add(job_id)


def _job_line(job: RedriveJob) -> str:
    return (
        f"job {job.job_id} {job.state.value}: {job.moved} moved, {job.cleaned} cleaned up, "
        f"{job.failed} failed, {job.skipped} skipped, {job.remaining} remaining of {job.total} "
        f"({round(job.progress * 100)} %, {job.chunks} chunk(s))"
    )


@dlq.command("job")
@click.argument("job_id")
@click.option("--follow", is_flag=True, help="show a progress bar until the job is done")
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, help="seconds between polls"
)
@click.pass_obj
@authorized("dlq:read", JobOf("job_id"))
def job(app: App, job_id: str, follow: bool, interval: float) -> None:
    """Show a redrive job: one the console or the API started (a redrive of more than 100
    messages, or with `async: true`, runs as a job in the ops API function and is polled).

    It reads the job's record (`redrive-job#<id>` in the control table): state, total, moved,
    cleaned up, failed, skipped, remaining, chunks, who started it. With --follow it polls until
    the job is done, with a progress bar on stderr. A running job whose record has not changed for
    90 s lost its continuation: --follow then carries it on from this process, a chunk at a time,
    acting as the operator who started it (the exactly-once redrive makes that safe). Exits 1 if
    the job failed or finished with failures.

    \b
    Examples:
      rebound dlq job 3f2a9c1d0e4b
      rebound dlq job 3f2a9c1d0e4b --follow
      rebound -o json dlq job 3f2a9c1d0e4b --follow | jq .moved

    \b
    JSON fields: job_id, state (running|succeeded|finished-with-failures|failed), done, progress
    (0..1), total, moved, cleaned, skipped, failed, remaining, examined, chunks, outcomes, filters,
    rate, limit, created_by, created_at, updated_at, error.
    """
    continuations = _Continuations()
    jobs = RedriveJobs(app.dlq(), continuations)
    found = jobs.poll(job_id) if follow else jobs.get(job_id)
    if follow and not found.done:
        with out.progress(f"redrive job {job_id}", total=found.total or None) as advance:
            shown = 0
            while not found.done:
                if job_id in continuations.wanted:
                    continuations.wanted.discard(job_id)
                    out.note(f"job {job_id} went quiet: carrying it on from here")
                    continue_job(app.deps, job_id, continuations)
                else:
                    app.sleep(interval)
                found = jobs.poll(job_id)
                handled = round(found.progress * found.total)
                advance(handled - shown)
                shown = handled
    elif not found.done and app.deps.clock.now() - found.updated_at > timedelta(seconds=STALE_S):
        out.note(f"job {job_id} has not changed since {iso(found.updated_at)}: --follow carries it on")
    error = f"; error: {found.error}" if found.error else ""
    out.emit(app, found.as_dict(), lambda: out.say(_job_line(found) + error))
    if found.state in (JobState.FAILED, JobState.FINISHED_WITH_FAILURES):
        raise click.exceptions.Exit(EXIT_FAILED)


@dlq.command("archive")
@filter_options
@click.option("--older-than", help="only messages waiting longer than this (7d, 36h)")
@click.option("--delete", is_flag=True, help="remove archived messages from the DLQ")
@click.option("--keep-days", type=click.IntRange(1), default=DEFAULT_KEEP_DAYS, show_default=True)
@out.YES
@click.pass_obj
@authorized("dlq:archive", BY_TENANT)
def archive(
    app: App, /, older_than: str | None, delete: bool, keep_days: int, yes: bool, **kwargs: Any
) -> None:
    """Copy DLQ messages into the archive table, to keep them beyond SQS's 14-day retention.

    Archiving the same message twice keeps the first copy. Without --delete it copies from the
    DLQ's record and receives nothing. With --delete, a message is removed from the DLQ only after
    the archive holds it (and an audit record and the DLQ's record say so). Archived
    messages can be listed (`dlq list --archived`), shown, and redriven (`dlq redrive --archived`).

    \b
    Examples:
      rebound dlq archive --older-than 7d
      rebound dlq archive --older-than 10d --delete --yes      # before retention ends

    JSON fields: examined, matched, archived, already_archived, deleted, failed{message_id: why}.
    """
    filters = _filters(app, kwargs)
    ops = app.dlq(writer=True)
    if delete:
        out.confirm("Archive the matching messages and remove them from the DLQ?", yes)
    seconds = parse_seconds(older_than, option="--older-than") if older_than else None
    with out.progress("archiving", total=ops.depth().visible) as advance:
        report = ops.archive_messages(
            filters,
            older_than_s=seconds,
            delete=delete,
            keep_days=keep_days,
            progress=lambda _m, _outcome: advance(1),
        )
    out.emit(
        app,
        report.as_dict(),
        lambda: out.say(
            f"examined {report.examined}, matched {report.matched}: {report.archived} archived, "
            f"{report.already_archived} already archived, {report.deleted} removed from the DLQ"
            + (f", {len(report.failed)} failed" if report.failed else "")
        ),
    )
    if report.failed:
        raise click.exceptions.Exit(EXIT_FAILED)
