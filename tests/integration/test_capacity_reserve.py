"""Capacity reservation before an attempt (``capacity_reserve``, the scheduler's
``POST /ops/capacity/reserve`` contract) against a loopback capacity service, through the executor's
handler on the local store: granted, refused, down, hanging; a refused or failed reservation holds
the run waiting without spending an attempt, and the run starts once the service grants it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from rebound.adapters.targets.registry import default_targets
from rebound.domain.run import RunState
from rebound.domain.target_specs import TargetRules
from rebound.domain.task import TenantSettings
from rebound.engine.deps import Deps
from rebound.engine.executor import capacity
from rebound.engine.executor.admission import WAIT_S
from rebound.handlers import executor
from support import Context, delete_done, fire, loopback_http, receive_event, register, sqs_event, task

pytestmark = pytest.mark.integration

RUN = "job:20260307T090000Z"
NEEDS = {"workers": 2, "pool": "batch"}


@dataclass
class Service:
    """A capacity service on 127.0.0.1: answers each reservation with ``status`` and ``body``."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=lambda: {"reserved": True, "reservation_id": "res-1"})
    delay_s: float = 0.0
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    base: str = ""


@pytest.fixture
def service() -> Iterator[Service]:
    state = Service()

    def answer(path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        state.requests.append((path, json.loads(body), dict(headers)))
        time.sleep(state.delay_s)
        return state.status, json.dumps(state.body).encode()

    with loopback_http(answer) as base:
        state.base = base
        yield state


@pytest.fixture
def local(wired: Deps, aws: Any) -> Deps:
    """The handlers' targets (and registration) under the local environment's rules, which reach
    a plain-http service on loopback."""
    rules = TargetRules.defaults_for("local")
    wired.settings = wired.settings.model_copy(update={"targets": rules})
    wired.targets = default_targets(aws, wired.clock, {}, rules)
    return wired


def drain(deps: Deps) -> None:
    event = receive_event(deps)
    if event["Records"]:
        delete_done(deps, event, executor.lambda_handler(event, Context()))


def the_run(deps: Deps) -> Any:
    run = deps.store.get_run(RUN)
    assert run is not None
    return run


def test_a_granted_reservation_starts_the_run_and_is_in_its_claims_record(
    local: Deps, service: Service
) -> None:
    register(local, task("job", capacity_reserve={"url": service.base + "/cap", "needs": NEEDS}))
    executor.lambda_handler(sqs_event(fire("job")), Context())

    [(path, body, headers)] = service.requests
    assert path == "/cap/ops/capacity/reserve"
    assert body["needs"] == NEEDS and body["run_id"] == RUN and body["attempt"] == 1
    assert body["idempotency_key"] == headers["Idempotency-Key"] == f"{RUN}#1"
    assert body["trace"]["traceparent"] == headers["traceparent"]
    assert the_run(local).state is RunState.SUCCEEDED
    [claim] = [r for r in local.store.audit_trail(f"run#{RUN}") if r.action == "attempt-started"]
    assert claim.evidence["capacity"] == {"reserved": True, "reservation_id": "res-1"}


@pytest.mark.parametrize(
    ("status", "body", "delay_s", "reason"),
    [
        (200, {"reserved": False, "reason": "pool batch is full"}, 0.0, "capacity_refused"),
        (409, {"error": "quota exceeded"}, 0.0, "capacity_refused"),
        (503, {"error": "down"}, 0.0, "capacity_unavailable"),
        (200, {"reserved": True}, 1.0, "capacity_unavailable"),  # no answer in time (0.3 s here)
    ],
)
def test_a_run_the_service_does_not_grant_waits_without_spending_an_attempt_then_starts(
    local: Deps,
    service: Service,
    status: int,
    body: dict[str, Any],
    delay_s: float,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(capacity, "RESERVE_TIMEOUT_S", 0.3)
    register(local, task("job", capacity_reserve={"url": service.base, "needs": NEEDS}))
    service.status, service.body, service.delay_s = status, body, delay_s
    executor.lambda_handler(sqs_event(fire("job")), Context())

    waiting = the_run(local)
    assert (waiting.state, waiting.attempt, waiting.wait_reason) == (RunState.PENDING, 0, reason)
    [record] = [r for r in local.store.audit_trail(f"run#{RUN}") if r.action == "waiting"]
    assert record.evidence["reason"] == reason and record.evidence["detail"]

    service.status, service.body, service.delay_s = 200, {"reserved": True, "reservation_id": "r2"}, 0.0
    local.clock.sleep(WAIT_S + 1)
    drain(local)
    done = the_run(local)
    assert (done.state, done.attempt) == (RunState.SUCCEEDED, 1)
    assert [b["idempotency_key"] for _, b, _ in service.requests] == [f"{RUN}#1", f"{RUN}#1"]


def test_a_task_without_its_own_asks_its_tenants_service(local: Deps, service: Service) -> None:
    local.store.put_tenant(
        "acme",
        TenantSettings(capacity_reserve={"url": service.base, "needs": {"tenant_pool": "acme"}}),  # type: ignore[arg-type]
        actor="test",
        at=local.clock.now(),
    )
    register(local, task("job"))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    assert [b["needs"] for _, b, _ in service.requests] == [{"tenant_pool": "acme"}]
    assert the_run(local).state is RunState.SUCCEEDED


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"url": "https://cap.example.com/x?token=1"}, "url"),
        ({"url": "ftp://cap.example.com"}, "url"),
        ({"url": "https://cap.example.com", "headers": {"X-Api-Key": "plain"}}, "headers"),
    ],
)
def test_a_capacity_service_that_cannot_be_called_safely_is_refused_naming_the_field(
    spec: dict[str, Any], where: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        task("job", capacity_reserve=spec)
    assert [e["loc"][:2] for e in caught.value.errors()] == [("capacity_reserve", where)]
