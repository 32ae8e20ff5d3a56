"""Tenancy at the edges, through the real ops API handler on the local cloud: a workstream names
only its tenant's tasks, an environment-level work order needs an administrator, a shared
resource shows other tenants' holders as a count, nothing is read before the caller is
authorized (a redrive job polled, a DLQ message loaded; known and unknown ids answer alike), and
a work order links the runbook of what it is about. The generated test over every route is
``test_authorization_generated.py``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from api_support import call, ok
from tenancy_world import BOB, ROOT, World, build

from rebound import wiring
from rebound.domain.basics import Severity
from rebound.domain.run import Run, RunState
from rebound.domain.workstreams import Workstream
from rebound.engine.concurrency import Slot, enter
from rebound.engine.deps import Deps
from rebound.engine.workstreams import Workstreams
from rebound.ops.dlq.jobs import RedriveJobs
from rebound.ops.workorders import WorkOrderOps
from support import register, task

pytestmark = pytest.mark.integration

STEAL = {
    "tasks": [{"id": "secret", "tenant": "globex", "target": {"type": "sim"}}],
    "workstreams": [{"id": "steal", "tenant": "globex", "steps": [{"task": "acme.secret"}]}],
}
"""A decoy task of globex with the short id of acme's task, and a workstream naming acme's."""


@pytest.fixture
def world(deps: Deps) -> World:
    return build(deps)


@pytest.fixture
def api(deps: Deps, world: World) -> Any:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def test_a_workstream_naming_another_tenants_task_is_refused_at_the_step(api: Any, deps: Deps) -> None:
    register(deps, task("acme.secret", tenant="acme"))
    status, body = call(api, "POST", "/tasks", {"document": STEAL}, caller=BOB)
    assert status == 400, body
    assert "workstreams[0].steps[0].task" in str(body) and "belongs to tenant 'acme'" in str(body)
    assert deps.store.get_task("globex.secret") is None, "nothing of the document was registered"


def test_a_stored_workstream_naming_another_tenants_task_never_starts_it(api: Any, deps: Deps) -> None:
    """A definition stored before the check (or written around it) still cannot run acme's task."""
    register(deps, task("acme.secret", tenant="acme"), task("globex.secret", tenant="globex"))
    steal = Workstream.model_validate(
        {"id": "steal", "tenant": "globex", "steps": [{"task": "secret", "task_key": "acme.secret"}]}
    )
    Workstreams(deps, actor="old-version").register([steal], [])
    status, body = call(api, "POST", "/workstreams/steal/run", {}, caller=ROOT)
    assert status in (400, 409), body
    assert "belongs to tenant 'acme'" in str(body)
    assert deps.store.runs_for_task("acme.secret", limit=10) == []


def test_a_runs_tenant_is_its_tasks_whatever_it_was_given() -> None:
    run = Run.model_validate(
        {
            "run_id": "acme.secret:manual-t1",
            "task_id": "acme.secret",
            "tenant": "globex",
            "state": RunState.PENDING,
            "trigger": "manual",
            "scheduled_for": "2026-03-07T09:00:00Z",
            "created_at": "2026-03-07T09:00:00Z",
            "updated_at": "2026-03-07T09:00:00Z",
        }
    )
    assert run.tenant == "acme"


def test_a_work_order_of_no_tenant_needs_an_administrator(api: Any, deps: Deps) -> None:
    opening = {"severity": "critical", "reason": "page everyone"}
    before = len(deps.store.work_orders())
    status, body = call(api, "POST", "/workorders", opening, caller=BOB)
    assert status == 403, body
    assert len(deps.store.work_orders()) == before, "nothing was opened"
    opened = ok(api, "POST", "/workorders", opening, caller=ROOT)
    assert opened["tenant"] is None and opened["severity"] == "critical"


def test_a_resource_shows_another_tenants_holders_as_a_count(api: Any, deps: Deps, world: World) -> None:
    assert world.workstream_run_id is not None
    holder = f"{world.workstream_run_id}/load"  # acme's workstream run holds the shared resource
    uow = deps.store.unit_of_work("test", deps.clock.now())
    enter(uow, Slot("resource", "shared-warehouse", 1), holder, deps.clock.now() + timedelta(hours=1))
    uow.commit()

    def shared(caller: str) -> dict[str, Any]:
        rows = ok(api, "GET", "/resources", caller=caller)
        return next(r for r in rows if r["resource"] == "shared-warehouse")

    shown = shared(BOB)  # globex's operator
    assert shown["holders"] == [] and shown["other_holders"] == 1
    assert shared(ROOT)["holders"] == [holder] and shared(ROOT)["other_holders"] == 0
    for secret in world.secrets:
        assert secret not in str(shown)


def test_another_tenants_redrive_job_is_not_polled_for_the_caller(
    api: Any, deps: Deps, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    polled: list[str] = []
    real = RedriveJobs.poll
    monkeypatch.setattr(RedriveJobs, "poll", lambda self, job_id: polled.append(job_id) or real(self, job_id))
    theirs = call(api, "GET", f"/dlq/redrive-jobs/{world.job_id}", caller=BOB)
    unknown = call(api, "GET", "/dlq/redrive-jobs/job-that-never-was", caller=BOB)
    assert theirs[0] == unknown[0] == 404
    assert world.job_id not in polled, "nothing is read or continued for a caller before the decision"
    sent = str(theirs[1]).replace(world.job_id or "", "job-that-never-was")
    assert sent == str(unknown[1]), "the same answer as for an id that never was"


def test_another_tenants_ids_answer_exactly_as_unknown_ones(api: Any, world: World) -> None:
    pairs = [
        (f"/dlq/{world.message_id}", "/dlq/00000000-0000-0000-0000-000000000000"),
        (f"/workstreams/{world.workstream_id}", "/workstreams/no-such-workstream"),
        (f"/runs/{world.run_id}", "/runs/acme.nothing:20990101T000000Z"),
        (f"/workorders/{world.work_order_id}", "/workorders/wo-never"),
    ]
    for theirs, unknown in pairs:
        seen, missing = call(api, "GET", theirs, caller=BOB), call(api, "GET", unknown, caller=BOB)
        assert seen[0] == missing[0] == 404, (theirs, seen, missing)
        assert set(seen[1]) == set(missing[1]), "the same shape of answer"


def test_a_work_order_opened_by_hand_links_its_own_runbook(deps: Deps, world: World) -> None:
    """(The health watch's orders: ``test_health_watch.py``.)"""
    by_hand = WorkOrderOps(deps, ROOT).create(severity=Severity.LOW, reason="a note", task_id=world.task_id)
    assert by_hand.runbook_url is not None and by_hand.runbook_url.endswith("work-order-by-hand.md")
    docs = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
    assert (docs / "work-order-by-hand.md").is_file() and (docs / "retry-health-unhealthy.md").is_file()
