"""``rebound local up --faults FILE``: any client of the endpoint meets a hostile cloud."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from test_local_up import CLI, ENV, REPO, UpProcess, _free_port

pytestmark = pytest.mark.e2e

ONE_ATTEMPT = Config(retries={"mode": "standard", "total_max_attempts": 1})
FAULTS = """
seed: 1
faults:
  throttle: {"sqs:ListQueues": 0.999}
  transaction_conflict: 0.999
  receipt_handles: latest_only
model:
  concurrency: 2
"""


def test_a_bad_faults_file_exits_2_naming_the_file_and_the_key(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("faults:\n  transaction_conflict: 2\n")
    done = subprocess.run(
        [*CLI, "local", "up", "--no-view", "--port", "0", "--faults", str(faults)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **ENV},
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{faults}: faults.transaction_conflict" in done.stderr
    assert "less than 1" in done.stderr


def test_every_client_meets_the_faults_and_the_banner_lists_them(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text(FAULTS)
    server = UpProcess(_free_port(), tmp_path / "state", "--faults", str(faults))
    try:
        banner = "\n".join(server.lines)
        assert f"hostile mode ({faults}):" in banner
        assert "throttling: 0.999 of sqs:ListQueues requests" in banner
        assert "transaction conflicts: 0.999" in banner
        assert "concurrency: up to 2 invocations" in banner

        sqs = server.client("sqs", config=ONE_ATTEMPT)
        with pytest.raises(ClientError) as caught:
            sqs.list_queues()
        assert caught.value.response["Error"]["Code"] == "RequestThrottled"
        ddb = server.client("dynamodb", config=ONE_ATTEMPT)
        table = server.resources()["tables"]["control"]
        with pytest.raises(ClientError) as caught:
            ddb.put_item(
                TableName=table, Item={"pk": {"S": "outside"}}, ConditionExpression="attribute_not_exists(pk)"
            )
        assert caught.value.response["Error"]["Code"] == "TransactionConflictException"
        assert server.interrupt() == 0
    finally:
        server.kill()
