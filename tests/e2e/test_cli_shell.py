"""The CLI in a shell and in scripts: refusing without a terminal, one ``--yes`` and one
``--reason`` everywhere."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from test_cli_harness import Cloud, cloud_fixture

from rebound_cli.app import cli
from rebound_cli.authz import LOCAL, rule_of

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()
ONLY_READS = {"audit:verify", "state:check", "console:serve"}
TASKS = {
    "tasks": [
        {
            "id": "shell-nightly",
            "tenant": "acme",
            "schedule": {"cron": "30 2 * * *", "timezone": "UTC"},
            "target": {"type": "sim", "behavior": {"ok": True}},
        }
    ]
}


def leaves(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += leaves(command, (*prefix, name))
        else:
            found.append((" ".join((*prefix, name)), command))
    return found


def options(command: click.Command) -> set[str]:
    return {o for p in command.params for o in p.opts if not getattr(p, "hidden", False)}


def changes_something(command: click.Command) -> bool:
    rule = rule_of(command.callback)
    assert rule is not None
    return rule != LOCAL and not rule.action.endswith(":read") and rule.action not in ONLY_READS


def test_every_command_that_changes_something_accepts_yes() -> None:
    writers = [path for path, command in leaves() if changes_something(command)]
    assert "tasks resume" in writers and "workorders ack" in writers
    missing = [
        path for path, command in leaves() if changes_something(command) and "--yes" not in options(command)
    ]
    assert not missing, f"commands that change something without --yes: {missing}"


def test_an_operators_reason_is_reason_everywhere_with_the_old_name_kept() -> None:
    for path in ("workorders ack", "workorders resolve"):
        command = dict(leaves())[path]
        assert {"--reason", "--note"} <= options(command), path
    other_names = [p for p, c in leaves() if "--note" in options(c) and "--reason" not in options(c)]
    assert not other_names


def test_without_a_terminal_and_without_yes_a_destructive_command_refuses_and_changes_nothing(
    local_cloud: Cloud, tmp_path: Path
) -> None:
    file = tmp_path / "tasks.yaml"
    file.write_text(yaml.safe_dump(TASKS))
    local_cloud.ok("tasks", "apply", "-f", str(file))

    refused = local_cloud.cli("tasks", "pause", "shell-nightly", "--reason", "migration")
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: refusing without --yes (no terminal to confirm on): Pause task")
    assert "Aborted" not in refused.output
    assert local_cloud.json("tasks", "show", "shell-nightly")["task"]["state"] == "active"

    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({"tasks": [{**TASKS["tasks"][0], "timeout_s": 45}]}))
    assert local_cloud.cli("tasks", "apply", "-f", str(changed)).exit_code == 2
    assert local_cloud.json("tasks", "show", "shell-nightly")["task"]["timeout_s"] != 45

    # at a terminal, declining still aborts with 1; --yes needs no terminal
    assert local_cloud.cli("tasks", "pause", "shell-nightly", input="n\n").exit_code == 1
    local_cloud.ok("tasks", "pause", "shell-nightly", "--yes")
    assert local_cloud.json("tasks", "show", "shell-nightly")["task"]["state"] == "paused"
    local_cloud.ok("tasks", "resume", "shell-nightly", "--yes")  # accepted where nothing is asked
    assert local_cloud.json("tasks", "show", "shell-nightly")["task"]["state"] == "active"


def test_output_fits_a_shell_text_by_default_yaml_and_a_query(local_cloud: Cloud, tmp_path: Path) -> None:
    file = tmp_path / "tasks.yaml"
    file.write_text(yaml.safe_dump(TASKS))
    local_cloud.ok("tasks", "apply", "-f", str(file), "--yes")

    text = local_cloud.ok("tasks", "list").stdout  # no terminal: text, one task a line
    line = next(li for li in text.splitlines() if li.startswith("acme.shell-nightly\t"))
    assert line.split("\t")[1:3] == [
        "acme",
        local_cloud.json("tasks", "show", "shell-nightly")["task"]["state"],
    ]
    assert not set("│┃━─┏") & set(text) and "id\t" not in text  # no box, no header

    as_json = local_cloud.json("tasks", "list")
    assert yaml.safe_load(local_cloud.ok("-o", "yaml", "tasks", "list").stdout) == as_json

    ids = local_cloud.json("tasks", "list", "--query", "[].id")
    assert ids == [t["id"] for t in as_json] and "acme.shell-nightly" in ids
    assert local_cloud.ok("tasks", "list", "--query", "[].id").stdout.splitlines() == ids
    one = local_cloud.ok("tasks", "list", "--query", "[?id=='acme.shell-nightly'].[id, tenant]").stdout
    assert one == "acme.shell-nightly\tacme\n"
    bad = local_cloud.cli("tasks", "list", "--query", "[?")
    assert bad.exit_code == 2 and "--query" in bad.stderr

    graph = local_cloud.cli("-o", "dot", "tasks", "list")
    assert graph.exit_code == 2 and "only `workstreams show`" in graph.stderr


LONG_ID = "acme.an-identifier-longer-than-the-terminal-is-wide:20260307T090500Z"
TEXT = "a message of many words that may wrap where it must"


@pytest.mark.parametrize(
    ("view", "line"),
    [
        (lambda out: out.table(None, ["run", "error"], [[LONG_ID, TEXT]]), 3),  # the first row
        (lambda out: out.fields("run", [("run", LONG_ID), ("note", TEXT)]), 1),
    ],
    ids=["table", "fields"],
)
def test_a_view_never_wraps_an_id(
    view: Any, line: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rebound_cli import output as out
    from rebound_cli.context import App

    monkeypatch.setenv("COLUMNS", "30")
    with click.Context(click.Command("show"), obj=App("dev", "table", False)):
        view(out)
    shown = capsys.readouterr().out
    assert LONG_ID in shown.splitlines()[line]  # whole on its line
    assert "message" in shown  # free text still wraps, at its spaces


def test_every_list_pages_the_same_way() -> None:
    lists = [path for path, _ in leaves() if path.endswith(" list")]
    assert len(lists) >= 8
    missing = [p for p in lists if not {"--limit", "--after", "--all"} <= options(dict(leaves())[p])]
    assert not missing, f"lists without --limit, --after and --all: {missing}"


def test_tasks_and_runs_page_with_the_cursor_they_print(local_cloud: Cloud, tmp_path: Path) -> None:
    many = [{**TASKS["tasks"][0], "id": f"shell-page-{i}"} for i in range(3)]
    file = tmp_path / "many.yaml"
    file.write_text(yaml.safe_dump({"tasks": many}))
    local_cloud.ok("tasks", "apply", "-f", str(file), "--yes")
    listed = [t["id"] for t in local_cloud.json("tasks", "list")]

    first = local_cloud.ok("-o", "json", "tasks", "list", "--limit", "2")
    page = json.loads(first.stdout)
    assert [t["id"] for t in page["items"]] == listed[:2]
    assert page["next"] == listed[1] and f"--after '{listed[1]}'" in first.stderr
    rest = local_cloud.json("tasks", "list", "--limit", "2", "--after", page["next"])
    assert [t["id"] for t in rest["items"]] == listed[2:4]
    assert local_cloud.json("tasks", "list", "--limit", "1", "--all")["next"] is None
    assert len(local_cloud.json("tasks", "list", "--limit", "1", "--all")["items"]) == len(listed)
    assert local_cloud.cli("tasks", "list", "--after", "acme.nothing").exit_code == 2

    for i in range(3):
        local_cloud.ok("tasks", "run", "shell-page-0", "--token", f"page-{i}")
    local_cloud.run_for(timedelta(minutes=1))  # the executor records the runs
    runs = [r["run_id"] for r in local_cloud.json("runs", "list", "--task", "shell-page-0")]
    assert len(runs) == 3
    one = local_cloud.ok("-o", "json", "runs", "list", "--task", "shell-page-0", "--limit", "1")
    cursor = json.loads(one.stdout)["next"]
    assert cursor == runs[0] and f"--after '{runs[0]}'" in one.stderr
    after = local_cloud.json("runs", "list", "--task", "shell-page-0", "--limit", "5", "--after", cursor)
    assert [r["run_id"] for r in after["items"]] == runs[1:] and after["next"] is None
    everywhere = local_cloud.json("runs", "list", "--limit", "1", "--after", runs[1])  # no --task
    assert runs[2] in [r["run_id"] for r in everywhere["items"]]
    assert local_cloud.ok("runs", "list", "--task", "shell-page-0", "--limit", "1").stdout.count("\n") == 1


def test_a_task_file_from_standard_input(local_cloud: Cloud) -> None:
    piped = {"tasks": [{**TASKS["tasks"][0], "id": "shell-piped"}]}
    planned = local_cloud.json("tasks", "apply", "-f", "-", "--dry-run", input=yaml.safe_dump(piped))
    assert [(p["id"], p["change"]) for p in planned["plan"]] == [("acme.shell-piped", "create")]
    local_cloud.ok("tasks", "apply", "-f", "-", "--yes", input=yaml.safe_dump(piped))
    assert local_cloud.json("tasks", "show", "shell-piped")["task"]["id"] == "acme.shell-piped"
    bad = local_cloud.cli("tasks", "dryrun", "-f", "-", input="tasks: [")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_profile_and_region_choose_the_aws_account_and_region(local_cloud: Cloud) -> None:
    assert local_cloud.cli("--region", "us-east-1", "tasks", "list").exit_code == 0
    elsewhere = local_cloud.cli("tasks", "list", "--region", "eu-west-1")
    assert elsewhere.exit_code == 4 and "no Rebound environment 'local' in eu-west-1" in elsewhere.stderr
    unknown = local_cloud.cli("--profile", "no-such-profile", "tasks", "list")
    assert unknown.exit_code == 2 and "AWS_PROFILE" in unknown.stderr


def test_policies_show_durations_as_the_config_writes_them(local_cloud: Cloud) -> None:
    rows = {r.split("\t")[0]: r.split("\t") for r in local_cloud.ok("policies", "list").stdout.splitlines()}
    header = ["name", "version", "max_attempts", "base_delay", "multiplier", "max_delay", "max_age"]
    default = dict(zip(header, rows["default"], strict=False))
    assert (default["base_delay"], default["max_delay"], default["max_age"]) == ("120s", "1h", "1d")
    patient = dict(zip(header, rows["patient"], strict=False))
    assert (patient["base_delay"], patient["max_delay"], patient["max_age"]) == ("5m", "6h", "2d")
    as_json = {p["name"]: p for p in local_cloud.json("policies", "list")}
    assert as_json["default"]["base_delay"] == 120  # JSON keeps seconds


def test_run_wait_and_show_watch_exit_with_the_runs_outcome(local_cloud: Cloud, tmp_path: Path) -> None:
    def sim(task_id: str, behavior: dict[str, object]) -> dict[str, object]:
        return {**TASKS["tasks"][0], "id": task_id, "target": {"type": "sim", "behavior": behavior}}

    file = tmp_path / "outcomes.yaml"
    file.write_text(
        yaml.safe_dump({"tasks": [sim("shell-ok", {"ok": True}), sim("shell-bad", {"always_fail": True})]})
    )
    local_cloud.ok("tasks", "apply", "-f", str(file), "--yes")
    local_cloud.while_sleeping = lambda s: local_cloud.run_for(timedelta(seconds=s))
    try:
        ok = local_cloud.cli("-o", "json", "tasks", "run", "shell-ok", "--wait", "--interval", "5")
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.stdout)["state"] == "succeeded" and "succeeded (attempt 1)" in ok.stderr

        short = local_cloud.cli("tasks", "run", "shell-bad", "--wait", "--interval", "5", "--timeout", "10")
        assert short.exit_code == 6 and "is still" in short.stderr
        run_id = short.stderr.split()[1]

        watched = local_cloud.cli("runs", "show", run_id, "--watch", "--interval", "60")
        assert watched.exit_code == 1, watched.output
        assert "attempt-failed" in watched.stdout and "dead_lettered after 3 attempt(s)" in watched.stdout
        bad = local_cloud.cli("tasks", "run", "shell-bad", "--wait", "--interval", "60", "--token", "again")
        assert bad.exit_code == 1 and "dead_lettered" in bad.stdout
    finally:
        local_cloud.while_sleeping = None


def test_completion_scripts_and_ids_from_the_environment(local_cloud: Cloud, tmp_path: Path) -> None:
    from click.testing import CliRunner

    runner = CliRunner()
    for shell, marker in (
        ("bash", "complete -o nosort -F"),
        ("zsh", "#compdef rebound"),
        ("fish", "complete "),
    ):
        script = runner.invoke(cli, ["completion", shell], prog_name="rebound")
        assert script.exit_code == 0 and marker in script.stdout and "_REBOUND_COMPLETE" in script.stdout

    file = tmp_path / "tasks.yaml"
    file.write_text(yaml.safe_dump(TASKS))
    local_cloud.ok("tasks", "apply", "-f", str(file), "--yes")

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        env = {"_REBOUND_COMPLETE": "bash_complete", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
        result = runner.invoke(cli, [], prog_name="rebound", env=env)
        assert result.exit_code == 0, result.output
        return [row.split(",", 1)[1] for row in result.stdout.splitlines() if row]

    assert "acme.shell-nightly" in complete("rebound --env local tasks show acme.shell-")
    assert complete("rebound --env local tasks pause acme.no-such-") == []
    assert "--limit" in complete("rebound tasks list --li")
    assert complete("rebound --env nowhere tasks show a") == []  # no environment: nothing, no error

    # Run ids, never from a scan of the runs table: a task's id with its colon, then its runs.
    for token in ("complete-1", "complete-2"):
        local_cloud.ok("tasks", "run", "shell-nightly", "--token", token)
    local_cloud.run_for(timedelta(minutes=1))
    runs = {r["run_id"] for r in local_cloud.json("runs", "list", "--task", "shell-nightly")}
    assert len(runs) == 2
    from rebound.adapters.dynamo.store import DynamoStore

    def no_scan(*_: object, **__: object) -> None:
        raise AssertionError("completion scanned the runs table")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DynamoStore, "scan_runs", no_scan)
        patch.setattr(DynamoStore, "scan_runs_page", no_scan)
        assert "acme.shell-nightly:" in complete("rebound --env local runs show acme.shell-nightly")
        assert runs <= set(complete("rebound --env local runs show acme.shell-nightly:"))
        assert complete("rebound --env local runs show acme.shell-nightly:manual-tnothing") == []


def test_a_reader_that_goes_away_is_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    def closed(*_: object, **__: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")  # as `rebound ... | head` meets it

    monkeypatch.setattr(click, "echo", closed)
    result = CliRunner().invoke(cli, ["completion", "bash"])
    assert result.exit_code == 0 and result.output == ""
