"""The operations API: the real handler on real-shaped API Gateway events (``events/ops_api``),
against moto. One test per route at least, then bad bodies, unknown ids and a caller without an
identity. The actor of every change is the caller's IAM identity, never a field of the body."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from api_support import ALICE, call, ok
from fakes import FakeNotifier

from rebound import wiring
from rebound.api import build_app, openapi_document
from rebound.domain.errors import OperationalError
from rebound.domain.ids import task_rule_name, task_schedule_name
from rebound.domain.run import RunState
from rebound.domain.work_order import DeliveryStatus
from rebound.engine.deps import Deps
from rebound.engine.escalation import Escalation
from rebound.engine.ports import DeliveryFailed
from support import Context, dead_letters, register, task

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = {
    "tasks": [
        {"id": "nightly", "tenant": "acme", "schedule": {"cron": "0 2 * * *"}, "target": {"type": "sim"}}
    ]
}


@pytest.fixture
def api(deps: Deps) -> Any:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def test_health_and_the_openapi_document(api: Any, deps: Deps) -> None:
    assert ok(api, "GET", "/health") == {"status": "ok", "environment": deps.settings.environment}
    served = ok(api, "GET", "/openapi.json")
    assert served == openapi_document(api.app())
    assert {"/tasks", "/runs/{run_id}", "/dlq/redrive", "/internal/tasks/retry", "/ops/workorders"} <= set(
        served["paths"]
    )


def test_the_committed_openapi_document_matches_the_routes() -> None:
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert committed == openapi_document(build_app(lambda: None)), (
        "docs/openapi.json drifted: run make openapi"
    )


def test_register_plans_then_applies_a_task_document(api: Any, deps: Deps) -> None:
    plan = ok(api, "POST", "/tasks", {"document": DOCUMENT, "dry_run": True})
    assert plan["plan"] == [{"id": "acme.nightly", "change": "create", "diff": plan["plan"][0]["diff"]}]
    assert plan["applied"] is None and deps.store.get_task("acme.nightly") is None
    applied = ok(api, "POST", "/internal/tasks/register", {"document": DOCUMENT})
    assert applied["applied"]["created"] == ["acme.nightly"]
    stored = deps.store.get_task("acme.nightly")
    assert stored is not None
    trail = deps.store.audit_trail("task#acme.nightly")
    assert trail[-1].actor == ALICE  # the caller's identity, not the body's


def test_a_bulk_registration_is_checked_against_one_listing_of_the_schedules(api: Any, deps: Deps) -> None:
    document = {
        "tasks": [
            {
                "id": f"bulk-{n:02d}",
                "tenant": "acme",
                "schedule": {"cron": "0 2 * * *"},
                "target": {"type": "sim"},
            }
            for n in range(30)
        ]
    }
    assert len(ok(api, "POST", "/tasks", {"document": document})["applied"]["created"]) == 30

    again = ok(api, "POST", "/tasks", {"document": document})["applied"]

    assert len(again["unchanged"]) == 30 and again["schedules_written"] == 0


def test_list_show_pause_resume_run_and_preview_a_task(api: Any, deps: Deps) -> None:
    ok(api, "POST", "/tasks", {"document": DOCUMENT})
    assert [t["id"] for t in ok(api, "GET", "/tasks")] == ["acme.nightly"]
    assert ok(api, "GET", "/tasks", query={"state": "paused"}) == []
    assert ok(api, "GET", "/tasks/nightly")["task"]["id"] == "acme.nightly"  # its short id finds it
    assert ok(api, "PUT", "/tasks/nightly/pause", {"reason": "maintenance"})["state"] == "paused"
    assert ok(api, "PUT", "/internal/tasks/nightly/resume")["state"] == "active"
    assert ok(api, "PUT", "/internal/tasks/nightly/pause")["state"] == "paused"
    assert ok(api, "PUT", "/tasks/nightly/resume")["state"] == "active"
    run = ok(api, "POST", "/tasks/nightly/run", {"token": "t-1"})
    assert run["run_id"].startswith("acme.nightly:manual-")  # the manual message is on the execution queue
    assert ok(api, "POST", "/tasks/nightly/run", {"token": "t-1"})["run_id"] == run["run_id"]
    fires = ok(api, "GET", "/tasks/nightly/preview", query={"count": "3"})
    assert len(fires) == 3


def test_runs_list_show_retry_skip_cancel_and_retry_failed(api: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 4)
    listed = ok(api, "GET", "/runs", query={"state": "dead_lettered"})
    assert sorted(r["run_id"] for r in listed) == sorted(run_ids)
    first = ok(api, "GET", "/runs", query={"task_id": "job", "limit": "3"})
    assert [r["run_id"] for r in first] == sorted(run_ids, reverse=True)[:3]
    shown = ok(api, "GET", f"/runs/{run_ids[0]}")
    assert shown["run"]["run_id"] == run_ids[0] and shown["audit"]["ok"] is True
    # the run as the list shows it too: the attempts of its current retry budget (the console says them)
    assert shown["run"]["attempts_in_budget"] == listed[0]["attempts_in_budget"] == 1
    assert {"attempt-failed", "dead-lettered"} <= {e["action"] for e in shown["timeline"]}
    retried = ok(api, "POST", f"/runs/{run_ids[0]}/retry", {"max_attempts": 2, "reason": "fixed"})
    assert retried["action"] == "replayed"
    assert ok(api, "POST", f"/runs/{run_ids[1]}/skip", {"reason": "superseded"})["state"] == "skipped"
    assert ok(api, "POST", f"/runs/{run_ids[2]}/cancel", {"reason": "obsolete"})["state"] == ("cancelled")
    failed = ok(api, "POST", "/runs/retry-failed", {"task_id": "job", "reason": "fixed"})
    assert failed["matched"] == 1 and failed["outcomes"][0]["run_id"] == run_ids[3]
    assert ok(api, "POST", "/internal/tasks/retry", {"run_id": run_ids[3]})["matched"] == 1
    run = deps.store.get_run(run_ids[1])
    assert run is not None and run.state is RunState.SKIPPED
    assert deps.store.audit_trail(f"run#{run_ids[1]}")[-1].actor == ALICE


def run_pages(api: Any, query: dict[str, str]) -> list[list[str]]:
    """The run ids of each page of ``GET /runs`` with ``query``, following ``X-Next-After``."""
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        status, page, headers = call(
            api, "GET", "/runs", query={**query, **({"after": after} if after else {})}, with_headers=True
        )
        assert status == 200
        pages.append([r["run_id"] for r in page])
        after = headers.get("X-Next-After")
        if after is None:
            return pages


def test_a_task_s_runs_come_a_page_at_a_time(api: Any, deps: Deps) -> None:
    run_ids = sorted(dead_letters(deps, 5), reverse=True)
    pages = run_pages(api, {"task_id": "job", "limit": "2"})
    assert pages == [run_ids[0:2], run_ids[2:4], run_ids[4:]]


def test_dlq_list_show_and_redrive(api: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 3)
    listed = ok(api, "GET", "/dlq", query={"task_id": "job"})
    messages = listed["messages"]
    assert sorted(m["run_id"] for m in messages) == sorted(run_ids)
    assert listed["depth"]["in_flight"] == 0  # listing hid nothing
    first = ok(api, "GET", "/dlq", query={"task_id": "job", "limit": "2"})
    rest = ok(api, "GET", "/dlq", query={"task_id": "job", "limit": "2", "after": first["next"]})
    assert [m["message_id"] for m in first["messages"] + rest["messages"]] == [
        m["message_id"] for m in messages
    ]
    assert rest["next"] is None
    shown = ok(api, "GET", f"/dlq/{messages[0]['message_id']}")
    assert shown["message_id"] == messages[0]["message_id"]
    dry = ok(api, "POST", "/dlq/redrive", {"task_id": "job", "dry_run": True})
    assert dry["dry_run"] is True
    moved = ok(api, "POST", "/dlq/redrive", {"task_id": "job", "limit": 2})
    assert moved["outcomes"]["moved"] == 2  # the limit


def test_dlq_history_comes_from_the_record_and_covers_the_time_before_anyone_looked(
    api: Any, deps: Deps, clock: Any
) -> None:
    dead_letters(deps, 3)  # arrived before any request
    clock.advance(600)
    ok(api, "POST", "/dlq/redrive", {"task_id": "job", "limit": 1})
    clock.advance(300)
    hour = ok(api, "GET", "/dlq/history")
    assert (hour["window"], hour["bucket_s"], len(hour["points"])) == ("1h", 60, 60)
    assert hour["source"] == "dlq record"
    assert (hour["arrived"], hour["left"], hour["complete"]) == (3, 1, True)
    depths = [p["depth"] for p in hour["points"]]
    assert depths[-1] == 2 and max(depths) == 3 and depths[-6] == 2  # one left 5 minutes ago
    assert ok(api, "GET", "/dlq", query={"task_id": "job"})["depth"]["in_flight"] == 0  # nothing received
    day = ok(api, "GET", "/dlq/history", query={"window": "24h"})
    assert (day["bucket_s"], len(day["points"]), day["points"][-1]["depth"]) == (900, 96, 2)
    status, error = call(api, "GET", "/dlq/history", query={"window": "7d"})
    assert (status, error["code"]) == (400, "VALIDATION_FAILED") and "window" in error["message"]


def test_work_orders_list_show_create_ack_resolve(api: Any, deps: Deps) -> None:
    register(deps, task("job"))
    opened = ok(api, "POST", "/ops/workorders", {"severity": "high", "reason": "disk full", "task_id": "job"})
    order_id = opened["work_order_id"]
    assert opened["state"] == "open" and opened["task_id"] == "job"
    again = ok(api, "POST", "/workorders", {"severity": "low", "reason": "heads up"})
    assert again["work_order_id"] != order_id
    assert {o["work_order_id"] for o in ok(api, "GET", "/workorders", query={"state": "open"})} == {
        order_id,
        again["work_order_id"],
    }
    shown = ok(api, "GET", f"/workorders/{order_id}")
    assert shown["work_order_id"] == order_id and shown["audit"][0]["actor"] == ALICE
    assert ok(api, "POST", f"/workorders/{order_id}/ack", {"note": "on it"})["state"] == "acknowledged"
    resolved = ok(api, "POST", f"/workorders/{order_id}/resolve", {"resolution": "fixed", "note": "freed"})
    assert resolved["state"] == "resolved"


def test_policies_list_show_and_set_with_field_errors(api: Any, deps: Deps) -> None:
    names = {p["name"] for p in ok(api, "GET", "/policies")}
    assert "default" in names
    shown = ok(api, "GET", "/policies/default")
    assert shown["policy"]["name"] == "default"
    dry = ok(api, "PUT", "/policies/default", {"changes": {"max_attempts": 7}, "dry_run": True})
    assert dry["dry_run"] is True and deps.policies.effective("default").max_attempts != 7
    saved = ok(api, "PUT", "/policies/default", {"changes": {"max_attempts": 7}})
    assert saved["policy"]["max_attempts"] == 7 == deps.policies.effective("default").max_attempts
    status, error = call(api, "PUT", "/policies/default", {"changes": {"max_attempts": 0}})
    assert status == 400 and error["code"] in {"VALIDATION_FAILED", "CONFIG_ERROR"}
    assert "max_attempts" in error["message"]


def test_flags_are_listed_and_set_audited_and_an_unknown_one_is_refused(api: Any, deps: Deps) -> None:
    listed = ok(api, "GET", "/flags")
    assert [(f["name"], f["on"]) for f in listed][:2] == [("task-retry-queue", True), ("dlq-inspector", True)]
    changed = ok(api, "PUT", "/flags/dlq-inspector", {"on": False, "reason": "noisy console"})
    assert changed["changed"] is True and changed["on"] is False
    assert {f["name"]: f["on"] for f in ok(api, "GET", "/flags")}["dlq-inspector"] is False
    [record] = deps.store.audit_trail(f"flags#{deps.settings.environment}")
    assert (record.actor, record.evidence["reason"]) == (ALICE, "noisy console")
    status, error = call(api, "PUT", "/flags/dlq-inspect", {"on": False})
    assert status == 400 and error["code"] == "VALIDATION_FAILED" and "the flags are" in error["message"]


def test_policy_whatif_replays_recorded_failures_and_refuses_bad_values(
    api: Any, deps: Deps, clock: Any
) -> None:
    dead_letters(deps, 2)  # two runs of the default policy, each dead-lettered on a terminal error
    clock.advance(600)
    report = ok(api, "POST", "/policies/default/whatif", {"changes": {"max_attempts": 5}, "since": "1d"})
    assert report["policy"] == "default" and report["changes"] == {"max_attempts": 5}
    assert report["current"]["runs"] == 2 and report["current"]["dead_lettered"] == 2
    # A terminal error is not retried by any number of attempts: nothing would change.
    assert report["proposed"]["dead_lettered"] == 2 and report["proposed"]["retries"] == 0
    assert report["added_cost_usd"] == 0
    figures = {"retries_per_hour", "peak_retries_per_hour", "recovery_p50_s", "cost_usd"}
    assert set(report["current"]) >= figures
    status, error = call(api, "POST", "/policies/default/whatif", {"changes": {"max_attempts": 0}})
    assert status == 400 and "max_attempts" in error["message"]
    for since in ("90d", "99999999999d", "soon"):
        body = {"changes": {"max_attempts": 5}, "since": since}
        status, error = call(api, "POST", "/policies/default/whatif", body)
        assert status == 400 and "since" in error["message"], since
    assert deps.policies.effective("default").max_attempts == 3  # nothing stored


def test_audit_verify_and_retry_health(api: Any, deps: Deps) -> None:
    run_ids = dead_letters(deps, 1)
    verified = ok(api, "POST", "/audit/verify", {"target": run_ids[0]})
    assert verified["ok"] is True
    health = ok(api, "GET", "/health/retry")
    assert {c["name"] for c in health["checks"]} >= {
        "retry_worker",
        "stale_retry_plans",
        "acknowledgement_gaps",
        "disabled_schedules",
    }


def test_a_task_moved_between_a_schedule_and_an_event_rule_keeps_one_trigger(api: Any, deps: Deps) -> None:
    """Registration writes and removes the task's schedules and its rule on the bus; pause and
    resume carry the rule's state."""
    ok(api, "POST", "/tasks", {"document": DOCUMENT})
    assert deps.schedules.get(task_schedule_name("acme.nightly", 0)) is not None
    on_event = {**DOCUMENT["tasks"][0], "schedule": None, "event": {"source": ["billing"]}}
    ok(api, "POST", "/tasks", {"document": {"tasks": [on_event]}})
    assert deps.schedules.get(task_schedule_name("acme.nightly", 0)) is None
    assert deps.bus.get_rule(task_rule_name("acme.nightly"))["State"] == "ENABLED"
    changed = ok(api, "POST", "/tasks", {"document": {"tasks": [{**on_event, "payload": {"step": 2}}]}})
    assert changed["applied"]["updated"] == ["acme.nightly"]  # the rule read back and left as it was
    ok(api, "PUT", "/tasks/nightly/pause", {"reason": "maintenance"})
    assert deps.bus.get_rule(task_rule_name("acme.nightly"))["State"] == "DISABLED"
    ok(api, "PUT", "/tasks/nightly/resume")
    assert deps.bus.get_rule(task_rule_name("acme.nightly"))["State"] == "ENABLED"
    ok(api, "POST", "/tasks", {"document": DOCUMENT})
    assert deps.bus.get_rule(task_rule_name("acme.nightly")) is None
    assert deps.schedules.get(task_schedule_name("acme.nightly", 0)) is not None


def test_the_delivery_retry_plan_and_its_execution(api: Any, deps: Deps) -> None:
    """A work order whose SNS delivery failed once: planned for a retry, then retried on SNS."""
    real = deps.notifier
    deps.notifier = FakeNotifier(Unreachable("sns"))
    with pytest.raises(OperationalError, match="notification failed for sns"):
        Escalation(deps).on_dead_lettered({"subject": "msg#m-1", "reason": "malformed"})
    deps.notifier = real
    [order] = deps.store.work_orders()
    body = {"generated_by": "oncall", "retry_policy": {"allow_immediate_retry": True}}
    plan = ok(api, "POST", "/notifications/retry-plan", body)
    assert [(d["channel"], d["decision"]) for d in plan["deliveries"]] == [("sns", "retry")]
    done = ok(api, "POST", "/notifications/retry-plan/execute", body)
    assert (done["delivered"], done["failed"], len(done["retried"])) == (1, 0, 1), done
    stored = deps.store.get_work_order(order.work_order_id)
    assert stored is not None and stored.deliveries[-1].status is DeliveryStatus.DELIVERED


class Unreachable:
    """A channel whose endpoint refuses every delivery."""

    def __init__(self, name: str) -> None:
        self.name = name

    def send(self, note: Any) -> str:
        raise DeliveryFailed(self.name, "HTTP 503")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/tasks/nope", None, 404, "TASK_NOT_FOUND"),
        ("GET", "/runs/nope", None, 404, "RUN_NOT_FOUND"),
        ("GET", "/workorders/wo-nope", None, 404, "WORK_ORDER_NOT_FOUND"),
        ("GET", "/policies/nope", None, 404, "POLICY_NOT_FOUND"),
        ("POST", "/runs/nope/skip", {"reason": ""}, 400, "VALIDATION_FAILED"),
        ("POST", "/runs/nope/skip", None, 400, "VALIDATION_FAILED"),
        ("POST", "/tasks", {"document": {"tasks": [{"id": "Bad Id"}]}}, 400, "CONFIG_ERROR"),
        ("POST", "/tasks", {"dry_run": True}, 400, "VALIDATION_FAILED"),
        ("POST", "/internal/tasks/retry", {}, 400, "VALIDATION_FAILED"),
        ("POST", "/workorders", {"severity": "loud", "reason": "x"}, 400, "VALIDATION_FAILED"),
        ("GET", "/runs", None, 400, "VALIDATION_FAILED"),
        ("GET", "/nowhere", None, 404, "NO_SUCH_ROUTE"),
    ],
)
def test_bad_requests_get_a_json_error_naming_what_was_wrong(
    api: Any, method: str, path: str, body: Any, status: int, code: str
) -> None:
    got, error = call(api, method, path, body)
    assert (got, error["code"]) == (status, code), error
    assert error["message"] and "Traceback" not in json.dumps(error)


def test_a_caller_without_an_identity_is_refused(api: Any, deps: Deps) -> None:
    status, error = call(api, "PUT", "/tasks/nightly/pause", caller=None)
    assert (status, error["code"]) == (403, "FORBIDDEN")


def test_an_unexpected_error_is_a_500_without_a_stack_trace(api: Any, deps: Deps, monkeypatch: Any) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(deps.store, "list_tasks", boom)
    monkeypatch.setattr(deps.store, "get_task", boom)
    status, error = call(api, "GET", "/tasks")
    assert (status, error["code"]) == (500, "INTERNAL")
    assert "secret" not in json.dumps(error)


class Invocations:
    """The Lambda client the ops API function invokes itself with: it records each async invoke."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"StatusCode": 202}


@pytest.fixture
def self_invoking(api: Any, monkeypatch: Any) -> Invocations:
    """The handler as deployed: a redrive job continues by the function invoking itself."""
    from rebound.ops.dlq import jobs

    invocations = Invocations()
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "rebound-dev-ops_api")
    monkeypatch.setattr(api, "_lambda_client", lambda: invocations)
    monkeypatch.setattr(jobs, "CHUNK_MESSAGES", 10)
    return invocations


def next_chunk(api: Any, invocations: Invocations) -> dict[str, Any]:
    """Deliver the oldest pending self-invocation to the handler, as Lambda would."""
    call_ = invocations.calls.pop(0)
    assert call_["FunctionName"] == "rebound-dev-ops_api" and call_["InvocationType"] == "Event"
    return dict(api.lambda_handler(json.loads(call_["Payload"]), Context()))


def test_a_large_redrive_is_a_job_continued_in_chunks_that_the_caller_polls(
    api: Any, deps: Deps, self_invoking: Invocations
) -> None:
    run_ids = dead_letters(deps, 25)
    status, job, headers = call(
        api, "POST", "/dlq/redrive", {"task_id": "job", "async": True}, with_headers=True
    )
    assert status == 202, job
    assert headers["Location"] == f"/dlq/redrive-jobs/{job['job_id']}"
    assert (job["state"], job["total"], job["remaining"], job["moved"]) == ("running", 25, 25, 0)
    assert len(self_invoking.calls) == 1  # nothing moved within the request: the job continues

    first = next_chunk(api, self_invoking)
    polled = ok(api, "GET", f"/dlq/redrive-jobs/{job['job_id']}")
    assert polled == first
    assert (polled["state"], polled["moved"], polled["remaining"], polled["chunks"]) == ("running", 10, 15, 1)
    assert 0 < polled["progress"] < 1
    while self_invoking.calls:
        next_chunk(api, self_invoking)
    done = ok(api, "GET", f"/dlq/redrive-jobs/{job['job_id']}")
    assert (done["state"], done["moved"], done["failed"], done["remaining"]) == ("succeeded", 25, 0, 0)
    assert done["chunks"] == 3 and done["created_by"] == ALICE
    assert {deps.store.get_run(r).state for r in run_ids} == {RunState.REPLAYED}  # type: ignore[union-attr]
    assert ok(api, "GET", "/dlq", query={"task_id": "job"})["messages"] == []
    trail = deps.store.audit_trail(f"redrive-job#{job['job_id']}")
    assert [(r.action, r.actor) for r in trail] == [
        ("dlq-redrive-job-started", ALICE),
        ("dlq-redrive-job-finished", ALICE),
    ]
    assert trail[1].evidence["moved"] == 25
    replays = [r for r in deps.store.audit_trail(f"run#{run_ids[-1]}") if r.evidence.get("redrive_id")]
    assert replays and replays[-1].actor == ALICE  # a chunk acts as the operator who started the job


def test_a_redrive_over_the_threshold_becomes_a_job_and_a_small_one_does_not(
    api: Any, deps: Deps, self_invoking: Invocations, monkeypatch: Any
) -> None:
    from rebound.api import routes_recovery

    monkeypatch.setattr(routes_recovery, "ASYNC_OVER", 3)
    dead_letters(deps, 6)
    status, small = call(api, "POST", "/dlq/redrive", {"task_id": "job", "limit": 2})
    assert status == 200 and small["moved"] == 2  # at most 2 to move: done within the request
    assert not self_invoking.calls
    status, job = call(api, "POST", "/dlq/redrive", {"task_id": "job"})
    assert status == 202 and job["total"] == 4  # 4 left: more than 3
    dry_status, dry = call(api, "POST", "/dlq/redrive", {"task_id": "job", "dry_run": True})
    assert dry_status == 200 and dry["dry_run"] is True  # a dry run is never a job


def test_redrive_job_errors(api: Any, deps: Deps, self_invoking: Invocations) -> None:
    status, error = call(api, "GET", "/dlq/redrive-jobs/nope")
    assert (status, error["code"]) == (404, "REDRIVE_JOB_NOT_FOUND")
    status, error = call(api, "POST", "/dlq/redrive", {"async": "maybe"})
    assert (status, error["code"], error["field"]) == (400, "VALIDATION_FAILED", "async")
    status, error = call(api, "GET", "/dlq/redrive-jobs/nope", caller=None)
    assert (status, error["code"]) == (403, "FORBIDDEN")
    status, error = call(api, "POST", "/dlq/redrive", {"async": True}, caller=None)
    assert (status, error["code"]) == (403, "FORBIDDEN")
    assert not self_invoking.calls


def test_a_job_whose_continuation_was_lost_is_continued_by_the_next_poll(
    api: Any, deps: Deps, self_invoking: Invocations, clock: Any
) -> None:
    dead_letters(deps, 2)
    job = call(api, "POST", "/dlq/redrive", {"async": True})[1]
    self_invoking.calls.clear()  # the async invocation was lost
    ok(api, "GET", f"/dlq/redrive-jobs/{job['job_id']}")
    assert not self_invoking.calls  # not yet quiet for long
    clock.advance(120)
    ok(api, "GET", f"/dlq/redrive-jobs/{job['job_id']}")
    assert len(self_invoking.calls) == 1
    assert next_chunk(api, self_invoking)["state"] == "succeeded"


def finished_run(deps: Deps, run_id: str, state: RunState, attempt: int, changed_ago_s: float) -> None:
    """A run that finished ``changed_ago_s`` ago after ``attempt`` attempts of one budget."""
    from rebound.domain.run import Run, Trigger

    now = deps.clock.now()
    at = now - timedelta(seconds=changed_ago_s)
    run = Run(
        run_id=run_id,
        task_id="job",
        tenant="acme",
        trigger=Trigger.SCHEDULE,
        scheduled_for=at,
        created_at=at,
        updated_at=at,
        state=state,
        attempt=attempt,
    )
    uow = deps.store.unit_of_work("test", at)
    uow.save_run(None, run, action="created")
    uow.commit()


def test_runs_in_a_state_come_a_page_at_a_time_by_cursor(api: Any, deps: Deps) -> None:
    for n in range(5):  # succeeded after a retry: the sparse by_state index lists them
        finished_run(deps, f"r{n}", RunState.SUCCEEDED, 2, changed_ago_s=60 * (5 - n))
    finished_run(deps, "clean", RunState.SUCCEEDED, 1, changed_ago_s=30)  # a clean success: not listed
    pages = run_pages(api, {"state": "succeeded", "limit": "2"})
    assert pages == [["r4", "r3"], ["r2", "r1"], ["r0"]]  # latest change first
    recent = ok(api, "GET", "/runs", query={"state": "succeeded", "since": "150s"})
    assert [r["run_id"] for r in recent] == ["r4", "r3"]
    status, error = call(api, "GET", "/runs", query={"state": "succeeded", "until": "1h"})
    assert (status, error["field"]) == (400, "until")
    status, error = call(api, "GET", "/runs", query={"state": "succeeded", "after": "not-a-cursor"})
    assert (status, error["code"]) == (400, "VALIDATION_FAILED") and "after" in error["message"]


def test_recovery_counts_runs_by_state_and_the_retry_success_rate(api: Any, deps: Deps) -> None:
    for n in range(9):
        finished_run(deps, f"ok{n}", RunState.SUCCEEDED, 2, changed_ago_s=600)  # succeeded on a retry
    finished_run(deps, "first-time", RunState.SUCCEEDED, 1, changed_ago_s=600)  # no retry: not counted
    finished_run(deps, "gave-up", RunState.DEAD_LETTERED, 3, changed_ago_s=7200)
    finished_run(deps, "last-week", RunState.DEAD_LETTERED, 3, changed_ago_s=7 * 86400)
    recovery = ok(api, "GET", "/runs/recovery")
    # the first-time success is not in the sparse by_state index: only the nine after a retry count
    hour = recovery["windows"]["hour"]
    assert (hour["succeeded_after_retry"], hour["dead_lettered"]) == (9, 0) and "succeeded" not in hour
    assert recovery["windows"]["day"]["dead_lettered"] == 1  # last week's is outside the day
    rate = recovery["retry_success"]
    assert (rate["succeeded"], rate["dead_lettered"], rate["rate"]) == (9, 1, 0.9)
    assert rate["meets_target"] is True and rate["target"] == 0.9
    by_hour = rate["by_hour"]
    assert len(by_hour) == 24 and by_hour[-1]["succeeded"] + by_hour[-2]["succeeded"] == 9
    assert sum(h["dead_lettered"] for h in by_hour) == 1
    capped = ok(api, "GET", "/runs/recovery", query={"at_most": "3"})
    assert capped["windows"]["hour"]["succeeded_after_retry"] > 3  # "more than 3": counting stopped early
    status, error = call(api, "GET", "/runs/recovery", caller=None)
    assert (status, error["code"]) == (403, "FORBIDDEN")
    status, error = call(api, "GET", "/runs/recovery", query={"at_most": "0"})
    assert (status, error["field"]) == (400, "at_most")
