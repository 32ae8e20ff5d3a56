"""Which events the outbox carries: those a rule of the stack consumes, and those the environment
names (``Settings.publish_events``, the environment's ``outbox.publish``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fakes import memory_settings
from pydantic import ValidationError

from rebound import resources as r
from rebound.adapters.memory.store import MemoryStore
from rebound.domain.errors import ConfigError
from rebound.domain.events import DomainEvent, EventType
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


def _bad_update() -> DomainEvent:
    # ``attempt`` must be a number: a wrong shape, known only when the detail is read.
    return DomainEvent.of(EventType.EXECUTION_UPDATED, run_id="r", attempt="many")


def test_an_events_detail_is_checked_against_its_model_when_it_is_read() -> None:
    event = _bad_update()
    with pytest.raises(ValidationError):
        event.detail  # noqa: B018


def test_an_unpublished_event_is_not_built_where_it_is_not_written_but_the_test_store_checks_it() -> None:
    at = datetime(2026, 3, 7, tzinfo=UTC)
    deployed = MemoryStore(published=frozenset({"task.execution.failed"}))
    deployed.check_unpublished = False  # as the DynamoDB store: nothing written, nothing built
    uow = deployed.unit_of_work("test", at)
    uow.emit(_bad_update(), "run#r")
    assert uow._events == 1  # its id is taken all the same
    checking = MemoryStore(published=frozenset({"task.execution.failed"}))
    with pytest.raises(ValidationError):
        checking.unit_of_work("test", at).emit(_bad_update(), "run#r")
    publishing = MemoryStore(published=None)
    publishing.check_unpublished = False
    with pytest.raises(ValidationError):  # an event that is written is always checked
        publishing.unit_of_work("test", at).emit(_bad_update(), "run#r")
