"""Reports of asynchronous attempts: heartbeats, completion and failure, from any path.

Events on Rebound's bus (``rebound.task.heartbeat|completed|failed``, via the retry queue's
consumer), the ops API (``POST /runs/{run_id}/heartbeat|complete|fail``), the CLI (``rebound runs
heartbeat|complete|fail``) and the worker helper (``rebound.worker``) all end in ``AsyncReports.report``.

What it accepts, and how each answer is exactly once:

- The token must verify (this environment's key), must not be expired, and must name the run the
  request addresses. The run must be ``running`` that token's attempt under that token's id
  (``Run.async_token_id``), and its heartbeat lease must not have run out.
- A heartbeat moves the heartbeat lease on and records progress: a bookkeeping write of the run
  (``touch_run``), guarded by its revision, without an audit record of its own.
- A completion or a failure records the attempt's outcome exactly as the executor does for a call
  that returned (``stage_outcome``), guarded by the run's revision, and clears the token id in the
  same write: the token is used.
- Every guarded write that loses (a heartbeat, the sweeper's timeout, another completion got there
  first) is decided again from the run as it now is. So a duplicate completion, a completion
  racing the timeout, or a heartbeat after the completion end in one outcome.
- Every refusal of a token that verifies is answered with its reason (``Refusal``) and one audit
  record on the run's reports chain (``reports#<run id>``); the run itself is never written, so a
  late completion never reopens it. A report whose lease has run out fails the attempt with its
  timeout first (as the sweeper would), then is refused ``timed_out``. Tokens that do not verify are
  refused and logged, never audited: their claims cannot be trusted to name a subject.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from rebound.domain.basics import ERROR_CODE_PATTERN
from rebound.domain.completion import Claims, Refusal, TokenRefused, verify
from rebound.domain.errors import Conflict, ValidationFailed
from rebound.domain.flags import TASK_SLA_MONITOR
from rebound.domain.jsonutil import canonical_bytes
from rebound.domain.run import AttemptOutcome, Run, RunState
from rebound.domain.timefmt import iso
from rebound.engine.async_attempts import heartbeat_lease
from rebound.engine.deps import Deps
from rebound.engine.executor.attempt import attempt_telemetry, stage_outcome
from rebound.engine.ports.targets import Outcome
from rebound.engine.sweeper import Sweeper

log = logging.getLogger(__name__)

REPORT_TRIES = 8
"""Guarded writes that lost are decided again this many times (each re-reads the run)."""
TASK_FAILED = "TASK_FAILED"
MAX_MESSAGE = 1000
MAX_OUTPUT_BYTES = 8192


class ReportKind(StrEnum):
    HEARTBEAT = "heartbeat"
    COMPLETE = "complete"
    FAIL = "fail"


REPORT_DETAIL_TYPES: dict[str, ReportKind] = {
    "rebound.task.heartbeat": ReportKind.HEARTBEAT,
    "rebound.task.completed": ReportKind.COMPLETE,
    "rebound.task.failed": ReportKind.FAIL,
}
"""The events on Rebound's bus that report for an asynchronous attempt (``resources`` routes them)."""


def answer_event(deps: Deps, detail_type: str, detail: Any) -> bool:
    """A report event found in the control DLQ (``Sweeper(reports=...)``), answered as the retry
    queue's consumer answers it: accepted, or refused with its final reason, audited on the run's
    reports chain either way. False when it is not a valid report (its refusal put it there)."""
    try:
        report = report_from_event(detail_type, detail)
    except ValidationFailed:
        return False
    answer = AsyncReports(deps, "bus").report(report)
    if not answer.accepted:
        log.info(
            "a report from the control DLQ was refused",
            extra={"run_id": answer.run_id, "attempt": answer.attempt, "reason": answer.reason},
        )
    return True


def reports_subject(run_id: str) -> str:
    """The audit chain of a run's refused reports (the run's own chain records what changed it)."""
    return f"reports#{run_id}"


@dataclass(frozen=True)
class Report:
    kind: ReportKind
    token: str
    run_id: str | None = None
    progress: float | None = None
    error_code: str | None = None
    message: str | None = None
    retryable: bool = True
    output: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        if self.progress is not None and not 0.0 <= self.progress <= 1.0:
            raise ValidationFailed(
                f"progress: must be between 0 and 1, got {self.progress}", key_path="progress"
            )
        if self.error_code is not None and not re.match(ERROR_CODE_PATTERN, self.error_code):
            raise ValidationFailed(
                f"error_code: must look like TASK_FAILED (capitals, digits, _), got {self.error_code!r}",
                key_path="error_code",
            )
        if len(canonical_bytes(self.output)) > MAX_OUTPUT_BYTES:
            raise ValidationFailed(f"output: at most {MAX_OUTPUT_BYTES} bytes of JSON", key_path="output")
        if self.kind is not ReportKind.FAIL and self.error_code is not None:
            raise ValidationFailed("error_code: only a failure carries an error code", key_path="error_code")


def report_from_event(detail_type: str, detail: Any) -> Report:
    """A report from a bus event's detail: ``{"token", "progress"?, "error_code"?, "message"?,
    "retryable"?, "output"?}``; ``ValidationFailed`` names what is wrong."""
    kind = REPORT_DETAIL_TYPES.get(detail_type)
    if kind is None:
        raise ValidationFailed(f"detail-type: {detail_type!r} is not a task report", key_path="detail-type")
    if not isinstance(detail, dict) or not isinstance(detail.get("token"), str):
        raise ValidationFailed(
            "detail.token: required (the attempt's completion token)", key_path="detail.token"
        )
    progress = detail.get("progress")
    if progress is not None and (isinstance(progress, bool) or not isinstance(progress, int | float)):
        raise ValidationFailed(
            f"detail.progress: a number from 0 to 1, got {progress!r}", key_path="detail.progress"
        )
    output = detail.get("output") or {}
    return Report(
        kind=kind,
        token=detail["token"],
        run_id=detail.get("run_id") if isinstance(detail.get("run_id"), str) else None,
        progress=float(progress) if progress is not None else None,
        error_code=detail.get("error_code"),
        message=detail.get("message"),
        retryable=bool(detail.get("retryable", True)),
        output=output if isinstance(output, dict) else {"value": output},
    )


@dataclass(frozen=True)
class ReportAnswer:
    accepted: bool
    kind: ReportKind
    run_id: str | None
    attempt: int | None
    state: str | None
    reason: str | None = None
    message: str = ""
    progress: float | None = None
    lease_expires_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "kind": self.kind.value,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "state": self.state,
            "reason": self.reason,
            "message": self.message,
            "progress": self.progress,
            "lease_expires_at": self.lease_expires_at,
        }


def accepted(report: Report, saved: Run, message: str, lease: datetime | None = None) -> ReportAnswer:
    return ReportAnswer(
        True,
        report.kind,
        saved.run_id,
        saved.attempt,
        saved.state.value,
        message=message,
        progress=saved.progress,
        lease_expires_at=iso(lease) if lease is not None else None,
    )


class AsyncReports:
    def __init__(self, deps: Deps, actor: str) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor

    def report(self, report: Report) -> ReportAnswer:
        """Accept ``report`` or refuse it with its reason; see the module's docstring."""
        report.check()
        now = self.deps.clock.now()
        try:
            claims = verify(self.deps.completion_keys.key(), report.token, now)
        except TokenRefused as exc:
            run_id = str(exc.details.get("run_id") or "") or None
            if exc.reason is Refusal.EXPIRED and run_id is not None:
                return self._refuse_expired(report, run_id, int(str(exc.details.get("attempt") or 0)), exc)
            log.warning("report refused: token does not verify", extra={"reason": exc.reason.value})
            return ReportAnswer(False, report.kind, report.run_id, None, None, exc.reason.value, exc.message)
        if report.run_id is not None and report.run_id != claims.run_id:
            return self._refuse(
                report,
                report.run_id,
                claims.attempt,
                None,
                Refusal.OTHER_RUN,
                f"the token was issued for run {claims.run_id}, not {report.run_id}",
            )
        for _ in range(REPORT_TRIES):
            answer = self._try(report, claims)
            if answer is not None:
                return answer
        raise Conflict(
            f"run {claims.run_id} kept changing while the {report.kind.value} was recorded; send it again",
            run_id=claims.run_id,
        )

    # --------------------------------------------------------------------------- one try
    def _try(self, report: Report, claims: Claims) -> ReportAnswer | None:
        """The answer, or ``None`` when a guarded write lost and the run must be read again."""
        now = self.deps.clock.now()
        run = self.store.get_run(claims.run_id)
        if run is None:
            return self._refuse(
                report, claims.run_id, claims.attempt, None, Refusal.UNKNOWN_RUN, f"no run {claims.run_id!r}"
            )
        refusal = self._refusal(run, claims)
        if refusal is not None:
            return self._refuse(report, run.run_id, claims.attempt, run, *refusal)
        if run.lease_expires_at is not None and now >= run.lease_expires_at:
            # Its time is up: fail the attempt with its timeout now, as the next sweep would, so
            # that the answer and the run agree; then refuse (decided again on the next try).
            Sweeper(self.deps, self.actor).fail_expired(run)
            return None
        if report.kind is ReportKind.HEARTBEAT:
            return self._heartbeat(report, run)
        return self._finish(report, run)

    @staticmethod
    def _refusal(run: Run, claims: Claims) -> tuple[Refusal, str] | None:
        attempt = next((a for a in run.attempts if a.n == claims.attempt), None)
        if attempt is None:
            return Refusal.OTHER_ATTEMPT, f"run {run.run_id} has no attempt {claims.attempt}"
        live = (
            run.state is RunState.RUNNING
            and run.attempt == claims.attempt
            and run.async_token_id == claims.token_id
            and attempt.outcome is AttemptOutcome.RUNNING
        )
        if live:
            return None
        ended = f"attempt {claims.attempt} of run {run.run_id}"
        if attempt.outcome is AttemptOutcome.TIMEOUT:
            return (
                Refusal.TIMED_OUT,
                f"{ended} timed out ({attempt.error_code}) at {iso(attempt.ended_at or run.updated_at)}; "
                f"the run is {run.state.value} and is not reopened",
            )
        if attempt.outcome in (AttemptOutcome.SUCCEEDED, AttemptOutcome.FAILED):
            return (
                Refusal.USED,
                f"{ended} already {attempt.outcome.value} with this token; it is used",
            )
        if attempt.outcome is AttemptOutcome.CANCELLED:
            return Refusal.NOT_RUNNING, f"{ended} was cancelled; the run is {run.state.value}"
        return Refusal.OTHER_ATTEMPT, f"the token does not belong to {ended}'s live token"

    def _heartbeat(self, report: Report, run: Run) -> ReportAnswer | None:
        now = self.deps.clock.now()
        lease = heartbeat_lease(run, now)
        after = run.model_copy(
            update={
                "heartbeat_at": now,
                "heartbeats": run.heartbeats + 1,
                "progress": report.progress if report.progress is not None else run.progress,
                "lease_expires_at": lease,
            }
        )
        uow = self.store.unit_of_work(self.actor, now)
        saved = uow.touch_run(run, after)
        try:
            uow.commit()
        except Conflict:
            return None
        return accepted(
            report, saved, f"heartbeat recorded; the attempt must report again before {iso(lease)}", lease
        )

    def _finish(self, report: Report, run: Run) -> ReportAnswer | None:
        now = self.deps.clock.now()
        if report.kind is ReportKind.COMPLETE:
            outcome = Outcome.success(report.output)
        else:
            outcome = Outcome.failure(
                report.error_code or TASK_FAILED,
                (report.message or "the asynchronous work reported a failure")[:MAX_MESSAGE],
                retryable=report.retryable,
            )
        stored = self.store.get_task(run.task_id)
        task = stored.task if stored else None
        if report.progress is not None:
            run = run.model_copy(update={"progress": report.progress})
        elif report.kind is ReportKind.COMPLETE:
            run = run.model_copy(update={"progress": 1.0})
        uow = self.store.unit_of_work(self.actor, now)
        saved, finished = stage_outcome(
            uow,
            run,
            outcome,
            task,
            self.deps.metrics,
            now,
            judge_sla=self.deps.flags.enabled(TASK_SLA_MONITOR),
            evidence={
                "reported_by": self.actor,
                "token_id": run.async_token_id,
                "heartbeats": run.heartbeats,
                "output": report.output or None,
            },
        )
        try:
            uow.commit()
        except Conflict:
            return None
        attempt_telemetry(self.deps.metrics, saved, finished)
        return accepted(
            report, saved, f"attempt {run.attempt} {finished.outcome.value}; the token is now used"
        )

    # --------------------------------------------------------------------------- refusals
    def _refuse_expired(self, report: Report, run_id: str, attempt: int, exc: TokenRefused) -> ReportAnswer:
        """An expired token (its signature verified): when its attempt has ended, say how (a late
        completion after a timeout is answered ``timed_out``), else ``expired``."""
        run = self.store.get_run(run_id)
        reason, message = exc.reason, exc.message
        if run is not None:
            ended = self._refusal(run, Claims(run_id, attempt, "", self.deps.clock.now()))
            if ended is not None and ended[0] in (Refusal.TIMED_OUT, Refusal.USED, Refusal.NOT_RUNNING):
                reason, message = ended[0], f"{ended[1]} ({exc.message})"
        return self._refuse(report, run_id, attempt, run, reason, message)

    def _refuse(
        self,
        report: Report,
        run_id: str,
        attempt: int,
        run: Run | None,
        reason: Refusal,
        message: str,
    ) -> ReportAnswer:
        """Answer a refusal and audit it: one record on the run's reports chain, the run untouched."""
        now = self.deps.clock.now()
        evidence = {
            "kind": report.kind.value,
            "reason": reason.value,
            "attempt": attempt,
            "message": message,
            "progress": report.progress,
            "error_code": report.error_code,
            "run_state": run.state.value if run else None,
        }

        def write() -> None:
            uow = self.store.unit_of_work(self.actor, now)
            uow.append_audit(reports_subject(run_id), action="report-refused", evidence=evidence)
            uow.commit()

        for n in range(1, REPORT_TRIES + 1):
            try:
                self.store.retrying(REPORT_TRIES, write)
                break
            except Conflict:  # another refusal took the chain's next place: read its head again
                if n == REPORT_TRIES:
                    raise
        log.warning("report refused", extra={"run_id": run_id, "attempt": attempt, "reason": reason.value})
        return ReportAnswer(
            False,
            report.kind,
            run_id,
            attempt,
            run.state.value if run else None,
            reason.value,
            message,
            progress=run.progress if run else None,
        )
