"""The CLI decides each command's declared rule for the operator (``rebound_cli.authz``): another
tenant's run, work order or workstream answers as one that does not exist (exit 4), what every
tenant shares is refused (exit 7), each refusal audited ``access-refused`` on the tenant's chain
with the operator as actor, and lists show only the operator's tenants.

The commands run through click's ``CliRunner`` against moto, with the operator's
identity and the environment's ``identities:`` set as ``sts:GetCallerIdentity`` and the resources
document would give them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rebound.domain.basics import Severity
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.ops.workorders import WorkOrderOps
from rebound_cli.app import cli
from rebound_cli.context import App
from support import dead_letters, fire, register, task

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
BOB = f"arn:aws:iam::{ACCOUNT}:user/bob"  # globex only
ROOT = f"arn:aws:iam::{ACCOUNT}:user/root-admin"


@pytest.fixture
def world(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> Deps:
    deps.settings = deps.settings.model_copy(update={"identities": {BOB: ["globex"], ROOT: ["*"]}})
    monkeypatch.setattr(App, "deps", property(lambda self: deps))
    return deps


def as_(world: Deps, monkeypatch: pytest.MonkeyPatch, who: str, *args: str) -> Result:
    monkeypatch.setattr(App, "actor", property(lambda self: who))
    return CliRunner().invoke(cli, ["-o", "json", *args], catch_exceptions=False)


def data(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # stderr has the progress bars


def globex_dead_letter(world: Deps) -> str:
    from rebound.engine.executor import Executor, QueueMessage
    from rebound.engine.retry_scheduler import RetryScheduler

    failing = {"type": "sim", "behavior": {"terminal_error": "NOPE"}}
    register(world, task("globex.job", tenant="globex", target=failing))
    Executor(world).process(QueueMessage("fire-g", json.dumps(fire("globex.job"))), 120)
    run_id = "globex.job:20260307T090000Z"
    assert RetryScheduler(world).on_failed(run_id, 1) == "dead-lettered"
    return run_id


def refusals(world: Deps, tenant: str) -> list[tuple[str, str]]:
    return [(r.actor, r.evidence["action"]) for r in world.store.audit_trail(f"tenant#{tenant}")]


def test_runs_commands_act_on_the_operators_tenants_only(
    world: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    [acme_run] = dead_letters(world, 1, "acme.job")
    globex_run = globex_dead_letter(world)
    listed = data(as_(world, monkeypatch, BOB, "runs", "list", "--status", "dead_lettered"))
    assert [r["run_id"] for r in listed] == [globex_run]
    assert [r["run_id"] for r in data(as_(world, monkeypatch, BOB, "runs", "list", "--task", "job"))] == [
        globex_run
    ]
    before = world.store.get_run(acme_run)
    assert as_(world, monkeypatch, BOB, "runs", "show", acme_run).exit_code == 4
    refused = as_(world, monkeypatch, BOB, "runs", "skip", acme_run, "--reason", "mine now", "--yes")
    unknown = as_(
        world, monkeypatch, BOB, "runs", "skip", "acme.job:20990101T000000Z", "--reason", "x", "--yes"
    )
    assert refused.exit_code == unknown.exit_code == 4
    assert refused.output.replace(acme_run, "ID") == unknown.output.replace("acme.job:20990101T000000Z", "ID")
    assert as_(world, monkeypatch, BOB, "runs", "retry", acme_run).exit_code == 4
    assert world.store.get_run(acme_run) == before  # nothing changed
    # an id in acme's namespace is refused (and audited) whether or not such a run exists
    skips = [(BOB, "runs:skip")] * 2
    assert refusals(world, "acme") == [(BOB, "runs:read"), *skips, (BOB, "runs:retry")]
    skipped = data(as_(world, monkeypatch, BOB, "runs", "skip", globex_run, "--reason", "by hand", "--yes"))
    assert skipped["state"] == RunState.SKIPPED.value
    everything = data(as_(world, monkeypatch, ROOT, "runs", "list", "--status", "dead_lettered"))
    assert [r["run_id"] for r in everything] == [acme_run]


def test_dlq_commands_are_bound_to_the_operators_tenant(world: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    dead_letters(world, 1, "acme.job")
    globex_run = globex_dead_letter(world)
    assert [m["run_id"] for m in data(as_(world, monkeypatch, BOB, "dlq", "list"))] == [globex_run]
    assert as_(world, monkeypatch, BOB, "dlq", "list", "--tenant", "acme").exit_code == 7
    assert as_(world, monkeypatch, BOB, "dlq", "redrive", "--tenant", "acme", "--dry-run").exit_code == 7
    assert refusals(world, "acme") == [(BOB, "dlq:read"), (BOB, "dlq:redrive")]
    assert len(data(as_(world, monkeypatch, ROOT, "dlq", "list"))) == 2  # an administrator: every tenant


def test_work_orders_of_another_tenant_are_neither_listed_nor_changed(
    world: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    [acme_run] = dead_letters(world, 1, "acme.job")
    globex_run = globex_dead_letter(world)
    orders = WorkOrderOps(world, ROOT)
    acme_order = orders.create(severity=Severity.HIGH, reason="by hand", run_id=acme_run)
    globex_order = orders.create(severity=Severity.HIGH, reason="by hand", run_id=globex_run)
    listed = data(as_(world, monkeypatch, BOB, "workorders", "list"))
    assert [o["work_order_id"] for o in listed] == [globex_order.work_order_id]
    assert as_(world, monkeypatch, BOB, "workorders", "show", acme_order.work_order_id).exit_code == 4
    assert as_(world, monkeypatch, BOB, "workorders", "ack", acme_order.work_order_id).exit_code == 4
    assert world.store.get_work_order(acme_order.work_order_id) == acme_order
    assert refusals(world, "acme") == [(BOB, "workorders:read"), (BOB, "workorders:ack")]
    assert (
        data(as_(world, monkeypatch, BOB, "workorders", "ack", globex_order.work_order_id))["state"]
        == "acknowledged"
    )


def test_retry_policies_are_changed_by_administrators_only(
    world: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert [p["name"] for p in data(as_(world, monkeypatch, BOB, "policies", "list"))]  # reading: any tenant
    before = world.policies.effective("default").max_attempts
    refused = as_(world, monkeypatch, BOB, "policies", "set", "default", "max_attempts=9", "--yes")
    assert refused.exit_code == 7 and "administrators" in refused.output
    assert world.policies.effective("default").max_attempts == before
    assert refusals(world, "*") == [(BOB, "policies:write")]


def test_workstreams_of_another_tenant_are_hidden_and_listed_only_to_theirs(
    world: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rebound.domain.workstreams import Workstream
    from rebound.ops.workstreams import WorkstreamOps

    register(world, task("acme.load", schedule=None), task("globex.load", tenant="globex", schedule=None))
    mine = Workstream.model_validate({"id": "g-nightly", "tenant": "globex", "steps": [{"task": "load"}]})
    theirs = Workstream.model_validate({"id": "a-nightly", "tenant": "acme", "steps": [{"task": "load"}]})
    WorkstreamOps(world, ROOT).register([mine, theirs], [])
    listed = data(as_(world, monkeypatch, BOB, "workstreams", "list"))
    assert [w["workstream_id"] for w in listed] == ["g-nightly"]
    hidden = as_(world, monkeypatch, BOB, "workstreams", "run", "a-nightly")
    unknown = as_(world, monkeypatch, BOB, "workstreams", "run", "z-nightly")
    assert hidden.exit_code == unknown.exit_code == 4
    assert hidden.output.replace("a-nightly", "ID") == unknown.output.replace("z-nightly", "ID")
    assert refusals(world, "acme") == [(BOB, "workstreams:run")]
    stolen = Workstream.model_validate({"id": "a-nightly", "tenant": "globex", "steps": [{"task": "load"}]})
    with pytest.raises(Exception, match="belongs to tenant 'acme'"):
        WorkstreamOps(world, ROOT).register([stolen], [])


def test_state_checks_are_for_administrators_and_the_sla_report_for_the_operators_tenant(
    world: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_letters(world, 1, "acme.job")
    globex_dead_letter(world)
    assert as_(world, monkeypatch, BOB, "state", "check").exit_code == 7  # reads every tenant's items
    assert as_(world, monkeypatch, BOB, "state", "repair", "--dry-run").exit_code == 7
    assert refusals(world, "*") == [(BOB, "state:check"), (BOB, "state:repair")]
    assert data(as_(world, monkeypatch, ROOT, "state", "check"))["differences"] == []
    report = as_(world, monkeypatch, BOB, "sla", "report", "--since", "30d")
    assert report.exit_code in (0, 3), report.output  # 3: the total misses an objective
    assert [t["name"] for t in json.loads(report.stdout)["tasks"]] == ["globex.job"]
    assert as_(world, monkeypatch, BOB, "sla", "report", "--tenant", "acme").exit_code == 7
    assert as_(world, monkeypatch, BOB, "sla", "report", "--rebuild", "--yes").exit_code == 7


def test_audit_and_notification_retries_are_for_administrators(
    world: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    [acme_run] = dead_letters(world, 1, "acme.job")
    globex_run = globex_dead_letter(world)
    # Any chain, any tenant's evidence: administrators only, as the API's POST /audit/verify.
    assert as_(world, monkeypatch, BOB, "audit", "verify", globex_run).exit_code == 7
    assert as_(world, monkeypatch, BOB, "audit", "verify", "--all").exit_code == 7
    assert as_(world, monkeypatch, BOB, "notifications", "retry", "--yes").exit_code == 7
    refused = [(BOB, "audit:verify"), (BOB, "audit:verify"), (BOB, "notifications:retry")]
    assert refusals(world, "*") == refused
    assert as_(world, monkeypatch, BOB, "notifications", "plan").exit_code == 0  # a tenant may read it
    [verified] = data(as_(world, monkeypatch, ROOT, "audit", "verify", acme_run))
    assert verified["ok"]
    # Copying every tenant's records to the archive: administrators only too.
    assert as_(world, monkeypatch, BOB, "audit", "archive", "--dry-run").exit_code == 7
    counted = data(as_(world, monkeypatch, ROOT, "audit", "archive", "--dry-run"))
    assert counted["dry_run"] and counted["in_table"] >= counted["archived"] and counted["objects"] == []
    assert data(as_(world, monkeypatch, BOB, "targets")) == []  # any tenant may see the targets
