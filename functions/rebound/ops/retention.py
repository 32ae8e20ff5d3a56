"""``rebound migrate retention``: finished runs written before retention get their expiry.

Runs finished before an environment had ``retention`` carry no ``ttl``, so they would stay for
ever. This pass gives each finished run the ``ttl`` it would have had (``runs_days`` after it
ended; one already past expires at DynamoDB's next sweep). Storage only: no audit record is
written and nothing of the run changes, and a run that changed since it was read is left for its
next write, which carries its ``ttl``. Idempotent. Audit records written before retention keep no
``ttl`` (the audit table refuses updates to everyone): they stay, and ``rebound audit archive``
copies them to the archive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rebound.domain.errors import ValidationFailed
from rebound.domain.retention import finished_run_expiry
from rebound.domain.states import TERMINAL
from rebound.engine.deps import Deps

PAGE = 100


@dataclass
class RetentionMigration:
    examined: int = 0
    finished: int = 0
    set: int = 0
    """Runs given their expiry now (or that would be, in a dry run)."""
    skipped: int = 0
    """Finished runs that have their expiry already, or changed since they were read."""
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "finished": self.finished,
            "set": self.set,
            "skipped": self.skipped,
            "dry_run": self.dry_run,
        }


def migrate_retention(
    deps: Deps, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
) -> RetentionMigration:
    """Every finished run of the table given its ``ttl``; ``progress`` hears each page's size."""
    retention = deps.settings.retention
    if retention is None:
        raise ValidationFailed(
            "this environment sets no retention: deploy this version of the stack first",
            key_path="retention",
        )
    report = RetentionMigration(dry_run=dry_run)
    after: str | None = None
    while True:
        runs, after = deps.store.scan_runs_page(limit=PAGE, after=after)
        for run in runs:
            report.examined += 1
            if run.state not in TERMINAL:
                continue
            report.finished += 1
            expires = finished_run_expiry(retention, run.updated_at)
            if dry_run or deps.store.set_run_expiry(run.run_id, run.rev, expires):
                report.set += 1
            else:
                report.skipped += 1
        if progress:
            progress(len(runs))
        if after is None:
            return report
