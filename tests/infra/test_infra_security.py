"""The security controls in the templates: the audit table denied to rewrites for every role and,
by its resource policy, for every principal; the audit HMAC key usable only by the writers (and
for VerifyMac alone by the optional auditor role); ``encryption: cmk`` putting every table, queue,
log group and the alerts topic under one rotating key whose policy names exactly its users, and
the optional VPC setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from infra_helpers import Synth, actions_on, as_list, flatten, mentions, role_statements

from rebound import resources as r
from rebound.domain.errors import ConfigError
from rebound_infra.app import ENVIRONMENTS_DIR_CONTEXT, build_app
from rebound_infra.config import load_environment
from rebound_infra.constructs.audit import AUDIT_SEALED, AUDITOR_READS, RETAINED_SEALED, TTL_SEALED
from rebound_infra.constructs.keys import ADMIN_ACTIONS
from rebound_infra.permissions import AUDIT_REWRITES, needs_data_key, writes_audit

pytestmark = pytest.mark.infra
ENV_DIR = Path(__file__).resolve().parents[2] / "config" / "environments"


def keys(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return synth.resources(env, "AWS::KMS::Key")


def key_id(synth: Synth, env: str, key: Any) -> str:
    return synth.logical_id(env, key)


def statement(key: dict[str, Any], sid: str) -> dict[str, Any]:
    [found] = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == sid]
    return found


def principal_roles(st: dict[str, Any]) -> set[str]:
    """The logical ids of the roles a key policy statement names (``Fn::GetAtt [role, Arn]``)."""
    return {
        p["Fn::GetAtt"][0]
        for p in as_list(st["Principal"]["AWS"])
        if isinstance(p, dict) and "Fn::GetAtt" in p
    }


def role_of(synth: Synth, env: str, logical: str) -> str:
    return synth.logical_id(env, synth.stacks[env].functions[logical].role)


# ------------------------------------------------------------------------ the audit table
def test_every_role_in_the_stack_is_denied_rewriting_the_audit_table(synth: Synth, env: str) -> None:
    audit = synth.logical_id(env, synth.stacks[env].state.tables[r.AUDIT.logical])
    roles = synth.resources(env, "AWS::IAM::Role")
    assert len(roles) > len(r.SPEC.functions)  # the scheduler's and the API's roles are covered too
    for role in roles:
        denies = [
            st
            for st in role_statements(synth.template(env), role)
            if st["Effect"] == "Deny" and any(mentions(res, audit) for res in as_list(st["Resource"]))
        ]
        assert denies, f"{role} has no Deny on the audit table"
        assert set(AUDIT_REWRITES) <= {a for st in denies for a in as_list(st["Action"])}


def test_the_audit_tables_resource_policy_denies_every_principal_changing_a_record(
    synth: Synth, env: str
) -> None:
    stack = synth.stacks[env]
    tables = synth.resources(env, "AWS::DynamoDB::Table")
    audit = tables[synth.logical_id(env, stack.state.tables[r.AUDIT.logical])]
    sealed, expiry = audit["Properties"]["ResourcePolicy"]["PolicyDocument"]["Statement"]
    assert sealed["Effect"] == "Deny" and sealed["Principal"] == {"AWS": "*"}
    assert sealed["Resource"] == "*"  # in a table's own policy: that table
    assert "Condition" not in sealed  # no principal, administrator or service is exempt
    denied = set(as_list(sealed["Action"]))
    assert set(AUDIT_REWRITES) <= denied
    assert {"dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} <= denied
    assert {"dynamodb:PartiQLUpdate", "dynamodb:PartiQLDelete"} <= denied
    # Records are added with PutItem, and the table stays readable and backed up.
    assert not {"dynamodb:PutItem", "dynamodb:Query", "dynamodb:GetItem"} & denied
    # A retained table can no longer be deleted without a policy change first; otherwise the
    # stack's deletion removes it.
    assert ("dynamodb:DeleteTable" in denied) is stack.config.retain_data
    assert denied == set(AUDIT_SEALED) | (set(RETAINED_SEALED) if stack.config.retain_data else set())
    # Expiry: TTL on the one attribute runs' records carry, which only CloudFormation (the
    # deploy) may change; a TTL on seq would have the service delete every record.
    assert expiry["Effect"] == "Deny" and expiry["Principal"] == {"AWS": "*"}
    assert as_list(expiry["Action"]) == list(TTL_SEALED) == ["dynamodb:UpdateTimeToLive"]
    assert expiry["Condition"] == {
        "ForAllValues:StringNotEquals": {"aws:CalledVia": ["cloudformation.amazonaws.com"]}
    }
    ttl = audit["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": r.RECORD_TTL, "Enabled": True}
    others = [t for k, t in tables.items() if k != synth.logical_id(env, stack.state.tables[r.AUDIT.logical])]
    assert others and all("ResourcePolicy" not in t["Properties"] for t in others)


def test_nothing_a_role_of_the_stack_is_granted_on_the_audit_table_is_what_its_policy_denies(
    synth: Synth, env: str
) -> None:
    """The resource policy breaks nothing the stack does: every role's rights on the audit table
    are adding records (PutItem, which a transaction's Put is authorized as) and reading."""
    audit = synth.logical_id(env, synth.stacks[env].state.tables[r.AUDIT.logical])
    granted: set[str] = set()
    for role in synth.resources(env, "AWS::IAM::Role"):
        granted |= actions_on(role_statements(synth.template(env), role), audit)
    assert "dynamodb:PutItem" in granted
    # The stream's reads: the archiver's mapping, and the sweeper reading a range again.
    granted -= {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
    assert granted <= {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan"}, granted
    assert not granted & (set(AUDIT_SEALED) | set(RETAINED_SEALED))


# ------------------------------------------------------------------------ the audit key
def test_the_audit_key_is_an_hmac_key_only_the_writers_may_use(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    key = keys(synth, env)[key_id(synth, env, stack.audit_key.key)]
    assert key["Properties"]["KeySpec"] == "HMAC_256"
    assert key["Properties"]["KeyUsage"] == "GENERATE_VERIFY_MAC"
    writers = statement(key, "AuditWriters")
    assert set(as_list(writers["Action"])) == {"kms:GenerateMac", "kms:VerifyMac"}
    expected = {role_of(synth, env, f.logical) for f in r.SPEC.functions if writes_audit(f.logical)}
    assert expected and principal_roles(writers) == expected
    # the ops API appends audit records for every operator action (tests/integration/test_ops_api_rights.py)
    assert role_of(synth, env, r.OPS_API_FUNCTION) in principal_roles(writers)
    admin = statement(key, "KeyAdministration")
    assert set(as_list(admin["Action"])) == set(ADMIN_ACTIONS)
    # no other statement: nobody else may make or check a MAC
    assert {s["Sid"] for s in key["Properties"]["KeyPolicy"]["Statement"]} == {
        "KeyAdministration",
        "AuditWriters",
    }


def test_every_function_is_told_the_audit_key(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    audit_key = key_id(synth, env, stack.audit_key.key)
    for fn in synth.resources(env, "AWS::Lambda::Function").values():
        variables = fn["Properties"]["Environment"]["Variables"]
        assert mentions(variables[r.ENV_AUDIT_KEY], audit_key)


# ------------------------------------------------------------------------ encryption
def test_dev_uses_aws_managed_keys_and_has_no_data_key(synth: Synth) -> None:
    assert synth.stacks["dev"].data_key is None
    for table in synth.resources("dev", "AWS::DynamoDB::Table").values():
        assert table["Properties"]["SSESpecification"]["SSEEnabled"] is True
        assert "KMSMasterKeyId" not in table["Properties"]["SSESpecification"]


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_cmk_puts_tables_queues_logs_and_topic_under_one_rotating_key(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    assert stack.data_key is not None
    data_key = key_id(synth, env, stack.data_key.key)
    key = keys(synth, env)[data_key]
    assert key["Properties"]["EnableKeyRotation"] is True
    for table in synth.resources(env, "AWS::DynamoDB::Table").values():
        sse = table["Properties"]["SSESpecification"]
        assert sse["SSEType"] == "KMS" and mentions(sse["KMSMasterKeyId"], data_key)
    for queue in synth.resources(env, "AWS::SQS::Queue").values():
        assert mentions(queue["Properties"]["KmsMasterKeyId"], data_key)
    log_groups = synth.resources(env, "AWS::Logs::LogGroup")
    assert len(log_groups) > len(r.SPEC.functions)  # the functions' and the API's access logs
    for group in log_groups.values():
        assert mentions(group["Properties"]["KmsKeyId"], data_key)
    [topic] = synth.resources(env, "AWS::SNS::Topic").values()
    assert mentions(topic["Properties"]["KmsMasterKeyId"], data_key)
    # one key: no separate alerts key
    assert set(keys(synth, env)) == {data_key, key_id(synth, env, stack.audit_key.key)}


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_the_data_key_policy_grants_exactly_the_roles_that_need_it(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    assert stack.data_key is not None
    key = keys(synth, env)[key_id(synth, env, stack.data_key.key)]
    users = statement(key, "RolesThroughServices")
    expected = {role_of(synth, env, f.logical) for f in r.SPEC.functions if needs_data_key(f.logical)}
    expected.add(synth.logical_id(env, stack.scheduling.role))
    assert principal_roles(users) == expected
    # the ops API reads and writes tables and queues (tests/integration/test_ops_api_rights.py)
    assert role_of(synth, env, r.OPS_API_FUNCTION) in expected
    services = as_list(users["Condition"]["StringEquals"]["kms:ViaService"])
    assert {flatten(service).split(".")[0] for service in services} == {"dynamodb", "sqs", "sns"}
    admin = statement(key, "KeyAdministration")
    assert not {"kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey*", "kms:*"} & set(as_list(admin["Action"]))
    sids = {s.get("Sid") for s in key["Properties"]["KeyPolicy"]["Statement"]}
    assert sids == {
        "KeyAdministration",
        "CloudWatchLogs",
        "CloudWatchAlarmsPublish",
        "RolesThroughServices",
        None,
    }
    # the one statement without a Sid: CDK's, for EventBridge to send to the rules' target queues
    [cdk] = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Sid" not in s]
    assert cdk["Principal"] == {"Service": "events.amazonaws.com"}


# ------------------------------------------------------------------------ configuration
def write_env(tmp_path: Path, name: str, extra: str, base: str = "dev") -> None:
    text = (ENV_DIR / f"{base}.yaml").read_text().replace(f"name: {base}", f"name: {name}")
    (tmp_path / f"{name}.yaml").write_text(text + extra)


def test_an_unknown_encryption_mode_names_the_key_and_the_choices(tmp_path: Path) -> None:
    write_env(tmp_path, "qa", "")
    text = (tmp_path / "qa.yaml").read_text().replace("encryption: aws_managed", "encryption: kms")
    (tmp_path / "qa.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_environment("qa", tmp_path)
    assert err.value.key_path == "encryption"
    assert "aws_managed" in err.value.problem and "cmk" in err.value.problem


def test_a_vpc_needs_one_subnet_per_zone_and_a_writer_role_must_be_a_role_arn(tmp_path: Path) -> None:
    write_env(
        tmp_path,
        "qa",
        "vpc:\n  vpc_id: vpc-0123456789abcdef0\n  availability_zones: [eu-west-1a, eu-west-1b]\n"
        "  subnet_ids: [subnet-0123456789abcdef0]\n  security_group_ids: [sg-0123456789abcdef0]\n",
    )
    with pytest.raises(ConfigError) as err:
        load_environment("qa", tmp_path)
    assert err.value.key_path == "vpc" and "one subnet id per availability zone" in err.value.problem
    write_env(tmp_path, "qb", "")
    text = (tmp_path / "qb.yaml").read_text().replace("writer_roles: []", "writer_roles: [alice]")
    (tmp_path / "qb.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_environment("qb", tmp_path)
    assert err.value.key_path.startswith("audit.writer_roles")


def test_the_optional_vpc_and_operator_writer_roles_reach_the_template(tmp_path: Path) -> None:
    operator = "arn:aws:iam::123456789012:role/rebound-operator"
    write_env(
        tmp_path,
        "qa",
        "vpc:\n  vpc_id: vpc-0123456789abcdef0\n  availability_zones: [eu-west-1a, eu-west-1b]\n"
        "  subnet_ids: [subnet-0123456789abcdef0, subnet-0123456789abcdef1]\n"
        "  security_group_ids: [sg-0123456789abcdef0]\n",
    )
    text = (tmp_path / "qa.yaml").read_text().replace("writer_roles: []", f"writer_roles: [{operator}]")
    (tmp_path / "qa.yaml").write_text(text)
    app, stacks = build_app(
        ["qa"], outdir=str(tmp_path / "out"), context={ENVIRONMENTS_DIR_CONTEXT: str(tmp_path)}
    )
    assembly = app.synth()  # cdk-nag passes with the VPC too
    template = assembly.get_stack_by_name(stacks["qa"].stack_name).template
    functions = [v for v in template["Resources"].values() if v["Type"] == "AWS::Lambda::Function"]
    assert functions
    for fn in functions:
        vpc = fn["Properties"]["VpcConfig"]
        assert vpc["SubnetIds"] == ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
        assert vpc["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    audit_key = template["Resources"][
        stacks["qa"].get_logical_id(stacks["qa"].audit_key.key.node.default_child)
    ]
    writers = statement(audit_key, "AuditWriters")
    assert operator in as_list(writers["Principal"]["AWS"])


# ------------------------------------------------------------------------ the auditor
def test_no_auditor_role_unless_the_environment_names_who_may_assume_it(synth: Synth, env: str) -> None:
    stack = synth.stacks[env]
    assert stack.config.audit.auditor_principals == ()
    assert stack.auditor is None
    key = keys(synth, env)[key_id(synth, env, stack.audit_key.key)]
    assert "AuditVerifiers" not in {s["Sid"] for s in key["Properties"]["KeyPolicy"]["Statement"]}


def test_the_auditor_reads_and_may_only_verify_macs(tmp_path: Path) -> None:
    """``audit.auditor_principals`` makes a role they may assume: it reads what ``rebound audit
    verify`` reads, may call VerifyMac on the audit key and nothing else there, never GenerateMac,
    never a write; cdk-nag and checkov pass on the template."""
    from test_infra_checkov import CHECKOV, _scan, accepted

    principals = ["arn:aws:iam::123456789012:role/compliance", "arn:aws:iam::210987654321:root"]
    write_env(tmp_path, "qa", "", base="prod")  # prod: cmk, retained
    text = (tmp_path / "qa.yaml").read_text()
    text = text.replace("auditor_principals: []", f"auditor_principals: [{', '.join(principals)}]")
    (tmp_path / "qa.yaml").write_text(text)
    outdir = tmp_path / "out"
    app, stacks = build_app(["qa"], outdir=str(outdir), context={ENVIRONMENTS_DIR_CONTEXT: str(tmp_path)})
    assembly = app.synth()  # cdk-nag passes with the auditor
    stack = stacks["qa"]
    template = assembly.get_stack_by_name(stack.stack_name).template
    resources = template["Resources"]

    def logical(construct: Any) -> str:
        return str(stack.get_logical_id(construct.node.default_child))

    assert stack.auditor is not None
    role = logical(stack.auditor.role)
    trust = resources[role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert sorted(p for st in trust for p in as_list(st["Principal"]["AWS"])) == sorted(principals)
    statements = role_statements(template, role)
    allowed = [st for st in statements if st["Effect"] == "Allow"]
    for logical_table, actions in AUDITOR_READS.items():
        table = logical(stack.state.tables[logical_table])
        assert actions_on(allowed, table) == set(actions)
    parameter = logical(stack.resources_parameter)
    assert actions_on(allowed, parameter) == {"ssm:GetParameter"}
    # The audit archive too (`rebound audit verify --archive`): list it, read under audit/, and
    # decrypt with the environment's key (prod: cmk).
    bucket = logical(stack.archive.bucket)
    assert actions_on(allowed, bucket) == {"s3:ListBucket", "s3:GetObject"}
    granted = {a for st in allowed for a in as_list(st["Action"])}
    reads = {a for actions in AUDITOR_READS.values() for a in actions}
    assert granted == {*reads, "ssm:GetParameter", "s3:ListBucket", "s3:GetObject", "kms:Decrypt"}
    # the stack-wide deny reaches it too
    assert any(
        st["Effect"] == "Deny" and set(AUDIT_REWRITES) <= set(as_list(st["Action"])) for st in statements
    )

    audit_key = resources[logical(stack.audit_key.key)]
    verifiers = statement(audit_key, "AuditVerifiers")
    assert as_list(verifiers["Action"]) == ["kms:VerifyMac"] and principal_roles(verifiers) == {role}
    writers = statement(audit_key, "AuditWriters")
    assert role not in principal_roles(writers)
    naming_the_auditor = [
        st
        for st in audit_key["Properties"]["KeyPolicy"]["Statement"]
        if "AWS" in st["Principal"] and role in principal_roles(st)
    ]
    assert [st["Sid"] for st in naming_the_auditor] == ["AuditVerifiers"]  # never GenerateMac
    assert stack.data_key is not None
    data_key = resources[logical(stack.data_key.key)]
    readers = statement(data_key, "ReadersThroughDynamoDB")
    assert set(as_list(readers["Action"])) == {"kms:Decrypt", "kms:DescribeKey"}
    assert principal_roles(readers) == {role}
    assert flatten(readers["Condition"]["StringEquals"]["kms:ViaService"]).startswith("dynamodb.")
    assert role not in principal_roles(statement(data_key, "RolesThroughServices"))

    if not CHECKOV.exists():
        pytest.skip("checkov is not installed in .venv-checkov: run `make scanner` (make test does)")
    found = _scan(str(assembly.directory), (("qa", stack.stack_name),))["qa"]
    assert not {check for check in found if check not in accepted()}, dict(found)
