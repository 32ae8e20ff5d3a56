"""``rebound local simulate``: faults on, every invariant holds; and the checks can fail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support import REPO, simulate

pytestmark = pytest.mark.e2e

REQUIRED_INVARIANTS = {
    "no_run_left_running",
    "every_run_settled",
    "dead_letters_have_one_work_order",
    "dead_letters_have_one_dlq_message",
    "dlq_record_matches_the_queue",
    "no_target_called_twice_per_attempt",
    "audit_chains_verify",
    "run_items_match_their_chains",
    "every_fire_became_a_run",
    "no_slot_held_by_an_idle_run",
    "no_message_lost",
    "at_most_one_live_message_per_run",
    "runs_listed_with_their_tasks",
}
SABOTAGED = """
description: breaks invariants on purpose
start: "2026-03-07T00:00:00Z"
duration: 30m
settle: 1h
tasks:
  - {id: steady, tenant: acme, schedule: {cron: "*/5 * * * *"}, target: {type: sim}}
  - id: broken
    tenant: acme
    schedule: {cron: "*/15 * * * *"}
    target: {type: sim, behavior: {always_fail: true}}
sabotage:
  drop_messages: 1
  tamper_audit_records: 1
"""


def load(report: Path) -> dict[str, Any]:
    return dict(json.loads(report.read_text()))


def test_with_every_fault_on_every_invariant_holds(tmp_path: Path) -> None:
    report_path = tmp_path / "faults.json"
    done = simulate(REPO / "scenarios" / "faults-2h.yaml", report_path)
    report = load(report_path)
    assert done.returncode == 0, done.stdout + done.stderr

    assert set(report["invariants"]) >= REQUIRED_INVARIANTS
    assert all(inv["ok"] for inv in report["invariants"].values())
    for key in ("runs", "work_orders", "target_calls", "metrics", "aws_calls", "invariants", "timing"):
        assert key in report
    run = report["runs"][0]
    assert {
        "run_id",
        "task_id",
        "tenant",
        "scheduled_for",
        "final_state",
        "attempts",
        "work_order_id",
    } <= set(run)
    assert {"n", "started_at", "ended_at", "outcome", "error_code"} <= set(run["attempts"][0])
    assert {"run_id", "attempt", "at"} <= set(report["target_calls"][0])

    # The faults really were injected.
    faults = report["faults"]
    assert faults["duplicate_delivery"] == 3
    assert sum(faults["crashes"].values()) > 0
    assert sum(faults["throttled"].values()) > 0
    assert sum(faults["transaction_conflicts"].values()) > 0
    assert faults["lagged_index_queries"] > 0
    assert report["runtime"]["timeouts"].get("executor", 0) > 0  # the stalled target's invocations
    assert report["messages"]["live_per_run_peak"] == 1
    # Dead letters happened, each with its work order, and the refused message too.
    states = report["summary"]["runs_by_state"]
    assert states.get("dead_lettered", 0) > 0 and states.get("succeeded", 0) > 0
    assert any(o["subject"].startswith("msg#") for o in report["work_orders"])


def test_a_lost_message_and_a_tampered_audit_record_fail_the_run(tmp_path: Path) -> None:
    scenario = tmp_path / "sabotaged.yaml"
    scenario.write_text(SABOTAGED)
    report_path = tmp_path / "sabotaged.json"
    done = simulate(scenario, report_path)
    assert done.returncode == 1, done.stdout + done.stderr
    report = load(report_path)
    failed = {name for name, inv in report["invariants"].items() if not inv["ok"]}
    assert {"no_message_lost", "every_fire_became_a_run", "audit_chains_verify"} <= failed
    # the archive kept the record as it was written: the table's copy no longer matches it
    assert "audit_records_archived" in failed
    tampered = report["faults"]["sabotage"]["tampered_audit_records"][0]
    assert any(tampered in e for e in report["invariants"]["audit_records_archived"]["examples"])
    assert report["ok"] is False
    dropped = report["faults"]["sabotage"]["dropped_messages"][0]["message_id"]
    assert any(dropped in example for example in report["invariants"]["no_message_lost"]["examples"])


SABOTAGED_EVERY_CHECK = """
description: breaks every invariant the engine must keep, one knob each
start: "2026-03-07T00:00:00Z"
duration: 1h
settle: 1h
tasks:
  - {id: steady, tenant: acme, schedule: {cron: "*/5 * * * *"}, target: {type: sim}}
  - id: broken
    tenant: acme
    schedule: {cron: "*/15 * * * *"}
    target: {type: sim, behavior: {always_fail: true}}
    retry_policy: {extends: quick, max_attempts: 2, base_delay: 5s}
sabotage:
  duplicate_fires: 1
  call_target_twice: 1
  leak_slots: 1
  strand_runs: 2
  stale_heads: 1
  remove_dlq_messages: 1
  remove_work_orders: 1
  skip_delivered_fires: 1
  forget_fire_segments: 1
"""
EACH_CHECK = {
    "at_most_one_live_message_per_run": "duplicate_fires",
    "no_target_called_twice_per_attempt": "call_target_twice",
    "no_slot_held_by_an_idle_run": "leak_slots",
    "no_run_left_running": "strand_runs",
    "every_run_settled": "strand_runs",
    "run_items_match_their_chains": "stale_heads",
    "dead_letters_have_one_dlq_message": "remove_dlq_messages",
    "dlq_record_matches_the_queue": "remove_dlq_messages",
    "dead_letters_have_one_work_order": "remove_work_orders",
    "every_fire_became_a_run": "skip_delivered_fires",
    "runs_listed_with_their_tasks": "forget_fire_segments",
}


def test_each_invariant_fails_when_its_rule_is_broken(tmp_path: Path) -> None:
    """With the faults off, only what the sabotage breaks fails, and each knob breaks its check."""
    scenario = tmp_path / "sabotaged.yaml"
    scenario.write_text(SABOTAGED_EVERY_CHECK)
    report_path = tmp_path / "sabotaged.json"
    done = simulate(scenario, report_path)
    assert done.returncode == 1, done.stdout + done.stderr
    report = load(report_path)
    failed = {name for name, inv in report["invariants"].items() if not inv["ok"]}
    assert failed == set(EACH_CHECK), failed
    sabotage = report["faults"]["sabotage"]
    for check, knob in EACH_CHECK.items():
        assert sabotage.get(knob), f"{knob} did nothing, so {check} proves nothing"
    live = report["invariants"]["at_most_one_live_message_per_run"]
    assert live["examples"] and "2 live at once" in live["examples"][0]
    assert report["messages"]["live_per_run_peak"] == 2
    skipped = report["invariants"]["every_fire_became_a_run"]["examples"]
    assert any("skipped as 'missed'" in e for e in skipped)


def test_a_bad_scenario_file_exits_2_naming_the_key(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(
        'start: "2026-03-07T00:00:00Z"\nduration: 1h\ntasks: []\nfaults: {crash: {points: [x], rate: 0.1}}\n'
    )
    done = simulate(scenario, tmp_path / "bad.json")
    assert done.returncode == 2
    assert "faults.crash.points[0]" in done.stderr


def test_a_hostile_window_across_midnight_finishes_though_threads_need_the_new_days_key_at_once(
    tmp_path: Path,
) -> None:
    """At midnight every thread signing an audit record needs the new day's key: one derives it
    (a KMS call that waits on the virtual clock under the latency model), the others wait for it.
    They used to wait on a lock, which the virtual clock counts as working, so the clock never
    moved and the day hung at 00:00 (``DerivedKeys`` now has them wait on the clock)."""
    from rebound_local.scenario import load_scenario
    from rebound_local.simulate import Simulation

    text = (REPO / "scenarios" / "hostile-day.yaml").read_text()
    for day, window in (
        ('start: "2026-03-07T00:00:00Z"', 'start: "2026-03-07T23:50:00Z"'),
        ("duration: 24h", "duration: 20m"),
        ("settle: 3h", "settle: 30m"),
    ):
        assert day in text
        text = text.replace(day, window)
    path = tmp_path / "midnight.yaml"
    path.write_text(text)

    result = Simulation(load_scenario(path), stall_wall_s=60).run()

    assert result.report.get("hung") is None, result.report.get("hung")
    assert result.ok and result.failed == []


def test_a_simulation_uses_its_own_cloud_whatever_aws_endpoint_url_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A simulation is self-contained: an endpoint left over from a stopped `rebound local up`
    (nothing listens on port 9) does not send its clients away."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:9")
    scenario = tmp_path / "steady.yaml"
    scenario.write_text(
        'start: "2026-03-07T00:00:00Z"\nduration: 10m\nsettle: 10m\n'
        'tasks:\n  - {id: steady, tenant: acme, schedule: {cron: "*/5 * * * *"}, target: {type: sim}}\n'
    )
    done = simulate(scenario, tmp_path / "report.json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and len(report["runs"]) == 3  # 00:00, 00:05 and 00:10
