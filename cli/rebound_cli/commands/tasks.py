"""``rebound tasks``: register, inspect, pause, resume and preview tasks."""

from __future__ import annotations

from pathlib import Path

import click

from rebound.domain.prediction.preflight import PreflightReport, PreflightWarning
from rebound.domain.run import Run
from rebound.domain.schedules import schedule_notes
from rebound.domain.task import TaskState
from rebound.domain.timefmt import iso
from rebound.ops.authz import Documents, TaskOf, document_tenants
from rebound.ops.preflight import PreflightOps, parse_window
from rebound.ops.preview import MAX_PREVIEW
from rebound.ops.task_views import detail_view, task_view
from rebound.ops.tasks import SCHEDULER_RATE, Change, TaskChange, change_view
from rebound.ops.workstreams import DefinitionChange, WorkstreamOps, definition_change_view
from rebound_cli import output as out
from rebound_cli import watch
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.errors import EXIT_UNHEALTHY
from rebound_cli.files import INPUT_FILE
from rebound_cli.paging import emit_page, page_of, paging, paging_options

SHOWN_CHANGES = 50


@click.group()
def tasks() -> None:
    """Register tasks from a file and look after them.

    \b
    Examples:
      rebound tasks apply -f tasks.yaml --dry-run     # the diff, nothing changed
      rebound tasks dryrun -f tasks.yaml --window 24h # fires, quotas and conflicts ahead
      rebound tasks list --state paused
      rebound tasks show export-ledger
      rebound tasks pause export-ledger --reason "target down, INC-123"
      rebound tasks preview export-ledger --count 5
    """


def _say_diff(diff: dict[str, tuple[object, object]]) -> None:
    for path, (old, new) in diff.items():
        out.say(f"    {path}: {out.cell(old)} -> {out.cell(new)}")


def _print_plan(changes: list[TaskChange]) -> None:
    marks = {Change.CREATE: "[green]+[/green]", Change.UPDATE: "[yellow]~[/yellow]"}
    shown = 0
    for change in changes:
        if change.change is Change.UNCHANGED:
            continue
        shown += 1
        if shown > SHOWN_CHANGES:
            continue
        task = change.task
        out.say(f"{marks[change.change]} {task.id} ({task.tenant}) {change.change.value}")
        if change.change is Change.UPDATE:
            _say_diff(change.diff)
    if shown > SHOWN_CHANGES:
        out.say(f"... and {shown - SHOWN_CHANGES} more")
    counts = {c: sum(1 for x in changes if x.change is c) for c in Change}
    out.say(
        f"{counts[Change.CREATE]} to create, {counts[Change.UPDATE]} to update, "
        f"{counts[Change.UNCHANGED]} unchanged"
    )


TASK_FILE = click.option(
    "-f",
    "--file",
    "path",
    required=True,
    type=INPUT_FILE,
    help="task file (YAML, a top-level `tasks:` list); - reads standard input",
)
SHOWN_WARNINGS = 30
WINDOW_HELP = "how far ahead to look (a duration: 6h, 24h, 7d; at most 7d)"
FAIL_HELP = "exit 3 when the pre-flight has a warning (tasks apply: and change nothing)"


def _print_preflight(report: PreflightReport) -> None:
    busiest = sorted(report.tasks, key=lambda t: -t.fires)
    out.say(
        f"pre-flight {iso(report.start)} .. {iso(report.end)}: "
        f"{sum(t.fires for t in report.tasks)} fire(s) of {len(report.tasks)} task(s)"
    )
    for quota in report.quotas:
        if quota.cap is not None:
            out.say(
                f"  tenant {quota.tenant}: at most {quota.peak} run(s) in flight of {quota.cap} "
                f"(headroom {quota.min_headroom}" + (f" at {iso(quota.peak_at)})" if quota.peak_at else ")")
            )
    for row in busiest:
        if row.note and row.fires:
            out.note(f"  {row.task_id}: {row.note}")
    if not report.warnings:
        out.say("[green]no conflict warnings[/green]")
        return
    # The same kind of warning for the same tasks, again and again (an every-minute task that
    # overlaps itself), is one line with its count, not hundreds.
    groups: dict[tuple[str, str, tuple[str, ...]], list[PreflightWarning]] = {}
    for warning in report.warnings:
        groups.setdefault((warning.severity, warning.kind, warning.tasks), []).append(warning)
    for (severity, kind, _), alike in list(groups.items())[:SHOWN_WARNINGS]:
        colour = "red" if severity == "high" else "yellow"
        first = alike[0]
        out.say(f"[{colour}]{severity}[/{colour}] {iso(first.at)} {kind}: {first.message}")
        if len(alike) > 1:
            out.say(f"  ... and {len(alike) - 1} more like it, the last at {iso(alike[-1].at)}")
    if len(groups) > SHOWN_WARNINGS:
        out.say(f"... and {len(groups) - SHOWN_WARNINGS} more kinds (all of them with --output json)")
    out.say(f"{len(report.warnings)} pre-flight warning(s)")


@tasks.command("dryrun")
@TASK_FILE
@click.option("--window", default="24h", show_default=True, help=WINDOW_HELP)
@click.option("--fail-on-warnings", is_flag=True, help=FAIL_HELP)
@click.pass_obj
@authorized("tasks:read", Documents("path", document_tenants))
def dryrun(app: App, path: Path, window: str, fail_on_warnings: bool) -> None:
    """Pre-flight FILE without changing anything: fires, quota headroom and conflicts ahead.

    With the tasks already deployed that FILE does not name, over the next --window: every
    task's fires (its time zone, DST policy, stagger and jitter); each tenant's quota headroom
    at every instant; mutex groups, workstream resources and a task's own overlap slot where run
    windows (fire + stagger + jitter window + expected duration) overlap; and catch-up storms (a
    paused task whose resume releases many missed fires at once). Each warning names the
    instant and the tasks. The thresholds are `conflicts:` in config/tasks/default_policy.yaml.

    \b
    Examples:
      rebound tasks dryrun -f tasks.yaml
      rebound tasks dryrun -f tasks.yaml --window 7d --fail-on-warnings
      rebound -o json tasks dryrun -f tasks.yaml | jq '.warnings[] | select(.severity == "high")'

    \b
    JSON fields: window (from, until), fires_total, tasks[] (task_id, tenant, source, fires, next[],
    expected_duration_s, duration_from, note), quotas[] (tenant, max_concurrent_runs,
    peak_in_flight, peak_at, min_headroom, headroom[], headroom_total), warnings[] (kind, at, until,
    tasks[], runs[], runs_total, severity, message, detail).
    """
    ops = PreflightOps(app.deps, sees=app.guard.sees)
    report = ops.dryrun(ops.load(path), parse_window(window, option="--window"))
    out.emit(app, report.as_dict(), lambda: _print_preflight(report))
    if fail_on_warnings and report.warnings:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)


@tasks.command("apply")
@TASK_FILE
@click.option("--dry-run", is_flag=True, help="show the diff and stop")
@click.option(
    "--rate",
    type=click.FloatRange(min=0.1),
    default=SCHEDULER_RATE,
    show_default=True,
    help="EventBridge Scheduler requests per second (stay under your account's quota)",
)
@click.option("-y", "--yes", is_flag=True, help="update existing tasks without asking")
@click.option(
    "--allow-past",
    is_flag=True,
    help="accept a one-time `at` that is already past (the task fires at once); refused otherwise",
)
@click.option("--preflight-window", default="24h", show_default=True, help="the pre-flight's " + WINDOW_HELP)
@click.option("--no-preflight", is_flag=True, help="skip the pre-flight (`tasks dryrun`)")
@click.option("--fail-on-warnings", is_flag=True, help=FAIL_HELP)
@click.pass_obj
@authorized("tasks:register", Documents("path", document_tenants))
def apply(
    app: App,
    path: Path,
    dry_run: bool,
    rate: float,
    yes: bool,
    allow_past: bool,
    preflight_window: str,
    no_preflight: bool,
    fail_on_warnings: bool,
) -> None:
    """Create or update the tasks in FILE, and its workstreams and resources: declarative and
    idempotent, with a diff first.

    Tasks and workstreams not in the file are left alone. Applying the same file twice changes
    nothing. Updates to existing tasks or workstreams ask for confirmation unless --yes. Schedules
    are written at --rate Scheduler requests per second; a throttled call backs off and slows the
    rate down.

    \b
    Examples:
      rebound tasks apply -f config/demo/tasks.yaml --dry-run
      rebound tasks apply -f tasks.yaml --yes
      generate-tasks | rebound tasks apply -f - --yes   # - is standard input
      rebound tasks apply -f config/demo/workstream.yaml   # tasks, workstreams and resources
      rebound --env prod tasks apply -f 10k-tasks.yaml --rate 500 --yes
      rebound tasks apply -f backfill.yaml --allow-past   # a one-time `at` already past runs now
      rebound tasks apply -f tasks.yaml --fail-on-warnings   # refuse when the pre-flight warns

    The pre-flight (`tasks dryrun`) runs first and shows its warnings; they do not stop the
    apply unless --fail-on-warnings (exit 3, nothing changed).

    \b
    JSON fields: dry_run, plan[] (id, change: create|update|unchanged, diff{path: {from, to}}),
    workstreams_plan[] (kind: workstream|resource, id, change, diff), applied (created[],
    updated[], unchanged[], schedules_written, rules_written, throttled, tenants[],
    workstreams{workstreams[], changed[], resources{}}) or null, preflight (as `tasks dryrun`;
    null with --no-preflight).
    """
    ops = app.tasks(writer=not dry_run, rate=rate)
    document = ops.load_document(path)
    changes = ops.plan(document.tasks, allow_past=allow_past)
    ws_ops = WorkstreamOps(ops.deps, ops.actor, ops.guard)
    ws_changes = ws_ops.plan(document.workstreams, document.resources)
    plan = [change_view(c) for c in changes]
    ws_plan = [definition_change_view(c) for c in ws_changes]
    report = (
        None
        if no_preflight
        else PreflightOps(app.deps, sees=app.guard.sees).dryrun(
            document, parse_window(preflight_window, option="--preflight-window")
        )
    )
    preflight = report.as_dict() if report is not None else None
    if not app.json:
        _print_plan(changes)
        _print_definitions(ws_changes)
        if report is not None:
            _print_preflight(report)
    todo = [c for c in changes if c.change is not Change.UNCHANGED]
    ws_todo = [c for c in ws_changes if c.change is not Change.UNCHANGED]
    nothing_applied = {
        "dry_run": dry_run,
        "plan": plan,
        "workstreams_plan": ws_plan,
        "applied": None,
        "preflight": preflight,
    }
    if fail_on_warnings and report is not None and report.warnings:
        out.emit(app, nothing_applied, lambda: None)
        out.note("refused: the pre-flight warned and --fail-on-warnings was given; nothing changed")
        raise click.exceptions.Exit(EXIT_UNHEALTHY)
    if dry_run or not (changes or ws_changes):
        out.emit(
            app,
            nothing_applied,
            lambda: None,
        )
        return
    updates = sum(c.change is Change.UPDATE for c in changes) + sum(
        c.change is Change.UPDATE for c in ws_changes
    )
    if updates:
        out.confirm(f"Update {updates} existing task(s), workstream(s) or resource(s)?", yes)
    with out.progress("applying", total=len(changes)) as advance:
        result = ops.apply(changes, progress=lambda _change: advance(1))
    tenants = ops.apply_tenants(document.tenants)
    registered = ws_ops.register(document.workstreams, document.resources)
    out.emit(
        app,
        {
            "dry_run": False,
            "plan": plan,
            "workstreams_plan": ws_plan,
            "applied": {**result.as_dict(), "tenants": tenants, "workstreams": registered},
            "preflight": preflight,
        },
        lambda: out.say(
            f"applied: {len(result.created)} created, {len(result.updated)} updated, "
            f"{len(result.unchanged)} unchanged; {result.schedules_written} schedule(s) and "
            f"{result.rules_written} event rule(s) written"
            + (f"; {result.throttled} throttled call(s) retried" if result.throttled else "")
            + (f"; tenant settings for {', '.join(tenants)}" if tenants else "")
            + (f"; workstreams and resources changed: {len(ws_todo)}" if ws_changes else "")
            + ("" if todo or tenants or ws_todo else " (nothing to change)")
        ),
    )


def _print_definitions(changes: list[DefinitionChange]) -> None:
    """The workstreams' and resources' part of the plan, as ``_print_plan`` shows tasks."""
    if not changes:
        return
    marks = {Change.CREATE: "[green]+[/green]", Change.UPDATE: "[yellow]~[/yellow]"}
    for change in changes:
        if change.change is Change.UNCHANGED:
            continue
        out.say(f"{marks[change.change]} {change.kind} {change.id} {change.change.value}")
        if change.change is Change.UPDATE:
            _say_diff(change.diff)
    counts = {c: sum(1 for x in changes if x.change is c) for c in Change}
    out.say(
        f"workstreams and resources: {counts[Change.CREATE]} to create, {counts[Change.UPDATE]} to update, "
        f"{counts[Change.UNCHANGED]} unchanged"
    )


@tasks.command("list")
@click.option("--tenant", help="only this tenant's tasks")
@click.option("--state", type=click.Choice([s.value for s in TaskState]), help="active or paused")
@paging_options()
@click.pass_obj
@authorized("tasks:read")
def list_tasks(
    app: App, tenant: str | None, state: str | None, limit: int | None, after: str | None, all_pages: bool
) -> None:
    """List registered tasks.

    \b
    Examples:
      rebound tasks list
      rebound tasks list --tenant acme --state paused
      rebound tasks list --limit 50                 # then --after CURSOR, as printed on stderr
      rebound -o json tasks list | jq -r '.[].id'

    \b
    JSON: a list of tasks: id, tenant, state, description, trigger, target, retry_policy,
    timeout_s, version, updated_at, schedule_names[].
    """
    found = app.tasks().find(tenant=tenant, state=TaskState(state) if state else None)
    pages = paging(limit, after, all_pages)
    views, following = page_of([task_view(s) for s in found], lambda v: str(v["id"]), pages)
    emit_page(
        app,
        views,
        following,
        pages,
        lambda: out.table(
            None,
            ["id", "tenant", "state", "trigger", "target", "policy", "version", "updated"],
            [
                [
                    v["id"],
                    v["tenant"],
                    v["state"],
                    v["trigger"],
                    v["target"],
                    v["retry_policy"],
                    v["version"],
                    v["updated_at"],
                ]
                for v in views
            ],
            empty="no tasks",
        ),
    )


@tasks.command("show")
@click.argument("task_id")
@click.pass_obj
@authorized("tasks:read", TaskOf("task_id"))
def show(app: App, task_id: str) -> None:
    """Show a task: its definition, its schedules as Scheduler holds them, next fires, recent runs.

    \b
    Examples:
      rebound tasks show export-ledger
      rebound -o json tasks show export-ledger | jq .schedules

    \b
    JSON fields: task (as in `tasks list`), definition (the task file entry), schedules[] (name,
    expression, timezone, state, drift), schedule_notes[] (why a Unix cron became several schedules, or
    lost a part that never fires), next_fires[] (as in `tasks preview`), recent_runs[] (as in `runs list`).
    """
    detail = app.tasks().show(task_id)
    data = detail_view(detail)
    view = data["task"]

    def render() -> None:
        out.fields(f"task {detail.stored.task.id}", list(view.items()))
        out.fields(
            "definition",
            [("target", data["definition"]["target"]), ("payload", data["definition"].get("payload"))],
        )
        out.table(
            "schedules",
            ["name", "expression", "timezone", "state", "drift"],
            [[s.name, s.expression, s.timezone, s.state, s.drift] for s in detail.schedules],
        )
        for note in detail.schedule_notes:
            out.say(f"note: {note}")
        out.table(
            "next fires",
            ["at (UTC)", "local", "dst"],
            [[f.at.isoformat(), f.local.isoformat(), f.dst_change] for f in detail.next_fires],
        )
        out.table(
            "recent runs",
            ["run", "state", "scheduled", "attempts", "error"],
            [
                [r.run_id, r.state.value, r.scheduled_for.isoformat(), r.attempt, r.last_error_code]
                for r in detail.recent_runs
            ],
        )

    out.emit(app, data, render)


def _set_state(app: App, task_id: str, state: TaskState, reason: str) -> None:
    ops = app.tasks(writer=True)
    stored = ops.set_state(task_id, state, reason)
    caught = ops.last_resume
    view = task_view(stored)
    if caught is not None:
        view["resumed"] = {
            "caught_up": caught.caught_up,
            "skipped": caught.skipped,
            "released": caught.delivered,
        }
    summary = f"task {stored.task.id} is {stored.task.state.value} (version {stored.version})"
    if caught is not None:
        summary += (
            f"; catch-up ran {len(caught.caught_up)} and skipped {len(caught.skipped)} missed fire(s), "
            f"{len(caught.delivered)} held run(s) released"
        )
    out.emit(app, view, lambda: out.say(summary))


@tasks.command("run")
@click.argument("task_id")
@click.option("--token", help="idempotency token: every request with the same token names the same run")
@click.option(
    "--wait",
    is_flag=True,
    help="wait until the run settles: exit 0 if it succeeded, 1 if not, 6 at --timeout",
)
@watch.INTERVAL
@watch.TIMEOUT
@out.YES_ACCEPTED
@click.pass_obj
@authorized("tasks:run", TaskOf("task_id"))
def run_now(
    app: App, task_id: str, token: str | None, wait: bool, interval: float, wait_timeout: float
) -> None:
    """Run a registered task now, outside its schedule, with the task's retry policy.

    An unknown or paused task is refused (exit code as for any error); nothing is queued.

    \b
    Examples:
      rebound tasks run nightly-report
      rebound -o json tasks run nightly-report
      rebound tasks run nightly-report --wait --timeout 600 && echo done   # exit code: the outcome

    JSON: run_id, task_id; with --wait also state and attempts (the settled run's).
    """
    run_id = app.tasks(writer=True).run_now(task_id, token)
    if wait:
        out.note(f"run {run_id} queued; waiting for it to settle")
        seen: list[str] = []

        def look(run: Run | None) -> None:
            if run is not None and run.state.value not in seen[-1:]:
                seen.append(run.state.value)
                out.note(f"  {run.state.value} (attempt {run.attempt})")

        settled = watch.follow(app, run_id, interval, wait_timeout, look)
        out.emit(
            app,
            {
                "run_id": run_id,
                "task_id": settled.task_id,
                "state": settled.state.value,
                "attempts": settled.attempt,
            },
            lambda: out.say(f"run {run_id} {settled.state.value} after {settled.attempt} attempt(s)"),
        )
        watch.exit_with_outcome(settled)
        return
    out.emit(
        app,
        {"run_id": run_id, "task_id": run_id.partition(":")[0]},  # the task's key
        lambda: out.say(f"run {run_id} queued; follow it with: rebound runs show {run_id}"),
    )


@tasks.command("pause")
@click.argument("task_id")
@click.option("--reason", default="", help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("tasks:pause", TaskOf("task_id"))
def pause(app: App, task_id: str, reason: str, yes: bool) -> None:
    """Pause a task: its schedules are disabled, and fires that still arrive are skipped.

    \b
    Examples:
      rebound tasks pause export-ledger --reason "ledger migration" --yes

    JSON: the task, as in `tasks list`.
    """
    out.confirm(f"Pause task {task_id}? Its schedules stop firing.", yes)
    _set_state(app, task_id, TaskState.PAUSED, reason)


@tasks.command("resume")
@click.argument("task_id")
@click.option("--reason", default="", help="why, for the audit trail")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("tasks:resume", TaskOf("task_id"))
def resume(app: App, task_id: str, reason: str) -> None:
    """Resume a paused task: its schedules are enabled again, the task's catch-up policy decides
    what happens to the fires of the pause, and retries held during it are sent.

    \b
    Examples:
      rebound tasks resume export-ledger --reason "migration done"

    JSON: the task, as in `tasks list`.
    """
    _set_state(app, task_id, TaskState.ACTIVE, reason)


@tasks.command("preview")
@click.argument("task_id")
@click.option("--count", type=click.IntRange(1, MAX_PREVIEW), default=10, show_default=True)
@click.option("--after", help="start after this time (ISO 8601 or a duration ago); default now")
@click.pass_obj
@authorized("tasks:read", TaskOf("task_id"))
def preview(app: App, task_id: str, count: int, after: str | None) -> None:
    """The next COUNT fire times in the task's time zone, with DST changes marked.

    Rows with `fires: no` are wall-clock matches that do not fire under the task's DST policy
    (the default is EventBridge Scheduler's): a local time that does not exist when clocks
    spring forward (dst-skipped), or the second of a local time that happens twice when they
    fall back (dst-not-repeated). With `dst: {missing: shift}` or `dst: {repeated: twice}` those
    fire, delivered by Rebound's run ledger, marked dst-shifted or dst-repeated.

    \b
    Examples:
      rebound tasks preview sync-invoices --count 20
      rebound tasks preview nightly --after 2026-03-28T00:00:00Z --count 5

    Where a Unix cron is deployed as several schedules (day-of-month OR day-of-week), or without a
    part that never fires, a note on stderr says so.

    \b
    JSON: a list of at (UTC), local (ISO with offset), utc_offset, fires, note, dst_change.
    """
    from rebound.ops.common import parse_when

    ops = app.tasks()
    start = parse_when(after, app.deps.clock.now(), option="--after") if after else None
    fires = ops.preview(task_id, count, start)
    for note in schedule_notes(ops.get(task_id).task.schedule):
        out.note(f"note: {note}")
    out.emit(
        app,
        [f.as_dict() for f in fires],
        lambda: out.table(
            f"next fires of {task_id}",
            ["at (UTC)", "local", "offset", "fires", "note", "DST change"],
            [
                [
                    f.at.strftime("%Y-%m-%d %H:%M"),
                    f.local.strftime("%Y-%m-%d %H:%M %Z"),
                    f.as_dict()["utc_offset"],
                    f.fires,
                    f.note,
                    f.dst_change,
                ]
                for f in fires
            ],
        ),
    )
