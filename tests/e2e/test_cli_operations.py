"""``rebound workorders``, ``policies``, ``health`` and ``audit`` against the local cloud.

The tests share one cloud (the module's fixture) in the order they are written, and each also
passes on its own, or with any of the others before it (``-k``, or the module split across
``pytest -n`` workers): a test makes the state it checks for, and puts back what it breaks."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from test_cli_harness import Cloud, cloud_fixture

from rebound.adapters.dynamo import from_item, to_item
from rebound_infra.constructs.audit import AUDITOR_READS

pytestmark = pytest.mark.e2e
base = cloud_fixture(name="base")
OPERATOR = "arn:aws:sts::123456789012:user/moto"
LEDGER_RUN = "globex.export-ledger:20260307T090500Z"
PAYMENT_RUN = "acme.payments:20260307T090000Z"

TASKS: list[dict[str, Any]] = [
    {
        "id": "export-ledger",
        "tenant": "globex",
        "schedule": {"cron": "5 9 * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
    },
    {
        "id": "payments",
        "tenant": "acme",
        "schedule": {"cron": "0 9 * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
        "retry_policy": "critical",
    },
    {
        "id": "flaky",
        "tenant": "acme",
        "schedule": {"cron": "*/10 * * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
    },
]


@pytest.fixture(scope="module")
def local_cloud(base: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Cloud:
    file = tmp_path_factory.mktemp("ops") / "tasks.yaml"
    file.write_text(yaml.safe_dump({"tasks": TASKS}))
    base.ok("tasks", "apply", "-f", str(file))
    base.run_for(timedelta(minutes=30))
    base.tick(31)
    return base


def order_of(cloud: Cloud, run_id: str) -> str:
    work_order_id = cloud.runs()[run_id].work_order_id
    assert work_order_id
    return work_order_id


def test_work_orders_list_show_ack_and_resolve(local_cloud: Cloud) -> None:
    open_orders = local_cloud.json("workorders", "list", "--state", "open")
    assert {o["run_id"] for o in open_orders} >= {LEDGER_RUN, PAYMENT_RUN}
    critical = local_cloud.json("workorders", "list", "--severity", "critical")
    assert [o["run_id"] for o in critical] == [PAYMENT_RUN]
    assert critical[0]["runbook_url"].endswith("critical-task-dead-lettered.md")

    ledger = order_of(local_cloud, LEDGER_RUN)
    shown = local_cloud.json("workorders", "show", ledger)
    assert shown["state"] == "open" and shown["notified"] == {"sns": "delivered"}
    assert [a["action"] for a in shown["audit"]][:2] == ["opened", "notified"] and shown["audit_verified"]
    assert shown["runbook_url"].endswith("dead-lettered-run.md")

    acked = local_cloud.json("workorders", "ack", ledger, "--note", "looking at it")
    assert acked["state"] == "acknowledged" and acked["acknowledged_by"] == OPERATOR
    assert "(already)" in local_cloud.ok("workorders", "ack", ledger).stdout

    too_early = local_cloud.cli("workorders", "resolve", ledger, "--resolution", "replayed", "--yes")
    assert too_early.exit_code == 2 and f"rebound runs retry {LEDGER_RUN}" in too_early.stderr
    not_skipped = local_cloud.cli("workorders", "resolve", ledger, "--resolution", "skipped", "--yes")
    assert not_skipped.exit_code == 2 and "rebound runs skip" in not_skipped.stderr
    declined = local_cloud.cli("workorders", "resolve", ledger, "--resolution", "fixed", input="n\n")
    assert declined.exit_code == 1

    resolved = local_cloud.json(
        "workorders", "resolve", ledger, "--resolution", "fixed", "--note", "booked by hand", "--yes"
    )
    assert resolved["state"] == "resolved" and resolved["resolution"] == "fixed"
    assert resolved["resolved_by"] == OPERATOR
    again = local_cloud.cli("workorders", "resolve", ledger, "--resolution", "fixed", "--yes")
    assert again.exit_code == 5 and "is resolved" in again.stderr
    actions = [a["action"] for a in local_cloud.json("workorders", "show", ledger)["audit"]]
    assert actions[-2:] == ["acknowledged", "resolved"]
    missing = local_cloud.cli("workorders", "show", "wo-nope")
    assert missing.exit_code == 4


def test_policies_are_validated_versioned_audited_and_used_next(local_cloud: Cloud) -> None:
    names = {p["name"]: p for p in local_cloud.json("policies", "list")}
    assert set(names) >= {"default", "quick", "patient", "critical"} and names["default"]["version"] == 0

    bad_value = local_cloud.cli("policies", "set", "default", "max_attempts=lots", "--yes")
    assert bad_value.exit_code == 2 and "max_attempts" in bad_value.stderr
    assert len(bad_value.stderr.strip().splitlines()) == 1
    bad_key = local_cloud.cli("policies", "set", "default", "max_tries=5", "--yes")
    assert bad_key.exit_code == 2 and "unknown policy key 'max_tries'" in bad_key.stderr
    unknown = local_cloud.cli("policies", "show", "nope")
    assert unknown.exit_code == 4

    dry = local_cloud.json("policies", "set", "default", "max_attempts=5", "base_delay=30s", "--dry-run")
    assert dry["diff"] == {"max_attempts": {"from": 3, "to": 5}, "base_delay": {"from": 120, "to": 30}}
    assert dry["stored"] is False and local_cloud.json("policies", "show", "default")["versions"] == []

    stored = local_cloud.json("policies", "set", "default", "max_attempts=5", "base_delay=30s", "--yes")
    assert stored["stored"] is True and stored["to_version"] == 1
    shown = local_cloud.json("policies", "show", "default")
    assert shown["policy"]["max_attempts"] == 5 and [v["version"] for v in shown["versions"]] == [1]
    assert shown["versions"][0]["updated_by"] == OPERATOR
    assert [a["action"] for a in shown["audit"]] == ["policy-changed"] and shown["audit_verified"]
    assert local_cloud.json("policies", "set", "default", "max_attempts=5")["stored"] is False  # no change

    # The next retry decisions use version 1: a new run of `flaky` gets five attempts.
    local_cloud.run_for(timedelta(minutes=15))
    newest = local_cloud.json("runs", "list", "--task", "flaky", "--status", "dead_lettered")[0]
    trail = local_cloud.deps.store.audit_trail(f"run#{newest['run_id']}")
    assert newest["attempt"] == 5
    assert next(r for r in trail if r.action == "dead-lettered").evidence["policy"] == "default@v1"


def test_policies_whatif_replays_recorded_failures_and_set_offers_it_first(local_cloud: Cloud) -> None:
    local_cloud.run_for(timedelta(minutes=30))  # `flaky` and `export-ledger` fail every attempt
    report = local_cloud.json("policies", "whatif", "default", "max_attempts=9", "--since", "1d")
    now, then = report["current"], report["proposed"]
    assert now["runs"] >= 2 and now["dead_lettered"] >= 1 and now["recovered"] == 0
    # A target that never answered well: more attempts only add retries, and their cost.
    assert then["dead_lettered"] == now["dead_lettered"] and then["retries"] > now["retries"]
    assert report["added_cost_usd"] > 0

    shown = local_cloud.cli(
        "-o", "table", "policies", "set", "default", "max_attempts=9", "--whatif", "--dry-run"
    )
    assert shown.exit_code == 0 and "what-if for policy default" in shown.stdout
    assert "would have dead-lettered" in shown.stdout and "dry run" in shown.stdout
    data = local_cloud.json("policies", "set", "default", "max_attempts=9", "--whatif", "--dry-run")
    assert data["whatif"]["proposed"]["retries"] == then["retries"] and data["stored"] is False

    bad = local_cloud.cli("policies", "whatif", "default", "max_attempts=9", "--since", "soon")
    assert bad.exit_code == 2 and "since" in bad.stderr


def test_health_exits_non_zero_until_the_problems_are_handled(local_cloud: Cloud, tmp_path: Any) -> None:
    local_cloud.tick(31)
    unhealthy = local_cloud.cli("health", "--json")
    assert unhealthy.exit_code == 3
    report = json.loads(unhealthy.stdout)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["acknowledgement_gaps"] == "fail" and report["healthy"] is False
    assert set(status) == {
        "retry_worker", "stale_retry_plans", "stuck_replays", "failed_retry_executions",
        "disabled_schedules", "acknowledgement_gaps", "dlq_age",
    }  # fmt: skip
    assert status["dlq_age"] == "warn" and status["retry_worker"] == "ok"

    for order in local_cloud.json("workorders", "list", "--state", "open"):
        local_cloud.ok("workorders", "ack", order["work_order_id"])
    local_cloud.tick(61)
    healthy = local_cloud.cli("health")
    assert healthy.exit_code == 0, healthy.output
    assert "acknowledgement_gaps" in healthy.stdout

    # A schedule disabled behind Rebound's back, and a retry dispatch that went to the Scheduler DLQ.
    scheduler = boto3.client("scheduler")
    group = local_cloud.stack.settings.schedule_group
    live = scheduler.get_schedule(Name="task-acme.flaky", GroupName=group)
    keep = (
        "Name",
        "GroupName",
        "ScheduleExpression",
        "ScheduleExpressionTimezone",
        "FlexibleTimeWindow",
        "Target",
    )
    scheduler.update_schedule(**{k: live[k] for k in keep}, State="DISABLED")
    boto3.client("sqs").send_message(
        QueueUrl=local_cloud.stack.settings.queue("scheduler_dlq").url, MessageBody="{}"
    )

    broken = local_cloud.cli("-o", "json", "health")
    assert broken.exit_code == 3
    checks = {c["name"]: c for c in json.loads(broken.stdout)["checks"]}
    assert checks["disabled_schedules"]["status"] == "fail"
    disabled = checks["disabled_schedules"]["details"]
    assert disabled == ["task-acme.flaky: DISABLED (task acme.flaky is active)"]
    assert checks["failed_retry_executions"]["status"] == "fail"
    assert checks["failed_retry_executions"]["summary"] == "scheduler DLQ holds 1, control DLQ holds 0"


class AuditorRights:
    """A botocore hook that lets through only what the auditor role may do (its template policy,
    ``rebound_infra.constructs.audit``): read the audit and runs tables as ``AUDITOR_READS`` says,
    read the resources parameter and call ``kms:VerifyMac``. Anything else is refused as IAM
    would refuse it, and recorded."""

    def __init__(self, cloud: Cloud) -> None:
        tables = cloud.stack.settings.tables
        self.allowed = {
            (action.split(":")[1], tables[logical])
            for logical, actions in AUDITOR_READS.items()
            for action in actions
        }
        self.calls: list[str] = []
        self.refused: list[str] = []

    def __call__(self, params: dict[str, Any], model: Any, event_name: str, **_: Any) -> None:
        service, operation = event_name.split(".")[1:3]
        call = f"{service}:{operation}"
        self.calls.append(call)
        if service == "dynamodb":
            names = list(params.get("RequestItems", {})) or [params.get("TableName")]
            if all((operation, name) in self.allowed for name in names):
                return
        elif call in ("ssm:GetParameter", "kms:VerifyMac"):
            return
        self.refused.append(call)
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": f"auditor: {call}"}}, model.name
        )


def test_an_auditor_verifies_with_verify_mac_and_reads_only(local_cloud: Cloud, tmp_path: Path) -> None:
    """A writer exports the day keys; with only the auditor's rights, ``audit verify --day-keys``
    checks every chain, confirming each day key with VerifyMac and never calling GenerateMac; a
    key altered in the file, or a day it lacks, is refused naming the day."""
    keys = tmp_path / "keys.json"
    exported = local_cloud.json("audit", "day-keys", "--since", "2026-03-01", "--out", str(keys))
    today = local_cloud.clock.now().date().isoformat()
    assert exported == {"file": str(keys), "days": exported["days"], "first": "2026-03-01", "last": today}
    assert keys.stat().st_mode & 0o077 == 0  # readable by the writer only
    labels = [entry["label"] for entry in json.loads(keys.read_text())["keys"]]
    assert labels[0] == "rebound-audit/v1/2026-03-01" and labels[-1] == f"rebound-audit/v1/{today}"

    rights = AuditorRights(local_cloud)
    with local_cloud.hooked("before-parameter-build", rights):
        everything = local_cloud.json("audit", "verify", "--all", "--day-keys", str(keys))
        one = local_cloud.json("audit", "verify", LEDGER_RUN, "--day-keys", str(keys))
    assert {"run", "task", "workorder"} <= {r["subject"].split("#")[0] for r in everything}
    assert all(r["ok"] and r["keying"] == "keyed" for r in everything)
    assert one[0]["ok"] and one[0]["detail"].endswith("the run rebuilds from its trail")
    assert rights.refused == [] and "kms:VerifyMac" in rights.calls
    assert "kms:GenerateMac" not in rights.calls
    assert {c.split(":")[0] for c in rights.calls} == {"ssm", "dynamodb", "kms"}
    # As an auditor, without the file, the MACs cannot be checked: GenerateMac is refused.
    with local_cloud.hooked("before-parameter-build", rights):
        unkeyed = local_cloud.cli("audit", "verify", LEDGER_RUN)
    assert unkeyed.exit_code != 0 and "AccessDeniedException" in unkeyed.stderr
    assert rights.refused == ["kms:GenerateMac"]

    document = json.loads(keys.read_text())
    day = document["keys"][-1]["label"]
    document["keys"][-1]["key"] = "00" * 32
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(document))
    refused = local_cloud.cli("audit", "verify", "--all", "--day-keys", str(altered))
    assert refused.exit_code == 2
    assert f"the key given for {day} is not the audit key's" in " ".join(refused.stderr.split())
    document["keys"] = document["keys"][:-1]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(document))
    missing = local_cloud.cli("audit", "verify", "--all", "--day-keys", str(short))
    assert missing.exit_code == 2 and f"hold no key for {day}" in " ".join(missing.stderr.split())
    ahead = local_cloud.cli(
        "audit", "day-keys", "--since", today, "--until", "2099-01-01", "--out", str(keys)
    )
    assert ahead.exit_code == 2 and "after today" in ahead.stderr


def test_audit_verify_checks_chains_and_finds_tampering(local_cloud: Cloud) -> None:
    one = local_cloud.json("audit", "verify", LEDGER_RUN)
    assert one == [
        {
            "subject": f"run#{LEDGER_RUN}",
            "ok": True,
            "records": one[0]["records"],
            "detail": f"{one[0]['records']} records verified; the run rebuilds from its trail",
            "mismatched_fields": [],
            "keying": "keyed",
            "unkeyed_records": 0,
        }
    ]
    # A policy's chain as well (whether or not the policy test ran first in this module's cloud).
    local_cloud.json("policies", "set", "quick", "max_delay=11m", "--yes")
    everything = local_cloud.json("audit", "verify", "--all")
    subjects = {r["subject"].split("#")[0] for r in everything}
    assert {"run", "task", "workorder", "policy"} <= subjects and all(r["ok"] for r in everything)
    assert local_cloud.cli("audit", "verify").exit_code == 2  # neither a subject nor --all
    shown = local_cloud.ok("audit", "verify", "--all")  # a bar of chains verified, out of all of them
    assert "chains verified" in shown.stderr and f"{len(everything)}/{len(everything)}" in shown.stderr

    # Someone edits a record of the payments run's trail, and the stored run of the ledger run.
    ddb = boto3.client("dynamodb")
    tables = local_cloud.stack.settings.tables
    key = to_item({"subject": f"run#{PAYMENT_RUN}", "seq": 2})
    stored_record = ddb.get_item(TableName=tables["audit"], Key=key)["Item"]
    stored_run = ddb.get_item(TableName=tables["runs"], Key=to_item({"run_id": LEDGER_RUN}))["Item"]
    record = from_item(stored_record)
    record["evidence"]["error_code"] = "NOTHING_TO_SEE"
    ddb.put_item(TableName=tables["audit"], Item=to_item(record, "audit"))
    run_item = from_item(stored_run)
    run_item["last_error_code"] = "EDITED"
    ddb.put_item(TableName=tables["runs"], Item=to_item(run_item, "runs"))
    try:
        altered = local_cloud.cli("audit", "verify", PAYMENT_RUN)
        assert altered.exit_code == 3 and "seq 2 was altered" in altered.stdout
        rewritten = local_cloud.cli("-o", "json", "audit", "verify", LEDGER_RUN)
        assert rewritten.exit_code == 3
        assert json.loads(rewritten.stdout)[0]["mismatched_fields"] == ["last_error_code"]
        sweep = local_cloud.cli("-o", "json", "audit", "verify", "--all")
        assert sweep.exit_code == 3
        assert {r["subject"] for r in json.loads(sweep.stdout) if not r["ok"]} == {
            f"run#{PAYMENT_RUN}",
            f"run#{LEDGER_RUN}",
        }
    finally:  # the module's other tests share this cloud, in whatever order they run
        ddb.put_item(TableName=tables["audit"], Item=stored_record)
        ddb.put_item(TableName=tables["runs"], Item=stored_run)
    assert local_cloud.cli("audit", "verify", "--all").exit_code == 0  # as it was


def test_a_critical_runs_skip_waits_for_a_second_operator_who_approves_it(local_cloud: Cloud) -> None:
    from rebound.ops.approvals import Approvals

    held = local_cloud.cli("runs", "skip", PAYMENT_RUN, "--reason", "paid by hand", "--yes")
    assert held.exit_code == 8, held.output
    assert "needs a second operator: request apr-" in held.output
    [request] = local_cloud.json("approvals", "list")
    assert (request["action"], request["subject"], request["requested_by"]) == (
        "runs:skip",
        f"run#{PAYMENT_RUN}",
        OPERATOR,
    )
    assert local_cloud.runs()[PAYMENT_RUN].state.value == "dead_lettered"  # nothing done yet

    own = local_cloud.cli("approvals", "approve", request["request_id"], "--yes")
    assert own.exit_code == 7 and "another operator must approve it" in own.output, own.output
    # a second operator (another identity: the approval is theirs, the run skipped as them)
    done = Approvals(local_cloud.deps, "arn:aws:iam::123456789012:user/bob").approve(request["request_id"])
    assert done.outcome == {"ok": True, "run_id": PAYMENT_RUN, "state": "skipped"}
    shown = local_cloud.json("approvals", "show", request["request_id"])
    assert (shown["state"], shown["decided_by"]) == ("done", "arn:aws:iam::123456789012:user/bob")
    assert local_cloud.json("approvals", "list") == []
    again = local_cloud.cli("approvals", "reject", request["request_id"])
    assert again.exit_code == 5 and "is done" in again.output, again.output
