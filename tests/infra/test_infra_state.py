"""Tables: keys, indexes, TTL and streams from SPEC; PITR and encryption everywhere; prod protected."""

from __future__ import annotations

from typing import Any

import pytest
from infra_helpers import Synth

from rebound import resources as r

pytestmark = pytest.mark.infra


def table(synth: Synth, env: str, logical: str) -> dict[str, Any]:
    lid = synth.logical_id(env, synth.stacks[env].state.tables[logical])
    return dict(synth.template(env)["Resources"][lid])


def key_schema(spec_partition: r.Key, spec_sort: r.Key | None) -> list[dict[str, str]]:
    keys = [{"AttributeName": spec_partition.name, "KeyType": "HASH"}]
    if spec_sort:
        keys.append({"AttributeName": spec_sort.name, "KeyType": "RANGE"})
    return keys


def test_tables_have_the_spec_keys_indexes_ttl_and_streams(synth: Synth, env: str) -> None:
    for spec in r.SPEC.tables:
        props = table(synth, env, spec.logical)["Properties"]
        assert props["KeySchema"] == key_schema(spec.partition, spec.sort)
        indexes = {i["IndexName"]: i for i in props.get("GlobalSecondaryIndexes", [])}
        assert set(indexes) == {i.name for i in spec.indexes}
        for index in spec.indexes:
            assert indexes[index.name]["KeySchema"] == key_schema(index.partition, index.sort)
            assert indexes[index.name]["Projection"] == {"ProjectionType": index.projection}
        ttl = props.get("TimeToLiveSpecification")
        if spec.ttl_attribute:
            assert ttl == {"AttributeName": spec.ttl_attribute, "Enabled": True}
        else:
            assert ttl is None
        stream = props.get("StreamSpecification")
        assert (stream or {}).get("StreamViewType") == spec.stream


def test_control_records_and_outbox_expire_by_ttl(synth: Synth) -> None:
    assert table(synth, "prod", "control")["Properties"]["TimeToLiveSpecification"]["Enabled"] is True
    assert (
        table(synth, "prod", "outbox")["Properties"]["StreamSpecification"]["StreamViewType"] == "NEW_IMAGE"
    )


def test_the_dlq_record_is_listed_by_time_from_two_indexes_and_expires(synth: Synth) -> None:
    """``rebound dlq list`` queries an index ordered by time (never a scan): all messages still in
    the DLQ (``by_status``), or one task's (``by_task``)."""
    props = table(synth, "prod", r.DLQ_MESSAGES.logical)["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "message_id", "KeyType": "HASH"}]
    indexes = {i["IndexName"]: i["KeySchema"] for i in props["GlobalSecondaryIndexes"]}
    assert indexes == {
        "by_status": key_schema(r.Key("status"), r.Key("dlq_at")),
        "by_task": key_schema(r.Key("dlq_task"), r.Key("dlq_at")),
    }
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_every_table_has_point_in_time_recovery_and_encryption(synth: Synth, env: str) -> None:
    for spec in r.SPEC.tables:
        props = table(synth, env, spec.logical)["Properties"]
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert props["SSESpecification"]["SSEEnabled"] is True
        assert props["BillingMode"] == "PAY_PER_REQUEST"


@pytest.mark.parametrize(("env", "protected", "policy"), [("dev", False, "Delete"), ("prod", True, "Retain")])
def test_prod_tables_are_protected_from_deletion(
    synth: Synth, env: str, protected: bool, policy: str
) -> None:
    for spec in r.SPEC.tables:
        res = table(synth, env, spec.logical)
        assert res["Properties"].get("DeletionProtectionEnabled", False) is protected
        assert res["DeletionPolicy"] == policy
        assert res["UpdateReplacePolicy"] == policy


def test_a_renamed_table_keeps_its_logical_id_so_cloudformation_keeps_the_table(
    synth: Synth, env: str
) -> None:
    # The control table was the idempotency table: CloudFormation replaces a resource whose
    # logical id changes (a new, empty table), so the rename must not change it.
    assert r.renamed_tables() == {"idempotency": "control"}
    assert synth.logical_id(env, synth.stacks[env].state.tables["control"]) == "StateidempotencyEAC317CA"
