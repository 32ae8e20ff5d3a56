"""The sweeper's two readers of the whole task list, the run ledger (every minute) and the
retry-health report's ``disabled_schedules`` (every five), share one scan of the tasks table
(``rebound.engine.task_list``) against the local cloud: neither scans again until a task write."""

from __future__ import annotations

import pytest

from rebound.domain.task import TaskState
from rebound.engine.deps import Deps
from rebound.engine.health.checks import HealthChecks
from rebound.engine.ledger import Ledger
from rebound.ops.tasks import TaskOps
from support import count_task_scans, register, task

pytestmark = pytest.mark.integration


def test_the_ledger_and_the_health_report_share_one_scan(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    register(deps, task("a"), task("b"))
    paused = next(s.task.id for s in deps.store.list_tasks() if s.task.id.endswith("b"))
    TaskOps(deps, actor="test").set_state(paused, TaskState.PAUSED, "maintenance")
    scans = count_task_scans(deps.store, monkeypatch)
    ledger = Ledger(deps)
    active = {s.task.id for s in ledger.active_tasks()}
    assert active and paused not in active
    check = HealthChecks(deps).disabled_schedules()
    assert "1 task(s) paused" in check.summary, check.summary
    assert any(paused in line for line in check.details), check.details
    ledger.active_tasks()
    HealthChecks(deps).disabled_schedules()
    assert scans == [2]

    TaskOps(deps, actor="test").set_state(paused, TaskState.ACTIVE, "done")
    assert paused in {s.task.id for s in ledger.active_tasks()}
    assert "0 task(s) paused" in HealthChecks(deps).disabled_schedules().summary
    assert scans == [2, 2]
