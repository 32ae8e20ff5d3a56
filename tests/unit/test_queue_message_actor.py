"""A queue message cannot name its audit actor: a replay that names one is believed only with the
ops layer's signature (the audit key's MAC over actor and run), else recorded as ``unverified``
with the name it claimed; one that names none is the fixed system actor ``console-redrive``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps

from rebound.domain.audit import UNVERIFIED_ACTOR, sign_actor, verified_actor
from rebound.domain.audit_record import AuditRecord
from rebound.domain.ids import run_subject
from rebound.domain.run import Run, RunState
from rebound.ops.replay import Replays
from support import fire, register, task

pytestmark = pytest.mark.unit

RUN = "job:20260307T090000Z"


@pytest.fixture
def world() -> MemoryWorld:
    world = memory_deps()
    register(
        world.deps,
        task("job", target={"type": "sim", "behavior": {"fail_first": 1}}, retry_policy={"max_attempts": 1}),
    )
    assert world.execute(fire("job")) == "failed"
    assert world.relay() == ["dead-lettered"]
    return world


def dead(world: MemoryWorld) -> Run:
    run = world.store.get_run(RUN)
    assert run is not None and run.state is RunState.DEAD_LETTERED
    return run


def replay(world: MemoryWorld, **fields: Any) -> AuditRecord:
    """Deliver a replay message for the dead run (as a DLQ message moved back would arrive); the
    audit record of the replay it starts."""
    run = dead(world)
    body = {"v": 1, "kind": "replay", "run_id": RUN, "task_id": "job", **fields}
    assert run.dead_lettered_at is not None
    world.execute(body, message_id="moved-back")
    [record] = [r for r in world.store.audit_trail(run_subject(RUN)) if r.action == "replayed"]
    return record


def signature(world: MemoryWorld, actor: str, run_id: str = RUN) -> str:
    return sign_actor(run_id, actor, world.clock.now(), world.store.audit_keys.sign)


def test_an_actor_the_ops_layer_signed_becomes_the_audit_actor(world: MemoryWorld) -> None:
    record = replay(world, actor="alice", actor_sig=signature(world, "alice"))
    assert record.actor == "alice" and "claimed_actor" not in record.evidence


def test_an_unsigned_actor_is_recorded_as_unverified_with_the_name_it_claimed(world: MemoryWorld) -> None:
    record = replay(world, actor="the-cfo")
    assert record.actor == UNVERIFIED_ACTOR and record.evidence["claimed_actor"] == "the-cfo"


def test_a_signature_for_another_actor_or_run_does_not_carry_over(world: MemoryWorld) -> None:
    record = replay(world, actor="mallory", actor_sig=signature(world, "alice"))
    assert record.actor == UNVERIFIED_ACTOR and record.evidence["claimed_actor"] == "mallory"
    keys = world.store.audit_keys
    other_run = signature(world, "alice", run_id="other:20260307T090000Z")
    assert verified_actor(RUN, "alice", other_run, keys.key_id, keys.check, "x") == (
        UNVERIFIED_ACTOR,
        "alice",
    )


def test_a_replay_that_names_no_actor_is_the_fixed_system_actor(world: MemoryWorld) -> None:
    assert replay(world).actor == "console-redrive"


def test_the_replay_message_the_ops_layer_sends_carries_a_signature_that_checks(world: MemoryWorld) -> None:
    body = Replays(world.deps, "alice").message(dead(world), key="k", dlq_message_id=None).body
    sent = json.loads(body)
    keys = world.store.audit_keys
    assert verified_actor(RUN, sent["actor"], sent["actor_sig"], keys.key_id, keys.check, "x") == (
        "alice",
        None,
    )
