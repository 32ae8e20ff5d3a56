"""``rebound dlq`` list, show, filtered and dry-run redrive, skips, duplicates, and the archive."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import boto3
import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.run import RunState
from rebound.ops.dlq import REDRIVE_VISIBILITY_S

pytestmark = pytest.mark.e2e
base = cloud_fixture(name="base")
OPERATOR = "arn:aws:sts::123456789012:user/moto"

TASKS: list[dict[str, Any]] = [
    {
        "id": "heartbeat",
        "tenant": "acme",
        "schedule": {"cron": "*/10 * * * *"},
        "target": {"type": "sim", "behavior": {"ok": True}},
    },
    {
        "id": "ledger",
        "tenant": "acme",
        "schedule": {"cron": "*/10 * * * *"},
        "target": {"type": "sim", "behavior": {"always_fail": True}},
        "retry_policy": "quick",
    },
    {
        "id": "billing",
        "tenant": "globex",
        "schedule": {"cron": "*/10 * * * *"},
        "target": {"type": "sim", "behavior": {"terminal_error": "BAD_INPUT"}},
    },
]
SUCCEEDED_FIRE = {
    "v": 1,
    "kind": "fire",
    "task_id": "acme.heartbeat",
    "scheduled_time": "2026-03-07T09:00:00Z",
}


@pytest.fixture(scope="module")
def local_cloud(base: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Cloud:
    file = tmp_path_factory.mktemp("dlq") / "tasks.yaml"
    file.write_text(yaml.safe_dump({"tasks": TASKS}))
    base.ok("tasks", "apply", "-f", str(file))
    sqs = boto3.client("sqs")
    sqs.send_message(QueueUrl=base.stack.settings.queue("execution").url, MessageBody='{"kind": "fire"')
    base.run_for(timedelta(minutes=25))
    # SQS's redrive policy moved an execution message whose run succeeded since (the crash path);
    # the sweeper's DLQ check finds it and records it.
    sqs.send_message(QueueUrl=base.stack.settings.queue("dlq").url, MessageBody=json.dumps(SUCCEEDED_FIRE))
    base.run_for(timedelta(minutes=2))
    base.tick(31)  # what the sweeper's check received is visible again
    return base


def in_flight(cloud: Cloud) -> int:
    """DLQ messages someone received and has not deleted or released (hidden from other readers)."""
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=cloud.stack.settings.queue("dlq").url,
        AttributeNames=["ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessagesNotVisible"])


def test_list_shows_every_message_with_its_run_and_filters(local_cloud: Cloud) -> None:
    listed = local_cloud.json("dlq", "list")
    # Listing reads the DLQ's record: it hides nothing, so listing again at once sees it all again.
    assert local_cloud.json("dlq", "list") == listed and in_flight(local_cloud) == 0

    by_arrival: dict[str, list[dict[str, Any]]] = {}
    for m in listed:
        by_arrival.setdefault(m["arrival"], []).append(m)
    assert {m["task_id"] for m in by_arrival["explicit"]} == {"acme.ledger", "globex.billing"}
    assert all(m["run_state"] == "dead_lettered" and m["work_order_id"] for m in by_arrival["explicit"])
    (refused,) = by_arrival["refused"]
    assert refused["run_id"] is None and refused["error_code"] == "INVALID_MESSAGE"
    (crash,) = by_arrival["redrive_policy"]
    assert crash["run_id"] == "acme.heartbeat:20260307T090000Z" and crash["run_state"] == "succeeded"
    assert [m["sent_at"] for m in listed] == sorted(m["sent_at"] for m in listed)

    billing = local_cloud.json("dlq", "list", "--tenant", "globex")
    assert billing and {m["task_id"] for m in billing} == {"globex.billing"}
    coded = local_cloud.json("dlq", "list", "--error-code", "BAD_INPUT")
    assert {m["message_id"] for m in coded} == {m["message_id"] for m in billing}
    early = local_cloud.json("dlq", "list", "--task", "billing", "--until", "2026-03-07T09:05:00Z")
    late = local_cloud.json("dlq", "list", "--task", "billing", "--since", "2026-03-07T09:05:00Z")
    assert len(early) + len(late) == len(billing) and early and late

    table = local_cloud.ok("dlq", "list", "--task", "ledger")
    assert "acme.ledger:" in table.stdout


def test_list_pages_with_the_cursor_it_prints(local_cloud: Cloud) -> None:
    listed = local_cloud.json("dlq", "list")
    assert len(listed) > 3
    first = local_cloud.ok("-o", "json", "dlq", "list", "--limit", "2")
    match = re.search(r"--after '([^']+)'", first.stderr)
    assert match is not None, first.stderr
    page = json.loads(first.stdout)
    assert page["next"] == match.group(1)  # the cursor is in the JSON too
    rest = local_cloud.json("dlq", "list", "--after", match.group(1))
    assert page["items"] + rest["items"] == listed and rest["next"] is None
    assert local_cloud.json("dlq", "list", "--limit", "2", "--all")["items"] == listed
    last = local_cloud.ok("dlq", "list", "--after", match.group(1))
    assert "--after" not in last.stderr  # the last page says there is no more


def test_show_finds_a_message_with_its_body_and_work_order(local_cloud: Cloud) -> None:
    message = local_cloud.json("dlq", "list", "--task", "billing")[0]

    shown = local_cloud.json("dlq", "show", message["message_id"])

    assert shown["location"] == "dlq" and shown["run_id"] == message["run_id"]
    assert json.loads(shown["body"])["kind"] == "replay"
    assert shown["attributes"]["reason"] == "terminal_error"
    assert shown["work_order"]["state"] == "open"
    missing = local_cloud.cli("dlq", "show", "no-such-message")
    assert missing.exit_code == 4 and "MESSAGE_NOT_FOUND" in missing.stderr


def test_dry_run_says_what_would_happen_and_changes_nothing(local_cloud: Cloud) -> None:
    before = local_cloud.runs()

    report = local_cloud.json("dlq", "redrive", "--dry-run")

    outcomes = {i["run_id"]: (i["outcome"], i["detail"]) for i in report["items"]}
    assert outcomes["acme.heartbeat:20260307T090000Z"] == ("skipped", "run already succeeded")
    assert outcomes[None][0] == "skipped" and "names no run" in outcomes[None][1]
    would = [i for i in report["items"] if i["outcome"] == "would-move"]
    assert {i["task_id"] for i in would} == {"acme.ledger", "globex.billing"}
    assert local_cloud.runs() == before
    assert len(local_cloud.json("dlq", "list")) == report["examined"]


def test_redrive_filters_canaries_and_audits_every_move(local_cloud: Cloud) -> None:
    ledger = {m["run_id"]: m["message_id"] for m in local_cloud.json("dlq", "list", "--task", "ledger")}
    assert len(ledger) >= 2

    declined = local_cloud.cli("dlq", "redrive", "--task", "ledger", input="n\n")
    assert declined.exit_code == 1
    assert f"Redrive {len(ledger)} matching DLQ message(s)?" in declined.output, "the prompt counts them"
    capped = local_cloud.cli("dlq", "redrive", "--task", "ledger", "--limit", "1", input="n\n")
    assert f"Redrive {len(ledger)} matching DLQ message(s) (at most 1)?" in capped.output
    canary = local_cloud.json("dlq", "redrive", "--task", "ledger", "--limit", "1", "--yes")
    local_cloud.tick(REDRIVE_VISIBILITY_S + 1)
    rest = local_cloud.json("dlq", "redrive", "--task", "ledger", "--rate", "50", "--yes")

    assert canary["outcomes"] == {"moved": 1, "skipped": len(ledger) - 1}
    assert rest["outcomes"] == {"moved": len(ledger) - 1}
    runs = local_cloud.runs()
    for run_id, message_id in ledger.items():
        assert runs[run_id].state is RunState.REPLAYED and runs[run_id].budget_start == runs[run_id].attempt
        record = local_cloud.deps.store.audit_trail(f"run#{run_id}")[-1]
        assert record.action == "replayed" and record.actor == OPERATOR
        assert record.evidence["dlq_message_id"] == message_id and record.evidence["via"] == "redrive-dlq"
    remaining = local_cloud.json("dlq", "list")
    assert "acme.ledger" not in {m["task_id"] for m in remaining}
    assert {m["task_id"] for m in remaining} >= {"globex.billing", "acme.heartbeat"}


def test_a_second_message_of_the_same_run_is_removed_without_a_second_budget(local_cloud: Cloud) -> None:
    message = local_cloud.json("dlq", "list", "--task", "billing")[0]
    shown = local_cloud.json("dlq", "show", message["message_id"])
    boto3.client("sqs").send_message(
        QueueUrl=local_cloud.stack.settings.queue("dlq").url,
        MessageBody=shown["body"],
        MessageAttributes={
            k: {"DataType": "String", "StringValue": v} for k, v in shown["attributes"].items()
        },
    )
    local_cloud.tick(1)

    report = local_cloud.json("dlq", "redrive", "--task", "billing", "--yes")

    mine = [i for i in report["items"] if i["run_id"] == message["run_id"]]
    assert sorted(i["outcome"] for i in mine) == ["duplicate-removed", "moved"]
    trail = local_cloud.deps.store.audit_trail(f"run#{message['run_id']}")
    assert [r.action for r in trail].count("replayed") == 1
    assert {m["task_id"] for m in local_cloud.json("dlq", "list")} == {"acme.heartbeat", None}


def test_archive_keeps_messages_and_redrives_from_the_archive(local_cloud: Cloud) -> None:
    # New dead letters for the archive to keep (billing fails every ten minutes).
    local_cloud.run_for(timedelta(minutes=20))
    local_cloud.tick(31)
    waiting = {m["message_id"]: m for m in local_cloud.json("dlq", "list", "--task", "billing")}
    assert waiting

    copied = local_cloud.json("dlq", "archive", "--task", "billing", "--older-than", "1m")
    assert copied["archived"] == len(waiting) and copied["deleted"] == 0
    again = local_cloud.json("dlq", "archive", "--task", "billing", "--delete", "--yes")
    assert again["already_archived"] == len(waiting) and again["deleted"] == len(waiting)
    assert local_cloud.json("dlq", "list", "--task", "billing") == []

    archived = local_cloud.json("dlq", "list", "--archived", "--task", "billing")
    assert {m["message_id"] for m in archived} == set(waiting)
    assert {m["archive_status"] for m in archived} == {"archived"}
    one = local_cloud.json("dlq", "show", next(iter(waiting)))
    assert one["location"] == "archive (archived)"
    note = local_cloud.deps.store.audit_trail(f"msg#{next(iter(waiting))}")
    assert [r.action for r in note] == ["archived"] and note[0].actor == OPERATOR

    report = local_cloud.json("dlq", "redrive", "--archived", "--task", "billing", "--yes")

    assert report["source"] == "archive" and report["outcomes"] == {"moved": len(waiting)}
    assert {
        m["archive_status"] for m in local_cloud.json("dlq", "list", "--archived", "--task", "billing")
    } == {"redriven"}
    for message in waiting.values():
        assert local_cloud.runs()[message["run_id"]].state is RunState.REPLAYED
    assert local_cloud.json("dlq", "redrive", "--archived", "--yes")["outcomes"] == {}
