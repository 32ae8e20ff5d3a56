"""Runs for operators: find them, see one correlated timeline, retry, skip or cancel them.

Every change goes through the run state machine and a unit of work, so it is one transaction with
its audit record (the operator is the actor) and its ``task.execution.updated`` event.

``retry`` depends on where the run is:

- ``dead_lettered``: replayed with a fresh attempt budget (``rebound.ops.replay``), optionally
  with ``--timeout`` / ``--max-attempts`` overrides for that budget only;
- ``replayed`` and not yet started: its replay message is sent again (a retry that was cut short);
- ``failed`` or ``retry_scheduled``: the next attempt of the current budget is dispatched now.

``skip`` and ``cancel`` close the run and, in the same transaction, resolve its open work order
with the matching resolution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rebound.domain import events as ev
from rebound.domain.approvals import CANCEL, SKIP, ApprovalRequest, approval_evidence
from rebound.domain.audit import CLAIM_CHANGES_SHOWN, ChainCheck, rebuild_run, verify_chain
from rebound.domain.audit_record import AuditRecord
from rebound.domain.basics import Severity
from rebound.domain.errors import Conflict, ReboundError, RunNotFound, ValidationFailed
from rebound.domain.ids import (
    fire_time,
    retry_dispatch_reference,
    run_subject,
    scheduled_day,
    work_order_subject,
)
from rebound.domain.run import Run, RunState, Trigger, with_changes
from rebound.domain.states import TERMINAL, closed, ensure_transition
from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder, WorkOrderState
from rebound.engine import crashpoints as cp
from rebound.engine.async_reports import reports_subject
from rebound.engine.concurrency import leave
from rebound.engine.deps import Deps
from rebound.engine.dispatch import Dispatcher
from rebound.engine.escalation import count_resolution, stage_closing_resolution
from rebound.engine.ports import BATCH, UnitOfWork
from rebound.ops import recovery_view
from rebound.ops.approvals import Approvals
from rebound.ops.common import when
from rebound.ops.dlq import DlqOps, MessageDetail
from rebound.ops.recovery_view import COUNT_AT_MOST, RATE_SAMPLE
from rebound.ops.replay import BudgetOverrides, Replays

EXECUTION = "execution"


def run_view(run: Run) -> dict[str, Any]:
    """A run as lists show it."""
    return {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "tenant": run.tenant,
        "state": run.state.value,
        "trigger": run.trigger.value,
        "scheduled_for": iso(run.scheduled_for),
        "attempt": run.attempt,
        "attempts_in_budget": run.attempts_in_budget,
        "last_error_code": run.last_error_code,
        "next_retry_at": when(run.next_retry_at),
        "dead_lettered_at": when(run.dead_lettered_at),
        "work_order_id": run.work_order_id,
        "updated_at": iso(run.updated_at),
    }


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    source: str
    action: str
    actor: str
    state: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "source": self.source,
            "action": self.action,
            "actor": self.actor,
            "state": self.state,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class RunTimeline:
    run: Run
    entries: list[TimelineEntry]
    work_order: WorkOrder | None
    dlq_message: MessageDetail | None
    chain: ChainCheck
    archived: bool = False
    """The run expired from the table: rebuilt from its audit chain in the archive."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "archived": self.archived,
            "run": {**self.run.model_dump(mode="json"), "attempts_in_budget": self.run.attempts_in_budget},
            "timeline": [e.as_dict() for e in self.entries],
            "work_order": self.work_order.model_dump(mode="json") if self.work_order else None,
            "dlq_message": self.dlq_message.as_dict() if self.dlq_message else None,
            "audit": {"ok": self.chain.ok, "records": self.chain.records, "detail": self.chain.detail},
        }


@dataclass(frozen=True)
class RetryOutcome:
    run_id: str
    action: str
    state: str
    detail: str = ""
    overrides: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "action": self.action,
            "state": self.state,
            "detail": self.detail,
            "overrides": self.overrides,
        }


_TRIGGER_ACTION = {
    Trigger.SCHEDULE: ("schedule-fired", "scheduler"),
    Trigger.EVENT: ("event-received", "bus"),
    Trigger.MANUAL: ("run-requested", "api"),
}


class RunOps:
    def __init__(
        self, deps: Deps, actor: str, *, dlq: DlqOps | None = None, approval: ApprovalRequest | None = None
    ) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor
        self.approval = approval
        """The approved request this skip or cancel carries out (``rebound.ops.approvals``)."""
        self.replays = Replays(deps, actor)
        self.queue = deps.queues.batches()
        self._dlq = dlq

    @property
    def dlq(self) -> DlqOps:
        """The DLQ's operations, built when first needed (``FeatureDisabled`` where the DLQ
        inspector is switched off: a run's timeline then leaves its DLQ message out)."""
        if self._dlq is None:
            self._dlq = DlqOps(self.deps, self.actor)
        return self._dlq

    # --------------------------------------------------------------------------- reading
    def get(self, run_id: str) -> Run:
        run = self.store.get_run(run_id)
        if run is None:
            raise RunNotFound.of(run_id)
        return run

    def find(
        self,
        *,
        task_id: str | None = None,
        state: RunState | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = 100,
        after: Run | None = None,
    ) -> list[Run]:
        """Runs, newest first by schedule time. ``since``/``until`` bound ``scheduled_for``.

        A task's runs are one index query that stops after ``limit`` (unless a state filters them);
        ``after`` (a page's last run) continues from there: the next page of older runs."""
        if task_id == "":
            raise ValidationFailed("a task id cannot be empty", key_path="task")
        if task_id is not None:
            if after is not None:
                until = after.scheduled_for if until is None else min(until, after.scheduled_for)
            # The page's last run comes back too (the bound is inclusive): one more to read.
            pushed = None if limit is None or state is not None else limit + (1 if after is not None else 0)
            runs = self.store.runs_for_task(task_id, since=since, until=until, limit=pushed)
            runs = [r for r in runs if state is None or r.state is state]
            if after is not None:
                runs = [r for r in runs if (r.scheduled_for, r.run_id) < (after.scheduled_for, after.run_id)]
        elif state is not None:
            runs = [
                r
                for r in self.store.runs_in_state(state)
                if (since is None or r.scheduled_for >= since) and (until is None or r.scheduled_for <= until)
            ]
        else:
            runs = [
                r
                for r in self.store.scan_runs()
                if (since is None or r.scheduled_for >= since) and (until is None or r.scheduled_for <= until)
            ]
        runs.sort(key=lambda r: (r.scheduled_for, r.run_id), reverse=True)
        return runs[:limit] if limit is not None else runs

    def recovery(self, *, at_most: int = COUNT_AT_MOST, sample: int = RATE_SAMPLE) -> dict[str, Any]:
        """The recovery view (``rebound.ops.recovery_view.recovery``)."""
        return recovery_view.recovery(self.store, self.deps.clock.now(), at_most=at_most, sample=sample)

    def timeline(self, run_id: str, *, look_in_dlq: bool = True, archive: bool = False) -> RunTimeline:
        """Trigger, attempts, retries, dead letter, work order and operator actions, in time order.
        With ``archive`` (the CLI, with the operator's rights on the bucket), a run that expired
        from the table (``rebound.domain.retention``) is rebuilt from its audit chain in the
        archive, which its records there and in the table together verify; without (the ops API,
        whose role does not read the archive), it is not found."""
        stored = self.store.get_run(run_id)
        if stored is None and not archive:
            raise self._not_in_the_table(run_id)
        trail = self.store.audit_trail(run_subject(run_id))
        run, trail = (stored, trail) if stored is not None else self._archived_run(run_id, trail)
        entries: list[TimelineEntry] = []
        action, actor = _TRIGGER_ACTION[run.trigger]
        trigger_detail: dict[str, Any] = {"scheduled_for": iso(run.scheduled_for)}
        if run.event_detail:
            trigger_detail["event"] = run.event_detail
        entries.append(TimelineEntry(run.scheduled_for, "trigger", action, actor, None, trigger_detail))
        for record in trail:
            detail = {k: v for k, v in record.evidence.items() if k != "changes" and v is not None}
            if record.action == "attempt-started":  # the claim's lease is in its changes
                changes = record.evidence.get("changes", {})
                detail.update({k: changes[k] for k in CLAIM_CHANGES_SHOWN if changes.get(k) is not None})
            attempt_no = record.evidence.get("attempt")
            if record.action.startswith("attempt-") and isinstance(attempt_no, int):
                attempt = next((a for a in run.attempts if a.n == attempt_no), None)
                if attempt is not None and attempt.error_message:
                    detail["error_message"] = attempt.error_message
            state = f"{record.from_state or '-'} -> {record.to_state or '-'}"
            entries.append(TimelineEntry(record.at, "run", record.action, record.actor, state, detail))
        entries.extend(async_entries(run, self.store.audit_trail(reports_subject(run_id))))
        order = self.store.get_work_order(run.work_order_id) if run.work_order_id else None
        if order is not None:
            for record in self.store.audit_trail(work_order_subject(order.work_order_id)):
                state = f"{record.from_state or '-'} -> {record.to_state or '-'}"
                detail = {"work_order_id": order.work_order_id, **record.evidence}
                entries.append(
                    TimelineEntry(record.at, "workorder", record.action, record.actor, state, detail)
                )
        message = None
        if look_in_dlq and run.dlq_message_id:
            try:
                message = self.dlq.show(run.dlq_message_id)
            except ReboundError:
                message = None
            if message is None:
                entries.append(
                    TimelineEntry(
                        self.deps.clock.now(),
                        "dlq",
                        "message-not-seen",
                        "rebound",
                        None,
                        {
                            "message_id": run.dlq_message_id,
                            "why": "not in the DLQ (as its record says) and not archived",
                        },
                    )
                )
            else:
                msg = message.examined.message
                entries.append(
                    TimelineEntry(
                        msg.sent_at,
                        "dlq",
                        "message-in-" + message.location.split(" ")[0],
                        "sqs",
                        None,
                        {
                            "message_id": msg.message_id,
                            "arrival": msg.arrival.value,
                            "location": message.location,
                        },
                    )
                )
        entries.sort(key=lambda e: e.at)
        return RunTimeline(
            run,
            entries,
            order,
            message,
            verify_chain(run_subject(run_id), trail, self.store.audit_keys.check),
            archived=stored is None,
        )

    def _not_in_the_table(self, run_id: str) -> RunNotFound:
        """The ops API's answer for a run the table does not hold. Where retention may have expired
        it (no time in its id, or one more than ``runs_days`` ago), it says where to look: the same
        answer whether such a run ever existed or not, read from the id and the settings alone."""
        retention = self.deps.settings.retention
        scheduled = fire_time(run_id)
        now = self.deps.clock.now()
        if retention is None or (
            scheduled is not None and now < scheduled + timedelta(days=retention.runs_days)
        ):
            return RunNotFound.of(run_id)
        return RunNotFound(
            f"no run {run_id!r} in the table: a finished run expires from it {retention.runs_days} days "
            "after it ended, and its audit chain stays in the archive "
            f"(`rebound runs show {run_id}` reads it there)",
            run_id=run_id,
        )

    def _archived_run(self, run_id: str, live: list[AuditRecord]) -> tuple[Run, list[AuditRecord]]:
        """``run_id`` rebuilt from its chain in the audit archive (and what of it the table still
        holds); ``RunNotFound`` if neither has it. The archive is read from the day before the
        run's scheduled time, when its id names one, or before its first record, when the table
        still holds that; else whole (every record is archived when it is written)."""
        archive = self.deps.audit_archive
        if archive is None:
            raise RunNotFound.of(run_id)
        subject = run_subject(run_id)
        since = scheduled_day(run_id)
        first = min(live, key=lambda record: record.seq, default=None)
        if since is None and first is not None and first.seq == 1:
            since = first.at.date() - timedelta(days=1)
        records = {(r.seq, r.hash): r for r in live}
        for fields in archive.trails(subject=subject, since=since).get(subject, []):
            records.setdefault((int(fields["seq"]), str(fields["hash"])), AuditRecord.model_validate(fields))
        if not records:
            raise RunNotFound.of(run_id)
        trail = [records[k] for k in sorted(records)]
        return rebuild_run(run_id, trail), trail

    # --------------------------------------------------------------------------- retry
    def retry(
        self, run_id: str, *, timeout_s: int | None = None, max_attempts: int | None = None, reason: str = ""
    ) -> RetryOutcome:
        overrides = BudgetOverrides.of(timeout_s, max_attempts)
        run = self.get(run_id)
        if run.state is RunState.SUPERSEDED:
            raise Conflict(
                f"run {run_id} was superseded by {run.superseded_by}: its work is that run's now, and "
                "it is never run again (follow the one that replaced it)",
                run_id=run_id,
                state=run.state.value,
                superseded_by=run.superseded_by,
            )
        if run.state is RunState.DEAD_LETTERED:
            saved = self.replays.begin(
                run, via="cli-retry", dlq_message_id=run.dlq_message_id, overrides=overrides, reason=reason
            )
            self._send_replays([saved])
            return RetryOutcome(
                run_id,
                "replayed",
                saved.state.value,
                f"fresh budget from attempt {saved.attempt + 1}",
                overrides.as_dict() if overrides else {},
            )
        if self.replays.unclaimed(run):
            if overrides:
                raise ValidationFailed(
                    f"run {run_id} was replayed already; its budget's overrides cannot change now",
                    key_path="overrides",
                )
            # A new token first, then the message: a replay message that was sent after all
            # becomes stale, so the replay still starts once.
            resent = Dispatcher(self.deps, self.actor).renew(
                run,
                due=self.deps.clock.now(),
                action="replay-resent",
                evidence={"reason": reason or None},
                crash_point=cp.AFTER_REDISPATCH_COMMIT,
            )
            if resent is None:
                raise Conflict(f"run {run_id} changed meanwhile; look at it again and retry", run_id=run_id)
            return RetryOutcome(run_id, "resent", resent.state.value, "the replay message was sent again")
        if run.state in (RunState.FAILED, RunState.RETRY_SCHEDULED):
            return self._retry_now(run, overrides, reason)
        raise Conflict(
            f"run {run_id} is {run.state.value}; only dead_lettered, failed or retry_scheduled runs can be "
            "retried",
            run_id=run_id,
            state=run.state.value,
        )

    def _retry_now(self, run: Run, overrides: BudgetOverrides | None, reason: str) -> RetryOutcome:
        now = self.deps.clock.now()
        token = run.dispatch + 1
        update: dict[str, Any] = {
            "state": RunState.RETRY_SCHEDULED,
            "next_retry_at": now,
            "dispatch": token,
            "dispatch_reference": retry_dispatch_reference(run.run_id, run.attempt + 1, token),
            "waiting_since": None,
            "held_at": None,
        }
        if overrides:
            update["budget_overrides"] = overrides.as_dict()
        if run.state is not RunState.RETRY_SCHEDULED:
            ensure_transition(run.state, RunState.RETRY_SCHEDULED, run.run_id)
        after = with_changes(run, update)
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            run,
            after,
            action="retry-now",
            evidence={
                "attempt": run.attempt + 1,
                "next_retry_at": iso(now),
                "dispatch_reference": after.dispatch_reference,
                "previous_plan": when(run.next_retry_at),
                "overrides": overrides.as_dict() if overrides else None,
                "reason": reason or None,
            },
        )
        uow.emit(ev.execution_updated(saved, run.state, now), run_subject(run.run_id))
        self._commit(uow, run.run_id)
        via = Dispatcher(self.deps, self.actor).send(saved)
        return RetryOutcome(
            run.run_id,
            "dispatched",
            saved.state.value,
            f"attempt {run.attempt + 1} dispatched now via {via}",
            overrides.as_dict() if overrides else {},
        )

    def failed_runs(self, *, task_id: str | None = None, since: datetime | None = None) -> list[Run]:
        """The dead-lettered runs ``retry_failed`` would replay."""
        if task_id is None and since is None:
            raise ValidationFailed("give --task or --since (or both)", key_path="task")
        return self.find(task_id=task_id, state=RunState.DEAD_LETTERED, since=since, limit=None)

    def retry_failed(
        self,
        runs: list[Run],
        *,
        reason: str = "",
        progress: Callable[[RetryOutcome], None] | None = None,
    ) -> list[RetryOutcome]:
        """Replay each run with a fresh budget; replay messages go out ten per request."""
        outcomes: list[RetryOutcome] = []
        pending: list[Run] = []

        def flush() -> None:
            self._send_replays(pending)
            for saved in pending:
                outcome = RetryOutcome(saved.run_id, "replayed", saved.state.value, "fresh budget")
                outcomes.append(outcome)
                if progress:
                    progress(outcome)
            pending.clear()

        for run in runs:
            try:
                current = self.get(run.run_id)
                pending.append(
                    self.replays.begin(
                        current, via="cli-retry-failed", dlq_message_id=current.dlq_message_id, reason=reason
                    )
                )
            except ReboundError as exc:
                outcome = RetryOutcome(run.run_id, "failed", run.state.value, exc.message)
                outcomes.append(outcome)
                if progress:
                    progress(outcome)
            if len(pending) >= BATCH:
                flush()
        flush()
        return outcomes

    def _send_replays(self, runs: list[Run]) -> None:
        for start in range(0, len(runs), BATCH):
            chunk = runs[start : start + BATCH]
            messages = [
                self.replays.message(r, key=r.run_id, dlq_message_id=None, redrive_id="") for r in chunk
            ]
            result = self.queue.send(EXECUTION, messages)
            if result.failed:
                first = next(iter(result.failed.items()))
                raise Conflict(
                    f"{len(result.failed)} replay message(s) were refused ({first[0]}: {first[1]}); those "
                    "runs are replayed but not started: run `rebound runs retry RUN_ID` for each again",
                    runs=sorted(result.failed),
                )

    # --------------------------------------------------------------------------- skip, cancel
    def skip(self, run_id: str, reason: str) -> Run:
        return self._close(run_id, RunState.SKIPPED, reason)

    def cancel(self, run_id: str, reason: str) -> Run:
        return self._close(run_id, RunState.CANCELLED, reason)

    def _held(self, run: Run, state: RunState, reason: str) -> None:
        """A run behind an open critical work order is skipped or cancelled by two operators where
        the environment says so: without an approval, a request is stored instead
        (``ApprovalRequired``)."""
        if self.approval is not None or not self.deps.settings.approval_rules().critical_runs:
            return
        order = self.store.get_work_order(run.work_order_id) if run.work_order_id else None
        if order is None or order.severity is not Severity.CRITICAL or order.state is WorkOrderState.RESOLVED:
            return
        action = SKIP if state is RunState.SKIPPED else CANCEL
        Approvals(self.deps, self.actor).gate(
            action, run.tenant, run_subject(run.run_id), {"run_id": run.run_id, "reason": reason}, reason
        )

    def _close(self, run_id: str, state: RunState, reason: str) -> Run:
        if not reason.strip():
            raise ValidationFailed("--reason is required: say why, for the audit trail", key_path="reason")
        run = self.get(run_id)
        if run.state in TERMINAL:
            raise Conflict(f"run {run_id} is {run.state.value} already", run_id=run_id, state=run.state.value)
        ensure_transition(run.state, state, run_id)
        self._held(run, state, reason)
        now = self.deps.clock.now()
        after = closed(run, state, now)
        action = "skipped" if state is RunState.SKIPPED else "cancelled"
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.save_run(
            run,
            after,
            action=action,
            evidence={
                "reason": reason,
                "work_order_id": run.work_order_id,
                "slots_left": run.slots,
                **approval_evidence(self.approval),
            },
        )
        # Every slot the run holds (a running attempt's, a waiting run's buffer) is left in the
        # same transaction: nothing else would ever leave them.
        for key in run.slots:
            leave(uow, key, run.run_id)
        uow.emit(ev.execution_updated(saved, run.state, now), run_subject(run_id))
        resolved = stage_closing_resolution(
            uow, self.store, run, state, by=self.actor, reason=reason, via=f"runs {action}"
        )
        self._commit(uow, run_id)
        if resolved is not None:
            count_resolution(self.deps.metrics, resolved)
        return saved

    def _commit(self, uow: UnitOfWork, run_id: str) -> None:
        try:
            uow.commit()
        except Conflict as exc:
            raise Conflict(
                f"run {run_id} changed meanwhile; look at it again and retry", run_id=run_id
            ) from exc


def async_entries(run: Run, refused: list[AuditRecord]) -> list[TimelineEntry]:
    """An asynchronous attempt in the timeline: its last heartbeat and progress (heartbeats
    write no audit record of their own), and every report that was refused, with its reason."""
    entries = [
        TimelineEntry(
            record.at,
            "reports",
            record.action,
            record.actor,
            None,
            {k: v for k, v in record.evidence.items() if v is not None},
        )
        for record in refused
    ]
    if run.heartbeat_at is not None and run.heartbeats:
        detail: dict[str, Any] = {
            "attempt": run.attempt,
            "heartbeats": run.heartbeats,
            "progress": run.progress,
        }
        if run.async_token_id is not None and run.lease_expires_at is not None:
            detail["report_before"] = iso(run.lease_expires_at)
        entries.append(TimelineEntry(run.heartbeat_at, "run", "heartbeat", "worker", None, detail))
    return entries
