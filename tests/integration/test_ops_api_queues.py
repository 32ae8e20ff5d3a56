"""``GET /queues``: every queue's depth from queue attributes, through the real handler on a
real-shaped API Gateway event against moto."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from test_ops_api import call

from rebound import wiring
from rebound.engine.deps import Deps
from rebound.resources import SPEC
from support import dead_letters

pytestmark = pytest.mark.integration


@pytest.fixture
def api(deps: Deps) -> Iterator[Any]:
    from rebound.handlers import ops_api

    wiring.use(deps)
    yield ops_api
    wiring.use(None)


def test_queues_lists_every_queue_with_its_depth(api: Any, deps: Deps) -> None:
    dead_letters(deps, 3)
    status, queues = call(api, "GET", "/queues")
    assert status == 200
    assert [q["queue"] for q in queues] == [q.logical for q in SPEC.queues]
    by_name = {q["queue"]: q for q in queues}
    assert by_name["dlq"]["total"] == 3 and by_name["dlq"]["dead_letter_queue"] is True
    assert by_name["execution"]["dead_letter_queue"] is False
    assert all(q["total"] == q["visible"] + q["in_flight"] + q["delayed"] for q in queues)
    status, queues = call(api, "GET", "/queues")
    assert {q["queue"]: q["total"] for q in queues}["dlq"] == 3  # reading hid nothing


def test_queues_needs_a_caller(api: Any) -> None:
    status, error = call(api, "GET", "/queues", caller=None)
    assert (status, error["code"]) == (403, "FORBIDDEN")


def test_each_queue_has_its_oldest_message_age_from_the_dlq_record_or_cloudwatch(
    api: Any, deps: Deps, aws: Any, clock: Any
) -> None:
    dead_letters(deps, 2)
    clock.advance(90)
    execution = deps.settings.queue("execution").url.rsplit("/", 1)[-1]
    aws.client("cloudwatch").put_metric_data(  # what SQS publishes every minute on AWS
        Namespace="AWS/SQS",
        MetricData=[
            {
                "MetricName": "ApproximateAgeOfOldestMessage",
                "Dimensions": [{"Name": "QueueName", "Value": execution}],
                "Timestamp": clock.now() - timedelta(minutes=2),
                "Value": 42.0,
            }
        ],
    )
    by_name = {q["queue"]: q for q in call(api, "GET", "/queues")[1]}
    # the DLQ's oldest arrival was dead-lettered at the start (the second a moment later): 90 s
    assert by_name["dlq"]["age_source"] == "dlq record"
    assert 89 <= by_name["dlq"]["oldest_age_s"] <= 90
    assert (by_name["execution"]["oldest_age_s"], by_name["execution"]["age_source"]) == (42.0, "cloudwatch")
    assert by_name["retry"]["oldest_age_s"] is None  # no datapoint: unknown, not zero


def test_the_local_runtime_reads_its_queues_ages_without_receiving(deps: Deps, clock: Any) -> None:
    """moto keeps the queues in this process (as the local cloud's server does): their ages are
    read there, and reading them receives nothing."""
    from rebound_local.cloud import LocalQueueAges

    names = {name: ref.url.rsplit("/", 1)[-1] for name, ref in deps.settings.queues.items()}
    ages = LocalQueueAges(names, clock.now)
    assert ages.oldest_age_s("execution") is None  # empty
    deps.queues.send("execution", {"kind": "fire"})
    clock.advance(30)
    assert 29 <= (ages.oldest_age_s("execution") or 0) <= 31
    assert deps.queues.counts("execution").visible == 1  # still there, nothing in flight
