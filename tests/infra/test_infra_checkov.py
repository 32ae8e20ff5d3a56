"""An outside scanner's view: checkov (offline) on every environment's synthesized template.

Every finding must be fixed or explained in ``infra/checkov-accepted.yaml`` (one reason per check
id); a finding an environment's ``encryption: cmk`` fixes must not appear where cmk is set, and an
explanation that no longer matches a finding must go. checkov runs from its own virtualenv
(``make scanner``; ``make test`` installs it).
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from infra_helpers import ENVIRONMENTS, Synth

pytestmark = pytest.mark.infra
ROOT = Path(__file__).resolve().parents[2]
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
ACCEPTED = ROOT / "infra" / "checkov-accepted.yaml"


def accepted() -> dict[str, dict[str, Any]]:
    return dict(yaml.safe_load(ACCEPTED.read_text(encoding="utf-8")))


@cache
def _scan(outdir: str, stacks: tuple[tuple[str, str], ...]) -> dict[str, dict[str, set[str]]]:
    """Failed check ids by environment, each with the logical ids of the resources that fail it."""
    files = {str(Path(outdir) / f"{stack}.template.json"): env for env, stack in stacks}
    args = [str(CHECKOV), "--framework", "cloudformation", "-o", "json", "--quiet", "--compact"]
    args += ["--skip-download"]  # offline: no policies, guidelines or version checks fetched
    for path in files:
        args += ["-f", path]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert done.stdout.strip(), f"checkov printed nothing (exit {done.returncode}): {done.stderr[-2000:]}"
    reports = json.loads(done.stdout)
    found: dict[str, dict[str, set[str]]] = {env: defaultdict(set) for env, _ in stacks}
    for report in reports if isinstance(reports, list) else [reports]:
        for check in report["results"]["failed_checks"]:
            env = next(e for path, e in files.items() if Path(path).name == Path(check["file_path"]).name)
            found[env][check["check_id"]].add(check["resource"])
    return found


@pytest.fixture(scope="module")
def findings(synth: Synth) -> dict[str, dict[str, set[str]]]:
    if not CHECKOV.exists():
        pytest.skip("checkov is not installed in .venv-checkov: run `make scanner` (make test does)")
    stacks = tuple((env, synth.stacks[env].stack_name) for env in ENVIRONMENTS)
    return _scan(str(synth.outdir), stacks)


def test_every_accepted_finding_has_a_reason() -> None:
    for check_id, entry in accepted().items():
        assert check_id.startswith("CKV_"), check_id
        assert len(str(entry.get("reason", "")).split()) >= 15, f"{check_id}: give a real reason"
        assert entry.get("only_with") in (None, "aws_managed"), check_id


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_finding_is_fixed_or_explained(findings: dict[str, dict[str, set[str]]], env: str) -> None:
    unexplained = {check: sorted(res) for check, res in findings[env].items() if check not in accepted()}
    assert not unexplained, f"{env}: fix these or explain them in {ACCEPTED.name}: {unexplained}"


def test_cmk_fixes_what_it_claims_to_fix(synth: Synth, findings: dict[str, dict[str, set[str]]]) -> None:
    cmk_only = {check for check, entry in accepted().items() if entry.get("only_with") == "aws_managed"}
    with_cmk = [env for env in ENVIRONMENTS if synth.stacks[env].config.encryption == "cmk"]
    assert with_cmk, "some environment should use encryption: cmk"
    for env in with_cmk:
        assert not cmk_only & set(findings[env]), (env, cmk_only & set(findings[env]))


def test_no_explanation_outlives_its_finding(findings: dict[str, dict[str, set[str]]]) -> None:
    seen = {check for env in findings for check in findings[env]}
    assert set(accepted()) <= seen, f"no longer found, remove from {ACCEPTED.name}: {set(accepted()) - seen}"


def test_the_only_key_without_rotation_is_the_audit_hmac_key(
    synth: Synth, findings: dict[str, dict[str, set[str]]]
) -> None:
    for env in ENVIRONMENTS:
        audit_key = synth.logical_id(env, synth.stacks[env].audit_key.key)
        assert findings[env].get("CKV_AWS_7", set()) <= {f"AWS::KMS::Key.{audit_key}"}
