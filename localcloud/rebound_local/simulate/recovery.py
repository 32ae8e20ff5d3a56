"""An operator recovering dead-lettered runs in a simulation, at the times the scenario says.

Each recovery (``rebound_local.scenario.Recovery``) is carried out through ``rebound.ops`` as its
CLI command does, under the same hostile cloud as everything else:

- ``replay``: ``RunOps.failed_runs`` and ``RunOps.retry_failed`` (``rebound runs retry-failed``),
  each dead-lettered run of the matching tasks replayed with a fresh attempt budget; a run whose
  replay message SQS refused is sent again with ``RunOps.retry`` (``rebound runs retry RUN_ID``),
  as that command's error tells the operator to do;
- ``redrive``: ``DlqOps.redrive`` (``rebound dlq redrive [--task]``), one pass over the DLQ. One
  pass, not one per task of a pattern: the local cloud's clock stands still while the operator
  acts, and a message a pass released (visibility 0) is visible again only once time moves, so a
  second pass at the same moment would find nothing;
- ``skip`` and ``cancel``: ``RunOps.skip`` / ``RunOps.cancel`` (``rebound runs skip|cancel
  --reason``) of each dead-lettered run of the matching tasks, which resolves its work order in
  the same transaction, with the operator as actor and their reason.

Finding the runs reads the ``by_state`` index, which the hostile cloud may show lagging: a run
dead-lettered a moment before is not seen, as an operator would not see it. An operator whose
command failed on a throttle or a conflict runs it again, for what is left (at most
``OPERATOR_TRIES`` rounds); a refusal (the run is no longer dead-lettered) is reported, not
retried.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rebound.domain.errors import Conflict, ReboundError
from rebound.domain.run import Run, RunState
from rebound.domain.timefmt import iso
from rebound.engine.deps import Deps
from rebound.ops.dlq import FAILED, MOVED, RESUMED, DlqFilter, DlqOps
from rebound.ops.runs import RunOps
from rebound_local.scenario import FlagSwitch, Recovery, task_matches
from rebound_local.simulate.workstreams import OPERATOR, OPERATOR_TRIES

log = logging.getLogger(__name__)


class Recover:
    """One recovery of dead-lettered runs; ``carry_out`` gives the report's entry for it."""

    def __init__(self, deps: Deps, recovery: Recovery, task_ids: list[str], window_start: datetime) -> None:
        self.deps = deps
        self.recovery = recovery
        self.tasks = sorted(t for t in task_ids if task_matches(t, recovery.task))
        self.since = window_start
        self.runs = RunOps(deps, actor=OPERATOR)
        self.done: list[str] = []
        self.unsent: list[str] = []
        """Runs replayed whose replay message SQS refused: sent again with ``RunOps.retry``."""
        self.refused: dict[str, str] = {}
        self.errors: list[str] = []
        self.redriven: Counter[str] = Counter()
        """A redrive's outcomes, over every task and try (``moved``, ``skipped``, ...)."""

    def carry_out(self) -> dict[str, Any]:
        rc = self.recovery
        entry: dict[str, Any] = {"at": iso(self.deps.clock.now()), "op": rc.op, "task": rc.task}
        act: Callable[[], bool] = {
            "replay": self._replay,
            "redrive": self._redrive,
            "skip": lambda: self._close(self.runs.skip),
            "cancel": lambda: self._close(self.runs.cancel),
        }[rc.op]
        tries = 0
        finished = False
        while tries < OPERATOR_TRIES and not finished:
            tries += 1
            try:
                finished = act()
            except ReboundError as exc:  # throttled or contended: the operator runs it again
                self.errors.append(f"{exc.code}: {exc.message}")
        entry.update(
            ok=finished and not self.redriven[FAILED],
            tries=tries,
            runs=sorted(self.done),
            refused=dict(sorted(self.refused.items())),
        )
        if self.redriven:
            entry["redrive_outcomes"] = dict(sorted(self.redriven.items()))
        if self.errors:
            entry["errors"] = self.errors[-3:]
        if not finished:
            log.warning("a scenario recovery did not finish in %d tries", tries, extra={"entry": entry})
        return entry

    def _dead_lettered(self) -> list[Run]:
        """The matching dead-lettered runs not acted on yet (what the operator lists)."""
        exact = self.tasks == [self.recovery.task]
        found = self.runs.failed_runs(task_id=self.recovery.task if exact else None, since=self.since)
        handled = set(self.done) | set(self.unsent) | set(self.refused)
        return [r for r in found if r.task_id in self.tasks and r.run_id not in handled]

    def _replay(self) -> bool:
        while self.unsent:  # `rebound runs retry RUN_ID` sends a replay that never started again
            self.runs.retry(self.unsent[0], reason=self.recovery.reason)
            self.done.append(self.unsent.pop(0))
        runs = self._dead_lettered()
        try:
            outcomes = self.runs.retry_failed(runs, reason=self.recovery.reason)
        except Conflict as exc:  # replayed, but SQS refused some replay messages
            unsent = {str(r) for r in exc.details.get("runs", [])}
            self.unsent += sorted(unsent)
            # the runs of earlier batches were sent; those after it are still dead-lettered
            sent = [r.run_id for r in runs if r.run_id not in unsent]
            self.done += [run_id for run_id in sent if not self._still_dead_lettered(run_id)]
            return False
        failed = False
        for outcome in outcomes:
            if outcome.action == "replayed":
                self.done.append(outcome.run_id)
            elif self._still_dead_lettered(outcome.run_id):
                failed = True  # throttled or contended: try it again
            else:
                self.refused[outcome.run_id] = outcome.detail
        return not failed

    def _redrive(self) -> bool:
        """One pass. A message it could not move stays in the DLQ, held until its visibility
        runs out, so a second pass at the same moment would not see it: it is reported (the
        entry is not ``ok``), as ``rebound dlq redrive`` exits 1, for a later redrive."""
        task = None if self.recovery.task == "*" else self.recovery.task
        report = DlqOps(self.deps, OPERATOR, wait_s=0).redrive(DlqFilter(task_id=task))
        self.redriven.update(report.outcomes)
        self.done += [i.run_id for i in report.items if i.outcome in (MOVED, RESUMED) and i.run_id]
        self.refused.update({i.run_id or i.message_id: i.detail for i in report.items if i.outcome == FAILED})
        return True

    def _close(self, close: Callable[[str, str], Run]) -> bool:
        failed = False
        for run in self._dead_lettered():
            try:
                close(run.run_id, self.recovery.reason)
            except Conflict as exc:  # changed meanwhile (look again), or no longer dead-lettered
                if self._still_dead_lettered(run.run_id):
                    failed = True
                else:
                    self.refused[run.run_id] = exc.message
                continue
            except ReboundError as exc:  # throttled or contended: try it again
                self.errors.append(f"{exc.code}: {exc.message}")
                failed = True
                continue
            self.done.append(run.run_id)
        return not failed

    def _still_dead_lettered(self, run_id: str) -> bool:
        run = self.deps.store.get_run(run_id)
        return run is not None and run.state is RunState.DEAD_LETTERED


def recover(deps: Deps, recovery: Recovery, task_ids: list[str], window_start: datetime) -> dict[str, Any]:
    """Carry out one recovery; the report's entry for it (the runs it acted on, those it could not)."""
    return Recover(deps, recovery, task_ids, window_start).carry_out()


def switch_flag(deps: Deps, switch: FlagSwitch) -> dict[str, Any]:
    """``rebound flags set NAME on|off --reason``, run again by the operator when it fails (a
    throttle, a conflict), at most ``OPERATOR_TRIES`` times; the report's entry for it."""
    from rebound.ops.flags import FlagOps

    entry: dict[str, Any] = {
        "at": iso(deps.clock.now()),
        "op": "flag",
        "flag": switch.flag,
        "set": switch.set,
    }
    errors: list[str] = []
    for tries in range(1, OPERATOR_TRIES + 1):
        try:
            result = FlagOps(deps, OPERATOR).set(switch.flag, switch.set == "on", switch.reason)
        except ReboundError as exc:
            errors.append(f"{exc.code}: {exc.message}")
            continue
        entry.update(ok=True, tries=tries, changed=result["changed"])
        return entry
    entry.update(ok=False, tries=OPERATOR_TRIES, errors=errors[-3:])
    log.warning("a scenario's flag switch did not finish", extra={"entry": entry})
    return entry
