"""The store contract, control records: concurrency slots (capacity, reentry, leaving, reaping),
streak counters, idempotency keys that expire, plain keys, and retrying transient errors."""

from __future__ import annotations

import pytest
from contract_support import at

from rebound.domain.errors import Conflict, Throttled, ValidationFailed
from rebound.domain.timefmt import iso
from rebound.engine.ports import Store
from support import START

pytestmark = pytest.mark.contract

SLOT = "slots#task#t"
LABEL = "slot task#t"


def enter(store: Store, run_id: str, cap: int = 1, until: float = 600, key: str = SLOT) -> None:
    uow = store.unit_of_work("executor", START)
    uow.enter_slot(key, cap, run_id, at(until), LABEL)
    uow.commit()


def leave(store: Store, run_id: str, key: str = SLOT) -> None:
    uow = store.unit_of_work("executor", START)
    uow.leave_slot(key, run_id)
    uow.commit()


def reap(store: Store, run_id: str, now: float) -> None:
    uow = store.unit_of_work("sweeper", at(now))
    uow.reap_slot_holder(SLOT, run_id, at(now))
    uow.commit()


def holders(store: Store, key: str = SLOT) -> list[str]:
    return list((store.get_key(key) or {}).get("holders", []))


def test_a_slot_holds_its_capacity_and_names_each_holders_expiry(store: Store) -> None:
    enter(store, "r1", until=600)
    assert store.get_key(SLOT) == {
        "pk": SLOT,
        "holders": ["r1"],
        "cap": 1,
        "exp:r1": int(at(600).timestamp()),
    }
    with pytest.raises(Conflict) as caught:
        enter(store, "r2")
    assert caught.value.details["failed"] == [LABEL]
    assert holders(store) == ["r1"]


def test_entering_a_slot_again_changes_nothing_but_the_expiry(store: Store) -> None:
    enter(store, "r1", until=600)
    enter(store, "r1", until=900)  # full, but of this run
    assert holders(store) == ["r1"]
    assert (store.get_key(SLOT) or {})["exp:r1"] == int(at(900).timestamp())


def test_a_slot_of_two_takes_two(store: Store) -> None:
    enter(store, "r1", cap=2)
    enter(store, "r2", cap=2)
    with pytest.raises(Conflict):
        enter(store, "r3", cap=2)
    leave(store, "r1")
    enter(store, "r3", cap=2)
    assert holders(store) == ["r2", "r3"]


def test_leaving_frees_the_place_and_forgets_the_expiry(store: Store) -> None:
    enter(store, "r1")
    leave(store, "r1")
    assert store.get_key(SLOT) == {"pk": SLOT, "cap": 1}
    leave(store, "r1")  # not held: nothing changes
    leave(store, "r9", key="slots#task#never")  # a slot nobody entered: nothing fails
    assert holders(store, "slots#task#never") == []
    enter(store, "r2")
    assert holders(store) == ["r2"]


def test_only_an_expired_holder_is_reaped(store: Store) -> None:
    enter(store, "r1", until=600)
    with pytest.raises(Conflict) as caught:
        reap(store, "r1", now=600)  # expires at 600: not yet past
    assert caught.value.details["failed"] == [f"reap {SLOT}"]
    assert holders(store) == ["r1"]
    reap(store, "r1", now=601)
    assert holders(store) == [] and "exp:r1" not in (store.get_key(SLOT) or {})
    with pytest.raises(Conflict):
        reap(store, "r1", now=700)  # gone already
    with pytest.raises(Conflict):
        reap(store, "r2", now=700)  # never held it


def test_a_streak_counts_and_ends(store: Store) -> None:
    for run_id in ("r1", "r2"):
        uow = store.unit_of_work("executor", START)
        uow.count_streak("sla#t", run_id, "sla streak t")
        uow.commit()
    assert store.get_key("sla#t") == {"pk": "sla#t", "consecutive": 2, "last_run": "r2"}
    uow = store.unit_of_work("executor", START)
    uow.end_streak("sla#t", "sla streak t")
    uow.commit()
    assert store.get_key("sla#t") == {"pk": "sla#t", "consecutive": 0, "streak": 1, "last_run": "r2"}


def test_a_rewritten_streak_keeps_the_streaks_ended(store: Store) -> None:
    for stage in ("count", "end"):
        uow = store.unit_of_work("executor", START)
        if stage == "count":
            uow.count_streak("sla#t", "r1", "sla streak t")
        else:
            uow.end_streak("sla#t", "sla streak t")
        uow.commit()
    uow = store.unit_of_work("sla-report", START)
    uow.set_streak("sla#t", 3, "r9", "sla streak t")
    uow.commit()
    assert store.get_key("sla#t") == {"pk": "sla#t", "consecutive": 3, "streak": 1, "last_run": "r9"}
    uow = store.unit_of_work("sla-report", START)
    uow.set_streak("sla#t", 0, None, "sla streak t")
    uow.commit()
    assert store.get_key("sla#t") == {"pk": "sla#t", "consecutive": 0, "streak": 1}


def test_a_claimed_key_is_taken_until_it_expires(store: Store) -> None:
    key = "dlq-send#r1"
    assert store.claim_key(key, START, at(60) - START, {"run_id": "r1"})
    assert store.get_key(key) == {
        "pk": key,
        "created_at": iso(START),
        "expires_at": int(at(60).timestamp()),
        "run_id": "r1",
    }
    assert not store.claim_key(key, at(30), at(60) - START)
    assert not store.claim_key(key, at(60), at(60) - START)  # expires at 60: not yet past
    assert store.claim_key(key, at(61), at(60) - START, {"run_id": "r2"})
    assert (store.get_key(key) or {})["run_id"] == "r2"
    store.release_key(key)
    assert store.get_key(key) is None
    assert store.claim_key(key, at(62), at(60) - START)


def test_a_key_put_without_expiry_cannot_be_claimed(store: Store) -> None:
    store.put_key("queue#execution#quiet", {"at": iso(START), "drained_at": None, "n": 3})
    assert store.get_key("queue#execution#quiet") == {"pk": "queue#execution#quiet", "at": iso(START), "n": 3}
    assert not store.claim_key("queue#execution#quiet", at(3600), at(60) - START)
    store.put_key("queue#execution#quiet", {"drained_at": iso(START)})  # the whole record is replaced
    assert store.get_key("queue#execution#quiet") == {"pk": "queue#execution#quiet", "drained_at": iso(START)}
    assert store.get_key("nothing#here") is None
    store.release_key("nothing#here")  # releasing what is not there changes nothing


def test_keys_are_read_in_batches_and_missing_ones_left_out(store: Store) -> None:
    keys = [f"schedule-sync#task-{n:03d}" for n in range(130)]  # more than one batch of 100
    for n, key in enumerate(keys[:120]):
        store.put_key(key, {"n": n})

    found = store.get_keys([*keys, keys[0]])

    assert sorted(found) == keys[:120]
    assert found[keys[119]] == {"pk": keys[119], "n": 119}
    assert store.get_keys([]) == {}


def test_retrying_tries_again_after_transient_errors_only(store: Store) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Throttled("slow down")
        return "done"

    assert store.retrying(3, flaky) == "done" and len(calls) == 3
    calls.clear()
    with pytest.raises(Throttled):
        store.retrying(2, flaky)
    assert len(calls) == 2

    def wrong() -> str:
        calls.append(1)
        raise ValidationFailed("no")

    calls.clear()
    with pytest.raises(ValidationFailed):
        store.retrying(5, wrong)
    assert len(calls) == 1


def put_versioned(store: Store, key: str, body: dict, expect: int | None) -> int:  # type: ignore[type-arg]
    uow = store.unit_of_work("workstreams", START)
    version = uow.stage_versioned(key, body, expect, f"record {key}")
    uow.commit()
    return version


def test_a_versioned_record_is_written_only_over_the_version_it_expects(store: Store) -> None:
    import json

    key = "ws#run#r1"
    assert put_versioned(store, key, {"state": "running"}, None) == 1
    with pytest.raises(Conflict) as caught:
        put_versioned(store, key, {"state": "other"}, None)  # it exists already
    assert caught.value.details["failed"] == [f"record {key}"]
    assert put_versioned(store, key, {"state": "failed"}, 1) == 2
    with pytest.raises(Conflict):
        put_versioned(store, key, {"state": "stale"}, 1)  # someone wrote version 2 meanwhile
    item = store.get_key(key) or {}
    assert (item["version"], json.loads(item["body"])) == (2, {"state": "failed"})


def test_a_plain_record_replaces_what_was_there(store: Store) -> None:
    import json

    for n in (1, 2):
        uow = store.unit_of_work("workstreams", START)
        uow.stage_record("ws#cp#r1#01", {"version": n}, "checkpoint")
        uow.commit()
    assert json.loads((store.get_key("ws#cp#r1#01") or {})["body"]) == {"version": 2}


def test_several_holders_enter_and_leave_one_slot_in_one_write_each(store: Store) -> None:
    key = "slots#resource#warehouse"
    uow = store.unit_of_work("workstreams", START)
    uow.enter_slot_many(key, 3, ["w/a", "w/b"], at(600), "slot resource#warehouse")
    uow.commit()  # one write for both: DynamoDB refuses two writes of one item in a transaction
    assert holders(store, key) == ["w/a", "w/b"]
    assert (store.get_key(key) or {})["exp:w/b"] == int(at(600).timestamp())

    full = store.unit_of_work("workstreams", START)
    full.enter_slot_many(key, 3, ["w/c", "w/d"], at(600), "slot resource#warehouse")
    with pytest.raises(Conflict) as caught:
        full.commit()  # room for one, not two: neither enters
    assert caught.value.details["failed"] == ["slot resource#warehouse"]
    assert holders(store, key) == ["w/a", "w/b"]

    out = store.unit_of_work("workstreams", START)
    out.leave_slot_many(key, ["w/a", "w/b", "w/never"])
    out.commit()
    assert store.get_key(key) == {"pk": key, "cap": 3}
