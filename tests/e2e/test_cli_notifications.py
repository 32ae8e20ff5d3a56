"""``rebound notifications plan|retry`` against the local cloud: the escalation's SNS delivery of a
work order fails, the plan waits and then retries it, a retry that fails again stays failed, and
the one that delivers is recorded on the work order and audited with the operator as actor."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.notification import Notification
from rebound.engine.ports import DeliveryFailed

pytestmark = pytest.mark.e2e
base = cloud_fixture(name="base")
OPERATOR = "arn:aws:sts::123456789012:user/moto"
TASK = {
    "id": "once",
    "tenant": "acme",
    "schedule": {"cron": "0 9 * * *"},
    "target": {"type": "sim", "behavior": {"always_fail": True}},
    "retry_policy": {"extends": "default", "max_attempts": 1},
}


@dataclass
class DownChannel:
    name: str

    def send(self, note: Notification) -> str:
        raise DeliveryFailed(self.name, "HTTP 503")


@pytest.fixture(scope="module")
def local_cloud(base: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Cloud:
    """One dead-lettered run whose work order's SNS notification failed (SNS was down)."""
    file = tmp_path_factory.mktemp("notifications") / "tasks.yaml"
    file.write_text(yaml.safe_dump({"tasks": [TASK]}))
    base.ok("tasks", "apply", "-f", str(file))
    notifier = base.deps.notifier
    working = list(notifier.channels)
    notifier.channels = [DownChannel("sns")]  # type: ignore[attr-defined]
    try:
        base.run_for(timedelta(minutes=2))
    finally:
        notifier.channels = working  # type: ignore[attr-defined]
    return base


def the_order(cloud: Cloud) -> dict[str, Any]:
    [order] = cloud.json("workorders", "list")
    return cloud.json("workorders", "show", order["work_order_id"])  # type: ignore[no-any-return]


def sns_down(**_: Any) -> None:
    raise ClientError({"Error": {"Code": "InternalError", "Message": "down"}}, "Publish")


def test_the_plan_waits_for_the_backoff_then_retries(local_cloud: Cloud) -> None:
    order = the_order(local_cloud)
    [sns] = order["deliveries"]
    assert (sns["channel"], sns["status"], sns["detail"]) == ("sns", "failed", "HTTP 503")

    plan = local_cloud.json(
        "notifications", "plan", "--retry-delay-minutes", "60", "--generated-by", "console"
    )
    assert plan["generated_by"] == "console"
    assert plan["counts"] == {"retry": 0, "wait": 1, "suppress": 0}
    [item] = plan["deliveries"]
    assert (item["work_order_id"], item["channel"], item["decision"]) == (
        order["work_order_id"],
        "sns",
        "wait",
    )
    assert item["retry_at"] is not None and "backoff: retry 1 is due 60m after it" in item["reason"]

    table = local_cloud.ok("notifications", "plan", "--retry-delay-minutes", "60").stdout
    assert "wait" in table and "0 retry, 1 wait, 0 suppress" in table

    local_cloud.tick(61 * 60)
    later = local_cloud.json("notifications", "plan", "--retry-delay-minutes", "60")
    assert later["deliveries"][0]["decision"] == "retry"
    assert later["deliveries"][0]["reason"].endswith("the 60m backoff has passed")
    exhausted = local_cloud.json("notifications", "plan", "--max-retry-attempts", "0")
    assert exhausted["deliveries"][0]["decision"] == "suppress"


def test_a_bad_policy_value_names_the_option(local_cloud: Cloud) -> None:
    result = local_cloud.cli("notifications", "plan", "--backoff-multiplier", "0.5")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        "error: --backoff-multiplier: Input should be greater than or equal to 1 [VALIDATION_FAILED]"
    )


def test_retry_asks_first_and_a_channel_that_fails_again_stays_failed(local_cloud: Cloud) -> None:
    before = the_order(local_cloud)["deliveries"][0]["attempts"]
    declined = local_cloud.cli("notifications", "retry", "--retry-delay-minutes", "0", input="n\n")
    assert declined.exit_code == 1 and "Send 1 failed notification(s) again now?" in declined.stderr
    assert the_order(local_cloud)["deliveries"][0]["attempts"] == before

    with local_cloud.hooked("before-call.sns.Publish", sns_down):
        again = local_cloud.cli("notifications", "retry", "--retry-delay-minutes", "0", "--yes", "-o", "json")
    assert again.exit_code == 1
    result = json.loads(again.stdout)
    assert (result["delivered"], result["failed"]) == (0, 1)
    [retried] = result["retried"]
    assert (retried["status"], retried["attempts"], retried["detail"]) == (
        "failed",
        before + 1,
        "ClientError",
    )
    sns = the_order(local_cloud)["deliveries"][0]
    assert (sns["status"], sns["attempts"]) == ("failed", before + 1)


def test_a_retry_that_delivers_is_recorded_and_audited(local_cloud: Cloud) -> None:
    before = the_order(local_cloud)["deliveries"][0]["attempts"]
    result = local_cloud.json(
        "notifications", "retry", "--retry-delay-minutes", "0", "--generated-by", "incident-42", "--yes"
    )
    assert (result["delivered"], result["failed"]) == (1, 0)
    assert result["retried"][0]["detail"].startswith("message ")

    order = the_order(local_cloud)
    sns = order["deliveries"][0]
    assert (sns["status"], sns["attempts"]) == ("delivered", before + 1)
    assert order["notified"] == {"sns": "delivered"} and order["audit_verified"] is True
    record = order["audit"][-1]
    assert (record["action"], record["actor"]) == ("notification-retried", OPERATOR)
    assert record["evidence"]["generated_by"] == "incident-42"
    assert record["evidence"]["sns"]["status"] == "delivered"

    # Nothing is left to plan, and retrying again sends nothing.
    assert local_cloud.json("notifications", "plan")["deliveries"] == []
    idle = local_cloud.ok("-o", "table", "notifications", "retry")
    assert "nothing to retry" in idle.stdout and "0 delivered, 0 failed" in idle.stdout
