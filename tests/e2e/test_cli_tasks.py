"""``rebound tasks`` against the local cloud: apply with a diff, bulk apply under throttling, list,
show, pause, resume, preview with DST marks, and errors as one line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import botocore.endpoint
import pytest
import yaml
from botocore.awsrequest import AWSResponse
from test_cli_harness import Cloud, cloud_fixture

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()


def task(task_id: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": task_id,
        "tenant": "acme",
        "schedule": {"cron": "*/10 * * * *", "timezone": "UTC"},
        "target": {"type": "sim", "behavior": {"ok": True}},
        "timeout_s": 30,
    }
    data.update(changes)
    return data


def write(path: Path, *tasks: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"tasks": list(tasks)}))
    return path


BASE_TASKS = (
    task("nightly", schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"}),
    task("hourly", schedule={"rate": "1 hour"}),
    task("on-order", schedule=None, event={"source": ["shop"], "detail-type": ["order.placed"]}),
)
"""What the apply test registers first; the tests after it in this module's cloud use them."""


def with_base_tasks(local_cloud: Cloud, folder: Path) -> None:
    """The cloud with ``BASE_TASKS`` registered: a test run without the apply test before it (with
    ``-k``, or the module split across ``pytest -n`` workers) registers them itself."""
    if local_cloud.cli("tasks", "show", "nightly").exit_code == 4:
        local_cloud.ok("tasks", "apply", "-f", str(write(folder / "base.yaml", *BASE_TASKS)))


def test_apply_shows_a_diff_is_idempotent_and_asks_before_updating(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    file = write(tmp_path / "tasks.yaml", *BASE_TASKS)

    dry = local_cloud.ok("tasks", "apply", "-f", str(file), "--dry-run")
    assert (
        "+ acme.nightly (acme) create" in dry.stdout and "3 to create, 0 to update, 0 unchanged" in dry.stdout
    )
    assert local_cloud.json("tasks", "list") == []

    applied = local_cloud.json("tasks", "apply", "-f", str(file))
    assert sorted(applied["applied"]["created"]) == ["acme.hourly", "acme.nightly", "acme.on-order"]
    assert applied["applied"]["schedules_written"] == 2
    assert applied["applied"]["rules_written"] == 1  # the event-triggered task's rule on the bus

    again = local_cloud.json("tasks", "apply", "-f", str(file))
    assert [p["change"] for p in again["plan"]] == ["unchanged"] * 3
    assert again["applied"]["created"] == again["applied"]["updated"] == []

    write(
        file,
        task("nightly", schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"}, timeout_s=45),
        task("hourly", schedule={"rate": "1 hour"}),
        task("on-order", schedule=None, event={"source": ["shop"], "detail-type": ["order.placed"]}),
    )
    declined = local_cloud.cli("tasks", "apply", "-f", str(file), input="n\n")
    assert declined.exit_code == 1 and "timeout_s: 30 -> 45" in declined.stdout
    assert local_cloud.json("tasks", "show", "nightly")["task"]["timeout_s"] == 30

    local_cloud.ok("tasks", "apply", "-f", str(file), "--yes")
    shown = local_cloud.json("tasks", "show", "nightly")
    assert shown["task"]["timeout_s"] == 45 and shown["task"]["version"] == 2
    trail = local_cloud.deps.store.audit_trail("task#acme.nightly")
    assert [r.action for r in trail] == ["registered", "updated"]
    assert trail[-1].actor == "arn:aws:sts::123456789012:user/moto"  # the operator's STS identity
    assert trail[-1].evidence["diff"] == {"timeout_s": [30, 45]}


def test_json_output_is_stable_with_sorted_keys(local_cloud: Cloud, tmp_path: Path) -> None:
    with_base_tasks(local_cloud, tmp_path)
    first = local_cloud.ok("-o", "json", "tasks", "list").stdout
    second = local_cloud.ok("-o", "json", "tasks", "list").stdout

    assert first == second
    parsed = json.loads(first)
    assert first == json.dumps(parsed, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert set(parsed[0]) == {
        "id", "tenant", "state", "description", "trigger", "target", "retry_policy", "timeout_s",
        "version", "updated_at", "schedule_names",
    }  # fmt: skip


def test_pause_and_resume_follow_through_to_the_schedules(local_cloud: Cloud, tmp_path: Path) -> None:
    with_base_tasks(local_cloud, tmp_path)
    assert local_cloud.cli("tasks", "pause", "nightly", input="n\n").exit_code == 1  # declined

    local_cloud.ok("tasks", "pause", "nightly", "--reason", "ledger migration", input="y\n")
    paused = local_cloud.json("tasks", "show", "nightly")
    assert paused["task"]["state"] == "paused"
    assert [s["state"] for s in paused["schedules"]] == ["DISABLED"]
    assert [t["id"] for t in local_cloud.json("tasks", "list", "--state", "paused")] == ["acme.nightly"]

    local_cloud.ok("tasks", "resume", "nightly")
    resumed = local_cloud.json("tasks", "show", "nightly")
    assert resumed["task"]["state"] == "active" and resumed["schedules"][0]["state"] == "ENABLED"
    assert resumed["schedules"][0]["drift"] is None
    actions = [r.action for r in local_cloud.deps.store.audit_trail("task#acme.nightly")]
    assert actions[-2:] == ["paused", "resumed"]


def test_preview_marks_the_dst_changes(local_cloud: Cloud, tmp_path: Path) -> None:
    with_base_tasks(local_cloud, tmp_path)
    spring = local_cloud.json(
        "tasks", "preview", "nightly", "--count", "3", "--after", "2026-03-27T12:00:00Z"
    )
    assert [(f["local"], f["fires"], f["note"], f["dst_change"]) for f in spring] == [
        ("2026-03-28T02:30:00+01:00", True, None, None),
        ("2026-03-29T03:00:00+02:00", False, "dst-skipped", "UTC+01:00 -> UTC+02:00"),
        ("2026-03-30T02:30:00+02:00", True, None, None),
        ("2026-03-31T02:30:00+02:00", True, None, None),
    ]

    autumn = local_cloud.json(
        "tasks", "preview", "nightly", "--count", "2", "--after", "2026-10-24T12:00:00Z"
    )
    assert [(f["at"], f["fires"], f["note"], f["dst_change"]) for f in autumn] == [
        ("2026-10-25T00:30:00.000Z", True, None, None),
        ("2026-10-25T01:30:00.000Z", False, "dst-not-repeated", "UTC+02:00 -> UTC+01:00"),
        ("2026-10-26T01:30:00.000Z", True, None, None),
    ]

    table = local_cloud.ok("tasks", "preview", "nightly", "--count", "3", "--after", "2026-03-27T12:00:00Z")
    assert "dst-skipped" in table.stdout and "UTC+01:00 -> UTC+02:00" in table.stdout


def test_task_errors_are_one_line_with_an_exit_code(local_cloud: Cloud, tmp_path: Path) -> None:
    with_base_tasks(local_cloud, tmp_path)
    missing = local_cloud.cli("tasks", "show", "nope")
    assert missing.exit_code == 4
    assert missing.stderr.strip() == "error: no task 'nope' [TASK_NOT_FOUND]"

    bad = write(tmp_path / "bad.yaml", {**task("typo"), "retyr_policy": "default"})
    invalid = local_cloud.cli("tasks", "apply", "-f", str(bad))
    assert invalid.exit_code == 2
    assert len(invalid.stderr.strip().splitlines()) == 1
    assert f"{bad}: tasks[0].retyr_policy: unknown key" in invalid.stderr

    event_only = local_cloud.cli("tasks", "preview", "on-order")
    assert event_only.exit_code == 2 and "triggered by events" in event_only.stderr


class ThrottleWindow:
    """Answers some CreateSchedule requests with ThrottlingException, as Scheduler does over quota."""

    def __init__(self, every: int, burst_at: int, burst: int) -> None:
        self.every, self.burst_at, self.burst = every, burst_at, burst
        self.seen = 0
        self.throttled = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        self.seen += 1
        in_burst = self.burst_at <= self.seen < self.burst_at + self.burst
        if not in_burst and self.seen % self.every:
            return None
        self.throttled += 1
        body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": "ThrottlingException"}
        return AWSResponse(request.url, 400, headers, _Raw(body))  # type: ignore[arg-type]


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> list[bytes]:
        return [self._body]


def test_bulk_apply_paces_scheduler_calls_and_backs_off_when_throttled(
    local_cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 120
    file = write(tmp_path / "bulk.yaml", *(task(f"bulk-{i:04d}", tenant="bulk") for i in range(count)))
    # Every 10th request is throttled (botocore's own retries absorb those) and, once, six in a
    # row: as many as botocore tries (once plus 5 retries), so Rebound's backoff must take over.
    throttle = ThrottleWindow(every=10, burst_at=30, burst=6)
    local_cloud.hooks.append(("before-send.scheduler.CreateSchedule", throttle))
    botocore_sleeps: list[float] = []
    monkeypatch.setattr(botocore.endpoint, "time", SimpleNamespace(sleep=botocore_sleeps.append))
    local_cloud.sleeps.clear()
    try:
        result = local_cloud.cli("-o", "json", "tasks", "apply", "-f", str(file), "--rate", "5")
    finally:
        local_cloud.hooks.clear()

    assert result.exit_code == 0, result.output
    applied = json.loads(result.stdout)["applied"]
    assert len(applied["created"]) == count and applied["schedules_written"] == count
    assert applied["throttled"] >= 1 and botocore_sleeps
    assert throttle.throttled > count // 10
    # Two Scheduler requests per task at 5 per second: about 47 s of pacing, only a few of which
    # the requests themselves take here; the limiter sleeps the rest (recorded, not slept).
    assert sum(local_cloud.sleeps) >= 25
    assert "applying" in result.stderr  # the progress bar
    bulk = local_cloud.json("tasks", "list", "--tenant", "bulk")
    assert len(bulk) == count and all(t["schedule_names"] == [f"task-{t['id']}"] for t in bulk)
    assert all(local_cloud.deps.schedules.get(f"task-bulk.bulk-{i:04d}") for i in range(0, count, 37))


def test_run_now_queues_a_manual_run_and_refuses_unknown_or_paused_tasks(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    local_cloud.ok("tasks", "apply", "-f", str(write(tmp_path / "t.yaml", task("adhoc"))), "--yes")
    queued = local_cloud.json("tasks", "run", "adhoc")
    assert queued["task_id"] == "acme.adhoc" and queued["run_id"].startswith("acme.adhoc:manual-")
    messages = local_cloud.deps.queues.client.receive_message(
        QueueUrl=local_cloud.deps.settings.queue("execution").url, MaxNumberOfMessages=10
    ).get("Messages", [])
    bodies = [json.loads(m["Body"]) for m in messages]
    assert [(b["kind"], b["run_id"]) for b in bodies if b.get("kind") == "manual"] == [
        ("manual", queued["run_id"])
    ]

    unknown = local_cloud.cli("tasks", "run", "nope")
    assert unknown.exit_code != 0 and "no task 'nope'" in unknown.output
    assert len(unknown.output.strip().splitlines()) == 1

    local_cloud.ok("tasks", "pause", "adhoc", "--yes")
    paused = local_cloud.cli("tasks", "run", "adhoc")
    assert paused.exit_code != 0 and "paused" in paused.output


def test_a_past_one_time_at_needs_allow_past(local_cloud: Cloud, tmp_path: Path) -> None:
    path = write(tmp_path / "once.yaml", task("backfill-once", schedule={"at": "2026-03-01T00:00:00Z"}))

    refused = local_cloud.cli("tasks", "apply", "-f", str(path))
    assert refused.exit_code == 2
    assert "schedule.at 2026-03-01T00:00:00.000Z is in the past" in refused.stderr
    assert "--allow-past" in refused.stderr

    applied = local_cloud.json("tasks", "apply", "-f", str(path), "--allow-past")
    assert applied["applied"]["created"] == ["acme.backfill-once"]


def test_a_target_inside_the_network_is_refused_at_apply(local_cloud: Cloud, tmp_path: Path) -> None:
    metadata = task(
        "steal-creds", target={"type": "http", "url": "https://169.254.169.254/latest/meta-data/"}
    )
    path = write(tmp_path / "ssrf.yaml", metadata)

    refused = local_cloud.cli("tasks", "apply", "-f", str(path))

    assert refused.exit_code == 2
    assert "target.url: 169.254.169.254 is a link-local address (the instance metadata" in refused.stderr
    assert local_cloud.cli("tasks", "show", "steal-creds").exit_code == 4


WORKSTREAM_FILE = Path(__file__).resolve().parents[2] / "config" / "demo" / "workstream.yaml"


def test_apply_registers_a_files_workstreams_and_resources_with_a_diff_and_a_dry_run(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    dry = local_cloud.ok("tasks", "apply", "-f", str(WORKSTREAM_FILE), "--dry-run")
    assert "+ workstream nightly-ledger create" in dry.stdout
    assert "+ resource warehouse-write create" in dry.stdout
    assert local_cloud.json("workstreams", "list") == []

    applied = local_cloud.json("tasks", "apply", "-f", str(WORKSTREAM_FILE))
    assert [(p["kind"], p["id"], p["change"]) for p in applied["workstreams_plan"]] == [
        ("workstream", "nightly-ledger", "create"),
        ("resource", "warehouse-write", "create"),
    ]
    assert applied["applied"]["workstreams"]["changed"] == ["nightly-ledger"]
    listed = local_cloud.json("workstreams", "list")
    assert [(w["workstream_id"], w["steps"]) for w in listed] == [
        ("nightly-ledger", ["ledger-extract", "ledger-transform", "ledger-load"])
    ]
    assert local_cloud.json("resources", "list")[0]["max_holders"] == 1

    again = local_cloud.json("tasks", "apply", "-f", str(WORKSTREAM_FILE))
    assert [p["change"] for p in again["workstreams_plan"]] == ["unchanged", "unchanged"]
    assert again["applied"]["workstreams"]["changed"] == []

    document = yaml.safe_load(WORKSTREAM_FILE.read_text())
    document["resources"][0]["max_holders"] = 2
    document["workstreams"][0]["steps"][2]["critical"] = False
    changed = tmp_path / "workstream.yaml"
    changed.write_text(yaml.safe_dump(document))
    refused = local_cloud.cli("tasks", "apply", "-f", str(changed), input="n\n")
    assert refused.exit_code != 0 and "Update 2 existing" in refused.output
    shown = local_cloud.ok("tasks", "apply", "-f", str(changed), "--yes").stdout
    assert "~ workstream nightly-ledger update" in shown and "~ resource warehouse-write update" in shown
    assert "max_holders: 1 -> 2" in shown
    assert local_cloud.json("resources", "list")[0]["max_holders"] == 2


def test_a_workstream_step_may_name_a_task_registered_by_an_earlier_file(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    first = write(tmp_path / "tasks.yaml", task("extract"), task("load"))
    local_cloud.ok("tasks", "apply", "-f", str(first))
    second = tmp_path / "chain.yaml"
    second.write_text(
        yaml.safe_dump(
            {
                "tasks": [],
                "workstreams": [
                    {
                        "id": "chain",
                        "tenant": "acme",
                        "steps": [{"task": "extract"}, {"task": "load", "needs": ["extract"]}],
                    }
                ],
            }
        )
    )
    applied = local_cloud.json("tasks", "apply", "-f", str(second))
    assert applied["applied"]["workstreams"]["changed"] == ["chain"]

    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(second.read_text().replace("task: load", "task: nope"))
    result = local_cloud.cli("tasks", "apply", "-f", str(unknown))
    assert result.exit_code != 0
    assert "workstreams[0].steps[1].task" in result.output and "unknown task 'nope'" in result.output
