"""Bulk task registration respects the Scheduler quota and backs off when throttled."""

from __future__ import annotations

import random
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rebound.domain.errors import Throttled
from rebound.engine.deps import Deps
from rebound.ops.tasks import TaskOps
from rebound.ops.throttle import Backoff, RateLimiter
from support import task

pytestmark = pytest.mark.integration


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_limiter_allows_a_burst_then_the_rate() -> None:
    t = FakeTime()
    limiter = RateLimiter(10, monotonic=t.monotonic, sleep=t.sleep)

    for _ in range(30):
        limiter.acquire()

    assert t.now == pytest.approx(2.0)  # ten at once, then twenty at ten per second


def test_the_limiter_halves_on_throttling_and_recovers_slowly() -> None:
    limiter = RateLimiter(100, floor=5, recover_after=3)

    for _ in range(6):
        limiter.slow_down()
    assert limiter.rate == 5
    for _ in range(6):
        limiter.succeeded()
    assert limiter.rate == 25  # +10 per three successes, never above 100


def test_backoff_retries_throttles_with_growing_capped_waits_then_gives_up() -> None:
    t = FakeTime()
    backoff = Backoff(attempts=4, base_s=1, cap_s=3, sleep=t.sleep, rng=random.Random(7))
    calls = {"n": 0}

    def throttled() -> None:
        calls["n"] += 1
        raise Throttled("slow down")

    with pytest.raises(Throttled):
        backoff.call(throttled)

    assert calls["n"] == 4 and len(t.slept) == 3 and backoff.throttles == 4
    assert all(0 <= s <= cap for s, cap in zip(t.slept, [1, 2, 3], strict=True))


def test_apply_paces_scheduler_requests_and_survives_throttling(deps: Deps, monkeypatch: Any) -> None:
    client = deps.schedules.client
    create = client.create_schedule
    seen = {"n": 0}

    def sometimes_throttled(**kwargs: Any) -> Any:
        seen["n"] += 1
        if seen["n"] % 3 == 0:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "CreateSchedule"
            )
        return create(**kwargs)

    monkeypatch.setattr(client, "create_schedule", sometimes_throttled)
    t = FakeTime()
    limiter = RateLimiter(20, monotonic=t.monotonic, sleep=t.sleep)
    ops = TaskOps(deps, "operator", limiter=limiter, backoff=Backoff(sleep=t.sleep, rng=random.Random(1)))
    done: list[str] = []

    result = ops.apply(
        ops.plan([task(f"t{i:03d}") for i in range(40)]), progress=lambda c: done.append(c.task.id)
    )

    assert len(result.created) == 40 and result.schedules_written == 40 and len(done) == 40
    assert result.throttled >= 13
    assert all(deps.schedules.get(f"task-t{i:03d}") for i in range(40))
    assert limiter.rate is not None and limiter.rate < 20  # it slowed down
    # 80 tokens (read + write per task) at no more than 20 per second, plus backoff pauses.
    assert t.now >= (80 - 20) / 20


def test_a_bulk_apply_of_unchanged_tasks_takes_one_token_per_listing_page(deps: Deps) -> None:
    tasks = [task(f"t{i:03d}") for i in range(40)]
    setup = TaskOps(deps, "operator")
    setup.apply(setup.plan(tasks))
    t = FakeTime()
    limiter = RateLimiter(1, burst=1, monotonic=t.monotonic, sleep=t.sleep)
    ops = TaskOps(deps, "operator", limiter=limiter, backoff=Backoff(sleep=t.sleep, rng=random.Random(1)))

    result = ops.apply(ops.plan(tasks))  # one ListSchedules page, no GetSchedule

    assert len(result.unchanged) == 40 and result.schedules_written == 0
    assert t.now == 0  # one token: the burst's
    changed = [task(f"t{i:03d}", schedule={"cron": "*/7 * * * *"}) for i in range(40)]
    before = t.now
    ops.apply(ops.plan(changed))  # the listing, then a write and its read-back each
    assert t.now - before == pytest.approx(81)  # 81 tokens at one a second, the burst spent
