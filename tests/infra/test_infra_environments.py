"""Environments: one YAML file each, validated; stack names carry the environment; prod differs
where it should (retention, deletion protection, alarm thresholds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from infra_helpers import ENVIRONMENTS, Synth

from rebound import resources as r
from rebound.domain.errors import ConfigError
from rebound.settings import settings_from_document
from rebound_infra.app import REPO_ROOT
from rebound_infra.config import environment_names, load_environment

pytestmark = pytest.mark.infra

ENV_DIR = REPO_ROOT / "config" / "environments"


def test_the_three_environment_files_load() -> None:
    assert environment_names(ENV_DIR) == sorted(ENVIRONMENTS)
    for name in ENVIRONMENTS:
        assert load_environment(name, ENV_DIR).name == name


def test_stack_names_carry_the_environment(synth: Synth, env: str) -> None:
    assert synth.stacks[env].stack_name == f"Rebound-{env}"


def test_the_resources_parameter_holds_what_the_cli_reads(synth: Synth, env: str) -> None:
    (parameter,) = synth.resources(env, "AWS::SSM::Parameter").values()
    assert parameter["Properties"]["Name"] == f"/rebound/{env}/resources"
    value = parameter["Properties"]["Value"]
    separator, parts = value["Fn::Join"]
    # Stand in for each deploy-time value; every one sits inside a JSON string.
    text = separator.join(p if isinstance(p, str) else "deployed" for p in parts)
    settings = settings_from_document(json.loads(text))
    assert settings.environment == env
    assert set(settings.tables) == {t.logical for t in r.SPEC.tables}
    assert set(settings.queues) == {q.logical for q in r.SPEC.queues}
    assert len(text) + 60 * sum(1 for p in parts if not isinstance(p, str)) < 4096  # a standard parameter


def test_prod_keeps_data_and_logs_longer_and_is_termination_protected(synth: Synth) -> None:
    dev, prod = synth.stacks["dev"].config, synth.stacks["prod"].config
    assert (dev.retain_data, dev.deletion_protection) == (False, False)
    assert (prod.retain_data, prod.deletion_protection, prod.termination_protection) == (True, True, True)
    assert prod.log_retention_days > dev.log_retention_days
    assert synth.stacks["prod"].termination_protection is True
    for env, days in (("dev", dev.log_retention_days), ("prod", prod.log_retention_days)):
        for group in synth.resources(env, "AWS::Logs::LogGroup").values():
            assert group["Properties"]["RetentionInDays"] == days


def test_prod_alarm_thresholds_are_tighter_but_the_seed_rates_hold_everywhere(synth: Synth) -> None:
    dev, prod = synth.stacks["dev"].config.alarms, synth.stacks["prod"].config.alarms
    assert prod.dlq_depth < dev.dlq_depth
    assert prod.dlq_oldest_age_s < dev.dlq_oldest_age_s
    assert prod.execution_oldest_age_s < dev.execution_oldest_age_s
    for env in ENVIRONMENTS:
        alarms = synth.stacks[env].config.alarms
        assert alarms.retry_failure_rate_percent == 15
        assert alarms.scheduling_failure_rate_percent == 5
        assert alarms.sla_consecutive_breaches == 3
        assert alarms.lock_contention_percent == 70


def write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


def valid_text(name: str) -> str:
    return (ENV_DIR / "dev.yaml").read_text().replace("name: dev", f"name: {name}")


def test_an_unknown_key_is_named_with_its_file_and_path(tmp_path: Path) -> None:
    write(tmp_path, "qa", valid_text("qa").replace("dlq_depth:", "dlq_dept:"))
    with pytest.raises(ConfigError) as err:
        load_environment("qa", tmp_path)
    assert err.value.file.endswith("qa.yaml")
    assert err.value.key_path.startswith("alarms.dlq_dept")
    assert "unknown key" in err.value.problem


def test_a_bad_value_says_what_was_wrong(tmp_path: Path) -> None:
    write(tmp_path, "qa", valid_text("qa").replace("log_retention_days: 14", "log_retention_days: 10"))
    with pytest.raises(ConfigError) as err:
        load_environment("qa", tmp_path)
    assert err.value.key_path == "log_retention_days"
    assert "does not accept 10 days" in err.value.problem


def test_deletion_protection_without_retained_data_is_refused(tmp_path: Path) -> None:
    text = valid_text("qa").replace("deletion_protection: false", "deletion_protection: true")
    write(tmp_path, "qa", text)
    with pytest.raises(ConfigError, match="retain_data"):
        load_environment("qa", tmp_path)


def test_the_file_name_and_the_environment_name_must_agree(tmp_path: Path) -> None:
    write(tmp_path, "qa", valid_text("uat"))
    with pytest.raises(ConfigError) as err:
        load_environment("qa", tmp_path)
    assert err.value.key_path == "name"


def test_an_unknown_environment_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="dev, prod, staging"):
        load_environment("nope", ENV_DIR)


def test_an_event_to_publish_must_be_one_of_rebounds_own(tmp_path: Path) -> None:
    text = valid_text("qa") + "outbox:\n  publish: [task.execution.updatd]\n"
    write(tmp_path, "qa", text)
    with pytest.raises(ConfigError) as err:
        load_environment("qa", tmp_path)
    assert err.value.key_path.startswith("outbox.publish")
    assert "task.execution.updatd" in err.value.problem


def test_events_to_publish_are_read_from_the_environment_file(tmp_path: Path) -> None:
    text = valid_text("qa") + "outbox:\n  publish: [task.execution.updated, task.retry.scheduled]\n"
    write(tmp_path, "qa", text)
    publish = load_environment("qa", tmp_path).outbox.publish
    assert publish == ("task.execution.updated", "task.retry.scheduled")
