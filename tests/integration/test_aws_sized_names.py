"""``make bench``'s cost scenarios run on resources named as on AWS, so every item has its AWS size:
CloudFormation's generated names, and audit records that name the key by its 75-character ARN."""

from __future__ import annotations

import boto3
import pytest

from rebound import resources as r
from rebound_local.billing import logical_table
from rebound_local.provision import provision

pytestmark = pytest.mark.integration


def test_aws_sized_resources_carry_names_and_a_key_arn_of_aws_length(aws: boto3.session.Session) -> None:
    local = provision(aws, None, "dev")
    sized = provision(aws, None, "bench", aws_sized=True)
    assert local.audit_key_id == "alias/rebound-dev-audit"
    assert sized.audit_key_id is not None and len(sized.audit_key_id) == 75
    assert sized.audit_key_id.startswith("arn:aws:kms:us-east-1:123456789012:key/")
    for spec in r.SPEC.tables:
        name = sized.tables[spec.logical]
        assert name.startswith("Rebound-bench-State") and len(name) > len(local.tables[spec.logical]) + 15
        assert logical_table(name) == spec.logical == logical_table(local.tables[spec.logical])
    assert len(sized.queues["execution"].arn) > 80
