"""``rebound local rehearse``: the synthesized dev stack, deployed to the local cloud, runs its
smoke scenario from the built bundle under its roles; and each kind of failure a first deploy
would meet (a missing grant, an import of a package the bundle lacks, a variable the template does
not set) makes the rehearsal fail, naming the function and what went wrong."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from synth_support import shared_assembly

from rebound import resources as r
from rebound_local.rehearse.run import RehearsalResult, print_summary, rehearse

pytestmark = pytest.mark.e2e

TEMPLATE = "Rebound-dev.template.json"
SHORT = """
description: one run retried by DelaySeconds, for the sabotage tests
start: "2026-03-07T00:00:00Z"
duration: 4m
settle: 10m
tasks:
  - id: acme.ledger-sync-0002
    tenant: acme
    schedule: {cron: "*/5 * * * *", timezone: UTC}
    target: {type: sim, behavior: {fail_first: 1}}
    retry_policy: {extends: quick, base_delay: 30s}
"""


def short(folder: Path) -> Path:
    """A shorter scenario than the smoke one: every sabotaged path is on it, in a few seconds."""
    path = folder / "short.yaml"
    path.write_text(SHORT)
    return path


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every environment synthesized once a session, as ``make synth`` does (the dev one is used)."""
    return shared_assembly(tmp_path_factory)


def copy_assembly(assembly: Path, dest: Path) -> Path:
    """The template and its code asset (the layer asset is not needed: the rehearsal builds the
    layer's packages for this machine from the same pins)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(assembly / TEMPLATE, dest / TEMPLATE)
    for asset in assembly.glob("asset.*"):
        if (asset / "rebound").is_dir():
            shutil.copytree(asset, dest / asset.name)
    return dest


def edit(folder: Path, change: Any) -> Path:
    path = folder / TEMPLATE
    body = json.loads(path.read_text())
    change(body["Resources"])
    path.write_text(json.dumps(body))
    return path


def summary(result: RehearsalResult) -> str:
    lines: list[str] = []
    print_summary(result, lines.append)
    return "\n".join(lines)


def function_resource(resources: dict[str, Any], logical: str) -> dict[str, Any]:
    service = r.service_name(logical)
    return next(
        v
        for v in resources.values()
        if v["Type"] == "AWS::Lambda::Function"
        and v["Properties"]["Environment"]["Variables"].get("POWERTOOLS_SERVICE_NAME") == service
    )


def test_the_synthesized_stack_runs_its_smoke_scenario_from_the_bundle_under_iam(
    assembly: Path, tmp_path: Path
) -> None:
    folder = copy_assembly(assembly, tmp_path)
    result = rehearse(folder / TEMPLATE, log_path=folder / "functions.log")
    report = result.report
    assert result.ok, summary(result)
    assert set(report["invocations"]) == {spec.logical for spec in r.SPEC.functions}
    calls = report["calls"]
    # Each path that writes, authorized against its own role: the one-time schedule of a long
    # retry (handing Scheduler its role), the DelaySeconds retry, the dead letter's notification,
    # the outbox on the bus, the audit chain's MACs with the key's full ARN.
    assert {"scheduler:CreateSchedule", "iam:PassRole", "sqs:SendMessage"} <= set(calls["retry_scheduler"])
    assert {"sns:Publish", "kms:GenerateMac"} <= set(calls["escalation"])
    assert "events:PutEvents" in calls["outbox_relay"]
    assert "kms:GenerateMac" in calls["executor"]
    assert {"scheduler:UpdateSchedule", "dynamodb:Query"} <= set(calls["ops_api"])
    # The feature flags, read through AppConfigData from the stack's deployed profile.
    reads = {"appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration"}
    assert reads <= set(calls["retry_scheduler"]) and reads <= set(calls["ops_api"])
    # every route signed with SigV4 by the operator is let in as that identity and answers; the
    # front door refuses an unsigned request and one signed with the wrong secret (403) before
    # the function is invoked
    signed = [route for route in report["routes"] if not route["route"].startswith(("unsigned", "wrong"))]
    assert signed and [route["status"] for route in signed] == [200] * len(signed)
    refused = {route["route"]: route for route in report["routes"] if route not in signed}
    assert refused["unsigned GET /health"]["refused"] == "Missing Authentication Token"
    assert "signature we calculated does not match" in refused["wrong secret GET /tasks"]["refused"]
    assert report["invocations"]["ops_api"] == len(signed), "no refused request reached the function"
    runs = report["simulation"]["runs"]
    states = {run["task_id"]: run["final_state"] for run in runs}
    assert states["globex.broken-feed-004"] == "dead_lettered"
    assert states["globex.report-build-03"] == "succeeded"  # after its one-time schedule
    assert max(len(run["attempts"]) for run in runs if run["task_id"] == "acme.ledger-sync-0002") == 2
    # The executor's first invocation died after its claim: the sweeper expired the lease and
    # the run's next attempt succeeded.
    assert report["crashes"] == {"executor": 1}
    first = next(run for run in runs if run["run_id"] == "acme.invoice-export-001:20260307T000000Z")
    assert [a["outcome"] for a in first["attempts"]] == ["timeout", "succeeded"]
    # An asynchronous attempt: the completion key is the stack's generated secret; the worker's
    # heartbeats and completion reach the retry scheduler through the bus.
    assert "secretsmanager:GetSecretValue" in calls["executor"]
    (backup,) = [run for run in runs if run["task_id"] == "acme.nightly-backup-05"]
    assert backup["final_state"] == "succeeded" and len(backup["attempts"]) == 1
    assert report["simulation"]["async_reports"]["sent"] == {
        "rebound.task.completed": 1,
        "rebound.task.heartbeat": 4,
    }
    (event_run,) = [run for run in runs if run["task_id"] == "acme.invoice-charged-06"]
    assert event_run["final_state"] == "succeeded" and ":evt-" in event_run["run_id"]
    simulation = report["simulation"]
    (workstream,) = simulation["workstream_runs"]
    assert workstream["state"] == "completed" and workstream["checkpoints"]["taken"] >= 2
    redrive = next(op for op in simulation["operations"] if op["op"] == "redrive")
    assert redrive["ok"] and redrive["redrive_outcomes"] == {"moved": 1}
    assert "sqs:SendMessage" in calls["escalation"]  # the workstream's step on the execution queue
    assert "AWS::Lambda::Function" in report["resources"]["played by the local runtime"]
    assert "AWS::CloudWatch::Alarm" in report["resources"]["not played"]  # named, not skipped silently
    assert report["plain_log_lines"] == []
    # Names of AWS's shape and length, so every item is its AWS size: the audit records carry the
    # key's 75-character ARN; tables and queues have CloudFormation's generated names.
    names = report["names"]
    assert (
        names["audit_key"].startswith("arn:aws:kms:us-east-1:123456789012:key/")
        and len(names["audit_key"]) == 75
    )
    assert names["tables"]["runs"].startswith("Rebound-dev-Stateruns") and len(names["tables"]["runs"]) >= 40
    assert names["queues"]["execution"].startswith(
        "arn:aws:sqs:us-east-1:123456789012:Rebound-dev-Messagingexecution"
    )


def test_a_role_missing_a_grant_fails_naming_the_function_the_call_and_the_resource(
    assembly: Path, tmp_path: Path
) -> None:
    def drop_send_to_execution(resources: dict[str, Any]) -> None:
        execution = next(k for k in resources if k.startswith("Messagingexecution"))
        role = next(k for k in resources if k.startswith("FunctionsretryschedulerRole") and "Policy" not in k)
        policy = next(
            v
            for v in resources.values()
            if v["Type"] == "AWS::IAM::Policy" and {"Ref": role} in v["Properties"]["Roles"]
        )
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "sqs:SendMessage" in statement["Action"]:
                statement["Resource"] = [
                    arn for arn in statement["Resource"] if arn != {"Fn::GetAtt": [execution, "Arn"]}
                ]

    template = edit(copy_assembly(assembly, tmp_path), drop_send_to_execution)
    result = rehearse(template, short(tmp_path), log_path=tmp_path / "functions.log")
    assert not result.ok
    denied = result.report["denied"]
    assert denied, summary(result)
    assert all(
        line.startswith("retry_scheduler: sqs:SendMessage on arn:aws:sqs:us-east-1:") for line in denied
    )
    assert all(":Rebound-dev-Messagingexecution" in line for line in denied)


def test_a_handler_importing_a_development_package_fails_at_its_cold_start(
    assembly: Path, tmp_path: Path
) -> None:
    assert importlib.util.find_spec("click") is not None  # in the dev environment, the import passes
    folder = copy_assembly(assembly, tmp_path)
    (code,) = [a for a in folder.glob("asset.*") if (a / "rebound").is_dir()]
    # The sweeper's engine: the sweeper imports it at its first invocation, the retry scheduler and
    # the ops API when they reach a path that uses it.
    sweeper = code / "rebound" / "engine" / "sweeper.py"
    sweeper.write_text(sweeper.read_text() + "\nimport click  # noqa: E402,F401\n")
    result = rehearse(folder / TEMPLATE, short(tmp_path), log_path=tmp_path / "functions.log")
    assert not result.ok
    failures = result.report["failed_invocations"]
    assert "sweeper" in {f["function"] for f in failures}, summary(result)
    assert {(f["type"], f["message"]) for f in failures} == {
        ("ModuleNotFoundError", "No module named 'click'")
    }
    assert not {f["function"] for f in failures} & {"executor", "escalation", "outbox_relay"}


def test_a_variable_missing_from_the_template_fails_the_function_that_reads_it(
    assembly: Path, tmp_path: Path
) -> None:
    def drop_runs_table(resources: dict[str, Any]) -> None:
        del function_resource(resources, "executor")["Properties"]["Environment"]["Variables"][
            "REBOUND_TABLE_RUNS"
        ]

    template = edit(copy_assembly(assembly, tmp_path), drop_runs_table)
    result = rehearse(template, short(tmp_path), log_path=tmp_path / "functions.log")
    assert not result.ok
    failures = result.report["failed_invocations"]
    assert failures and {f["function"] for f in failures} == {"executor"}, summary(result)
    assert "REBOUND_TABLE_RUNS" in failures[0]["message"]


def test_an_environment_over_lambda_s_4_kb_fails_naming_the_functions(assembly: Path, tmp_path: Path) -> None:
    """Lambda refuses a function whose variables add up to more than 4 KB; with AWS's ARNs, 30
    identities in the environment's file are enough."""
    identities = {f"arn:aws:iam::123456789012:role/operators/oncall-team-{n:02d}": ["*"] for n in range(30)}

    def many_identities(resources: dict[str, Any]) -> None:
        for resource in resources.values():
            if resource["Type"] == "AWS::Lambda::Function":
                resource["Properties"]["Environment"]["Variables"]["REBOUND_IDENTITIES"] = json.dumps(
                    identities
                )

    result = rehearse(edit(copy_assembly(assembly, tmp_path), many_identities))
    assert not result.ok
    oversize = result.report["oversize"]
    assert len(oversize) == len(r.SPEC.functions), summary(result)
    assert all("over Lambda's 4,096" in line for line in oversize)
