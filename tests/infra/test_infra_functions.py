"""Functions: one factory, arm64 and python3.13, the environment the code reads, and the triggers
their specs name (batch item failures, concurrency caps, the outbox relay's stream, the sweep)."""

from __future__ import annotations

from typing import Any

import pytest
from infra_helpers import Synth, ref_target

from rebound import resources as r
from rebound.domain.target_specs import TargetRules
from rebound.settings import settings_from_env

pytestmark = pytest.mark.infra


def function(synth: Synth, env: str, logical: str) -> dict[str, Any]:
    lid = synth.logical_id(env, synth.stacks[env].functions[logical].function)
    return dict(synth.template(env)["Resources"][lid])


def mappings_of(synth: Synth, env: str, logical: str) -> list[dict[str, Any]]:
    lid = synth.logical_id(env, synth.stacks[env].functions[logical].function)
    return [
        m["Properties"]
        for m in synth.resources(env, "AWS::Lambda::EventSourceMapping").values()
        if ref_target(m["Properties"]["FunctionName"]) == lid
    ]


def test_every_spec_function_runs_python_3_13_on_arm64_with_its_handler_and_timeout(
    synth: Synth, env: str
) -> None:
    for spec in r.SPEC.functions:
        props = function(synth, env, spec.logical)["Properties"]
        assert props["Runtime"] == "python3.13"
        assert props["Architectures"] == ["arm64"]
        assert props["Handler"] == spec.handler
        assert props["Timeout"] == spec.timeout_s
        assert props["MemorySize"] == spec.memory_mb
        assert ref_target(props["LoggingConfig"]["LogGroup"]) is not None
        assert len(props["Layers"]) == 1


def test_the_environment_is_the_one_settings_from_env_reads(synth: Synth, env: str) -> None:
    for spec in r.SPEC.functions:
        variables = function(synth, env, spec.logical)["Properties"]["Environment"]["Variables"]

        # Tokens resolve at deploy time; stand in for them with their logical ids (queue ARNs are
        # parsed into URL and name, so theirs must look like ARNs).
        def resolved(v: Any) -> str:
            if isinstance(v, dict) and "Fn::Join" in v:  # a value made of several tokens (the flags')
                separator, parts = v["Fn::Join"]
                return str(separator).join(resolved(part) for part in parts)
            return v if isinstance(v, str) else f"resolved-{ref_target(v)}"

        plain = {
            k: f"arn:aws:sqs:us-east-1:123456789012:{ref_target(v)}"
            if k.startswith("REBOUND_QUEUE_") and not isinstance(v, str)
            else resolved(v)
            for k, v in variables.items()
        }
        settings = settings_from_env(plain)
        assert settings.flags is not None and settings.flags.startswith("appconfig:resolved-FeatureFlags")
        assert settings.environment == env
        assert set(settings.tables) == {t.logical for t in r.SPEC.tables}
        assert set(settings.queues) == {q.logical for q in r.SPEC.queues}
        assert settings.topic_arn is not None
        assert r.ENV_CONFIG_DIR not in variables  # the bundle's rebound/_config is the default


@pytest.mark.parametrize(("env", "sim"), [("dev", True), ("staging", False), ("prod", False)])
def test_every_function_carries_its_environments_target_rules(synth: Synth, env: str, sim: bool) -> None:
    """The executor judges targets by the rules registration used: sim only where enabled."""
    for spec in r.SPEC.functions:
        variables = function(synth, env, spec.logical)["Properties"]["Environment"]["Variables"]
        rules = TargetRules.model_validate_json(variables[r.ENV_TARGET_RULES])
        assert rules.sim is sim
        assert rules.plain_http_hosts == () and rules.allow_networks == ()


def test_lambda_environment_stays_under_the_4_kb_limit(synth: Synth) -> None:
    """With each name at the longest CloudFormation would generate for it."""
    variables = function(synth, "staging", "executor")["Properties"]["Environment"]["Variables"]
    size = 0
    for key, value in variables.items():
        size += len(key)
        if isinstance(value, str):
            size += len(value)
        elif key.endswith("_URL"):
            size += len("https://sqs.ap-southeast-2.amazonaws.com/123456789012/") + 80
        elif key.endswith("_ARN"):
            size += len("arn:aws:sqs:ap-southeast-2:123456789012:") + 80
        else:
            size += 80
    assert size < 4096


def test_queue_consumers_report_batch_item_failures_with_a_concurrency_cap(synth: Synth, env: str) -> None:
    for spec in r.SPEC.functions:
        if spec.queue is None:
            continue
        (mapping,) = mappings_of(synth, env, spec.logical)
        queue = synth.logical_id(env, synth.stacks[env].messaging.queues[spec.queue])
        assert ref_target(mapping["EventSourceArn"]) == queue
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert mapping["ScalingConfig"]["MaximumConcurrency"] == spec.max_concurrency
        assert mapping["BatchSize"] == spec.batch_size


@pytest.mark.parametrize("logical", [f.logical for f in r.SPEC.functions if f.stream_table])
def test_stream_functions_read_inserts_and_never_drop_a_failure_silently(
    synth: Synth, env: str, logical: str
) -> None:
    """The outbox relay and the archiver: inserts only (TTL deletions are stream records too),
    bisected and retried, and a batch given up on is named in the control DLQ (the sweeper
    publishes or archives it again)."""
    spec = r.SPEC.function(logical)
    (mapping,) = mappings_of(synth, env, spec.logical)
    assert mapping.get("MaximumBatchingWindowInSeconds", 0) == spec.batch_window_s
    assert mapping["BatchSize"] == spec.batch_size
    table = synth.logical_id(env, synth.stacks[env].state.tables[str(spec.stream_table)])
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [table, "StreamArn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["ParallelizationFactor"] == 1
    assert 0 < mapping["MaximumRetryAttempts"] <= 10000
    assert mapping["FilterCriteria"] == {"Filters": [{"Pattern": '{"eventName":["INSERT"]}'}]}
    control_dlq = synth.logical_id(env, synth.stacks[env].messaging.queues[r.CONTROL_DLQ.logical])
    assert ref_target(mapping["DestinationConfig"]["OnFailure"]["Destination"]) == control_dlq


def test_sweeper_runs_every_minute_with_a_retry_policy_and_the_scheduler_dlq(synth: Synth, env: str) -> None:
    (spec,) = [f for f in r.SPEC.functions if f.every_minute]
    fn = synth.logical_id(env, synth.stacks[env].functions[spec.logical].function)
    (schedule,) = [
        s["Properties"]
        for s in synth.resources(env, "AWS::Scheduler::Schedule").values()
        if ref_target(s["Properties"]["Target"]["Arn"]) == fn
    ]
    assert schedule["ScheduleExpression"] == "rate(1 minute)"
    assert schedule["State"] == "ENABLED"
    target = schedule["Target"]
    dlq = synth.logical_id(env, synth.stacks[env].messaging.queues[r.SCHEDULER_DLQ.logical])
    assert ref_target(target["DeadLetterConfig"]["Arn"]) == dlq
    assert target["RetryPolicy"]["MaximumRetryAttempts"] >= 1
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60


def test_functions_without_a_trigger_in_the_spec_get_none(synth: Synth) -> None:
    for spec in r.SPEC.functions:
        triggered = spec.queue is not None or spec.stream_table is not None
        assert bool(mappings_of(synth, "dev", spec.logical)) is triggered


def test_all_functions_share_one_code_asset_and_one_layer(synth: Synth) -> None:
    functions = synth.resources("dev", "AWS::Lambda::Function").values()
    assert len({f["Properties"]["Code"]["S3Key"] for f in functions}) == 1
    (layer,) = synth.resources("dev", "AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
    # Same inputs, same assets, whatever the environment.
    for env in ("staging", "prod"):
        other = synth.resources(env, "AWS::Lambda::Function").values()
        assert {f["Properties"]["Code"]["S3Key"] for f in other} == {
            f["Properties"]["Code"]["S3Key"] for f in functions
        }


def test_tracing_is_active_on_every_function_where_the_environment_asks(synth: Synth, env: str) -> None:
    traced = synth.stacks[env].config.tracing
    for spec in r.SPEC.functions:
        props = function(synth, env, spec.logical)["Properties"]
        mode = props.get("TracingConfig", {}).get("Mode")
        assert mode == ("Active" if traced else None), (env, spec.logical)
        assert props["Environment"]["Variables"][r.ENV_TRACING] == ("1" if traced else "0")
    if traced:
        statements = [
            s
            for policy in synth.resources(env, "AWS::IAM::Policy").values()
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
        ]
        assert any("xray:PutTraceSegments" in str(s["Action"]) for s in statements)


def test_staging_traces_and_dev_and_prod_do_not_by_default(synth: Synth) -> None:
    assert [synth.stacks[e].config.tracing for e in ("dev", "staging", "prod")] == [False, True, False]
