"""The gates: cdk-nag AwsSolutions with zero unacknowledged findings (synthesis fails otherwise),
every acknowledgment with its reason, and cfn-lint with zero errors on every template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from infra_helpers import ENVIRONMENTS, Synth

pytestmark = pytest.mark.infra

LINT_REGIONS = ["us-east-1", "eu-central-1", "ap-southeast-2"]


def acknowledgments(synth: Synth) -> dict[str, dict[str, str]]:
    key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    found: dict[str, dict[str, str]] = {}
    for construct in synth.app.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                found.setdefault(construct.node.path, {}).update(entry.data)
    return found


def test_cdk_nag_ran_and_left_no_unacknowledged_finding(synth: Synth) -> None:
    # The fixture's synth would have raised on any finding; the report records the clean run.
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    for plugin in report["pluginReports"]:
        assert plugin["conclusion"] == "success", plugin


def test_every_acknowledgment_names_its_rule_and_gives_a_reason(synth: Synth) -> None:
    acks = acknowledgments(synth)
    assert acks, "the stacks acknowledge findings; none were recorded"
    for path, rules in acks.items():
        assert path.split("/")[0] in {synth.stacks[e].stack_name for e in ENVIRONMENTS}, path
        for rule, reason in rules.items():
            assert "AwsSolutions-" in rule, (path, rule)
            assert len(reason) >= 40, (path, rule, reason)


def test_no_acknowledgment_covers_a_whole_stack(synth: Synth) -> None:
    for path in acknowledgments(synth):
        assert "/" in path, f"{path}: acknowledge on the construct that has the finding"


def test_an_unacknowledged_finding_fails_synthesis(tmp_path: Path) -> None:
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "NagProbe")
    sqs.Queue(stack, "Plain", encryption=sqs.QueueEncryption.UNENCRYPTED)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(Exception, match=r"AwsSolutions-SQS2"):
        app.synth()


def test_cfn_lint_reports_no_errors_on_any_template(synth: Synth) -> None:
    from cfnlint.api import ManualArgs, lint

    templates = sorted(synth.outdir.glob("*.template.json"))
    assert len(templates) == len(ENVIRONMENTS)
    for path in templates:
        matches = lint(path.read_text(), config=ManualArgs(regions=LINT_REGIONS))
        errors = [f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.id.startswith("E")]
        assert errors == [], f"{path.name}:\n" + "\n".join(errors)
