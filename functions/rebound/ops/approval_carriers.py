"""What each held action does once it is approved (``rebound.ops.approvals``): the same operation
the requester asked for, carried out as the approver with the request, so it passes the gate and
its audit record names the request, the requester and the approver."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from rebound.domain.approvals import CANCEL, POLICY, REDRIVE, RESOLVE, SKIP, ApprovalRequest
from rebound.domain.work_order import Resolution
from rebound.engine.deps import Deps
from rebound.ops.approvals import Carrier

if TYPE_CHECKING:
    from rebound.ops.dlq import DlqFilter, DlqOps
    from rebound.ops.dlq.jobs import Continuation


def _skip(deps: Deps, actor: str, request: ApprovalRequest) -> dict[str, Any]:
    from rebound.ops.runs import RunOps

    run = RunOps(deps, actor, approval=request).skip(str(request.args["run_id"]), str(request.args["reason"]))
    return {"run_id": run.run_id, "state": run.state.value}


def _cancel(deps: Deps, actor: str, request: ApprovalRequest) -> dict[str, Any]:
    from rebound.ops.runs import RunOps

    run = RunOps(deps, actor, approval=request).cancel(
        str(request.args["run_id"]), str(request.args["reason"])
    )
    return {"run_id": run.run_id, "state": run.state.value}


def _resolve(deps: Deps, actor: str, request: ApprovalRequest) -> dict[str, Any]:
    from rebound.ops.workorders import WorkOrderOps

    order = WorkOrderOps(deps, actor, approval=request).resolve(
        str(request.args["work_order_id"]),
        Resolution(str(request.args["resolution"])),
        str(request.args.get("note") or ""),
    )
    return {"work_order_id": order.work_order_id, "state": order.state.value}


def _policy(deps: Deps, actor: str, request: ApprovalRequest) -> dict[str, Any]:
    from rebound.ops.policies import PolicyOps

    ops = PolicyOps(deps, actor, approval=request)
    policy = ops.set(ops.plan(str(request.args["name"]), dict(request.args["changes"])))
    return {"policy": policy.name, "version": policy.version}


def _redrive_of(deps: Deps, actor: str, request: ApprovalRequest) -> tuple[DlqOps, DlqFilter]:
    """The operations the approver carries a held redrive out with, and the redrive's filters."""
    from rebound.ops.dlq import DlqOps
    from rebound.ops.dlq.jobs import filters_from

    return DlqOps(deps, actor, wait_s=0, approval=request), filters_from(dict(request.args["filters"]))


def _redrive(deps: Deps, actor: str, request: ApprovalRequest) -> dict[str, Any]:
    """The redrive, run through once as the approver (the CLI: no call has a time limit). Run
    again after a crash, it moves what still matches: a message moved is out of the DLQ, so none
    is moved twice."""
    ops, filters = _redrive_of(deps, actor, request)
    report = ops.redrive(filters, limit=request.args.get("limit"), rate=request.args.get("rate"))
    return {"redrive": report.as_dict().get("outcomes", {})}


def redrive_as_job(continuation: Continuation) -> Carrier:
    """The approved redrive started as a redrive job (``rebound.ops.dlq.jobs``), as the ops API
    carries it out: one API call lives 29 s, and a redrive large enough to need approval takes
    longer. The job's record names the request; its chunks act as the approver. The job's id
    derives from the request's, so carrying the request out again (approved again after a crash
    between the job's start and the request's ``done``) finds the job instead of starting another."""

    def carry(deps: Deps, actor: str, request: ApprovalRequest) -> dict[str, Any]:
        from rebound.ops.dlq.jobs import RedriveJobs

        ops, filters = _redrive_of(deps, actor, request)
        # Named by the request: approved again after a crash, the request finds its job.
        named = hashlib.sha256(request.request_id.encode()).hexdigest()[:12]
        job = RedriveJobs(ops, continuation).start(
            filters, rate=request.args.get("rate"), limit=request.args.get("limit"), job_id=named
        )
        return {"redrive_job": job.job_id, "total": job.total, "poll": f"/dlq/redrive-jobs/{job.job_id}"}

    return carry


CARRIERS: dict[str, Carrier] = {
    SKIP: _skip,
    CANCEL: _cancel,
    RESOLVE: _resolve,
    POLICY: _policy,
    REDRIVE: _redrive,
}
