"""The app as the CDK CLI runs it: ``cdk.json``'s command, ``--context env=NAME``, and the output
folder the CLI names, with no AWS call and no Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rebound_infra.app import REPO_ROOT, cdk_json_context

pytestmark = pytest.mark.infra


def test_cdk_json_runs_the_app_with_the_project_python() -> None:
    config = json.loads((REPO_ROOT / "cdk.json").read_text())
    assert config["app"].split() == [".venv/bin/python", "infra/app.py"]
    assert cdk_json_context()["rebound:environments-dir"] == "config/environments"


def test_the_app_synthesizes_one_environment_as_the_cli_asks(tmp_path: Path) -> None:
    """What ``npx aws-cdk@2 synth --context env=dev`` does: the CLI passes context and outdir."""
    env = {
        **os.environ,
        "CDK_OUTDIR": str(tmp_path),
        "CDK_CONTEXT_JSON": json.dumps({"env": "dev"}),
        # No credentials and no endpoint: synthesis must not need AWS.
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    result = subprocess.run(
        [sys.executable, "infra/app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    stacks = [name for name, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"]
    assert stacks == ["Rebound-dev"]
    assert (tmp_path / "Rebound-dev.template.json").is_file()


def test_a_bad_environment_file_stops_the_app_with_the_file_and_key(tmp_path: Path) -> None:
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path), "CDK_CONTEXT_JSON": json.dumps({"env": "nope"})}
    result = subprocess.run(
        [sys.executable, "infra/app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr and "no such environment file" in result.stderr
