"""An environment upgrading from an earlier layout: ``upgrade.keep_indexes`` keeps a retired index
beside its replacement, grants its queries, and points the functions at it; a name that is not a
retired index is refused, naming the key and the ones there are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template
from infra_helpers import role_statements

from rebound import resources as r
from rebound.domain.errors import ConfigError
from rebound_infra.app import ENVIRONMENTS_DIR_CONTEXT, build_app
from rebound_infra.config import load_environment

pytestmark = pytest.mark.infra
ENV_DIR = Path(__file__).resolve().parents[2] / "config" / "environments"


def write_env(folder: Path, name: str, extra: str) -> None:
    text = (ENV_DIR / "dev.yaml").read_text().replace("name: dev", f"name: {name}")
    (folder / f"{name}.yaml").write_text(text + "\n" + extra)


@pytest.fixture(scope="module")
def upgrading(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("upgrade")
    write_env(folder, "qa", "upgrade:\n  keep_indexes: [runs.by_task]\n")
    _app, stacks = build_app(
        ["qa"], outdir=str(folder / "out"), context={ENVIRONMENTS_DIR_CONTEXT: str(folder)}
    )
    return Template.from_stack(stacks["qa"]).to_json()


def _runs_table(template: dict[str, Any]) -> dict[str, Any]:
    [table] = [
        v["Properties"]
        for k, v in template["Resources"].items()
        if v["Type"] == "AWS::DynamoDB::Table" and k.startswith("Stateruns")
    ]
    return table


def test_the_retired_index_is_kept_beside_its_replacement(upgrading: dict[str, Any]) -> None:
    indexes = {
        i["IndexName"]: i["Projection"]["ProjectionType"]
        for i in _runs_table(upgrading)["GlobalSecondaryIndexes"]
    }
    assert indexes == {r.RUNS_BY_TASK_WHOLE: "ALL", r.RUNS_BY_TASK: "KEYS_ONLY", "by_state": "ALL"}


def test_the_functions_read_the_kept_index_and_may_query_it(upgrading: dict[str, Any]) -> None:
    functions = [v for v in upgrading["Resources"].values() if v["Type"] == "AWS::Lambda::Function"]
    reading = {f["Properties"]["Environment"]["Variables"].get(r.ENV_RUNS_BY_TASK) for f in functions}
    assert reading == {r.RUNS_BY_TASK_WHOLE}
    [executor_role] = [
        k
        for k, v in upgrading["Resources"].items()
        if v["Type"] == "AWS::IAM::Role" and k.startswith("FunctionsexecutorRole")
    ]
    queried = str(
        [s for s in role_statements(upgrading, executor_role) if "dynamodb:Query" in str(s["Action"])]
    )
    assert f"/index/{r.RUNS_BY_TASK_WHOLE}" in queried and f"/index/{r.RUNS_BY_TASK}" in queried


def test_a_name_that_is_not_a_retired_index_is_refused_with_the_names_there_are(tmp_path: Path) -> None:
    write_env(tmp_path, "qa", "upgrade:\n  keep_indexes: [runs.by_tusk]\n")
    with pytest.raises(ConfigError) as caught:
        load_environment("qa", tmp_path)
    message = str(caught.value)
    assert "upgrade.keep_indexes" in message and "runs.by_tusk" in message and "runs.by_task" in message
