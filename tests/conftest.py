"""Shared fixtures.

``aws``: moto in-process (``mock_aws``) with Rebound's moto patches, fake credentials, us-east-1.
``settings``: every resource provisioned from ``rebound.resources.SPEC``, as the local cloud does.
``clock``: a manual clock; moto's SQS delays and visibility timeouts follow it.
``deps``: the engine's dependencies on top of those, with recording metrics.

Hypothesis profiles: ``make test`` (and CI) loads ``ci``, whose examples derive from each test's
name, so a red run is red again on a laptop. ``make fuzz`` loads ``fuzz``: fresh random examples
every round, for finding new failures; each one found becomes an ``@example`` on its test once
fixed, so ``make test`` keeps checking it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import settings as hypothesis_settings

from rebound.engine.deps import Deps
from rebound.settings import Settings
from rebound_local import motopatch
from rebound_local.instrument import RecordingMetrics, RecordingTargets
from support import ManualClock

hypothesis_settings.register_profile("ci", derandomize=True, database=None)
hypothesis_settings.register_profile("fuzz", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    manual = ManualClock()
    motopatch.install()
    motopatch.set_clock(manual.now)
    yield manual
    motopatch.set_clock(None)


_SESSIONS: list[boto3.session.Session] = []


def _session() -> boto3.session.Session:
    """One session for the whole run: botocore then loads each service model once, not per test."""
    if not _SESSIONS:
        _SESSIONS.append(
            boto3.session.Session(
                region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
            )
        )
    return _SESSIONS[0]


@pytest.fixture
def aws(clock: ManualClock) -> Iterator[boto3.session.Session]:
    from moto import mock_aws

    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    with mock_aws():
        yield _session()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def settings(aws: boto3.session.Session) -> Settings:
    from rebound_local.provision import provision

    return provision(aws, None, "test")


@pytest.fixture
def metrics() -> RecordingMetrics:
    return RecordingMetrics()


@pytest.fixture
def deps(
    aws: boto3.session.Session, settings: Settings, clock: ManualClock, metrics: RecordingMetrics
) -> Deps:
    from rebound.wiring import build_deps

    return build_deps(settings, session=aws, clock=clock, metrics=metrics)


@pytest.fixture
def every_event(deps: Deps) -> None:
    """The outbox of ``deps`` carries every event, as in an environment with ``outbox.publish: ['*']``:
    for tests that watch events no rule of the stack consumes (``task.retry.scheduled``...)."""
    deps.store.published = None


@pytest.fixture
def wired(deps: Deps) -> Iterator[Deps]:
    """``deps`` installed as what the Lambda handlers use (``rebound.wiring.deps()``)."""
    from rebound import wiring

    wiring.use(deps)
    yield deps
    wiring.use(None)


@pytest.fixture(autouse=True, scope="session")
def _quiet_powertools() -> None:
    """Handlers' metrics are recorded by the tests' sink; Powertools need not print EMF."""
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    from rebound_local.stack import quiet_powertools_metrics

    quiet_powertools_metrics()


@pytest.fixture
def calls(wired: Deps) -> RecordingTargets:
    """Every real call of a target, recorded (the handlers' targets, wrapped)."""
    recorder = RecordingTargets(wired.targets, wired.clock)
    wired.targets = recorder
    return recorder


@pytest.fixture
def local_stacks() -> Iterator[list[Any]]:
    """Local stacks a test starts (``support.start_virtual``): stopped afterwards, moto reset."""
    from rebound_local.cloud import reset_moto

    started: list[Any] = []
    yield started
    for stack in started:
        stack.stop()
    reset_moto()
