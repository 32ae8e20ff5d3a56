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

from rebound.domain.errors import ValidationFailed
from rebound.domain.retention import finished_run_expiry
from rebound.domain.states import TERMINAL
from rebound.engine.deps import Deps
from rebound.ops.layout import RunsPass, run_pass


def migrate_retention(
    deps: Deps, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
) -> RunsPass:
    """Every finished run of the table given its ``ttl`` (``finished``, ``set``); ``progress``
    hears each page's size."""
    retention = deps.settings.retention
    if retention is None:
        raise ValidationFailed(
            "this environment sets no retention: deploy this version of the stack first",
            key_path="retention",
        )
    return run_pass(
        deps,
        RunsPass("finished", "set", dry_run=dry_run),
        lambda run: run.state in TERMINAL,
        lambda run: deps.store.set_run_expiry(
            run.run_id, run.rev, finished_run_expiry(retention, run.updated_at)
        ),
        progress,
    )
