"""Which events the outbox carries: those a rule of the stack consumes, and those the environment
names (``Settings.publish_events``, the environment's ``outbox.publish``)."""

from __future__ import annotations

import pytest
from fakes import memory_settings

from rebound import resources as r
from rebound.domain.errors import ConfigError
from rebound.settings import settings_from_env, settings_to_env

pytestmark = pytest.mark.unit


def test_the_outbox_carries_exactly_the_events_a_rule_consumes_by_default() -> None:
    published = memory_settings().published_events()
    assert published == {d for rule in r.SPEC.rules for d in rule.detail_types}
    assert "task.execution.failed" in published and "task.dead_lettered" in published
    assert "task.execution.updated" not in published


def test_an_environment_adds_events_of_its_own_or_publishes_every_one() -> None:
    extra = memory_settings(publish_events=("task.execution.updated",)).published_events()
    assert extra is not None and "task.execution.updated" in extra and "task.retry.scheduled" not in extra
    assert memory_settings(publish_events=("*",)).published_events() is None


def test_the_published_events_survive_the_functions_environment() -> None:
    settings = memory_settings(publish_events=("task.execution.updated", "task.retry.scheduled"))
    env = settings_to_env(settings)
    assert env[r.ENV_PUBLISH_EVENTS] == "task.execution.updated,task.retry.scheduled"
    assert settings_from_env({**env, r.ENV_AUDIT_KEY: "key"}).publish_events == settings.publish_events


def test_an_unknown_event_is_refused_naming_it_and_the_variable() -> None:
    env = settings_to_env(memory_settings())
    with pytest.raises(ConfigError) as caught:
        settings_from_env({**env, r.ENV_AUDIT_KEY: "key", r.ENV_PUBLISH_EVENTS: "task.execution.updatd"})
    assert "publish_events" in str(caught.value) and "task.execution.updatd" in str(caught.value)
