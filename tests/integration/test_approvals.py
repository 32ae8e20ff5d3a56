"""Work-order approvals (four eyes, ``rebound.ops.approvals``) on moto: a held action stores a
request and changes nothing; another operator approves it and it is carried out once, as them,
audited with both; the requester cannot approve their own; a rejected or expired request does
nothing; two approvers at once and a repeated approval carry it out once."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from rebound.domain.approvals import ApprovalRequired, ApprovalRules, ApprovalState
from rebound.domain.errors import Conflict, Forbidden, ValidationFailed
from rebound.domain.run import RunState
from rebound.domain.work_order import Resolution, WorkOrderState
from rebound.engine.deps import Deps
from rebound.ops.approvals import Approvals
from rebound.ops.policies import PolicyOps
from rebound.ops.runs import RunOps
from rebound.ops.workorders import WorkOrderOps
from rebound.settings import Settings
from support import critical_dead_letter

pytestmark = pytest.mark.integration

ALICE = "arn:aws:iam::123456789012:user/alice"
BOB = "arn:aws:iam::123456789012:user/bob"
CAROL = "arn:aws:iam::123456789012:user/carol"


def held(call: Any) -> Any:
    with pytest.raises(ApprovalRequired) as caught:
        call()
    return caught.value.request


def test_a_skip_behind_a_critical_order_waits_then_the_approver_carries_it_out_once(deps: Deps) -> None:
    run_id = critical_dead_letter(deps)
    request = held(lambda: RunOps(deps, ALICE).skip(run_id, "the payout was made by hand"))
    assert (request.action, request.state, request.requested_by) == (
        "runs:skip",
        ApprovalState.PENDING,
        ALICE,
    )
    assert deps.store.get_run(run_id).state is RunState.DEAD_LETTERED  # type: ignore[union-attr]
    # asked again (a retried call): the same request, not a second one
    assert held(lambda: RunOps(deps, ALICE).skip(run_id, "the payout was made by hand")).request_id == (
        request.request_id
    )
    assert [r.request_id for r in Approvals(deps, BOB).list()] == [request.request_id]

    with pytest.raises(Forbidden, match="another operator must approve it"):
        Approvals(deps, ALICE).approve(request.request_id)
    done = Approvals(deps, BOB).approve(request.request_id, "checked the ledger")
    assert done.state is ApprovalState.DONE and done.decided_by == BOB and done.outcome["ok"]  # type: ignore[index]
    run = deps.store.get_run(run_id)
    assert run is not None and run.state is RunState.SKIPPED
    skipped = [r for r in deps.store.audit_trail(f"run#{run_id}") if r.action == "skipped"]
    assert len(skipped) == 1 and skipped[0].actor == BOB
    assert skipped[0].evidence["approval"] == request.request_id
    assert (skipped[0].evidence["requested_by"], skipped[0].evidence["approved_by"]) == (ALICE, BOB)
    order = deps.store.get_work_order(run.work_order_id)  # type: ignore[arg-type]
    assert order is not None and order.state is WorkOrderState.RESOLVED
    # approved again (a duplicate delivery of the approver's call): nothing more happens
    assert Approvals(deps, BOB).approve(request.request_id).state is ApprovalState.DONE
    with pytest.raises(Conflict, match="carried out by"):
        Approvals(deps, CAROL).approve(request.request_id)
    assert Approvals(deps, BOB).list() == []
    trail = [r.action for r in deps.store.audit_trail(f"approval#{request.request_id}")]
    assert trail == ["approval-requested", "approval-approved", "approval-done"]


def test_two_approvers_at_once_carry_the_action_out_once(deps: Deps) -> None:
    run_id = critical_dead_letter(deps)
    request = held(lambda: RunOps(deps, ALICE).cancel(run_id, "superseded"))
    results: dict[str, Any] = {}

    def approve(who: str) -> None:
        try:
            results[who] = Approvals(deps, who).approve(request.request_id)
        except Conflict as exc:
            results[who] = exc

    threads = [threading.Thread(target=approve, args=(who,)) for who in (BOB, CAROL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [who for who, r in results.items() if not isinstance(r, Exception)]
    assert len(won) == 1, results
    cancelled = [r for r in deps.store.audit_trail(f"run#{run_id}") if r.action == "cancelled"]
    assert len(cancelled) == 1 and cancelled[0].actor == won[0]


def test_a_crash_after_the_action_is_finished_by_approving_again_without_acting_twice(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = critical_dead_letter(deps)
    request = held(lambda: RunOps(deps, ALICE).skip(run_id, "made by hand"))
    approvals = Approvals(deps, BOB)
    real = approvals._decide

    def crash_before_done(req: Any, version: int, state: ApprovalState, *args: Any) -> Any:
        if state is ApprovalState.DONE:
            raise RuntimeError("the Lambda died after the skip")
        return real(req, version, state, *args)

    monkeypatch.setattr(approvals, "_decide", crash_before_done)
    with pytest.raises(RuntimeError):
        approvals.approve(request.request_id)
    assert deps.store.get_run(run_id).state is RunState.SKIPPED  # type: ignore[union-attr]
    assert Approvals(deps, BOB).get(request.request_id).state is ApprovalState.APPROVED
    deps.clock.sleep(301)  # type: ignore[attr-defined]  # the carry-out lease lapses
    done = Approvals(deps, BOB).approve(request.request_id)
    assert done.state is ApprovalState.DONE and done.outcome == {"ok": True, "carried_out": "before"}
    assert len([r for r in deps.store.audit_trail(f"run#{run_id}") if r.action == "skipped"]) == 1


def test_a_rejected_or_expired_request_does_nothing(deps: Deps) -> None:
    first = critical_dead_letter(deps, 0)
    second = critical_dead_letter(deps, 5)
    rejected = held(lambda: RunOps(deps, ALICE).skip(first, "not needed"))
    assert (
        Approvals(deps, BOB).reject(rejected.request_id, "replay it instead").state is ApprovalState.REJECTED
    )
    with pytest.raises(Conflict, match="is rejected"):
        Approvals(deps, CAROL).approve(rejected.request_id)

    expiring = held(
        lambda: WorkOrderOps(deps, ALICE).resolve(
            deps.store.get_run(second).work_order_id,
            Resolution.FIXED,
            "fixed by hand",  # type: ignore[union-attr,arg-type]
        )
    )
    deps.clock.sleep(24 * 3600 + 1)  # type: ignore[attr-defined]
    with pytest.raises(Conflict, match=r"expired .* nothing was done"):
        Approvals(deps, BOB).approve(expiring.request_id)
    assert Approvals(deps, BOB).get(expiring.request_id).state is ApprovalState.EXPIRED
    for run_id in (first, second):
        run = deps.store.get_run(run_id)
        assert run is not None and run.state is RunState.DEAD_LETTERED
        order = deps.store.get_work_order(run.work_order_id)  # type: ignore[arg-type]
        assert order is not None and order.state is not WorkOrderState.RESOLVED


def test_a_policy_change_in_prod_waits_for_a_second_administrator(deps: Deps) -> None:
    deps.settings = deps.settings.model_copy(update={"environment": "prod"})
    ops = PolicyOps(deps, ALICE)
    request = held(lambda: ops.set(ops.plan("quick", {"max_attempts": 7}), "storms need more tries"))
    assert request.tenant == "*" and deps.policies.effective("quick").max_attempts != 7
    Approvals(deps, BOB).approve(request.request_id)
    assert deps.policies.effective("quick").max_attempts == 7


def test_runs_without_a_critical_order_and_environments_that_turn_it_off_are_not_held(deps: Deps) -> None:
    run_id = critical_dead_letter(deps)
    deps.settings = deps.settings.model_copy(update={"approvals": ApprovalRules(critical_runs=False)})
    assert RunOps(deps, ALICE).skip(run_id, "off here").state is RunState.SKIPPED


def test_bad_approval_rules_are_refused_naming_the_field(deps: Deps) -> None:
    with pytest.raises(ValueError) as caught:
        Settings.model_validate({**deps.settings.model_dump(), "approvals": {"expires_after_s": 10}})
    assert "expires_after_s" in str(caught.value)
    with pytest.raises(ValidationFailed):
        RunOps(deps, ALICE).skip(critical_dead_letter(deps), "  ")
    assert timedelta(seconds=ApprovalRules().expires_after_s) == timedelta(hours=24)


def test_a_redrive_of_more_messages_than_the_rule_allows_waits_and_is_carried_out_once(deps: Deps) -> None:
    from rebound.ops.dlq import DlqFilter, DlqOps
    from support import dead_letters

    deps.settings = deps.settings.model_copy(update={"approvals": ApprovalRules(redrive_over=2)})
    run_ids = dead_letters(deps, 3)
    assert DlqOps(deps, ALICE, wait_s=0).redrive(DlqFilter(), limit=2).moved == 2  # within the rule: at once
    deps.clock.sleep(1)  # type: ignore[attr-defined]  # what that pass released is visible again
    more = dead_letters(deps, 2, "other")
    request = held(lambda: DlqOps(deps, ALICE, wait_s=0).redrive(DlqFilter()))
    assert request.action == "dlq:redrive" and request.args["limit"] is None
    assert deps.queues.counts("dlq").total == 3  # nothing moved yet
    done = Approvals(deps, BOB).approve(request.request_id)
    assert done.outcome is not None and done.outcome["ok"] and deps.queues.counts("dlq").total == 0
    replayed = {r: deps.store.get_run(r).state for r in [*run_ids, *more]}  # type: ignore[union-attr]
    assert set(replayed.values()) == {RunState.REPLAYED}, replayed


def test_an_approved_redrive_starts_its_job_once_however_often_it_is_carried_out(deps: Deps) -> None:
    """As the ops API carries a redrive out (``redrive_as_job``): the job is named by the request,
    so carrying it out again (approved again after a crash before the request was marked done)
    continues that job instead of starting a second one."""
    from rebound.ops.approval_carriers import redrive_as_job
    from rebound.ops.dlq import DlqFilter, DlqOps
    from support import dead_letters

    deps.settings = deps.settings.model_copy(update={"approvals": ApprovalRules(redrive_over=2)})
    dead_letters(deps, 5)
    request = held(lambda: DlqOps(deps, ALICE, wait_s=0).redrive(DlqFilter()))
    continued: list[str] = []
    carry = redrive_as_job(continued.append)
    first = carry(deps, BOB, request)
    again = carry(deps, BOB, request)
    job_id = first["redrive_job"]
    assert again["redrive_job"] == job_id and first["total"] == again["total"] == 5
    trail = deps.store.audit_trail(f"redrive-job#{job_id}")
    assert [r.action for r in trail] == ["dlq-redrive-job-started"]
    assert trail[0].evidence["approval"] == request.request_id
    assert continued == [job_id, job_id]  # continued again: a continuation lost in the crash is made good
    assert deps.queues.counts("dlq").total == 5  # the job's chunks move them, not the approval


def test_an_approved_redrive_job_whose_start_crashed_before_its_record_gets_it_when_carried_out_again(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between saving the job and writing its start's audit record: carried out again,
    the request finds its job and writes the missing record, once."""
    from rebound.ops.approval_carriers import redrive_as_job
    from rebound.ops.dlq import DlqFilter, DlqOps
    from rebound.ops.dlq.jobs import RedriveJobs
    from rebound_local.instrument import SimulatedCrash
    from support import dead_letters

    deps.settings = deps.settings.model_copy(update={"approvals": ApprovalRules(redrive_over=2)})
    dead_letters(deps, 3)
    request = held(lambda: DlqOps(deps, ALICE, wait_s=0).redrive(DlqFilter()))
    carry = redrive_as_job(lambda job_id: None)
    real = RedriveJobs._audit

    def dies(self: RedriveJobs, job: Any, action: str, evidence: dict[str, Any]) -> None:
        raise SimulatedCrash("after the job was saved")

    monkeypatch.setattr(RedriveJobs, "_audit", dies)
    with pytest.raises(SimulatedCrash):
        carry(deps, BOB, request)
    monkeypatch.setattr(RedriveJobs, "_audit", real)
    job_id = carry(deps, BOB, request)["redrive_job"]
    carry(deps, BOB, request)
    [started] = deps.store.audit_trail(f"redrive-job#{job_id}")
    assert (started.action, started.actor, started.evidence["approval"]) == (
        "dlq-redrive-job-started",
        BOB,
        request.request_id,
    )
