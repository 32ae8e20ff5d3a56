"""The local cloud's audit key survives a restart: provisioning the same environment again (as
``rebound local up --state-dir`` does after a restart, KMS not being kept) gives a key whose
MACs are the same, so records written before the restart still check (``motopatch.kms_material``)."""

from __future__ import annotations

import pytest

from rebound.adapters.audit_keys import KmsAuditKeys
from support import ManualClock

pytestmark = pytest.mark.integration


def test_a_new_cloud_provisions_an_audit_key_that_checks_the_old_records(clock: ManualClock) -> None:
    """``clock`` installs the local cloud's moto patches, as the local cloud does."""
    from moto import mock_aws

    from rebound_local.provision import provision

    macs = []
    for _restart in range(2):
        with mock_aws():  # a fresh cloud each time: nothing of the first is left
            import boto3

            session = boto3.session.Session(
                aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
            )
            settings = provision(session, None, "restart")
            assert settings.audit_key_id == "alias/rebound-restart-audit"
            keys = KmsAuditKeys(session.client("kms", region_name="us-east-1"), settings.audit_key_id)
            macs.append(keys.sign("rebound-audit/v1/2026-03-07", b"a record"))
            assert keys.check(settings.audit_key_id, "rebound-audit/v1/2026-03-07", b"a record", macs[0])
    assert macs[0] == macs[1]
