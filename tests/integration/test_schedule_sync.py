"""A bulk ``tasks apply`` lists the schedule group instead of reading every schedule, and still
repairs every schedule changed, disabled or deleted behind its back (``rebound.ops.schedule_sync``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from rebound.engine.deps import Deps
from rebound.ops.schedule_sync import LIST_ABOVE, SYNC_PREFIX
from rebound.ops.tasks import TaskOps
from support import ManualClock, task

pytestmark = pytest.mark.integration

TASKS = [task(f"t{i:03d}") for i in range(150)]


@pytest.fixture
def requests(deps: Deps) -> Iterator[Counter[str]]:
    """Scheduler requests by operation, as the client sends them."""
    seen: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        seen[model.name] += 1

    events = deps.schedules.client.meta.events  # type: ignore[attr-defined]
    events.register("before-call.scheduler", count)
    yield seen
    events.unregister("before-call.scheduler", count)


def as_held(client: Any, group: str, name: str, **changes: Any) -> dict[str, Any]:
    """UpdateSchedule's arguments for the schedule as Scheduler holds it, with ``changes``."""
    held = client.get_schedule(Name=name, GroupName=group)
    return {k: v for k, v in held.items() if k in UPDATE} | changes


def apply(deps: Deps, tasks: list[Any]) -> Any:
    ops = TaskOps(deps, "operator")
    return ops.apply(ops.plan(tasks))


def test_an_unchanged_bulk_apply_reads_no_schedule(deps: Deps, requests: Counter[str]) -> None:
    apply(deps, TASKS)
    requests.clear()

    result = apply(deps, TASKS)

    assert len(result.unchanged) == 150 and result.schedules_written == 0
    assert requests == {"ListSchedules": 2}  # 150 schedules: two pages of 100


def test_drift_behind_the_applys_back_is_repaired_and_nothing_else_is_read(
    deps: Deps, clock: ManualClock, requests: Counter[str]
) -> None:
    apply(deps, TASKS)
    clock.advance(1)  # Scheduler stamps each change; locally with the runtime's clock
    client: Any = deps.schedules.client
    group = deps.settings.schedule_group
    wanted = client.get_schedule(Name="task-t001", GroupName=group)["ScheduleExpression"]
    client.delete_schedule(Name="task-t001", GroupName=group)
    client.update_schedule(**as_held(client, group, "task-t002", ScheduleExpression="cron(0 12 * * ? *)"))
    client.update_schedule(**as_held(client, group, "task-t003", State="DISABLED"))
    requests.clear()

    result = apply(deps, TASKS)

    assert result.schedules_written == 3 and len(result.unchanged) == 150
    # the listing; t002 and t003 read (their date moved); three writes; three read-backs
    assert requests == {
        "ListSchedules": 2,
        "GetSchedule": 2 + 3,
        "CreateSchedule": 1,
        "UpdateSchedule": 2,
    }
    assert client.get_schedule(Name="task-t001", GroupName=group)["ScheduleExpression"] == wanted
    assert client.get_schedule(Name="task-t002", GroupName=group)["ScheduleExpression"] == wanted
    assert client.get_schedule(Name="task-t003", GroupName=group)["State"] == "ENABLED"
    requests.clear()
    assert apply(deps, TASKS).schedules_written == 0 and requests == {"ListSchedules": 2}


def test_a_payload_edited_behind_the_applys_back_is_found_by_its_modification_date(
    deps: Deps, clock: ManualClock, requests: Counter[str]
) -> None:
    # The listing shows no payload: only the schedule's LastModificationDate says it changed.
    apply(deps, TASKS)
    clock.advance(1)
    client: Any = deps.schedules.client
    group = deps.settings.schedule_group
    held = client.get_schedule(Name="task-t004", GroupName=group)
    wanted_input = held["Target"]["Input"]
    edited = {**held["Target"], "Input": '{"v": 1, "kind": "fire", "task_id": "someone-else"}'}
    client.update_schedule(**as_held(client, group, "task-t004", Target=edited))
    requests.clear()

    result = apply(deps, TASKS)

    assert result.schedules_written == 1
    # the listing; t004 read (its date moved); written; read back
    assert requests == {"ListSchedules": 2, "GetSchedule": 2, "UpdateSchedule": 1}
    assert client.get_schedule(Name="task-t004", GroupName=group)["Target"]["Input"] == wanted_input
    requests.clear()
    assert apply(deps, TASKS).schedules_written == 0 and requests == {"ListSchedules": 2}


@pytest.mark.parametrize("change", ["disabled", "retargeted"])
def test_a_change_the_listing_shows_is_repaired_even_at_the_instant_of_the_last_sync(
    deps: Deps, requests: Counter[str], change: str
) -> None:
    # Locally the date comes from the runtime's clock: with the clock held still, a change made
    # out of band keeps the date the last sync recorded, but the listing shows state and target.
    apply(deps, TASKS)
    client: Any = deps.schedules.client
    group = deps.settings.schedule_group
    held = client.get_schedule(Name="task-t005", GroupName=group)
    wanted_arn = held["Target"]["Arn"]
    if change == "disabled":
        client.update_schedule(**as_held(client, group, "task-t005", State="DISABLED"))
    else:
        elsewhere = {**held["Target"], "Arn": deps.settings.queue("escalation").arn}
        client.update_schedule(**as_held(client, group, "task-t005", Target=elsewhere))
    after = client.get_schedule(Name="task-t005", GroupName=group)
    assert after["LastModificationDate"] == held["LastModificationDate"]  # the date did not move
    requests.clear()

    result = apply(deps, TASKS)

    assert result.schedules_written == 1
    # the listing; t005 written without a read (its record names the listed date); read back
    assert requests == {"ListSchedules": 2, "UpdateSchedule": 1, "GetSchedule": 1}
    live = client.get_schedule(Name="task-t005", GroupName=group)
    assert live["State"] == "ENABLED" and live["Target"]["Arn"] == wanted_arn


def test_a_changed_task_is_written_without_a_read_and_its_record_follows(
    deps: Deps, requests: Counter[str]
) -> None:
    apply(deps, TASKS)
    changed = [*TASKS[:-1], task("t149", schedule={"cron": "*/9 * * * *"})]
    requests.clear()

    result = apply(deps, changed)

    assert result.updated == ["t149"] and result.schedules_written == 1
    assert requests == {"ListSchedules": 2, "UpdateSchedule": 1, "GetSchedule": 1}
    live = deps.schedules.get("task-t149")
    assert live is not None and live["ScheduleExpression"] == "cron(0/9 * * * ? *)"
    record = deps.store.get_key(SYNC_PREFIX + "task-t149")
    assert record is not None and record["modified"] == live["LastModificationDate"].isoformat()


def test_a_schedule_without_a_record_is_read_once_then_trusted(deps: Deps, requests: Counter[str]) -> None:
    apply(deps, TASKS)
    deps.store.release_key(SYNC_PREFIX + "task-t010")  # as after an upgrade: never recorded
    requests.clear()

    assert apply(deps, TASKS).schedules_written == 0
    assert requests == {"ListSchedules": 2, "GetSchedule": 1}
    requests.clear()
    apply(deps, TASKS)
    assert requests == {"ListSchedules": 2}


def test_a_small_apply_reads_its_schedules_instead_of_listing_the_group(
    deps: Deps, requests: Counter[str]
) -> None:
    apply(deps, TASKS)
    requests.clear()

    apply(deps, TASKS[:LIST_ABOVE])

    assert requests == {"GetSchedule": LIST_ABOVE}


UPDATE = (
    "Name",
    "GroupName",
    "ScheduleExpression",
    "ScheduleExpressionTimezone",
    "FlexibleTimeWindow",
    "Target",
    "State",
    "Description",
)
