"""Through the real ops API handler on the local cloud: a caller acts on its own tenants only, lists
show only its tenants' things, another tenant's thing answers as one that does not exist (404),
what every tenant shares answers 403, and every refusal is audited on the tenant's chain with the
caller as actor (``rebound.ops.authz``). The generated test over every route is
``test_authorization_generated.py``; these pin the answers route by route."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_ops_api import call, ok

from rebound import wiring
from rebound.engine.deps import Deps
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.retry_scheduler import RetryScheduler
from support import dead_letters, fire, register, task

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
BOB = f"arn:aws:sts::{ACCOUNT}:assumed-role/GlobexOperators/bob"  # globex only, through his role
ROOT = f"arn:aws:iam::{ACCOUNT}:user/root-admin"
NOBODY = f"arn:aws:iam::{ACCOUNT}:user/nobody"


@pytest.fixture
def api(deps: Deps) -> Any:
    from rebound.handlers import ops_api

    deps.settings = deps.settings.model_copy(
        update={"identities": {f"arn:aws:iam::{ACCOUNT}:role/GlobexOperators": ["globex"], ROOT: ["*"]}}
    )
    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def globex_dead_letter(deps: Deps, task_id: str = "gjob") -> str:
    failing = {"type": "sim", "behavior": {"terminal_error": "NOPE"}}
    register(deps, task(task_id, tenant="globex", target=failing))
    Executor(deps).process(QueueMessage(f"fire-{task_id}", json.dumps(fire(task_id))), 120)
    run_id = f"{task_id}:20260307T090000Z"
    assert RetryScheduler(deps).on_failed(run_id, 1) == "dead-lettered"
    return run_id


def refusals(deps: Deps, tenant: str) -> list[tuple[str, str]]:
    return [(r.actor, r.evidence["action"]) for r in deps.store.audit_trail(f"tenant#{tenant}")]


def test_another_tenants_run_answers_as_an_unknown_one_and_the_refusal_is_audited(
    api: Any, deps: Deps
) -> None:
    [acme_run] = dead_letters(deps, 1)
    before = deps.store.get_run(acme_run)
    status, body = call(api, "POST", f"/runs/{acme_run}/retry", {"reason": "mine now"}, caller=BOB)
    unknown = call(api, "POST", "/runs/job:20990101T000000Z/retry", {"reason": "mine now"}, caller=BOB)
    assert status == unknown[0] == 404 and body["code"] == unknown[1]["code"] == "RUN_NOT_FOUND"
    assert body["message"] == f"no run {acme_run!r}"
    assert deps.store.get_run(acme_run) == before  # nothing changed
    assert call(api, "GET", f"/runs/{acme_run}", caller=BOB)[0] == 404
    assert call(api, "PUT", "/tasks/job/pause", {"reason": "x"}, caller=BOB)[0] == 404
    assert refusals(deps, "acme") == [(BOB, "runs:retry"), (BOB, "runs:read"), (BOB, "tasks:pause")]
    document = {"tasks": [{"id": "job", "tenant": "acme", "target": {"type": "sim"}}]}
    status, _ = call(api, "POST", "/tasks", {"document": document}, caller=BOB)
    assert status == 403 and deps.store.get_task("acme.job") is None


def test_lists_show_only_the_callers_tenants_and_an_administrator_sees_all(api: Any, deps: Deps) -> None:
    acme_runs = dead_letters(deps, 2)
    globex_run = globex_dead_letter(deps)
    listed = ok(api, "GET", "/runs", query={"state": "dead_lettered"}, caller=BOB)
    assert [r["run_id"] for r in listed] == [globex_run]
    assert [t["id"] for t in ok(api, "GET", "/tasks", caller=BOB)] == ["gjob"]
    messages = ok(api, "GET", "/dlq", caller=BOB)["messages"]  # bound to his one tenant
    assert [m["run_id"] for m in messages] == [globex_run]
    assert call(api, "GET", "/dlq", query={"tenant": "acme"}, caller=BOB)[0] == 403
    everything = ok(api, "GET", "/runs", query={"state": "dead_lettered"}, caller=ROOT)
    assert sorted(r["run_id"] for r in everything) == sorted([*acme_runs, globex_run])
    assert (
        ok(api, "POST", f"/runs/{globex_run}/skip", {"reason": "done by hand"}, caller=BOB)["state"]
        == "skipped"
    )


def test_a_caller_with_no_tenant_may_not_even_list(api: Any, deps: Deps) -> None:
    status, body = call(api, "GET", "/tasks", caller=NOBODY)
    assert status == 403 and "has no tenant" in body["message"]
    status, _ = call(api, "PUT", "/policies/default", {"changes": {"max_attempts": 9}}, caller=BOB)
    assert status == 403  # retry policies are every tenant's: administrators only
    assert refusals(deps, "*") == [(NOBODY, "tasks:read"), (BOB, "policies:write")]


def test_a_short_task_id_names_the_one_task_the_caller_may_see(api: Any, deps: Deps) -> None:
    [acme_run] = dead_letters(deps, 1, "acme.job")
    globex_run = globex_dead_letter(deps, "globex.job")
    assert ok(api, "GET", "/tasks/job", caller=BOB)["task"]["id"] == "globex.job"
    assert [r["run_id"] for r in ok(api, "GET", "/runs", query={"task_id": "job"}, caller=BOB)] == [
        globex_run
    ]
    messages = ok(api, "GET", "/dlq", query={"task_id": "job"}, caller=BOB)["messages"]
    assert [m["run_id"] for m in messages] == [globex_run]
    report = ok(api, "GET", "/sla/report", query={"task_id": "job", "since": "30d"}, caller=BOB)
    assert [t["name"] for t in report["tasks"]] == ["globex.job"]
    status, body = call(api, "GET", "/runs", query={"task_id": "job"}, caller=ROOT)  # sees both tenants
    assert status == 400 and "acme.job, globex.job" in body["message"] and "TENANT.ID" in body["message"]
    assert call(api, "GET", "/dlq", query={"task_id": "job"}, caller=ROOT)[0] == 400
    by_key = ok(api, "GET", "/runs", query={"task_id": "acme.job"}, caller=ROOT)
    assert [r["run_id"] for r in by_key] == [acme_run]
    # another tenant's task lists as one with no runs, as an unknown task does
    assert ok(api, "GET", "/runs", query={"task_id": "acme.job"}, caller=BOB) == []
    assert ok(api, "GET", "/runs", query={"task_id": "acme.nosuch"}, caller=BOB) == []


def test_state_checks_are_for_administrators_and_a_runs_restore_for_its_tenant(api: Any, deps: Deps) -> None:
    [acme_run] = dead_letters(deps, 1)
    globex_run = globex_dead_letter(deps)
    assert call(api, "POST", "/state/check", {}, caller=BOB)[0] == 403  # reads every tenant's items
    assert call(api, "POST", "/state/repair", {"dry_run": True}, caller=BOB)[0] == 403
    assert ok(api, "POST", "/state/check", {}, caller=ROOT)["differences"] == []
    assert call(api, "POST", f"/runs/{acme_run}/restore", {"dry_run": True}, caller=BOB)[0] == 404
    assert ok(api, "POST", f"/runs/{globex_run}/restore", {"dry_run": True}, caller=BOB)["differences"] == []
    assert refusals(deps, "*") == [(BOB, "state:check"), (BOB, "state:repair")]
    assert refusals(deps, "acme") == [(BOB, "runs:restore")]


def test_work_orders_list_only_the_callers_tenants(api: Any, deps: Deps) -> None:
    [acme_run] = dead_letters(deps, 1)
    globex_dead_letter(deps)
    opened = {"severity": "high", "reason": "by hand"}
    ok(api, "POST", "/workorders", {**opened, "run_id": acme_run}, caller=ROOT)
    ok(api, "POST", "/workorders", {**opened, "task_id": "gjob"}, caller=BOB)
    assert call(api, "POST", "/workorders", {**opened, "run_id": acme_run}, caller=BOB)[0] == 404
    # an order about the environment (no run, no task) is every tenant's: administrators only
    status, body = call(api, "POST", "/workorders", {**opened, "severity": "critical"}, caller=BOB)
    assert status == 403 and body["code"] == "FORBIDDEN"
    everyone = ok(api, "GET", "/workorders", caller=ROOT)
    assert sorted(o["tenant"] for o in everyone) == ["acme", "globex"]
    assert [o["tenant"] for o in ok(api, "GET", "/workorders", caller=BOB)] == ["globex"]


def test_the_dry_run_names_no_task_of_a_tenant_the_caller_does_not_see(api: Any, deps: Deps) -> None:
    register(
        deps,
        task("acme.secret-export", schedule={"cron": "*/5 * * * *"}),
        task("globex.deployed", tenant="globex", schedule={"cron": "*/5 * * * *"}),
    )
    document = {
        "tasks": [
            {
                "id": "report",
                "tenant": "globex",
                "schedule": {"cron": "*/5 * * * *"},
                "target": {"type": "sim"},
            }
        ]
    }
    status, seen = call(api, "POST", "/tasks/dryrun", {"document": document, "window": "1h"}, caller=BOB)
    assert status == 200, seen
    assert {t["task_id"] for t in seen["tasks"]} == {"globex.report", "globex.deployed"}
    assert "acme" not in json.dumps(seen)
    status, everything = call(
        api, "POST", "/tasks/dryrun", {"document": document, "window": "1h"}, caller=ROOT
    )
    assert status == 200 and "acme.secret-export" in {t["task_id"] for t in everything["tasks"]}
