"""What each held action does once it is approved (``rebound.ops.approvals``): the same operation
the requester asked for, carried out as the approver with the request, so it passes the gate and
its audit record names the request, the requester and the approver."""

from __future__ import annotations

from typing import Any

from rebound.domain.approvals import CANCEL, POLICY, RESOLVE, SKIP, ApprovalRequest
from rebound.domain.work_order import Resolution
from rebound.engine.deps import Deps
from rebound.ops.approvals import Carrier


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


CARRIERS: dict[str, Carrier] = {SKIP: _skip, CANCEL: _cancel, RESOLVE: _resolve, POLICY: _policy}
