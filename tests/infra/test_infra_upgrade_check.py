"""``make deploy`` checks first that the deploy changes at most one index of each deployed table:
a stack of the earlier layout meeting a version that replaced an index is stopped, told which
``upgrade.keep_indexes`` to deploy with first; the first deploy, a new stack and an up-to-date
one pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from rebound import resources as r
from rebound_infra import upgrade_check
from rebound_infra.config import load_environment

pytestmark = pytest.mark.infra
ENV_DIR = Path(__file__).resolve().parents[2] / "config" / "environments"


def _stack(session: boto3.session.Session, indexes: list[str]) -> None:
    """The dev stack's resources parameter and its runs table with ``indexes``."""
    session.client("ssm").put_parameter(
        Name=r.resources_parameter("dev"),
        Type="String",
        Value=json.dumps({"tables": {"runs": "Rebound-dev-StateRuns-1"}}),
    )
    keys = [
        {"AttributeName": "task_id", "KeyType": "HASH"},
        {"AttributeName": "scheduled_for", "KeyType": "RANGE"},
    ]
    session.client("dynamodb").create_table(
        TableName="Rebound-dev-StateRuns-1",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": n, "AttributeType": "S"} for n in ("run_id", "task_id", "scheduled_for")
        ],
        KeySchema=[{"AttributeName": "run_id", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {"IndexName": name, "KeySchema": keys, "Projection": {"ProjectionType": "ALL"}}
            for name in indexes
        ],
    )


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Iterator[boto3.session.Session]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield boto3.Session(region_name="us-east-1")


def test_a_stack_of_the_earlier_layout_is_told_to_keep_the_retired_index_first(
    session: boto3.session.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    _stack(session, [r.RUNS_BY_TASK_WHOLE, "by_state"])
    assert upgrade_check.main(["dev"]) == 1
    said = capsys.readouterr().err
    assert "cannot deploy Rebound-dev: table runs" in said
    assert f"build {r.RUNS_BY_TASK} and drop {r.RUNS_BY_TASK_WHOLE}" in said
    assert "keep_indexes: [runs.by_task]" in said and "config/environments/dev.yaml" in said


def test_the_first_deploy_a_new_stack_and_an_upgraded_one_pass(session: boto3.session.Session) -> None:
    config = load_environment("dev", ENV_DIR)
    keeping = config.model_copy(
        update={"upgrade": config.upgrade.model_copy(update={"keep_indexes": ("runs.by_task",)})}
    )
    earlier = {"runs": {r.RUNS_BY_TASK_WHOLE, "by_state"}}
    assert upgrade_check.problems(keeping, earlier) == []  # builds by_task_keys, drops nothing
    assert upgrade_check.problems(config, {"runs": {r.RUNS_BY_TASK_WHOLE, r.RUNS_BY_TASK, "by_state"}}) == []
    assert upgrade_check.problems(config, {"runs": {r.RUNS_BY_TASK, "by_state"}}) == []
    assert upgrade_check.main(["dev"]) == 0  # no stack yet: nothing to check
