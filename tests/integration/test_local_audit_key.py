"""The local cloud's audit key survives a restart: provisioning the same environment again (as
``rebound local up --state-dir`` does after a restart, KMS not being kept) gives a key whose
MACs are the same, so records written before the restart still check (``motopatch.kms_material``).

An auditor, who may call VerifyMac but not GenerateMac, checks the same MACs with the day keys a
writer exported, each confirmed by KMS (``VerifyingAuditKeys``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rebound.adapters.audit_keys import (
    DAY_KEYS_FORMAT,
    KmsAuditKeys,
    VerifyingAuditKeys,
    day_keys_document,
    read_day_keys,
)
from rebound.domain.errors import ValidationFailed
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


def refuse_generate_mac(model: Any, **_: Any) -> None:
    """A botocore ``before-call`` hook: the auditor's rights, which never include GenerateMac."""
    raise ClientError(
        {"Error": {"Code": "AccessDeniedException", "Message": "not an auditor's right"}}, model.name
    )


def test_an_auditor_checks_records_with_day_keys_kms_confirms_never_calling_generate_mac(
    clock: ManualClock,
) -> None:
    """The writer exports its day keys; the auditor, whose KMS client refuses GenerateMac, checks
    the writer's MACs with them after VerifyMac confirms each; an altered key, a day not covered
    and signing are refused, each naming what was wrong."""
    from moto import mock_aws

    from rebound_local.provision import provision

    day, other_day = "rebound-audit/v1/2026-03-07", "rebound-audit/v1/2026-03-08"
    with mock_aws():
        import boto3

        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        )
        key_id = provision(session, None, "auditor").audit_key_id or ""
        writer = KmsAuditKeys(session.client("kms", region_name="us-east-1"), key_id)
        mac = writer.sign(day, b"a record")
        document = json.loads(json.dumps(day_keys_document(writer, [day])))

        kms = session.client("kms", region_name="us-east-1")
        kms.meta.events.register("before-call.kms.GenerateMac", refuse_generate_mac)
        verified: list[bytes] = []
        kms.meta.events.register(
            "before-parameter-build.kms.VerifyMac", lambda params, **_: verified.append(params["Message"])
        )
        auditor = VerifyingAuditKeys(kms, key_id, read_day_keys(document, "keys.json"), source="keys.json")
        assert auditor.check(key_id, day, b"a record", mac)
        assert not auditor.check(key_id, day, b"an edited record", mac)
        assert not auditor.check("alias/another-key", day, b"a record", mac)  # a key not trusted
        assert verified == [day.encode()]  # one VerifyMac for the day, none per record

        with pytest.raises(ValidationFailed, match=f"hold no key for {other_day}") as missing:
            auditor.check(key_id, other_day, b"a record", mac)
        assert missing.value.details["key_path"] == other_day
        with pytest.raises(ValidationFailed, match="only verify"):
            auditor.sign(day, b"a forged record")

        forged = json.loads(json.dumps(document))
        forged["keys"][0]["key"] = hashlib.sha256(b"a guess").hexdigest()
        impostor = VerifyingAuditKeys(kms, key_id, read_day_keys(forged, "forged.json"), source="forged.json")
        refused = f"forged.json: the key given for {day} is not the audit key's"
        with pytest.raises(ValidationFailed, match=refused):
            impostor.check(key_id, day, b"a record", mac)
        with pytest.raises(Exception, match="AccessDenied"):
            KmsAuditKeys(kms, key_id).sign(day, b"a record")  # the hook stands for the auditor's rights


@pytest.mark.parametrize(
    ("document", "key_path"),
    [
        ({"keys": []}, "format"),
        ({"format": DAY_KEYS_FORMAT, "keys": {}}, "keys"),
        ({"format": DAY_KEYS_FORMAT, "keys": [{"key_id": "k", "label": "l"}]}, "keys[0]"),
        ({"format": DAY_KEYS_FORMAT, "keys": [{"key_id": "k", "label": "l", "key": "zz"}]}, "keys[0].key"),
    ],
)
def test_a_bad_day_keys_document_names_the_entry(document: dict[str, Any], key_path: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        read_day_keys(document, "keys.json")
    assert err.value.details["key_path"] == key_path and err.value.message.startswith("keys.json: ")
