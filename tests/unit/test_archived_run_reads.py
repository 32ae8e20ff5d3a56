"""Where ``rebound runs show`` starts reading the archive for a run that expired from the table
(``RunOps._archived_run``): a scheduled run's id names its day; for any other id, the first
record of its chain, if the table still holds it, bounds the read; else the archive is read whole."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from fakes import memory_deps

from rebound.domain.ids import run_subject
from rebound.ops.runs import RunOps
from rebound.ops.tasks import TaskOps
from support import register, task

pytestmark = pytest.mark.unit


class SpyArchive:
    """An archive holding ``records`` of one subject, remembering where each read started."""

    def __init__(self, subject: str, records: list[dict[str, Any]]) -> None:
        self.subject, self.records = subject, records
        self.since: list[date | None] = []

    def trails(
        self, *, subject: str | None = None, since: date | None = None, until: date | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        self.since.append(since)
        return {self.subject: self.records} if subject == self.subject else {}


def test_a_manual_runs_archive_is_read_from_the_day_before_its_first_record_else_whole() -> None:
    world = memory_deps()
    register(world.deps, task("acme.export"))
    run_id = TaskOps(world.deps, actor="ops:alice").run_now("acme.export", token="deploy-42")
    world.deliver()
    subject = run_subject(run_id)
    trail = world.store.audit_trail(subject)
    assert len(trail) >= 2 and trail[0].seq == 1
    archive = SpyArchive(subject, [r.model_dump(mode="json") for r in trail])
    world.deps.audit_archive = archive  # type: ignore[assignment]
    ops = RunOps(world.deps, "test")

    run, _ = ops._archived_run(run_id, trail)  # the table holds the chain's first record
    assert run.run_id == run_id
    assert archive.since[-1] == trail[0].at.date() - timedelta(days=1)
    ops._archived_run(run_id, trail[1:])  # it expired: nothing bounds the read
    assert archive.since[-1] is None
    rebuilt, chain = ops._archived_run(run_id, [])
    assert archive.since[-1] is None and rebuilt.state == run.state and len(chain) == len(trail)
