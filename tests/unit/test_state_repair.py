"""``rebound state check|repair`` and ``runs restore`` on the engine's real paths (in-memory ports).

A workstream whose transform step dead-letters leaves tasks, task runs (one dead-lettered, with its
work order), a failed workstream run and its critical work order. The items are then corrupted the
way a bad write, a hand edit or a half-applied restore would (the tables written directly), and
the chains, never touched, say what each item should be.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fakes import MemoryWorld, memory_deps
from test_workstream_engine import drive, ledger

from rebound.domain.audit import trail_mismatches
from rebound.domain.errors import NotFound, ValidationFailed
from rebound.domain.ids import run_subject
from rebound.domain.restore import CHAIN
from rebound.domain.run import RunState
from rebound.domain.workstream_runs import WorkstreamState
from rebound.engine.workstreams import run_key, workstream_subject
from rebound.ops.state import ACTION, StateOps
from support import ended_run

pytestmark = pytest.mark.unit
OPERATOR = "arn:aws:iam::123456789012:user/oncall"


@pytest.fixture
def world() -> MemoryWorld:
    world = memory_deps()
    engine = ledger(world, transform={"terminal_error": "BAD_INPUT"})
    run = engine.start("nightly-ledger", token="t1")
    drive(world)
    assert engine.get_run(run.run_id).state is WorkstreamState.FAILED
    standalone(world)
    world.clock.advance(60)
    return world


STANDALONE = "report:manual-1"


def standalone(world: MemoryWorld) -> None:
    """A run of its own, with three records: created, claimed, succeeded."""
    ended_run(world.deps, STANDALONE, RunState.SUCCEEDED)


def tables(world: MemoryWorld) -> dict[str, dict[Any, Any]]:
    return copy.deepcopy(world.store._tables)


def workstream_run_id(world: MemoryWorld) -> str:
    return next(k for k in world.store._tables["control"] if k.startswith("ws#run#")).removeprefix("ws#run#")


def dead_run_id(world: MemoryWorld) -> str:
    return next(r for r, d in world.store._tables["runs"].items() if d["state"] == "dead_lettered")


def succeeded_run_id(world: MemoryWorld) -> str:
    return next(
        r for r, d in world.store._tables["runs"].items() if d["state"] == "succeeded" and r != STANDALONE
    )


def corrupt(world: MemoryWorld) -> dict[str, str]:
    """Corrupt one item of each kind in its own way; returns which ids were touched."""
    t = world.store._tables
    dead, ok = dead_run_id(world), succeeded_run_id(world)
    t["runs"][dead]["state"] = "succeeded"  # wrong state
    t["runs"][ok]["attempts"] = []  # a missing attempt
    order = next(w for w, d in t["workorders"].items() if d.get("run_id") == dead)
    t["workorders"][order]["state"] = "resolved"  # a wrong work-order state
    t["workorders"][order]["audit_seq"] = 0  # and a stale head pointer
    ws = workstream_run_id(world)
    body = json.loads(t["control"][run_key(ws)]["body"])
    transform = next(s for s in body["steps"] if s["step"] == "transform")
    transform["state"] = "succeeded"  # a workstream step's state
    body["state"] = "completed"
    t["control"][run_key(ws)]["body"] = json.dumps(body)
    t["tasks"]["load"]["definition"]["timeout_s"] = 7  # a task's definition
    stale = STANDALONE
    seq = t["runs"][stale]["audit_seq"] - 1  # a stale head: the item names the record before its last
    previous = t["audit"][(run_subject(stale), seq)]
    t["runs"][stale]["audit_seq"], t["runs"][stale]["audit_head"] = seq, previous["hash"]
    return {"dead": dead, "ok": ok, "order": order, "ws": ws, "stale": stale}


def test_check_reports_each_corrupted_field_with_the_item_value_and_the_chain_value(
    world: MemoryWorld,
) -> None:
    ops = StateOps(world.deps, OPERATOR)
    assert ops.check().differences == [], "an untouched store matches its chains"
    ids = corrupt(world)
    found = {(d.kind, d.item, d.field): (d.stored, d.chain) for d in ops.check().differences}
    assert found[("run", ids["dead"], "state")] == ("succeeded", "dead_lettered")
    stored, chain = found[("run", ids["ok"], "attempts")]
    assert stored == [] and [a["n"] for a in chain] == [1]
    assert found[("workorder", ids["order"], "state")] == ("resolved", "open")
    assert found[("workorder", ids["order"], "audit_seq")][0] == 0
    assert found[("workstream", ids["ws"], "steps.transform.state")] == ("succeeded", "failed")
    assert found[("workstream", ids["ws"], "state")] == ("completed", "failed")
    assert found[("task", "load", "definition.timeout_s")][0] == 7
    stale_seq = found[("run", ids["stale"], "audit_seq")]
    assert stale_seq[1] == stale_seq[0] + 1
    assert ("run", ids["stale"], "audit_head") in found
    assert all(d.repairable for d in ops.check().differences)


def test_a_dry_run_repair_reports_what_it_would_do_and_changes_nothing(world: MemoryWorld) -> None:
    corrupt(world)
    before = tables(world)
    report = StateOps(world.deps, OPERATOR).repair(dry_run=True)
    assert report.dry_run and report.differences and report.repaired == []
    assert tables(world) == before


def test_repair_restores_exactly_what_the_chains_say_and_then_check_finds_nothing(world: MemoryWorld) -> None:
    original = tables(world)
    ids = corrupt(world)
    ops = StateOps(world.deps, OPERATOR)
    report = ops.repair(reason="restore after a bad hand edit")
    assert report.failed == []
    assert sorted(report.repaired) == sorted(
        [
            f"run {ids['dead']}",
            f"run {ids['ok']}",
            f"run {ids['stale']}",
            f"workorder {ids['order']}",
            f"workstream {ids['ws']}",
            "task load",
        ]
    )
    assert ops.check().differences == []
    # each repaired item is the original again, but for the write's own bookkeeping
    bookkeeping = {"audit_seq", "audit_head", "rev", "updated_at", "version", "body"}
    for table, key in (
        ("runs", ids["dead"]),
        ("runs", ids["ok"]),
        ("runs", ids["stale"]),
        ("workorders", ids["order"]),
    ):
        now = world.store._tables[table][key]
        assert {k: v for k, v in now.items() if k not in bookkeeping} == {
            k: v for k, v in original[table][key].items() if k not in bookkeeping
        }, (table, key)
    assert world.store._tables["tasks"]["load"]["definition"] == original["tasks"]["load"]["definition"]
    ws_now = json.loads(world.store._tables["control"][run_key(ids["ws"])]["body"])
    ws_before = json.loads(original["control"][run_key(ids["ws"])]["body"])
    assert {s["step"]: s["state"] for s in ws_now["steps"]} == {
        s["step"]: s["state"] for s in ws_before["steps"]
    }
    assert ws_now["state"] == ws_before["state"] == "failed"
    # the run is exactly what its chain, repair record included, rebuilds
    run = world.store.get_run(ids["dead"])
    assert run is not None and trail_mismatches(run, world.store.audit_trail(run_subject(ids["dead"]))) == []


def test_a_repair_only_appends_one_audit_record_per_repaired_item_with_the_operator(
    world: MemoryWorld,
) -> None:
    ids = corrupt(world)
    before = tables(world)["audit"]
    report = StateOps(world.deps, OPERATOR).repair(reason="bad edit")
    after = world.store._tables["audit"]
    assert all(after[key] == record for key, record in before.items()), "no record lost or rewritten"
    added = [after[k] for k in after if k not in before]
    assert len(added) == len(report.repaired)
    assert {r["actor"] for r in added} == {OPERATOR} and {r["action"] for r in added} == {ACTION}
    dead = next(r for r in added if r["subject"] == run_subject(ids["dead"]))
    assert dead["evidence"]["reason"] == "bad edit"
    assert dead["evidence"]["repaired"] == [{"field": "state", "was": "succeeded", "now": "dead_lettered"}]
    assert (dead["from_state"], dead["to_state"]) == ("succeeded", "dead_lettered")
    stale = next(r for r in added if r["subject"] == run_subject(ids["stale"]))
    assert stale["seq"] == before_head(before, run_subject(ids["stale"])) + 1, "appended after the real head"
    ws = next(r for r in added if r["subject"] == workstream_subject(ids["ws"]))
    assert ws["evidence"]["steps"]["transform"] == "failed"


def before_head(audit: dict[Any, Any], subject: str) -> int:
    return max(seq for s, seq in audit if s == subject)


def test_runs_restore_recreates_a_deleted_run_from_its_chain(world: MemoryWorld) -> None:
    dead = dead_run_id(world)
    original = tables(world)["runs"][dead]
    del world.store._tables["runs"][dead]
    ops = StateOps(world.deps, OPERATOR)
    dry = ops.restore_run(dead, dry_run=True)
    assert [(d.field, d.stored, d.chain) for d in dry.differences] == [("state", None, "dead_lettered")]
    assert dead not in world.store._tables["runs"]
    report = ops.restore_run(dead)
    assert report.repaired == [f"run {dead}"]
    now = world.store._tables["runs"][dead]
    assert now["state"] == "dead_lettered" and now["attempts"] == original["attempts"]
    assert ops.restore_run(dead).differences == []
    with pytest.raises(NotFound):
        ops.restore_run("no-such-run")


def test_an_item_whose_chain_is_broken_is_reported_and_left_alone(world: MemoryWorld) -> None:
    dead = dead_run_id(world)
    world.store._tables["runs"][dead]["state"] = "succeeded"
    del world.store._tables["audit"][(run_subject(dead), 2)]
    before = tables(world)
    report = StateOps(world.deps, OPERATOR).repair()
    broken = [d for d in report.differences if d.item == dead]
    assert [(d.field, d.repairable) for d in broken] == [(CHAIN, False)]
    assert "does not verify" in str(broken[0].chain)
    assert report.failed == [{"item": f"run {dead}", "why": broken[0].chain}]
    assert tables(world)["runs"][dead] == before["runs"][dead]


def test_a_pass_stopped_early_resumes_where_it_stopped(world: MemoryWorld) -> None:
    ids = corrupt(world)
    ops = StateOps(world.deps, OPERATOR)
    first = ops.check(stop=lambda: True)
    assert first.next == "workstreams"
    seen = {(d.kind, d.item) for d in first.differences}
    after = first.next
    while after is not None:
        part = ops.check(after=after, stop=lambda: True)
        seen |= {(d.kind, d.item) for d in part.differences}
        after = part.next
    assert ("run", ids["dead"]) in seen and ("workstream", ids["ws"]) in seen
    with pytest.raises(ValidationFailed, match="after"):
        ops.check(after="nowhere:x")


def test_a_run_that_moved_on_after_its_page_was_read_is_not_reported(
    world: MemoryWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page holds the run as it was before its last write (the engine wrote it in between):
    its chain is one record ahead, so it differs until it is read again."""
    current = world.store.get_run(STANDALONE)
    assert current is not None
    stale = current.model_copy(update={"state": RunState.RUNNING, "audit_seq": current.audit_seq - 1})
    real_page = world.store.scan_runs_page

    def page(*, limit: int = 100, after: str | None = None) -> tuple[list[Any], str | None]:
        runs, cursor = real_page(limit=limit, after=after)
        return [stale if r.run_id == STANDALONE else r for r in runs], cursor

    monkeypatch.setattr(world.store, "scan_runs_page", page)
    before = tables(world)
    assert StateOps(world.deps, OPERATOR).check().differences == []
    assert StateOps(world.deps, OPERATOR).repair().repaired == []
    assert tables(world) == before
