"""Least privilege: each function's role has what its code calls and nothing more; the audit table
is append-only for everyone; no statement uses a ``*`` resource unless AWS requires one."""

from __future__ import annotations

import pytest
from infra_helpers import Synth, actions_on, all_actions, as_list, mentions, role_statements

from rebound import resources as r
from rebound_infra.permissions import ACCESS, APPEND_ONLY_FORBIDDEN

pytestmark = pytest.mark.infra

KMS_DATA_ACTIONS = {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"}
"""What CDK grants on the customer-managed key of a queue (encryption: cmk)."""
# Actions AWS authorizes only on "*" (they take no resource ARN).
STAR_ONLY_ACTIONS = {
    "dynamodb:ListStreams",
    "cloudwatch:GetMetricStatistics",
    "scheduler:ListSchedules",
    "xray:PutTraceSegments",  # active tracing (an environment's `tracing: true`): X-Ray has no resources
    "xray:PutTelemetryRecords",
}


def function_role(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].functions[logical].role)


def table_id(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].state.tables[logical])


def queue_id(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].messaging.queues[logical])


def all_role_ids(synth: Synth, env: str) -> list[str]:
    return list(synth.resources(env, "AWS::IAM::Role"))


def test_every_function_has_its_own_role(synth: Synth, env: str) -> None:
    roles = [function_role(synth, env, f.logical) for f in r.SPEC.functions]
    assert len(set(roles)) == len(roles)
    functions = synth.resources(env, "AWS::Lambda::Function")
    assert sorted(f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()) == sorted(roles)


def test_no_role_uses_a_star_resource_unless_aws_requires_it(synth: Synth, env: str) -> None:
    for role in all_role_ids(synth, env):
        for st in role_statements(synth.template(env), role):
            if "*" in as_list(st.get("Resource", [])):
                assert set(as_list(st["Action"])) <= STAR_ONLY_ACTIONS, (role, st)


def test_no_action_wildcards_except_kms_data_keys(synth: Synth, env: str) -> None:
    for role in all_role_ids(synth, env):
        for action in all_actions(role_statements(synth.template(env), role)):
            assert "*" not in action or action in {"kms:GenerateDataKey*", "kms:ReEncrypt*"}, (role, action)


def test_no_role_can_update_or_delete_audit_records(synth: Synth, env: str) -> None:
    audit = table_id(synth, env, r.AUDIT.logical)
    for role in all_role_ids(synth, env):
        granted = actions_on(role_statements(synth.template(env), role), audit)
        assert not granted & APPEND_ONLY_FORBIDDEN, (role, granted)


def test_audit_writers_may_only_put_and_read(synth: Synth, env: str) -> None:
    audit = table_id(synth, env, r.AUDIT.logical)
    writers = [f for f, a in ACCESS.items() if r.AUDIT.logical in a.tables]
    assert writers, "someone must write the audit trail"
    for logical in writers:
        granted = actions_on(role_statements(synth.template(env), function_role(synth, env, logical)), audit)
        # The sweeper reads the stream again where the archiver gave up (its reads of the stream).
        granted -= {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
        # The run path reads records back (GetItem); the ops API only appends and queries trails.
        assert "dynamodb:PutItem" in granted <= {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"}


@pytest.mark.parametrize("logical", [f.logical for f in r.SPEC.functions])
def test_table_rights_are_exactly_what_the_function_uses(synth: Synth, logical: str) -> None:
    statements = role_statements(synth.template("prod"), function_role(synth, "prod", logical))
    for spec in r.SPEC.tables:
        granted = actions_on(statements, table_id(synth, "prod", spec.logical))
        granted -= {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
        assert granted == set(ACCESS[logical].tables.get(spec.logical, ())), (logical, spec.logical)


def test_only_the_relay_and_the_sweeper_read_the_outbox_stream_and_put_events(synth: Synth) -> None:
    """The relay publishes from the stream; the sweeper publishes again a range of it the relay
    gave up on (``Sweeper.work_control_dlq``), which it could not without both rights."""
    outbox = table_id(synth, "prod", r.OUTBOX.logical)
    bus = synth.logical_id("prod", synth.stacks["prod"].events.bus)
    for spec in r.SPEC.functions:
        statements = role_statements(synth.template("prod"), function_role(synth, "prod", spec.logical))
        reads_stream = "dynamodb:GetRecords" in actions_on(statements, outbox)
        puts_events = "events:PutEvents" in actions_on(statements, bus)
        assert reads_stream is puts_events is (spec.logical in ("outbox_relay", "sweeper")), spec.logical


def test_retry_scheduler_creates_schedules_in_its_group_and_passes_only_the_scheduler_role(
    synth: Synth,
) -> None:
    stack = synth.stacks["prod"]
    scheduler_role = synth.logical_id("prod", stack.scheduling.role)
    # The ops API writes a task's schedules as it is registered, paused and resumed.
    for logical in ("retry_scheduler", "sweeper", "ops_api"):
        statements = role_statements(synth.template("prod"), function_role(synth, "prod", logical))
        create = [st for st in statements if "scheduler:CreateSchedule" in as_list(st["Action"])]
        assert len(create) == 1
        (arn,) = as_list(create[0]["Resource"])
        assert arn["Fn::Join"][1][-1].endswith(f":schedule/{stack.scheduling.group.schedule_group_name}/*")
        assert actions_on(statements, scheduler_role) == {"iam:PassRole"}
    for logical in ("executor", "escalation", "outbox_relay"):
        statements = role_statements(synth.template("prod"), function_role(synth, "prod", logical))
        assert "scheduler:CreateSchedule" not in all_actions(statements)
        assert "iam:PassRole" not in all_actions(statements)


def test_scheduler_role_only_sends_to_the_execution_and_escalation_queues_and_its_dlq(
    synth: Synth, env: str
) -> None:
    stack = synth.stacks[env]
    role_id = synth.logical_id(env, stack.scheduling.role)
    statements = role_statements(synth.template(env), role_id)
    sends = {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
    assert actions_on(statements, queue_id(synth, env, "execution")) == sends
    assert actions_on(statements, queue_id(synth, env, "escalation")) == sends  # workstreams' starts
    assert actions_on(statements, queue_id(synth, env, "scheduler_dlq")) == sends
    assert all_actions(statements) - KMS_DATA_ACTIONS == sends
    for st in statements:
        if st["Effect"] == "Deny":  # the audit table's deny, which every role carries
            continue
        if all(a.startswith("kms:") for a in as_list(st["Action"])):  # the queues' key (encryption: cmk)
            assert stack.data_key is not None and mentions(
                st["Resource"], synth.logical_id(env, stack.data_key.key)
            )
            continue
        for resource in as_list(st["Resource"]):
            assert resource["Fn::GetAtt"][0] in {
                queue_id(synth, env, "execution"),
                queue_id(synth, env, "escalation"),
                queue_id(synth, env, "scheduler_dlq"),
            }


def test_scheduler_role_trusts_only_schedules_of_this_environments_group_in_this_account(
    synth: Synth, env: str
) -> None:
    """Confused-deputy guard. EventBridge Scheduler presents the schedule *group* ARN as
    ``aws:SourceArn`` (AWS: "The ARN you specify must be a schedule group"), so the condition is the
    group's ARN exactly: the group whose ``schedule/<group>/*`` ARNs the functions may create."""
    stack = synth.stacks[env]
    template = synth.template(env)
    role_id = synth.logical_id(env, stack.scheduling.role)
    group_id = synth.logical_id(env, stack.scheduling.group)
    group = template["Resources"][group_id]
    assert group["Type"] == "AWS::Scheduler::ScheduleGroup"
    document = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]
    (trust,) = document["Statement"]
    assert trust["Effect"] == "Allow"
    assert as_list(trust["Action"]) == ["sts:AssumeRole"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    account = stack.config.account or {"Ref": "AWS::AccountId"}
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": account},
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [group_id, "Arn"]}},
    }
    # The group trusted is the group schedules are created in.
    statements = role_statements(template, function_role(synth, env, "retry_scheduler"))
    (create,) = [st for st in statements if "scheduler:CreateSchedule" in as_list(st["Action"])]
    (arn,) = as_list(create["Resource"])
    assert arn["Fn::Join"][1][-1].endswith(f":schedule/{group['Properties']['Name']}/*")
    assert stack.scheduling.group.schedule_group_name == group["Properties"]["Name"]


def test_only_escalation_the_sweeper_and_the_ops_api_publish_to_the_alerts_topic(synth: Synth) -> None:
    """Escalation delivers work orders; the sweeper notifies the work order of a failing health
    check (``rebound.engine.health.watch``); the ops API's delivery-retry plan delivers them again."""
    topic = synth.logical_id("prod", synth.stacks["prod"].observability.topic)
    for spec in r.SPEC.functions:
        statements = role_statements(synth.template("prod"), function_role(synth, "prod", spec.logical))
        publishes = "sns:Publish" in actions_on(statements, topic)
        assert publishes is (spec.logical in {"escalation", "sweeper", "ops_api"}), spec.logical


def test_the_sweeper_reads_what_the_retry_health_report_checks(synth: Synth) -> None:
    statements = role_statements(synth.template("prod"), function_role(synth, "prod", "sweeper"))
    for queue in ("retry", "scheduler_dlq", "control_dlq"):
        granted = actions_on(statements, queue_id(synth, "prod", queue))
        assert "sqs:GetQueueAttributes" in granted, queue
        assert not {"sqs:SendMessage", "sqs:DeleteMessage"} & granted or queue == "control_dlq", queue
    (listing,) = [st for st in statements if "scheduler:ListSchedules" in as_list(st["Action"])]
    # AWS allows no resource ARN for either (ListStreams: reading the audit stream again)
    assert set(as_list(listing["Action"])) <= {"scheduler:ListSchedules", "dynamodb:ListStreams"}
    workorders = actions_on(statements, table_id(synth, "prod", "workorders"))
    assert workorders == {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"}


def test_queue_rights_match_what_each_function_sends_and_receives(synth: Synth) -> None:
    for spec in r.SPEC.functions:
        statements = role_statements(synth.template("prod"), function_role(synth, "prod", spec.logical))
        access = ACCESS[spec.logical]
        for queue in r.SPEC.queues:
            granted = actions_on(statements, queue_id(synth, "prod", queue.logical))
            consumes = spec.queue == queue.logical
            on_failure = spec.stream_table is not None and queue.logical == r.CONTROL_DLQ.logical
            assert ("sqs:SendMessage" in granted) is (queue.logical in access.send or on_failure), (
                spec.logical,
                queue.logical,
            )
            assert ("sqs:ReceiveMessage" in granted) is (consumes or queue.logical in access.receive)
            takes = consumes or queue.logical in access.take  # the ops API's redrive takes from the DLQ
            assert ("sqs:DeleteMessage" in granted) is takes, (spec.logical, queue.logical)


def test_every_spec_function_has_an_access_entry_and_every_emitter_is_a_function() -> None:
    from rebound_infra.telemetry import EMITTERS

    functions = {f.logical for f in r.SPEC.functions}
    assert set(ACCESS) == functions
    assert {svc for services in EMITTERS.values() for svc in services} <= functions


def test_the_dlq_record_is_put_where_messages_reach_the_dlq_and_never_deleted(synth: Synth) -> None:
    """Every function that dead-letters records the DLQ message; only the sweeper's DLQ check and
    the ops API's redrive also mark records (the second copies removed, the messages redriven);
    records expire, nobody deletes."""
    record = table_id(synth, "prod", r.DLQ_MESSAGES.logical)
    dead_letterers = {"executor", "retry_scheduler", "escalation", "sweeper"}
    for spec in r.SPEC.functions:
        statements = role_statements(synth.template("prod"), function_role(synth, "prod", spec.logical))
        granted = actions_on(statements, record)
        assert ("dynamodb:PutItem" in granted) is (spec.logical in dead_letterers), spec.logical
        assert ("dynamodb:UpdateItem" in granted) is (spec.logical in {"sweeper", "ops_api"}), spec.logical
        assert not granted & {"dynamodb:DeleteItem", "dynamodb:Scan", "dynamodb:BatchWriteItem"}, spec.logical
