"""Tenancy: task keys carry their tenant, a file never changes another tenant's task, secrets and
quotas are per tenant, and ``authorize`` decides per tenant (``rebound.domain.tenancy``,
``rebound.ops.access``, ``rebound.api.auth``)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
import yaml
from fakes import memory_deps
from pydantic import ValidationError

from rebound.adapters.secrets import SESSION_SECONDS, TenantSecrets
from rebound.adapters.targets.http import SECRET_REFUSED, HttpInvoker
from rebound.api.auth import Caller, Gate, authorize
from rebound.config.loader import parse_task_document, parse_task_file
from rebound.domain.errors import ConfigError, Conflict, Forbidden, OperationalError, ValidationFailed
from rebound.domain.ids import task_rule_name, task_schedule_name
from rebound.domain.schedules import planned_schedules
from rebound.domain.target_specs import HttpTarget, TargetRules
from rebound.domain.task import Task, TenantSettings
from rebound.domain.tenancy import qualify, secret_problem, short_id, tenant_of, tenant_of_run
from rebound.engine.executor import Executor, QueueMessage
from rebound.engine.ports.targets import Invocation
from rebound.ops.access import TenantAccess, Tenants, find_task, identity_keys, task_key
from rebound.ops.tasks import TaskOps
from support import START, ManualClock, fire, register, start_and_crash, task

AWS_NAME = re.compile(r"^[0-9A-Za-z._-]{1,64}$")


def tasks_of(text: str) -> list[Task]:
    return parse_task_file(yaml.safe_load(text), "tasks.yaml")


# --------------------------------------------------------------------------- keys


def test_two_tenants_may_each_have_a_task_with_the_same_id_and_each_keeps_its_own() -> None:
    world = memory_deps()
    acme, globex = tasks_of(
        "tasks:\n"
        "  - {id: nightly, tenant: acme, schedule: {cron: '0 2 * * *'}, target: {type: sim}}\n"
        "  - {id: nightly, tenant: globex, schedule: {cron: '0 3 * * *'}, target: {type: sim}}\n"
    )
    assert (acme.id, globex.id) == ("acme.nightly", "globex.nightly")
    register(world.deps, acme, globex)
    stored_acme, stored_globex = world.store.get_task("acme.nightly"), world.store.get_task("globex.nightly")
    assert stored_acme is not None and stored_acme.task.schedule.cron == "0 2 * * *"  # type: ignore[union-attr]
    assert stored_globex is not None and stored_globex.task.schedule.cron == "0 3 * * *"  # type: ignore[union-attr]
    assert set(stored_acme.schedule_names).isdisjoint(stored_globex.schedule_names)
    # run ids start with the task's key, so they carry the tenant
    Executor(world.deps).process(QueueMessage("m1", json.dumps(fire("acme.nightly"))), 120)
    Executor(world.deps).process(QueueMessage("m2", json.dumps(fire("globex.nightly"))), 120)
    runs = {run.run_id: run.tenant for run in world.store.scan_runs()}
    assert {tenant_of_run(run_id): tenant for run_id, tenant in runs.items()} == {
        "acme": "acme",
        "globex": "globex",
    }


def test_one_tenant_may_not_have_the_same_id_twice() -> None:
    with pytest.raises(ConfigError) as caught:
        tasks_of(
            "tasks:\n"
            "  - {id: nightly, tenant: acme, target: {type: sim}}\n"
            "  - {id: nightly, tenant: acme, target: {type: sim}}\n"
        )
    assert "'nightly' appears more than once for tenant 'acme'" in caught.value.problem


def test_a_key_or_mutex_group_naming_another_tenant_is_refused() -> None:
    with pytest.raises(ValidationError, match="belongs to tenant 'globex'"):
        Task.model_validate({"id": "globex.nightly", "tenant": "acme", "target": {"type": "sim"}})
    with pytest.raises(ValidationError, match=r"mutex_group 'globex\.db' belongs to tenant 'globex'"):
        Task.model_validate(
            {"id": "x", "tenant": "acme", "mutex_group": "globex.db", "target": {"type": "sim"}}
        )
    [mine] = tasks_of("tasks:\n  - {id: x, tenant: acme, mutex_group: db, target: {type: sim}}\n")
    assert mine.mutex_group == "acme.db"  # one tenant's mutex group is never another's


def test_keys_split_back_into_tenant_and_short_id() -> None:
    assert qualify("acme", "nightly") == "acme.nightly" == qualify("acme", "acme.nightly")
    assert tenant_of("acme.nightly") == "acme" and short_id("acme.nightly") == "nightly"
    assert tenant_of("nightly") is None and short_id("nightly") == "nightly"
    assert tenant_of_run("acme.nightly:20260307T090000Z") == "acme"


def test_the_longest_tenant_and_id_give_valid_distinct_aws_names() -> None:
    tenant, task_id = "t" * 48, "a" * 48
    key = qualify(tenant, task_id)
    other = qualify(tenant, "a" * 47 + "b")  # same first 64 characters once prefixed
    names = [task_schedule_name(key, i) for i in range(3)] + [task_rule_name(key)]
    names += [task_schedule_name(other), task_rule_name(other)]
    for name in names:
        assert AWS_NAME.match(name), name
    # a key's rule and its first schedule share a name, as before (different services)
    assert task_rule_name(key) == task_schedule_name(key) and task_rule_name(other) == task_schedule_name(
        other
    )
    assert len({*names}) == 4 and task_schedule_name(key) != task_schedule_name(other)
    assert task_schedule_name(key) == task_schedule_name(key)  # the same task finds the same schedule
    long = Task.model_validate(
        {"id": task_id, "tenant": tenant, "schedule": {"cron": "0 * * * *"}, "target": {"type": "sim"}}
    ).qualified()
    assert all(AWS_NAME.match(p.name) for p in planned_schedules(long))
    assert task_schedule_name("acme.nightly") == "task-acme.nightly"  # short names are kept as they are


# --------------------------------------------------------------------------- applying


def test_applying_a_file_never_changes_another_tenants_task() -> None:
    world = memory_deps()
    theirs = task("nightly", tenant="globex")  # stored under its id from before tenancy
    register(world.deps, theirs)
    before = world.store.get_task("nightly")
    ops = TaskOps(world.deps, "alice")
    with pytest.raises(Conflict) as caught:
        ops.plan([task("nightly", tenant="acme", schedule={"cron": "0 9 * * *"})])
    assert "task nightly belongs to tenant 'globex'" in caught.value.message
    after = world.store.get_task("nightly")
    assert after == before and after is not None and after.task.tenant == "globex"


def test_a_task_stored_before_tenancy_must_be_migrated_before_its_file_is_applied_again() -> None:
    world = memory_deps()
    register(world.deps, task("nightly"))  # acme's, under its bare id
    [again] = tasks_of(
        "tasks:\n  - {id: nightly, tenant: acme, schedule: {cron: '*/5 * * * *'}, target: {type: sim}}\n"
    )
    with pytest.raises(Conflict, match="rebound migrate tenancy"):
        TaskOps(world.deps, "alice").plan([again])
    assert world.store.get_task("acme.nightly") is None  # never registered twice, never fired twice


# --------------------------------------------------------------------------- secrets


def secret_task(reference: str, tenant: str = "acme") -> Task:
    return task(
        "signed",
        tenant=tenant,
        target={
            "type": "http",
            "url": "https://hooks.example.com/run",
            "secret": reference,
            "headers": {"Authorization": {"secret": reference, "prefix": "Bearer "}},
        },
    )


@pytest.mark.parametrize(
    "reference",
    [
        "ssm:/rebound/test/tenants/acme/hmac",
        "/rebound/test/tenants/acme/deep/hmac",
        "secretsmanager:rebound/test/tenants/acme/token",
        "arn:aws:ssm:us-east-1:123456789012:parameter/rebound/test/tenants/acme/hmac",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:rebound/test/tenants/acme/token-AbCdEf",
    ],
)
def test_a_reference_under_the_tasks_tenant_is_accepted(reference: str) -> None:
    assert secret_problem(reference, "test", "acme") is None
    TaskOps(memory_deps().deps, "alice").validate(secret_task(reference))


@pytest.mark.parametrize(
    "reference",
    [
        "ssm:/rebound/test/tenants/globex/hmac",
        "/rebound/test/secrets/hmac",
        "/rebound/test/tenants/acme-two/hmac",
        "/rebound/test/tenants/acme/../globex/hmac",
        "/rebound/prod/tenants/acme/hmac",
        "secretsmanager:rebound/test/tenants/globex/token",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:rebound/test/tenants/globex/t-AbCdEf",
    ],
)
def test_registration_refuses_a_secret_outside_the_tasks_tenant_naming_the_field(reference: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        TaskOps(memory_deps().deps, "alice").validate(secret_task(reference))
    assert caught.value.details["key_path"] == "target.secret"
    assert "/rebound/test/tenants/acme/" in caught.value.message


class RecordingSecrets:
    def __init__(self) -> None:
        self.read: list[str] = []

    def get(self, reference: str) -> str:
        self.read.append(reference)
        raise OperationalError("no such secret here")


def test_the_executor_refuses_a_secret_outside_the_tasks_tenant_without_reading_it() -> None:
    secrets = RecordingSecrets()
    clock = ManualClock()
    invoker = HttpInvoker(secrets, clock, rules=TargetRules(), environment="test")  # type: ignore[arg-type]
    target = HttpTarget.model_validate(
        {
            "type": "http",
            "url": "https://hooks.example.com/run",
            "headers": {"X-Api-Key": {"secret": "ssm:/rebound/test/tenants/globex/key"}},
        }
    )
    call = Invocation(
        run_id="acme.signed:20260307T090000Z",
        task_id="acme.signed",
        tenant="acme",
        attempt=1,
        scheduled_for=START,
        deadline=clock.now() + timedelta(seconds=30),
        payload={},
    )
    outcome = invoker.invoke(target, call)
    assert outcome.error_code == SECRET_REFUSED and outcome.retryable is False
    assert "target.headers.X-Api-Key.secret" in outcome.message
    assert secrets.read == []  # nothing read, nothing sent


# --------------------------------------------------------------------------- quotas


def test_a_quota_counts_its_own_tenants_runs_only() -> None:
    world = memory_deps()
    deps = world.deps
    deps.store.put_tenant("acme", TenantSettings(max_concurrent_runs=1), actor="test", at=deps.clock.now())
    file = (
        "tasks:\n"
        "  - {id: a, tenant: acme, schedule: {cron: '* * * * *'}, target: {type: sim}}\n"
        "  - {id: b, tenant: acme, schedule: {cron: '* * * * *'}, target: {type: sim}}\n"
        "  - {id: a, tenant: globex, schedule: {cron: '* * * * *'}, target: {type: sim}}\n"
    )
    register(deps, *tasks_of(file))
    start_and_crash(deps, "globex.a")  # globex's run holds no acme slot
    deliver = Executor(deps).process
    assert deliver(QueueMessage("m-a", json.dumps(fire("acme.a"))), 120) == "succeeded"
    start_and_crash(deps, "acme.a", "2026-03-07T09:01:00Z")
    assert deliver(QueueMessage("m-b", json.dumps(fire("acme.b"))), 120) == "waiting"
    holders = (deps.store.get_key("slots#tenant#acme") or {}).get("holders", [])
    assert sorted(holders) == ["acme.a:20260307T090100Z"]


def test_a_file_may_not_set_the_quota_of_a_tenant_its_caller_does_not_hold() -> None:
    world = memory_deps()
    deps = world.deps
    access = TenantAccess(deps)
    gate = Gate(Caller("arn:aws:iam::123456789012:user/alice", Tenants(frozenset({"acme"}))), access)
    document = parse_task_document(
        yaml.safe_load(
            "tenants:\n  globex: {max_concurrent_runs: 1}\n"
            "tasks:\n  - {id: a, tenant: acme, target: {type: sim}}\n"
        ),
        "tasks.yaml",
    )
    ops = TaskOps(deps, "alice", guard=gate)
    with pytest.raises(Forbidden):
        ops.apply_tenants(document.tenants)
    assert deps.store.get_tenant("globex") is None
    with pytest.raises(Forbidden):  # nor file a task under it
        ops.plan([task("x", tenant="globex")])


# --------------------------------------------------------------------------- authorize


ALICE = "arn:aws:sts::123456789012:assumed-role/AcmeOperators/alice"


def caller(*tenants: str) -> Caller:
    return Caller(ALICE, Tenants(frozenset(tenants)))


def test_authorize_lets_a_caller_act_on_its_tenants_only() -> None:
    authorize(caller("acme"), "runs:retry", "acme")
    authorize(caller("acme"), "tasks:read")  # a list, filtered afterwards
    with pytest.raises(Forbidden, match="may not runs:retry on tenant 'globex'; its tenants: acme"):
        authorize(caller("acme"), "runs:retry", "globex")
    with pytest.raises(Forbidden, match="it has no tenant"):
        authorize(caller(), "tasks:read")
    with pytest.raises(Forbidden, match="for administrators"):
        authorize(caller("acme", "globex"), "policies:write")
    authorize(caller("*"), "policies:write")
    authorize(caller("*"), "runs:retry", "globex")


def test_an_assumed_role_session_answers_to_its_role() -> None:
    assert identity_keys(ALICE) == (ALICE, "arn:aws:iam::123456789012:role/AcmeOperators")
    world = memory_deps()
    world.deps.settings = world.deps.settings.model_copy(
        update={"identities": {"arn:aws:iam::123456789012:role/AcmeOperators": ["acme"]}}
    )
    access = TenantAccess(world.deps)
    assert access.tenants_of(ALICE).names == {"acme"}
    assert access.tenants_of("arn:aws:iam::123456789012:user/mallory").names == frozenset()


def test_grants_add_tenants_are_audited_and_revoke_takes_them_away() -> None:
    world = memory_deps()
    world.deps.settings = world.deps.settings.model_copy(update={"identities": {}})
    access = TenantAccess(world.deps)
    bob = "arn:aws:iam::123456789012:user/bob"
    assert access.grant(bob, ["acme", "globex"], actor="root-admin") == ["acme", "globex"]
    assert access.grant(bob, ["acme"], actor="root-admin") == ["acme", "globex"]  # nothing new
    assert access.tenants_of(bob).names == {"acme", "globex"}
    assert access.revoke(bob, ["globex"], actor="root-admin") == ["acme"]
    assert access.tenants_of(bob).names == {"acme"}
    trail = world.store.audit_trail("tenant#globex")
    assert [(r.action, r.actor) for r in trail] == [
        ("access-granted", "root-admin"),
        ("access-revoked", "root-admin"),
    ]
    with pytest.raises(ValidationFailed, match="not a tenant name"):
        access.grant(bob, ["Bad Name"], actor="root-admin")


def test_a_refusal_is_audited_on_the_tenants_chain_with_the_caller_as_actor() -> None:
    world = memory_deps()
    gate = Gate(caller("acme"), TenantAccess(world.deps))
    with pytest.raises(Forbidden):
        gate.check("runs:skip", "globex")
    [record] = world.store.audit_trail("tenant#globex")
    assert record.actor == ALICE and record.action == "access-refused"
    assert record.evidence["action"] == "runs:skip" and record.evidence["tenant"] == "globex"
    with pytest.raises(Forbidden):
        gate.check("policies:write")
    assert [r.action for r in world.store.audit_trail("tenant#*")] == ["access-refused"]


def test_task_operations_show_and_change_only_the_callers_tenants() -> None:
    world = memory_deps()
    register(
        world.deps,
        *tasks_of(
            "tasks:\n"
            "  - {id: nightly, tenant: acme, schedule: {cron: '0 2 * * *'}, target: {type: sim}}\n"
            "  - {id: nightly, tenant: globex, schedule: {cron: '0 3 * * *'}, target: {type: sim}}\n"
        ),
    )
    ops = TaskOps(world.deps, ALICE, guard=Gate(caller("acme"), TenantAccess(world.deps)))
    assert [s.task.id for s in ops.find()] == ["acme.nightly"]
    assert ops.get("nightly").task.id == "acme.nightly"  # a short id among the caller's tasks
    with pytest.raises(Forbidden):
        ops.get("globex.nightly")
    with pytest.raises(Forbidden):
        ops.run_now("globex.nightly")
    assert world.queues.visible("execution") == []
    admin = TaskOps(world.deps, "root", guard=Gate(caller("*"), TenantAccess(world.deps)))
    with pytest.raises(ValidationFailed, match="names several tenants' tasks"):
        admin.get("nightly")


def test_a_short_id_names_the_one_task_the_caller_sees_and_several_are_refused_with_their_keys() -> None:
    world = memory_deps()
    register(
        world.deps,
        *tasks_of(
            "tasks:\n"
            "  - {id: nightly, tenant: acme, schedule: {cron: '0 2 * * *'}, target: {type: sim}}\n"
            "  - {id: nightly, tenant: globex, schedule: {cron: '0 3 * * *'}, target: {type: sim}}\n"
            "  - {id: weekly, tenant: globex, schedule: {cron: '0 3 * * 1'}, target: {type: sim}}\n"
        ),
    )
    store, acme = world.store, Gate(caller("acme"), TenantAccess(world.deps))
    assert task_key(store, "nightly", acme) == "acme.nightly"
    assert task_key(store, "weekly", acme) == "weekly"  # globex's: not seen, so nothing matches
    assert find_task(store, "weekly", acme) is None
    assert task_key(store, "weekly") == "globex.weekly"
    assert task_key(store, "globex.nightly", acme) == "globex.nightly"  # a key is taken as given
    with pytest.raises(ValidationFailed) as refused:
        task_key(store, "nightly", field="--task")
    assert refused.value.message == (
        "--task: task id 'nightly' names several tenants' tasks (acme.nightly, globex.nightly); "
        "give TENANT.ID"
    )


def test_on_aws_each_tenants_secrets_are_read_as_that_tenant() -> None:
    """The executor assumes the tenant secrets role tagged with the task's tenant, once per tenant
    until the session nears its end; IAM then limits that session to the tenant's path."""
    calls: list[dict[str, object]] = []
    built: list[dict[str, str]] = []
    now = [0.0]

    def assume_role(**kwargs: object) -> dict[str, object]:
        calls.append(kwargs)
        n = len(calls)
        return {"Credentials": {"AccessKeyId": f"AK{n}", "SecretAccessKey": "s", "SessionToken": "t"}}

    def resolver(credentials: dict[str, str]) -> Any:
        built.append(dict(credentials))
        return RecordingSecrets()

    secrets = TenantSecrets(
        assume_role, "arn:aws:iam::123456789012:role/reader", resolver, monotonic=lambda: now[0]
    )
    acme = secrets.for_tenant("acme")
    assert secrets.for_tenant("acme") is acme  # one session per tenant
    secrets.for_tenant("globex")
    assert [c["Tags"] for c in calls] == [
        [{"Key": "rebound:tenant", "Value": "acme"}],
        [{"Key": "rebound:tenant", "Value": "globex"}],
    ]
    assert [b["aws_access_key_id"] for b in built] == ["AK1", "AK2"]
    now[0] += SESSION_SECONDS  # the session is about to end: a new one
    assert secrets.for_tenant("acme") is not acme and len(calls) == 3
