"""``rebound approvals``: requests for a second operator (four eyes), listed, approved, rejected."""

from __future__ import annotations

import click

from rebound.domain.approvals import ACTIONS
from rebound.ops.authz import ApprovalOf
from rebound_cli import output as out
from rebound_cli.authz import authorized
from rebound_cli.context import App
from rebound_cli.paging import emit_page, page_of, paging, paging_options


@click.group()
def approvals() -> None:
    """Actions that wait for a second operator: a run behind a critical work order skipped,
    cancelled or resolved, a retry policy changed in prod (the environment's `approvals:`).

    \b
    Examples:
      rebound approvals list
      rebound approvals approve apr-3f2a9c0d1e4b --reason "checked with the ledger team" --yes
      rebound approvals reject apr-3f2a9c0d1e4b --reason "the run must be replayed instead"
    """


@approvals.command("list")
@click.option("--closed", is_flag=True, help="the latest approved, rejected and expired requests too")
@paging_options()
@click.pass_obj
@authorized("approvals:read")
def list_approvals(app: App, closed: bool, limit: int | None, after: str | None, all_pages: bool) -> None:
    """List the requests of your tenants that wait for a second operator, newest first.

    \b
    Examples:
      rebound approvals list
      rebound approvals list --closed -o json
    JSON: a list of requests {request_id, action, tenant, subject, args, reason, requested_by,
    requested_at, expires_at, state, decided_by, decided_at, note, outcome}.
    """
    pages = paging(limit, after, all_pages)
    listed = [r.view() for r in app.approvals().list(sees=app.sees, closed=closed)]
    found, following = page_of(listed, lambda r: str(r["request_id"]), pages)
    emit_page(
        app,
        found,
        following,
        pages,
        lambda: out.table(
            None,
            ["request", "state", "what", "subject", "asked by", "why", "expires (UTC)"],
            [
                [
                    r["request_id"],
                    r["state"],
                    ACTIONS.get(r["action"], r["action"]),
                    r["subject"],
                    r["requested_by"],
                    r["reason"],
                    r["expires_at"],
                ]
                for r in found
            ],
            empty="no request waits for a second operator",
        ),
    )


@approvals.command("show")
@click.argument("request_id")
@click.pass_obj
@authorized("approvals:read", ApprovalOf("request_id"))
def show(app: App, request_id: str) -> None:
    """Show one request: what it asks, who asked, why, and its decision.

    \b
    Examples:
      rebound approvals show apr-3f2a9c0d1e4b
    """
    data = app.approvals().get(request_id).view()
    out.emit(app, data, lambda: out.fields(f"approval request {request_id}", list(data.items())))


@approvals.command("approve")
@click.argument("request_id")
@click.option("--reason", "--note", "note", default="", help="why, for the audit trail")
@out.YES
@click.pass_obj
@authorized("approvals:approve", ApprovalOf("request_id"))
def approve(app: App, request_id: str, note: str, yes: bool) -> None:
    """Approve REQUEST_ID and carry its action out, as you (never a request you made yourself).

    \b
    Examples:
      rebound approvals approve apr-3f2a9c0d1e4b --reason "checked" --yes
    """
    ops = app.approvals(writer=True)
    request = ops.get(request_id)
    out.confirm(
        f"{ACTIONS.get(request.action, request.action)}: {request.subject}, asked by {request.requested_by}?",
        yes,
    )
    done = ops.approve(request_id, note).view()
    outcome = done.get("outcome") or {}
    said = (
        f"{request_id} approved and carried out: {outcome}"
        if outcome.get("ok")
        else f"{request_id} approved, but its action failed: {outcome.get('message')}"
    )
    out.emit(app, done, lambda: out.say(said))


@approvals.command("reject")
@click.argument("request_id")
@click.option("--reason", "--note", "note", default="", help="why, for the audit trail")
@out.YES_ACCEPTED
@click.pass_obj
@authorized("approvals:approve", ApprovalOf("request_id"))
def reject(app: App, request_id: str, note: str) -> None:
    """Reject REQUEST_ID: nothing is done.

    \b
    Examples:
      rebound approvals reject apr-3f2a9c0d1e4b --reason "replay it instead"
    """
    done = app.approvals(writer=True).reject(request_id, note).view()
    out.emit(app, done, lambda: out.say(f"{request_id} rejected; nothing was done"))
