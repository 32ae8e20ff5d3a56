"""Retry budgets per target, in the engine: holding failed runs, probing, paced release.

The rules are ``rebound.domain.target_budget``; this module reads and writes a target's state
(one control record, ``target#<target>``, written only over the version read, so two writers
never both act on the same state) and acts on runs:

- **On a failure a retry would follow** (``RetryScheduler.decide``), ``on_failure`` counts it on
  its target. While the target is healthy the retry goes ahead as the policy says. When this
  failure trips the target, or the target is unhealthy already, the run is *held* instead:
  ``retry_scheduled`` with ``held_at``, waiting (``wait_reason: target-unhealthy``), no carrier,
  the failed attempt forgiven (``Run.forgiven``: it does not count against the budget). The run
  that trips the target opens the target's one work order in the same transaction (subject
  ``target#<target>#<episode>``, its id derived from the subject, so a retried transaction never
  opens two), and joins the list of unhealthy targets (``targets#unhealthy``). The sweeper
  notifies the order's channels, within a minute.
- **Every minute** (the sweeper, ``sweep``) looks at each unhealthy or recovering target and the
  runs held for it (the held runs come from the sweeper's own query of waiting runs): it sends the
  work order's notifications still undelivered; lets one held run through as the probe when one
  is due; marks the target recovering once its latest probe succeeded; releases held runs of a
  recovering (or healthy) target, at most ``release_per_minute`` a minute, spread over the
  minute, each under a new dispatch token; closes a recovering target once nothing is held, which
  resolves its work order in the same transaction (the system as actor, the reason in the audit
  record); and dead-letters a run held longer than ``max_hold`` (``TARGET_UNHEALTHY``).

Nothing is lost: a held run is an ordinary waiting run that the sweeper visits every minute. A
release whose message was lost is an overdue dispatch the sweeper sends again; a probe lost the
same way is followed by the next one; a target whose held runs all ended some other way is closed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain import target_budget as tb
from rebound.domain.errors import Conflict, ReboundError
from rebound.domain.ids import run_subject, work_order_id, work_order_subject
from rebound.domain.retry import Reason
from rebound.domain.retry_policy import RetryPolicy
from rebound.domain.run import Run, RunState, with_changes
from rebound.domain.states import ACTIVE, ensure_transition
from rebound.domain.stored import StoredTask
from rebound.domain.timefmt import iso
from rebound.domain.work_order import Resolution, WorkOrder
from rebound.engine import crashpoints as cp
from rebound.engine import leases
from rebound.engine import telemetry as m
from rebound.engine.dead_letters import DeadLetters
from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher
from rebound.engine.escalation import OPEN_STATES, Escalation, count_resolution, stage_resolution
from rebound.engine.ports import UnitOfWork

log = logging.getLogger(__name__)

STATE_PREFIX = "target#"
INDEX_KEY = "targets#unhealthy"
"""Control record: the targets that are not healthy (unhealthy or recovering)."""
WRITE_TRIES = 6
SETTLE = timedelta(minutes=3)
"""How long a target must have been recovering (or unhealthy with nothing held) before the
sweeper, finding nothing held, closes it: a run held just before is then visible to its query
(which looks at runs unchanged for two minutes)."""


def state_key(target: str) -> str:
    return f"{STATE_PREFIX}{target}"


def held_by_target(run: Run) -> bool:
    """Whether ``run`` is held because its target is unhealthy (not by a pause)."""
    held = run.held_at is not None and run.waiting_since is not None
    return held and run.wait_reason == tb.TARGET_UNHEALTHY


def _body(item: dict[str, Any] | None) -> tuple[dict[str, Any] | None, int | None]:
    if not item:
        return None, None
    return json.loads(item["body"]), int(item["version"])


@dataclass
class TargetSweep:
    """What one sweep did to targets and their held runs."""

    probes: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)

    def total(self) -> int:
        return (
            len(self.probes)
            + len(self.released)
            + len(self.recovered)
            + len(self.closed)
            + len(self.dead_lettered)
        )


class TargetBudgets:
    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor

    # --------------------------------------------------------------------------- state
    def read(self, target: str) -> tuple[tb.TargetState, int | None]:
        body, version = _body(self.store.get_key(state_key(target)))
        if body is None:
            return tb.TargetState(target=target), None
        return tb.TargetState.model_validate(body), version

    def unhealthy(self) -> tuple[list[str], int | None]:
        body, version = _body(self.store.get_key(INDEX_KEY))
        return list((body or {}).get("targets", [])), version

    def _stage_state(self, uow: UnitOfWork, state: tb.TargetState, version: int | None) -> None:
        uow.stage_versioned(
            state_key(state.target), state.model_dump(mode="json"), version, f"target {state.target}"
        )

    def _stage_index(self, uow: UnitOfWork, target: str, *, add: bool) -> None:
        targets, version = self.unhealthy()
        wanted = sorted({*targets, target}) if add else sorted(set(targets) - {target})
        if wanted != sorted(targets) or version is None:
            uow.stage_versioned(INDEX_KEY, {"targets": wanted}, version, "unhealthy targets")

    # --------------------------------------------------------------------------- a failure
    def on_failure(self, run: Run, stored: StoredTask | None, policy: RetryPolicy) -> str | None:
        """Count a failure a retry would follow. ``None``: retry as the policy says; otherwise the
        run was held (``"held"``) or changed meanwhile (``"stale"``)."""
        budget = policy.target_budget
        if not budget.enabled or stored is None:
            return None
        target = tb.target_identity(stored.task)
        for _ in range(WRITE_TRIES):
            now = self.clock.now()
            state, version = self.read(target)
            after, verdict = tb.record_failure(
                state, run.run_id, now, budget, counted=not leases.worker_died(run)
            )
            if after == state and verdict is tb.Verdict.RETRY:
                return None  # not counted: nothing to write
            uow = self.store.unit_of_work(self.actor, now)
            if verdict is tb.Verdict.RETRY:
                self._stage_state(uow, after, version)
                try:
                    uow.commit()
                except Conflict:
                    continue  # another failure of the target counted first: count again
                return None
            order = None
            if verdict is tb.Verdict.TRIP and state.healthy:
                order = self._stage_work_order(uow, after, run, policy, now)
                after = after.model_copy(update={"work_order_id": order.work_order_id})
                self._stage_index(uow, target, add=True)
            if after != state:
                self._stage_state(uow, after, version)
            if verdict is tb.Verdict.TRIP:
                uow.append_audit(
                    state_key(target),
                    action="target-unhealthy",
                    evidence={
                        "episode": after.episode,
                        "work_order_id": after.work_order_id,
                        "failures": len(after.failures),
                        "runs": sorted({f.run_id for f in after.failures}),
                        "tripped_by": run.run_id,
                        "from": state.health.value,
                    },
                )
            self._stage_hold(uow, run, after, verdict, policy, now)
            try:
                uow.commit()
            except Conflict as exc:
                if f"runs {run.run_id}" in exc.details.get("failed", []):
                    return "stale"
                continue
            self._held_telemetry(run, after, verdict, order)
            return "held"
        log.warning("target budget kept changing: retrying as usual", extra={"run_id": run.run_id})
        return None

    def _stage_hold(
        self,
        uow: UnitOfWork,
        run: Run,
        state: tb.TargetState,
        verdict: tb.Verdict,
        policy: RetryPolicy,
        now: datetime,
    ) -> Run:
        held = with_changes(
            run,
            {
                "state": RunState.RETRY_SCHEDULED,
                "held_at": now,
                "waiting_since": now,
                "wait_reason": tb.TARGET_UNHEALTHY,
                "waits": run.waits + 1,
                "wait_polls": 0,
                "next_retry_at": None,
                "forgiven": [*run.forgiven, run.attempt],
                "policy_ref": f"{policy.name}@v{policy.version}",
            },
        )
        ensure_transition(run.state, held.state, run.run_id)
        saved = uow.save_run(
            run,
            held,
            action="held",
            evidence={
                "reason": tb.TARGET_UNHEALTHY,
                "target": state.target,
                "tripped": verdict is tb.Verdict.TRIP,
                "episode": state.episode,
                "work_order_id": state.work_order_id,
                "attempt": run.attempt,
                "error_code": run.last_error_code,
                "forgiven_attempt": run.attempt,
                "probe_every_s": policy.target_budget.probe_every,
            },
        )
        subject = run_subject(run.run_id)
        uow.emit(ev.execution_updated(saved, run.state, now), subject)
        uow.emit(
            ev.execution_waiting(
                saved,
                reason=tb.TARGET_UNHEALTHY,
                slots=[],
                holders=[state.target],
                retry_in_s=policy.target_budget.probe_every,
            ),
            subject,
        )
        return saved

    def _stage_work_order(
        self, uow: UnitOfWork, state: tb.TargetState, run: Run, policy: RetryPolicy, now: datetime
    ) -> WorkOrder:
        subject = tb.order_subject(state.target, state.episode)
        budget = policy.target_budget
        order = WorkOrder(
            work_order_id=work_order_id(subject),
            subject=subject,
            task_id=run.task_id,
            tenant=run.tenant,
            severity=policy.severity,
            reason=tb.TARGET_UNHEALTHY.replace("-", "_"),
            error_code=run.last_error_code,
            runbook_url=f"{self.deps.settings.runbook_base_url}/target-unhealthy.md",
            opened_at=now,
        )
        saved = uow.save_work_order(
            None,
            order,
            action="opened",
            evidence={
                "subject": subject,
                "reason": order.reason,
                "target": state.target,
                "failures": len(state.failures),
                "runs": sorted({f.run_id for f in state.failures}),
                "window_s": budget.window,
                "threshold": budget.threshold,
                "min_runs": budget.min_runs,
            },
        )
        uow.emit(ev.workorder_created(saved), work_order_subject(order.work_order_id))
        return saved

    def _held_telemetry(
        self, run: Run, state: tb.TargetState, verdict: tb.Verdict, order: WorkOrder | None
    ) -> None:
        self.deps.metrics.count(m.TARGET_HELD)
        if verdict is tb.Verdict.TRIP:
            self.deps.metrics.count(m.TARGET_TRIPPED)
        if order is not None:
            log.warning(
                "target unhealthy: retries held",
                extra={"target": state.target, "work_order_id": order.work_order_id, "run_id": run.run_id},
            )

    def _notify(self, order_id: str | None) -> None:
        """Tell every channel the target's order opened (only those not told yet; nothing once it
        is resolved). The sweeper does it, every minute while the target is not healthy, rather
        than the retry scheduler that opened it: the sweeper already holds the notification
        rights, and a channel that failed is simply tried again at the next sweep."""
        order = self.store.get_work_order(order_id) if order_id else None
        if order is None:
            return
        try:
            Escalation(self.deps, self.actor).notify(order)
        except ReboundError as exc:
            log.warning("target work order not delivered everywhere yet", extra={"error": exc.message})

    # --------------------------------------------------------------------------- every minute
    def sweep(self, held: list[Run]) -> TargetSweep:
        """Probe, release, recover, close and time out, for every target that is not healthy or
        has runs held (``held``: the held runs the sweeper found; see ``held_by_target``)."""
        out = TargetSweep()
        tasks: dict[str, StoredTask | None] = {}
        by_target: dict[str, list[Run]] = {}
        for run in held:
            if run.task_id not in tasks:
                tasks[run.task_id] = self.store.get_task(run.task_id)
            stored = tasks[run.task_id]
            target = tb.target_identity(stored.task) if stored else f"task:{run.task_id}"
            by_target.setdefault(target, []).append(run)
        listed, _ = self.unhealthy()
        for target in sorted({*listed, *by_target}):
            runs = sorted(by_target.get(target, []), key=lambda r: (r.held_at or r.updated_at, r.run_id))
            first = tasks.get(runs[0].task_id) if runs else None
            policy = self.deps.policies.for_stored(first).policy
            runs = self._time_out(runs, policy, out)
            self._target(target, runs, policy, out)
        return out

    def _time_out(self, runs: list[Run], policy: RetryPolicy, out: TargetSweep) -> list[Run]:
        now = self.clock.now()
        limit = timedelta(seconds=policy.target_budget.max_hold)
        keep: list[Run] = []
        for run in runs:
            if run.waiting_since is None or now - run.waiting_since <= limit:
                keep.append(run)
                continue
            failed = run.model_copy(
                update={
                    "last_error_code": tb.TARGET_UNHEALTHY_CODE,
                    "last_error_message": f"held {(now - run.waiting_since).total_seconds():.0f}s while its "
                    f"target was unhealthy; the limit is {policy.target_budget.max_hold:.0f}s",
                    "last_error_retryable": False,
                }
            )
            saved = DeadLetters(self.deps, self.actor).dead_letter(
                failed, Reason.TARGET_UNHEALTHY, policy, error_code=tb.TARGET_UNHEALTHY_CODE, previous=run
            )
            if saved is not None:
                out.dead_lettered.append(run.run_id)
        return keep

    def _target(self, target: str, runs: list[Run], policy: RetryPolicy, out: TargetSweep) -> None:
        now = self.clock.now()
        state, version = self.read(target)
        budget = policy.target_budget
        if not state.healthy:
            self._notify(state.work_order_id)
        if state.health is tb.Health.UNHEALTHY:
            why = self._recovery(state, runs, now)
            if why is not None:
                state, version = self._write(state, version, tb.recovered(state, now), evidence=why)
                if state.health is tb.Health.RECOVERING:
                    out.recovered.append(target)
            elif tb.probe_due(state, now) and runs:
                probe = runs[0]
                taken = tb.take_probe(state, probe.run_id, now, budget)
                written, version = self._write(state, version, taken)
                if written.probe_run == probe.run_id and self._release(probe, now, "probe", written):
                    out.probes.append(probe.run_id)
                return
        if state.health is tb.Health.UNHEALTHY:
            return
        if runs:
            count = min(tb.releases_left(state, now, budget), len(runs))
            if count:
                taken = tb.take_releases(state, count, now)
                written, version = self._write(state, version, taken)
                if written == taken:
                    for run, due in zip(runs[:count], tb.release_times(count, now), strict=True):
                        if self._release(run, due, "recovered", written):
                            out.released.append(run.run_id)
                state = written
            return
        settled = state.recovering_since is not None and now - state.recovering_since >= SETTLE
        if state.health is tb.Health.RECOVERING and settled and self._close(state, version):
            out.closed.append(target)

    def _recovery(self, state: tb.TargetState, runs: list[Run], now: datetime) -> dict[str, Any] | None:
        """Why an unhealthy target may be taken for recovered (``None``: it may not yet)."""
        in_flight = False
        if state.probe_run is not None:
            probe = self.store.get_run(state.probe_run)
            if probe is not None and probe.state is RunState.SUCCEEDED:
                return {"why": "probe-succeeded", "probe_run": probe.run_id, "probes": state.probes}
            # A probe still on its way; one cancelled, skipped or dead-lettered meanwhile is not.
            in_flight = probe is not None and probe.state in ACTIVE and not held_by_target(probe)
        quiet = state.changed_at is None or now - state.changed_at >= SETTLE
        if not runs and quiet and not in_flight:
            return {"why": "nothing-held", "since": iso(state.changed_at) if state.changed_at else None}
        return None

    def _write(
        self,
        state: tb.TargetState,
        version: int | None,
        after: tb.TargetState,
        evidence: dict[str, Any] | None = None,
    ) -> tuple[tb.TargetState, int | None]:
        """Write ``after`` over ``version``; on a lost race, the state as it now is."""
        uow = self.store.unit_of_work(self.actor, self.clock.now())
        self._stage_state(uow, after, version)
        if evidence is not None:
            uow.append_audit(
                state_key(state.target),
                action=f"target-{after.health.value}",
                evidence={**evidence, "episode": after.episode, "work_order_id": after.work_order_id},
            )
        try:
            uow.commit()
        except Conflict:
            return self.read(state.target)
        return after, (version or 0) + 1

    def _release(self, run: Run, due: datetime, why: str, state: tb.TargetState) -> bool:
        saved = Dispatcher(self.deps, self.actor).renew(
            run,
            due=due,
            action="released",
            evidence={
                "reason": why,
                "target": state.target,
                "held_s": round((self.clock.now() - (run.held_at or run.updated_at)).total_seconds(), 3),
            },
            crash_point=cp.AFTER_REDISPATCH_COMMIT,
            update={"held_at": None, "waiting_since": None, "wait_reason": None, "wait_polls": 0},
        )
        if saved is None:
            return False
        self.deps.metrics.count(m.TARGET_RELEASED)
        return True

    def _close(self, state: tb.TargetState, version: int | None) -> bool:
        """Nothing is held any more: healthy again; its work order resolves in the same write."""
        now = self.clock.now()
        after = tb.closed(state, now)
        uow = self.store.unit_of_work(self.actor, now)
        self._stage_state(uow, after, version)
        self._stage_index(uow, state.target, add=False)
        order = self.store.get_work_order(state.work_order_id) if state.work_order_id else None
        resolved = None
        if order is not None and order.state in OPEN_STATES:
            reason = f"target {state.target} recovered: {state.probes} probe(s), every held run released"
            resolved = stage_resolution(
                uow,
                order,
                resolution=Resolution.FIXED,
                by=self.actor,
                reason=reason,
                evidence={"target": state.target, "episode": state.episode},
            )
        uow.append_audit(
            state_key(state.target),
            action="target-healthy",
            evidence={"episode": state.episode, "work_order_id": state.work_order_id},
        )
        try:
            uow.commit()
        except Conflict:
            return False
        if resolved is not None:
            count_resolution(self.deps.metrics, resolved)
        log.info("target healthy again", extra={"target": state.target, "work_order_id": state.work_order_id})
        return True
