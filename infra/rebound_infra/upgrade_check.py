"""Before a deploy: would it ask DynamoDB to build one index of a table and drop another at once?

DynamoDB builds or drops one global secondary index per table update, and CloudFormation fails
(and rolls back) a stack update that does both on one table. That happens when a stack deployed
by an earlier version meets a version that replaced an index, without the first of the two
deploys docs/deploy.md (*Upgrading*) asks for. ``make deploy`` runs this first, with the
deployer's credentials: it reads the environment's resources parameter (no stack yet: nothing to
check) and each table's indexes, and stops with what to set in the environment's file.

    python -m rebound_infra.upgrade_check ENV
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rebound import resources as r
from rebound_infra.config import EnvironmentConfig, load_environment

ENV_DIR = Path(__file__).resolve().parents[2] / "config" / "environments"


def problems(config: EnvironmentConfig, deployed: Mapping[str, set[str]]) -> list[str]:
    """What the deploy of ``config`` would refuse to do, for tables that have ``deployed`` indexes
    (table -> index names); empty when each table gains or loses at most one index."""
    out = []
    for spec in r.SPEC.tables:
        if spec.logical not in deployed:
            continue
        have = deployed[spec.logical]
        want = {i.name for i in spec.built_indexes(config.upgrade.keep_indexes)}
        added, dropped = sorted(want - have), sorted(have - want)
        if len(added) + len(dropped) <= 1:
            continue
        kept = [
            f"{spec.logical}.{name}" for name in dropped if name in {i.name for i in spec.retired_indexes}
        ]
        fix = (
            f"deploy first with `upgrade: {{keep_indexes: [{', '.join(kept)}]}}` in "
            f"config/environments/{config.name}.yaml, then without it"
            if kept and len(added) == 1
            else "change one index per deploy"
        )
        out.append(
            f"table {spec.logical}: this deploy would build {', '.join(added) or 'no index'} and drop "
            f"{', '.join(dropped) or 'no index'}, and DynamoDB changes one index per update: {fix} "
            "(docs/deploy.md, Upgrading)"
        )
    return out


def deployed_indexes(session: Any, environment: str) -> dict[str, set[str]]:
    """Each deployed table's indexes, from the environment's resources parameter (empty: no stack)."""
    ssm = session.client("ssm")
    try:
        document = json.loads(
            ssm.get_parameter(Name=r.resources_parameter(environment))["Parameter"]["Value"]
        )
    except ssm.exceptions.ParameterNotFound:
        return {}
    dynamodb = session.client("dynamodb")
    out = {}
    for logical, name in document.get("tables", {}).items():
        try:
            table = dynamodb.describe_table(TableName=name)["Table"]
        except dynamodb.exceptions.ResourceNotFoundException:
            continue
        out[logical] = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
    return out


def main(argv: list[str] | None = None) -> int:
    import boto3

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rebound_infra.upgrade_check ENV", file=sys.stderr)
        return 2
    from botocore.exceptions import BotoCoreError, ClientError

    config = load_environment(args[0], ENV_DIR)
    try:
        deployed = deployed_indexes(boto3.Session(), config.name)
    except (BotoCoreError, ClientError) as exc:
        print(f"cannot check {config.stack_name}'s tables before deploying: {exc}", file=sys.stderr)
        return 1
    found = problems(config, deployed)
    for problem in found:
        print(f"cannot deploy {config.stack_name}: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
