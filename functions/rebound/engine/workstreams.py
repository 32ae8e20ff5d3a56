"""Workstreams in the engine: definitions, runs and checkpoints in the control table, steps run
through the normal retry loop, progress from the outbox.

How a step runs and how the workstream hears of its end:

1. The workstream run, the task run of each step it starts (``pending``, with its dispatch token
   and ``workstream_run`` set), the resource slots it enters, its audit record, its checkpoint
   and its events are written in **one transaction**; then the step's message is sent. A crash in
   between leaves a pending run whose message is overdue: the sweeper sends it (as it does for
   the ledger's catch-up runs).
2. The step's run goes through the executor, the retry scheduler and dead-lettering unchanged.
3. Whatever write puts a step's run in a final state (``succeeded``, ``dead_lettered``,
   ``skipped``, ``cancelled``) also writes ``workstream.step.ended`` to the outbox in the same
   transaction (``rebound.adapters.staging``: it is in ``save_run``, the one place every run write
   goes through). A rule sends it to the escalation queue, whose handler calls ``on_step_ended``:
   the workstream run is read, advanced (``rebound.domain.workstream_runs``) and written back
   guarded by its version, so a redelivered event or a concurrent change is harmless.

Control records: ``ws#def#<id>`` (a definition and its recent runs), ``ws#index`` (the ids and
the resources' limits), ``ws#run#<run id>`` (a run), ``ws#cp#<run id>#<nn>`` (its checkpoints: a
ring of the last 100, slot ``version % 100``). Resources are concurrency slots
(``rebound.engine.concurrency``) named ``slots#resource#<id>`` with ``max_holders`` as capacity.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain import workstream_runs as wr
from rebound.domain.errors import Conflict, NotFound, OperationalError
from rebound.domain.ids import event_run_id, manual_run_id, run_subject, scheduled_run_id
from rebound.domain.run import Run, RunState, Trigger
from rebound.domain.states import TERMINAL, closed
from rebound.domain.timefmt import parse_utc
from rebound.domain.work_order import WorkOrder
from rebound.domain.workstreams import ResourceSpec, Workstream
from rebound.engine.concurrency import SLOT_PREFIX, holders, leave
from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher
from rebound.engine.escalation import count_resolution, stage_closing_resolution
from rebound.engine.ports import UnitOfWork
from rebound.engine.superseded import mark_superseded_messages, stage_supersede

log = logging.getLogger(__name__)

INDEX_KEY = "ws#index"
RECENT_RUNS = 50
WRITE_TRIES = 8
RESOURCE_HOLD = timedelta(days=7)
"""A resource holder's expiry on its slot (a backstop only: a step leaves when it ends)."""

Change = Callable[[wr.WorkstreamRun, wr.ResourceBook, datetime], wr.Progress]


class WorkstreamNotFound(NotFound):
    code = "WORKSTREAM_NOT_FOUND"

    @classmethod
    def workstream(cls, workstream_id: str) -> WorkstreamNotFound:
        return cls(f"no workstream {workstream_id!r}", workstream_id=workstream_id)

    @classmethod
    def run(cls, run_id: str) -> WorkstreamNotFound:
        return cls(f"no workstream run {run_id!r}", run_id=run_id)


def definition_key(workstream_id: str) -> str:
    return f"ws#def#{workstream_id}"


def run_key(run_id: str) -> str:
    return f"ws#run#{run_id}"


def checkpoint_key(run_id: str, version: int) -> str:
    return f"ws#cp#{run_id}#{version % wr.CHECKPOINTS_KEPT:02d}"


def resource_slot(resource_id: str) -> str:
    return f"{SLOT_PREFIX}resource#{resource_id}"


def workstream_subject(run_id: str) -> str:
    return f"workstream#{run_id}"


@dataclass
class SlotResources:
    """A ``ResourceBook`` on the resources' slots: decisions on the slots as read, changes staged
    in the unit of work, where entering a full slot fails the commit (then everything is read and
    decided again).

    A transaction may write an item only once, so the holders entering one slot are staged as one
    write, and so are those leaving it. Entering a slot that holders leave in the same
    transaction would be a second write: such a step is refused for now (it waits) and
    ``deferred`` is set, and the caller decides again right after the commit, when the slot has
    room."""

    deps: Deps
    limits: dict[str, int]
    entering: dict[str, list[str]] = field(default_factory=dict)
    leaving: dict[str, list[str]] = field(default_factory=dict)
    deferred: bool = False
    _read: dict[str, list[str]] = field(default_factory=dict)

    def holders(self, resource: str) -> list[str]:
        if resource not in self._read:
            self._read[resource] = holders(self.deps.store.get_key(resource_slot(resource)))
        inside = [h for h in self._read[resource] if h not in self.leaving.get(resource, [])]
        return inside + [h for h in self.entering.get(resource, []) if h not in inside]

    def acquire(self, resources: list[str], holder: str) -> bool:
        for resource in resources:
            inside = self.holders(resource)
            if holder in inside:
                continue
            if self.leaving.get(resource):
                self.deferred = True  # its room comes with this commit: decided again after it
                return False
            if len(inside) >= self.limits.get(resource, 1):
                return False
        for resource in resources:
            if holder not in self.holders(resource):
                self.entering.setdefault(resource, []).append(holder)
        return True

    def release(self, resources: list[str], holder: str) -> None:
        for resource in resources:
            if holder in self.entering.get(resource, []):
                self.entering[resource].remove(holder)
            elif holder in self.holders(resource):
                if self.entering.get(resource):
                    raise OperationalError(
                        f"resource {resource}: a holder would leave and another enter in one write"
                    )
                self.leaving.setdefault(resource, []).append(holder)

    def stage(self, uow: UnitOfWork, until: datetime) -> None:
        for resource, entering in self.entering.items():
            if entering:
                uow.enter_slot_many(
                    resource_slot(resource),
                    self.limits.get(resource, 1),
                    entering,
                    until,
                    f"slot resource#{resource}",
                )
        for resource, leaving in self.leaving.items():
            if leaving:
                uow.leave_slot_many(resource_slot(resource), leaving)


def versioned_body(item: dict[str, Any] | None) -> tuple[dict[str, Any] | None, int | None]:
    """A versioned control record's body and version (``UnitOfWork.stage_versioned``); ``None``s
    where there is none."""
    if not item:
        return None, None
    return json.loads(item["body"]), int(item["version"])


class Workstreams:
    def __init__(self, deps: Deps, actor: str = "workstreams") -> None:
        self.deps = deps
        self.store = deps.store
        self.clock = deps.clock
        self.actor = actor

    # --------------------------------------------------------------------------- definitions
    def register(self, workstreams: list[Workstream], resources: list[ResourceSpec]) -> list[str]:
        """Store definitions (already checked by the loader) and the resources' limits; audited on
        ``workstream-def#<id>``. Returns the ids whose definition changed."""
        changed: list[str] = []
        for workstream in workstreams:
            for _ in range(WRITE_TRIES):
                body, version = versioned_body(self.store.get_key(definition_key(workstream.id)))
                wanted = workstream.model_dump(mode="json")
                if body is not None and body["definition"] == wanted:
                    break
                uow = self.store.unit_of_work(self.actor, self.clock.now())
                uow.stage_versioned(
                    definition_key(workstream.id),
                    {"definition": wanted, "runs": (body or {}).get("runs", [])},
                    version,
                    f"workstream {workstream.id}",
                )
                uow.append_audit(
                    f"workstream-def#{workstream.id}",
                    action="registered" if body is None else "updated",
                    evidence={"definition": wanted},
                )
                try:
                    uow.commit()
                except Conflict:
                    continue
                changed.append(workstream.id)
                break
        self._update_index(
            lambda index: {
                "workstreams": sorted({*index.get("workstreams", []), *(w.id for w in workstreams)}),
                "resources": {**index.get("resources", {}), **{r.id: r.max_holders for r in resources}},
            },
            "resources-registered" if resources else "workstreams-registered",
            {"resources": {r.id: r.max_holders for r in resources}},
        )
        return changed

    def set_limit(self, resource_id: str, max_holders: int) -> dict[str, int]:
        """Change a resource's ``max_holders`` (audited); steps already holding it keep it."""
        if max_holders < 1:
            raise Conflict(f"max_holders must be at least 1, got {max_holders}")
        if resource_id not in self.resources():
            raise WorkstreamNotFound(f"no resource {resource_id!r}", resource=resource_id)
        index = self._update_index(
            lambda index: {**index, "resources": {**index.get("resources", {}), resource_id: max_holders}},
            "resource-limit-set",
            {"resource": resource_id, "max_holders": max_holders},
        )
        return dict(index["resources"])

    def _update_index(
        self, change: Callable[[dict[str, Any]], dict[str, Any]], action: str, evidence: dict[str, Any]
    ) -> dict[str, Any]:
        for _ in range(WRITE_TRIES):
            body, version = versioned_body(self.store.get_key(INDEX_KEY))
            new = change(body or {})
            if new == body:
                return new
            uow = self.store.unit_of_work(self.actor, self.clock.now())
            uow.stage_versioned(INDEX_KEY, new, version, "workstreams index")
            uow.append_audit("workstreams#index", action=action, evidence=evidence)
            try:
                uow.commit()
            except Conflict:
                continue
            return new
        raise OperationalError("could not update the workstreams index: it kept changing")

    def index(self) -> dict[str, Any]:
        return versioned_body(self.store.get_key(INDEX_KEY))[0] or {}

    def resources(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.index().get("resources", {}).items()}

    def resource_holders(self, resource_id: str) -> list[str]:
        return holders(self.store.get_key(resource_slot(resource_id)))

    def definition(self, workstream_id: str) -> tuple[Workstream, list[str]]:
        body, _ = versioned_body(self.store.get_key(definition_key(workstream_id)))
        if body is None:
            raise WorkstreamNotFound.workstream(workstream_id)
        return Workstream.model_validate(body["definition"]), list(body.get("runs", []))

    def ids(self) -> list[str]:
        return list(self.index().get("workstreams", []))

    # --------------------------------------------------------------------------- runs
    def get_run(self, run_id: str) -> wr.WorkstreamRun:
        return self._load(run_id)[0]

    def _load(self, run_id: str) -> tuple[wr.WorkstreamRun, int]:
        body, version = versioned_body(self.store.get_key(run_key(run_id)))
        if body is None or version is None:
            raise WorkstreamNotFound.run(run_id)
        return wr.WorkstreamRun.model_validate(body), version

    def checkpoints(self, run_id: str) -> list[wr.Checkpoint]:
        run = self.get_run(run_id)
        first = max(1, run.checkpoint_version - wr.CHECKPOINTS_KEPT + 1)
        found: list[wr.Checkpoint] = []
        for version in range(first, run.checkpoint_version + 1):
            item = self.store.get_key(checkpoint_key(run_id, version))
            body = json.loads(item["body"]) if item else None
            if body is not None and body.get("version") == version:  # not overwritten by a later lap
                found.append(wr.Checkpoint.model_validate(body))
        return found

    def start(
        self, workstream_id: str, token: str | None = None, run_id: str | None = None
    ) -> wr.WorkstreamRun:
        """Start a run of a registered workstream: a cycle made by a later edit is refused here
        (``dependency_cycle_detected``, before any step starts); otherwise its root steps start.
        ``run_id`` names the run (a fire's or an event's); the same run id starts one run."""
        definition, _ = self.definition(workstream_id)
        now = self.clock.now()
        run_id = run_id or manual_run_id(workstream_id, now, token, unique=uuid.uuid4().hex)
        for _ in range(WRITE_TRIES):
            existing = self.store.get_key(run_key(run_id))
            if existing is not None:
                return self.get_run(run_id)  # the same request again
            run = wr.new_run(definition, run_id, now)
            books = SlotResources(self.deps, self.resources())
            progress = wr.start(run, books, now)
            try:
                self._commit(None, run, progress, books, "started", {"workstream_id": workstream_id})
            except Conflict:
                continue
            self._remember_run(workstream_id, run_id)
            return run
        raise OperationalError(f"could not start workstream {workstream_id}: its records kept changing")

    def _remember_run(self, workstream_id: str, run_id: str) -> None:
        for _ in range(WRITE_TRIES):
            body, version = versioned_body(self.store.get_key(definition_key(workstream_id)))
            if body is None:
                return
            runs = [run_id, *[r for r in body.get("runs", []) if r != run_id]][:RECENT_RUNS]
            uow = self.store.unit_of_work(self.actor, self.clock.now())
            uow.stage_versioned(definition_key(workstream_id), {**body, "runs": runs}, version, "recent runs")
            try:
                uow.commit()
            except Conflict:
                continue
            return

    def on_start(self, detail: dict[str, Any]) -> str:
        """A workstream's schedule fired, or an event its rule matches arrived (``workstream.start``,
        at least once): start the run that fire or event names, once."""
        workstream_id = str(detail["workstream_id"])
        if detail.get("event_id"):
            run_id = event_run_id(workstream_id, str(detail["event_id"]))
        else:
            run_id = scheduled_run_id(workstream_id, parse_utc(str(detail["scheduled_time"])))
        if self.store.get_key(definition_key(workstream_id)) is None:
            log.warning("a start for an unknown workstream", extra={"detail": detail})
            return "unknown workstream"  # its schedule or rule outlived it; redelivering would not help
        return self.start(workstream_id, run_id=run_id).run_id

    def on_step_ended(self, detail: dict[str, Any]) -> str:
        """A step's run reached a final state (``workstream.step.ended``, at least once)."""
        final = RunState(str(detail["state"]))
        task_run = str(detail["run_id"])
        if self.store.get_key(run_key(str(detail["workstream_run_id"]))) is None:
            log.warning("a step ended for an unknown workstream run", extra={"detail": detail})
            return "unknown workstream run"  # nothing to advance; redelivering would not help
        return self.change(
            str(detail["workstream_run_id"]),
            lambda run, books, at: wr.record_outcome(run, task_run, final, books, at),
            action="step-ended",
            evidence={"task_run": task_run, "state": final.value, "event_id": detail.get("event_id")},
            reconcile=False,  # this is the outcome itself
        )[0].state.value

    def change(
        self,
        run_id: str,
        change: Change,
        *,
        action: str,
        evidence: dict[str, Any],
        always: bool = False,
        reconcile: bool = True,
    ) -> tuple[wr.WorkstreamRun, wr.Progress]:
        """Read the run, apply ``change``, write it back guarded by its version; again on a
        conflict. A change that changes nothing writes nothing (unless ``always``: an operator's
        action is audited even when it changes no step).

        With ``reconcile`` (an operator's change, racing the engine), the steps are first brought
        up to their task runs as stored (``wr.reconcile``), so a step whose run finished while its
        end event was still in the outbox is that outcome, never cancelled or run again. A task run
        that moves on between that read and the commit fails the commit (every write of a run is
        guarded by its revision), and the change is decided again; one that keeps moving is
        refused as changed under you, with nothing changed."""
        for _ in range(WRITE_TRIES):
            run, version = self._load(run_id)
            before = run.model_copy(deep=True)
            books = SlotResources(self.deps, self.resources())
            now = self.clock.now()
            reconciled = self._reconcile(run, books, now) if reconcile else {}
            progress = change(run, books, now)
            if run == before and not progress.events and not progress.cancel and not always:
                return run, progress
            noted = {**evidence, "reconciled": reconciled} if reconciled else evidence
            try:
                self._commit(version, run, progress, books, action, noted, before.state.value)
            except Conflict:
                continue
            if books.deferred:  # a step left a resource another step waits for: it may start now
                try:
                    self.poll(run_id)
                except OperationalError:  # it waits; the sweeper polls waiting steps every minute
                    log.warning(
                        "a step waiting for a freed resource was not started", extra={"run_id": run_id}
                    )
            return run, progress
        raise Conflict(
            f"workstream run {run_id} changed under you (its steps' runs kept moving on); nothing was "
            "changed: look at it again and retry",
            run_id=run_id,
        )

    def _reconcile(self, run: wr.WorkstreamRun, books: SlotResources, at: datetime) -> dict[str, str]:
        """``wr.reconcile`` with the stored state of each step's current task run."""
        followed = [
            s.run_id
            for s in run.steps
            if s.run_id is not None
            and s.state in (wr.StepState.RUNNING, wr.StepState.FAILED, wr.StepState.CANCELLED)
        ]
        if not followed:
            return {}
        states = {rid: r.state for rid, r in self.store.get_runs(followed).items()}
        return wr.reconcile(run, states, books, at)

    def poll(self, run_id: str) -> wr.Progress:
        """Look again at the steps waiting for a resource (the sweeper, every minute)."""
        return self.change(
            run_id, lambda run, books, at: wr.advance(run, books, at, "poll"), action="polled", evidence={}
        )[1]

    def poll_waiting(self) -> list[str]:
        """Every minute (the sweeper): the recent runs with a step waiting for a resource look
        again, so a resource another workstream released is taken, and ``resource_exhausted`` is
        raised for a wait past its threshold. Returns the runs polled."""
        polled: list[str] = []
        for workstream_id in self.ids():
            try:
                _, runs = self.definition(workstream_id)
            except WorkstreamNotFound:
                continue
            for run_id in runs:
                try:
                    run = self.get_run(run_id)
                except WorkstreamNotFound:
                    continue
                if run.state is wr.WorkstreamState.RUNNING and run.in_state(wr.StepState.WAITING):
                    self.poll(run_id)
                    polled.append(run_id)
        return polled

    # --------------------------------------------------------------------------- the one write
    def _commit(
        self,
        version: int | None,
        run: wr.WorkstreamRun,
        progress: wr.Progress,
        books: SlotResources,
        action: str,
        evidence: dict[str, Any],
        from_state: str | None = None,
    ) -> None:
        now = self.clock.now()
        uow = self.store.unit_of_work(self.actor, now)
        subject = workstream_subject(run.run_id)
        record = uow.append_audit(
            subject,
            action=action,
            evidence={
                **evidence,
                "steps": {s.step: s.state.value for s in run.steps},
                "started": [s.step for s in progress.start],
                "cancelled_runs": progress.cancel,
                "not_rolled_back": progress.not_rolled_back,
                "checkpoint": progress.checkpoint.version if progress.checkpoint else None,
            },
            head=(run.audit_seq, run.audit_head),
            from_state=from_state,
            to_state=run.state.value,
        )
        run.audit_seq, run.audit_head = record.seq, record.hash
        for event in progress.domain_events():  # right after its audit record: event ids derive from it
            uow.emit(event, subject)
        uow.stage_versioned(
            run_key(run.run_id), run.model_dump(mode="json"), version, f"workstream run {run.run_id}"
        )
        if progress.checkpoint is not None:
            uow.stage_record(
                checkpoint_key(run.run_id, progress.checkpoint.version),
                progress.checkpoint.model_dump(mode="json"),
                f"checkpoint {progress.checkpoint.version}",
            )
        started: list[Run] = []
        for step in progress.start:
            assert step.run_id is not None
            task_run = Run(
                run_id=step.run_id,
                task_id=step.task_id,
                tenant=run.tenant,
                trigger=Trigger.MANUAL,
                scheduled_for=now,
                created_at=now,
                updated_at=now,
                budget_started_at=now,
                due_at=now,
                dispatch=1,
                next_retry_at=now,
                workstream_run=run.run_id,
            )
            saved = uow.save_run(
                None,
                task_run,
                action="created",
                evidence={"trigger": "workstream", "workstream_run": run.run_id, "step": step.step},
            )
            uow.emit(ev.execution_updated(saved, None, now), run_subject(saved.run_id))
            started.append(saved)
        resolved = [self._stage_cancel(uow, task_run_id, run.run_id) for task_run_id in progress.cancel]
        superseded = self._stage_supersede(uow, run, progress)
        resolved += [order for _, order in superseded]
        books.stage(uow, now + RESOURCE_HOLD)
        uow.commit()
        for order in resolved:
            if order is not None:
                count_resolution(self.deps.metrics, order)
        if superseded:
            mark_superseded_messages(self.store, [r for r, _ in superseded], at=now, by=self.actor)
        dispatcher = Dispatcher(self.deps, self.actor)
        for task_run in started:
            dispatcher.send(task_run)

    def _stage_cancel(self, uow: UnitOfWork, task_run_id: str, workstream_run: str) -> WorkOrder | None:
        """Cancel a step's task run in the same transaction (a rollback, a cancelled step), and
        resolve the work order it may have open. That order, if one was resolved."""
        current = self.store.get_run(task_run_id)
        if current is None:
            return None
        if current.state in TERMINAL or current.state is RunState.DEAD_LETTERED:
            # it ended after the workstream was read: its outcome is the step's, decide again
            raise Conflict(f"task run {task_run_id} is {current.state.value} now", run_id=task_run_id)
        now = uow.at
        reason = f"workstream {workstream_run}: rolled back or step cancelled"
        saved = uow.save_run(
            current,
            closed(current, RunState.CANCELLED, now),
            action="cancelled",
            evidence={"reason": reason, "slots_left": current.slots},
        )
        for key in current.slots:
            leave(uow, key, current.run_id)
        uow.emit(ev.execution_updated(saved, current.state, now), run_subject(task_run_id))
        return stage_closing_resolution(
            uow,
            self.store,
            current,
            RunState.CANCELLED,
            by=self.actor,
            reason=reason,
            via="workstream cancel",
        )

    def _stage_supersede(
        self, uow: UnitOfWork, run: wr.WorkstreamRun, progress: wr.Progress
    ) -> list[tuple[Run, WorkOrder | None]]:
        """Close each dead-lettered task run a step no longer follows as superseded (by the step's
        new run when one starts in this change, else by the workstream run), in ``uow``. A run the
        step no longer follows that runs again (an operator retried it) makes the change wait:
        ``Conflict``, decided again once ``reconcile`` sees it."""
        if not progress.replaced:
            return []
        started = {s.step: s.run_id for s in progress.start}
        closed: list[tuple[Run, WorkOrder | None]] = []
        for task_run_id, step in progress.replaced.items():
            current = self.store.get_run(task_run_id)
            if current is None or current.state in TERMINAL:
                continue
            if current.state is not RunState.DEAD_LETTERED:
                raise Conflict(f"task run {task_run_id} is {current.state.value} now", run_id=task_run_id)
            successor = started.get(step) or progress.replaced_by or run.run_id
            order = stage_supersede(
                uow,
                self.store,
                current,
                replaced_by=successor,
                by=self.actor,
                reason=f"workstream run {run.run_id}: step {step} no longer follows it ({successor} does)",
            )
            closed.append((current, order))
        return closed
