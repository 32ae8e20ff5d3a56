"""A resources document written by an earlier version (before the control table's rename, before
``by_task_keys``) still reads as that stack is."""

from __future__ import annotations

from typing import Any

from rebound import resources as r
from rebound.settings import QueueRef, Settings, resources_document, settings_from_document


def document(**tables: str) -> dict[str, Any]:
    return {
        "environment": "dev",
        "tables": {spec.logical: f"t-{spec.logical}" for spec in r.SPEC.tables if spec.logical != "control"}
        | tables,
        "queues": {
            q.logical: QueueRef.from_arn(f"arn:aws:sqs:us-east-1:123456789012:{q.logical}").model_dump()
            for q in r.SPEC.queues
        },
        "bus_name": "bus",
        "schedule_group": "group",
        "scheduler_role_arn": "arn:aws:iam::123456789012:role/scheduler",
    }


def test_the_former_name_of_a_table_reads_as_its_current_name() -> None:
    settings = settings_from_document(document(idempotency="rebound-dev-table"))
    assert settings.table("control") == "rebound-dev-table"
    assert "idempotency" not in settings.tables
    assert resources_document(settings)["tables"]["control"] == "rebound-dev-table"


def test_the_current_name_wins_when_a_document_has_both() -> None:
    settings = Settings.model_validate(
        {**document(control="new", idempotency="old"), "config_dir": "config/tasks"}
    )
    assert settings.table("control") == "new"


def test_a_document_from_before_by_task_keys_lists_a_tasks_runs_from_by_task() -> None:
    """A CLI of this version against a stack not yet upgraded (docs/deploy.md, *Upgrading*) reads
    the index that stack has; a document this version wrote says which it reads."""
    earlier = settings_from_document(document(control="t-control"))
    assert earlier.runs_by_task == r.RUNS_BY_TASK_WHOLE
    current = Settings.model_validate({**document(control="t-control"), "config_dir": "config/tasks"})
    assert current.runs_by_task == r.RUNS_BY_TASK
    assert settings_from_document(resources_document(current)).runs_by_task == r.RUNS_BY_TASK
