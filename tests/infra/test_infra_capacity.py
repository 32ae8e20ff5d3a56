"""DynamoDB capacity: on-demand by default; ``capacity.mode: provisioned`` provisions every table
and index with auto scaling at the target utilization, and alarms when a table stays throttled.
cdk-nag passes on the provisioned stack too."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from infra_helpers import Synth, flatten

from rebound import resources as r
from rebound.domain.errors import ConfigError
from rebound_infra.app import ENVIRONMENTS_DIR_CONTEXT, build_app
from rebound_infra.config import CapacityConfig, load_environment
from rebound_infra.constructs.observability import THROTTLING_RUNBOOK

pytestmark = pytest.mark.infra
ENV_DIR = Path(__file__).resolve().parents[2] / "config" / "environments"
PROVISIONED = (
    "capacity:\n  mode: provisioned\n  target_utilization_percent: 65\n"
    "  min_read_units: 2\n  max_read_units: 300\n  min_write_units: 3\n  max_write_units: 900\n"
    "  tables:\n    runs:\n      min_write_units: 40\n      max_write_units: 4000\n"
)
OWN = {"runs": {"ReadCapacityUnits": 2, "WriteCapacityUnits": 40}}
"""The tables whose own units differ from the environment's (reads are left to the environment)."""


def write_env(tmp_path: Path, name: str, capacity: str) -> None:
    text = (ENV_DIR / "dev.yaml").read_text().replace("name: dev", f"name: {name}")
    kept, inside = [], False
    for line in text.splitlines():  # the file's own capacity block gives way to the test's
        inside = line.startswith("capacity:") or (inside and line.startswith("  "))
        if not inside:
            kept.append(line)
    (tmp_path / f"{name}.yaml").write_text("\n".join(kept) + "\n" + capacity)


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp("capacity")
    write_env(tmp_path, "qa", PROVISIONED)
    app, stacks = build_app(
        ["qa"], outdir=str(tmp_path / "out"), context={ENVIRONMENTS_DIR_CONTEXT: str(tmp_path)}
    )
    assembly = app.synth()  # cdk-nag runs here: a finding fails the synthesis
    return {
        "template": assembly.get_stack_by_name(stacks["qa"].stack_name).template,
        "stack": stacks["qa"],
        "outdir": str(tmp_path / "out"),
    }


def test_tables_are_on_demand_with_no_scaling_or_throttling_alarms_by_default(synth: Synth, env: str) -> None:
    template = synth.template(env)
    tables = _of_type(template, "AWS::DynamoDB::Table")
    assert len(tables) == len(r.SPEC.tables)
    for resource in tables.values():
        props = resource["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert "ProvisionedThroughput" not in props
        for index in props.get("GlobalSecondaryIndexes", []):
            assert "ProvisionedThroughput" not in index
    assert not _of_type(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert not [a for a in synth.stacks[env].observability.alarms if a.endswith("Throttled")]


def test_the_bench_prices_provisioned_tables_at_the_stacks_defaults() -> None:
    """``make bench``'s provisioned model (``rebound_local.pricing``, which cannot import the CDK
    app's config) assumes the target utilization and minimum units a ``provisioned`` environment
    gets when it says nothing else, and one throttling alarm per table."""
    from rebound_local import pricing

    defaults = CapacityConfig(mode="provisioned")
    assert defaults.target_utilization_percent == pricing.PROVISIONED_UTILIZATION * 100
    signature = inspect.signature(pricing.provisioned_idle_monthly).parameters
    assert signature["min_read_units"].default == defaults.min_read_units
    assert signature["min_write_units"].default == defaults.min_write_units
    assert len(r.SPEC.tables) == pricing.PROVISIONED_ALARMS


def test_provisioned_tables_and_indexes_start_at_the_minimum_units(provisioned: dict[str, Any]) -> None:
    tables = _of_type(provisioned["template"], "AWS::DynamoDB::Table")
    assert len(tables) == len(r.SPEC.tables)
    stack = provisioned["stack"]
    for spec in r.SPEC.tables:
        lid = stack.get_logical_id(stack.state.tables[spec.logical].node.default_child)
        props = tables[lid]["Properties"]
        minimum = OWN.get(spec.logical, {"ReadCapacityUnits": 2, "WriteCapacityUnits": 3})
        assert props.get("BillingMode", "PROVISIONED") == "PROVISIONED"
        assert props["ProvisionedThroughput"] == minimum, spec.logical
        for index in props.get("GlobalSecondaryIndexes", []):
            assert index["ProvisionedThroughput"] == minimum, (spec.logical, index["IndexName"])


def test_every_table_and_index_scales_reads_and_writes_at_the_target(provisioned: dict[str, Any]) -> None:
    template = provisioned["template"]
    targets = _of_type(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    indexes = sum(len(spec.indexes) for spec in r.SPEC.tables)
    assert len(targets) == 2 * (len(r.SPEC.tables) + indexes)
    dimensions: dict[str, int] = {}
    runs_writes = 0
    for target in targets.values():
        props = target["Properties"]
        dimension = props["ScalableDimension"]
        dimensions[dimension] = dimensions.get(dimension, 0) + 1
        limits = (props["MinCapacity"], props["MaxCapacity"])
        if dimension.endswith("ReadCapacityUnits"):
            assert limits == (2, 300)
        elif limits == (40, 4000):  # the runs table's own, for it and its two indexes
            runs_writes += 1
        else:
            assert limits == (3, 900)
    assert runs_writes == 1 + len(r.RUNS.indexes)
    assert dimensions == {
        "dynamodb:table:ReadCapacityUnits": len(r.SPEC.tables),
        "dynamodb:table:WriteCapacityUnits": len(r.SPEC.tables),
        "dynamodb:index:ReadCapacityUnits": indexes,
        "dynamodb:index:WriteCapacityUnits": indexes,
    }
    policies = _of_type(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    assert len(policies) == len(targets)
    for policy in policies.values():
        config = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        assert config["TargetValue"] == 65


def test_each_provisioned_table_alarms_when_it_or_an_index_stays_throttled(
    provisioned: dict[str, Any],
) -> None:
    observability = provisioned["stack"].observability
    throttled = {name for name in observability.alarms if name.endswith("Throttled")}
    assert throttled == {
        f"{''.join(p.capitalize() for p in s.logical.split('_'))}Throttled" for s in r.SPEC.tables
    }
    assert {observability.runbooks[name] for name in throttled} == {THROTTLING_RUNBOOK}
    page = (ENV_DIR.parents[1] / "docs" / "runbooks" / THROTTLING_RUNBOOK).read_text()
    assert all(f"`{name}`" in page for name in throttled)
    alarms = _of_type(provisioned["template"], "AWS::CloudWatch::Alarm")
    [runs] = [
        a["Properties"] for a in alarms.values() if "the runs table" in a["Properties"]["AlarmDescription"]
    ]
    assert runs["EvaluationPeriods"] == runs["DatapointsToAlarm"] == 3
    assert runs["Threshold"] == 0
    metrics = [m for m in runs["Metrics"] if "MetricStat" in m]
    names = sorted(m["MetricStat"]["Metric"]["MetricName"] for m in metrics)
    # the table's reads and writes and each of its two indexes' reads and writes
    assert names == ["ReadThrottleEvents"] * 3 + ["WriteThrottleEvents"] * 3
    indexes = {
        d["Value"]
        for m in metrics
        for d in m["MetricStat"]["Metric"]["Dimensions"]
        if d["Name"] == "GlobalSecondaryIndexName"
    }
    assert indexes == {i.name for i in r.RUNS.indexes}


@pytest.mark.parametrize(
    ("capacity", "key_path", "words"),
    [
        ("capacity:\n  mode: reserved\n", "capacity.mode", ("on_demand", "provisioned")),
        (
            "capacity:\n  mode: provisioned\n  min_write_units: 50\n  max_write_units: 10\n",
            "capacity",
            ("min_write_units",),
        ),
        (
            "capacity:\n  mode: provisioned\n  target_utilization_percent: 95\n",
            "capacity.target_utilization_percent",
            ("90",),
        ),
        (
            "capacity:\n  tables:\n    run:\n      min_write_units: 5\n",
            "capacity.tables",
            ("run", "runs", "audit"),
        ),
        (
            "capacity:\n  tables:\n    audit:\n      min_write_units: 2000\n",
            "capacity",
            ("tables.audit", "min_write_units (2000)", "max_write_units (1000)"),
        ),
    ],
)
def test_a_bad_capacity_names_the_key_and_what_is_wrong(
    tmp_path: Path, capacity: str, key_path: str, words: tuple[str, ...]
) -> None:
    write_env(tmp_path, "qa", capacity)
    with pytest.raises(ConfigError) as err:
        load_environment("qa", tmp_path)
    assert err.value.key_path == key_path
    assert all(word in err.value.problem for word in words), err.value.problem


def test_checkov_finds_nothing_new_in_the_provisioned_stack(provisioned: dict[str, Any]) -> None:
    from test_infra_checkov import CHECKOV, _scan, accepted

    if not CHECKOV.exists():
        pytest.skip("checkov is not installed in .venv-checkov: run `make scanner` (make test does)")
    found = _scan(provisioned["outdir"], (("qa", provisioned["stack"].stack_name),))["qa"]
    unexplained = {check: sorted(res) for check, res in found.items() if check not in accepted()}
    assert not unexplained, unexplained


def test_the_dashboard_graphs_every_tables_throttled_requests_when_provisioned(
    provisioned: dict[str, Any], synth: Synth
) -> None:
    title = "DynamoDB throttled requests per table (provisioned capacity)"

    def widgets(template: dict[str, Any]) -> dict[str, Any]:
        [board] = _of_type(template, "AWS::CloudWatch::Dashboard").values()
        body = json.loads(flatten(board["Properties"]["DashboardBody"]))
        return {w["properties"]["title"]: w for w in body["widgets"]}

    graph = widgets(provisioned["template"])[title]
    labels = [row[-1]["label"] for row in graph["properties"]["metrics"] if "expression" in row[-1]]
    assert labels == [f"{spec.logical} throttled requests" for spec in r.SPEC.tables]
    assert title not in widgets(synth.template("prod"))
