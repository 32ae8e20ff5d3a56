"""``GET /queues``: every queue's depth from queue attributes, through the real handler on a
real-shaped API Gateway event against moto."""

from __future__ import annotations

from collections.abc import Iterator
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
