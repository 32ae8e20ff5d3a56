"""A run's change without a transaction (``rebound.adapters.dynamo.write_ahead``): its audit record
is the commit point, its item follows, and whoever meets an item behind its chain rolls it forward."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from rebound.domain.audit import verify_chain
from rebound.domain.errors import Conflict
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.engine.ports.runtime import AFTER_AUDIT_RECORD
from rebound_local.instrument import CrashPlan, SimulatedCrash
from support import new_run

pytestmark = pytest.mark.integration


def _calls(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    client = deps.store.client  # type: ignore[attr-defined]
    seen: list[str] = []
    for name in ("put_item", "transact_write_items"):
        real = getattr(client, name)

        def wrapped(*, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            seen.append(_name)
            return _real(**kwargs)

        monkeypatch.setattr(client, name, wrapped)
    return seen


def test_a_runs_change_alone_is_two_puts_not_a_transaction(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = new_run(deps)
    seen = _calls(deps, monkeypatch)
    uow = deps.store.unit_of_work("executor", deps.clock.now())
    uow.save_run(run, run.model_copy(update={"state": RunState.RUNNING}), action="claim")
    uow.commit()
    assert seen == ["put_item", "put_item"]  # the record, then the item
    stored = deps.store.get_run("r1")
    assert stored is not None and stored.state is RunState.RUNNING and stored.audit_seq == 2


def test_two_writers_with_byte_identical_records_commit_once(deps: Deps) -> None:
    """Two copies of one message in one batch, at one instant, stage the same record: equal content
    does not make the second writer's record its own; it loses, as a transaction's loser does."""
    run = new_run(deps)
    now = deps.clock.now()
    first, second = (deps.store.unit_of_work("executor", now) for _ in range(2))
    for uow in (first, second):
        uow.save_run(run, run.model_copy(update={"state": RunState.RUNNING}), action="claim")
    first.commit()
    with pytest.raises(Conflict) as caught:
        second.commit()
    assert caught.value.details["failed"] == ["runs r1", "audit run#r1 #2"]
    assert [r.seq for r in deps.store.audit_trail("run#r1")] == [1, 2]


def test_a_record_the_sdk_sent_twice_is_known_as_its_own(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK sent the put again after a lost answer, and the condition failed on the first try's
    own record: the change goes on to its item instead of reporting a conflict."""
    run = new_run(deps)
    client = deps.store.client  # type: ignore[attr-defined]
    real = client.put_item

    def lost_answer(**kwargs: Any) -> Any:
        real(**kwargs)  # written, but the answer never arrives; the SDK's retry meets it
        if kwargs["Item"].get("subject", {}).get("S") == "run#r1":
            monkeypatch.setattr(client, "put_item", real)
            raise ClientError(
                {
                    "Error": {"Code": "ConditionalCheckFailedException", "Message": "failed"},
                    "ResponseMetadata": {"RetryAttempts": 1},
                },
                "PutItem",
            )
        return None

    monkeypatch.setattr(client, "put_item", lost_answer)
    uow = deps.store.unit_of_work("executor", deps.clock.now())
    uow.save_run(run, run.model_copy(update={"state": RunState.RUNNING}), action="claim")
    uow.commit()
    stored = deps.store.get_run("r1")
    assert stored is not None and stored.state is RunState.RUNNING and stored.audit_seq == 2


def test_a_change_stopped_after_its_record_is_rolled_forward_by_the_next_writer(deps: Deps) -> None:
    run = new_run(deps)
    saved = deps.faults
    deps.store.faults = CrashPlan(frozenset({AFTER_AUDIT_RECORD}), 1.0)  # type: ignore[attr-defined]
    uow = deps.store.unit_of_work("executor", deps.clock.now())
    uow.save_run(run, run.model_copy(update={"state": RunState.RUNNING}), action="claim")
    with pytest.raises(SimulatedCrash):
        uow.commit()
    deps.store.faults = saved  # type: ignore[attr-defined]
    behind = deps.store.get_run("r1")
    assert behind is not None and behind.state is RunState.PENDING and behind.audit_seq == 1

    # The next writer read the item behind its chain: its record loses, the item catches up.
    late = deps.store.unit_of_work("sweeper", deps.clock.now())
    late.save_run(behind, behind.model_copy(update={"state": RunState.CANCELLED}), action="cancel")
    with pytest.raises(Conflict):
        late.commit()
    caught_up = deps.store.get_run("r1")
    assert caught_up is not None and caught_up.state is RunState.RUNNING and caught_up.audit_seq == 2
    trail = deps.store.audit_trail("run#r1")
    assert caught_up.audit_head == trail[-1].hash
    assert verify_chain("run#r1", trail).ok
