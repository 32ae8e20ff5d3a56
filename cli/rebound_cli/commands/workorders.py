"""``rebound workorders``: the work orders opened for dead-lettered runs."""

from __future__ import annotations

import click

from rebound.domain.basics import Severity
from rebound.domain.work_order import Resolution, WorkOrderState
from rebound.ops.authz import WorkOrderOf
from rebound.ops.workorders import work_order_view
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.paging import emit_page, page_of, paging, paging_options


@click.group()
def workorders() -> None:
    """Work orders: one per dead-lettered run, open -> acknowledged -> resolved.

    \b
    Examples:
      rebound workorders list --state open --severity critical
      rebound workorders show WO_ID
      rebound workorders ack WO_ID --reason "looking at it"
      rebound workorders resolve WO_ID --resolution replayed --reason "redriven" --yes
    """


@workorders.command("list")
@click.option("--state", type=click.Choice([s.value for s in WorkOrderState]), help="only in this state")
@click.option("--task", "task_id", help="only this task's work orders")
@click.option("--severity", type=click.Choice([s.value for s in Severity]))
@click.option(
    "--level",
    type=click.IntRange(1, 4),
    help="only this escalation level: 1 informational, 2 owning team, 3 page on-call, 4 incident",
)
@paging_options()
@click.pass_obj
@authorized("workorders:read")
def list_orders(
    app: App,
    state: str | None,
    task_id: str | None,
    severity: str | None,
    level: int | None,
    limit: int | None,
    after: str | None,
    all_pages: bool,
) -> None:
    """List work orders, oldest first.

    \b
    Examples:
      rebound workorders list --state open
      rebound workorders list --severity critical
      rebound workorders list --state open --level 4
      rebound workorders list --limit 20 --after wo-cf8522a59b02531d

    \b
    JSON: a list of work_order_id, state, severity, level, subject, run_id, task_id, tenant, reason,
    error_code, attempts, opened_at, acknowledged_at, acknowledged_by, resolved_at, resolved_by,
    resolution, runbook_url, notified{channel: delivered|failed}.
    """
    found = app.workorders().find(
        state=WorkOrderState(state) if state else None,
        task_id=app.task_key(task_id),
        severity=Severity(severity) if severity else None,
        level=level,
    )
    now = app.deps.clock.now()
    pages = paging(limit, after, all_pages)
    views, following = page_of(
        [work_order_view(o, now) for o in found if app.sees(o.tenant)],
        lambda v: str(v["work_order_id"]),
        pages,
    )
    emit_page(
        app,
        views,
        following,
        pages,
        lambda: out.table(
            None,
            ["work order", "state", "severity", "level", "run", "reason", "opened (UTC)", "runbook"],
            [
                [
                    v["work_order_id"],
                    v["state"],
                    v["severity"],
                    v["level"],
                    v["run_id"] or v["subject"],
                    v["reason"],
                    v["opened_at"],
                    v["runbook_url"],
                ]
                for v in views
            ],
            empty="no work orders",
        ),
    )


@workorders.command("show")
@click.argument("work_order_id")
@click.pass_obj
@authorized("workorders:read", WorkOrderOf("work_order_id"))
def show(app: App, work_order_id: str) -> None:
    """Show a work order, its notifications, its run's state and its audit trail.

    \b
    Examples:
      rebound workorders show wo-cf8522a59b02531d

    JSON fields: as in `workorders list`, plus note, deliveries[], run_state, audit[] (seq, at,
    actor, action, from_state, to_state, evidence), audit_verified.
    """
    detail = app.workorders().show(work_order_id)
    data = detail.as_dict()

    def render() -> None:
        out.fields(
            f"work order {work_order_id}",
            [(k, v) for k, v in data.items() if k not in ("audit", "deliveries")],
        )
        out.table(
            "audit trail",
            ["#", "at (UTC)", "actor", "action", "state", "evidence"],
            [
                [
                    a["seq"],
                    a["at"],
                    a["actor"],
                    a["action"],
                    f"{a['from_state']} -> {a['to_state']}",
                    a["evidence"],
                ]
                for a in data["audit"]
            ],
        )

    out.emit(app, data, render)


@workorders.command("ack")
@click.argument("work_order_id")
@click.option("--reason", "--note", "note", default="", help="what you are doing about it (--note: the same)")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("workorders:ack", WorkOrderOf("work_order_id"))
def ack(app: App, work_order_id: str, note: str) -> None:
    """Acknowledge a work order: someone is on it (stops the acknowledgement-gap alarm).

    \b
    Examples:
      rebound workorders ack wo-cf8522a59b02531d --reason "looking; upstream 503s"

    JSON: the work order, as in `workorders list`.
    """
    order, changed = app.workorders(writer=True).ack(work_order_id, note)
    out.emit(
        app,
        work_order_view(order),
        lambda: out.say(
            f"work order {work_order_id} acknowledged by {order.acknowledged_by}"
            + ("" if changed else " (already)")
        ),
    )


@workorders.command("resolve")
@click.argument("work_order_id")
@click.option(
    "--resolution",
    required=True,
    type=click.Choice([r.value for r in Resolution]),
    help="replayed: the run was replayed; skipped/cancelled: the run was; fixed: repaired another way",
)
@click.option(
    "--reason", "--note", "note", default="", help="what was done, for the audit trail (--note: the same)"
)
@out.YES
@click.pass_obj
@authorized("workorders:resolve", WorkOrderOf("work_order_id"))
def resolve(app: App, work_order_id: str, resolution: str, note: str, yes: bool) -> None:
    """Resolve a work order.

    `replayed` needs a run that was replayed (`runs retry`, `dlq redrive`); `skipped` and
    `cancelled` are recorded by `runs skip|cancel`, which resolve the work order themselves.

    \b
    Examples:
      rebound workorders resolve wo-cf8522a59b02531d --resolution replayed --reason "succeeded on replay"
      rebound workorders resolve wo-cf8522a59b02531d --resolution fixed --reason "booked by hand" --yes

    JSON: the work order, as in `workorders list`.
    """
    out.confirm(f"Resolve work order {work_order_id} as {resolution}?", yes)
    order = app.workorders(writer=True).resolve(work_order_id, Resolution(resolution), note)
    out.emit(
        app,
        work_order_view(order),
        lambda: out.say(f"work order {work_order_id} resolved ({resolution}) by {order.resolved_by}"),
    )
