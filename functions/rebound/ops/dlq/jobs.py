"""A large redrive as a job: a record the caller polls, the work done in chunks.

One ops API invocation lives at most 29 s (API Gateway's limit) and a redrive of thousands of
messages takes longer, so ``POST /dlq/redrive`` over more than ``ASYNC_OVER`` matching messages
(or with ``async: true``) only starts a job and answers 202 with its id. The job is a record in
the ``control`` table (``redrive-job#<id>``); each **chunk** is one ``DlqOps.redrive`` pass that
stops after ``CHUNK_S`` seconds or ``CHUNK_MESSAGES`` received messages, adds what it did to the
record and, when matching messages may remain, asks its ``continuation`` to run the next chunk in
a fresh invocation: on AWS the ops API function invokes itself asynchronously
(``LambdaContinuation``), in ``rebound console`` and ``rebound local up`` a background thread
plays that part (``ThreadContinuation``).

Nothing is lost when a chunk dies half-way: a chunk works through the redrive's exactly-once
protocol (``rebound.ops.dlq.redrive``), so the next one resumes what it left. A chunk holds a
lease (a control key expiring after ``LEASE_S``), so two continuations never run one job at
once; a job whose continuation was lost (its record unchanged for ``STALE_S``) is continued
again by the next ``GET /dlq/redrive-jobs/{id}``.

Counting. ``moved`` (moved or resumed), ``cleaned`` (earlier replays and duplicates removed) add
up over chunks: those messages left the DLQ. ``skipped`` and ``failed`` are the last chunk's: those
messages stay in the DLQ and every chunk judges them again. ``remaining`` is what the DLQ's record
still holds of the filter, less those the last chunk left; ``total`` the match count at the start.
The job's audit trail (subject ``redrive-job#<id>``) says who started it, with what filters, and
how it ended; every moved message has its own record in its run's trail, as in any redrive.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from rebound.domain.approvals import approval_evidence
from rebound.domain.errors import NotFound
from rebound.domain.timefmt import iso, parse_utc
from rebound.engine.deps import Deps
from rebound.ops.dlq.message import DlqFilter
from rebound.ops.dlq.operations import DlqOps
from rebound.ops.dlq.redrive import (
    CLEANED_UP,
    DUPLICATE_REMOVED,
    FAILED,
    SKIPPED,
    RedriveItem,
    RedriveReport,
)

log = logging.getLogger(__name__)

ASYNC_OVER = 100
"""A redrive matching more messages than this is a job (``async: true`` makes any redrive one)."""
CHUNK_S = 15.0
"""Seconds of work per chunk: inside the ops API function's 29 s with room to save and continue."""
CHUNK_MESSAGES = 1000
"""Received messages per chunk at most."""
LEASE_S = 60
STALE_S = 90
"""A running job whose record has not changed for this long lost its continuation."""
JOB_PREFIX = "redrive-job#"
JOB_STARTED = "dlq-redrive-job-started"
CONTINUE = "rebound-redrive-job"
"""The key of the event that continues a job (``{"rebound-redrive-job": "<id>"}``)."""


class RedriveJobNotFound(NotFound):
    code = "REDRIVE_JOB_NOT_FOUND"

    @classmethod
    def of(cls, job_id: str) -> RedriveJobNotFound:
        """The one answer for a job that does not exist, or that the caller may not see."""
        return cls(f"no redrive job {job_id}", job_id=job_id)


def job_tenant(record: dict[str, Any]) -> str | None:
    """The tenant a stored job's filters name (``None``: every tenant, an administrator's job)."""
    filters = json.loads(str(record["job"])).get("filters") or {}
    tenant = filters.get("tenant")
    return str(tenant) if tenant else None


class JobState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    """Every matching message was judged: moved, or left with a reason (``skipped``)."""
    FINISHED_WITH_FAILURES = "finished-with-failures"
    """Done, but some messages could not be sent or removed: run the redrive again for them."""
    FAILED = "failed"
    """A chunk raised an error it could not get past (``error`` says which)."""


class Continuation(Protocol):
    def __call__(self, job_id: str) -> None:
        """Have ``RedriveJobs.run_chunk(job_id)`` run soon, outside this call."""


@dataclass
class RedriveJob:
    job_id: str
    filters: dict[str, Any]
    rate: float | None
    limit: int | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    state: JobState = JobState.RUNNING
    total: int = 0
    moved: int = 0
    cleaned: int = 0
    skipped: int = 0
    failed: int = 0
    remaining: int = 0
    examined: int = 0
    chunks: int = 0
    error: str | None = None
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.state is not JobState.RUNNING

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            state=self.state.value,
            created_at=iso(self.created_at),
            updated_at=iso(self.updated_at),
            done=self.done,
            progress=self.progress,
        )
        return data

    @property
    def progress(self) -> float:
        """The share of the work done, 0..1 (1 once the job is done)."""
        if self.done:
            return 1.0
        handled = self.moved + self.cleaned + self.skipped + self.failed
        return round(handled / max(handled + self.remaining, 1), 3)

    def to_record(self) -> dict[str, Any]:
        return {"job": json.dumps(self.as_dict())}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> RedriveJob:
        raw = json.loads(str(data["job"]))
        for computed in ("done", "progress"):
            raw.pop(computed, None)
        raw["state"] = JobState(raw["state"])
        raw["created_at"] = parse_utc(raw["created_at"])
        raw["updated_at"] = parse_utc(raw["updated_at"])
        return cls(**raw)


def filters_from(data: dict[str, Any]) -> DlqFilter:
    return DlqFilter(
        task_id=data.get("task_id"),
        tenant=data.get("tenant"),
        error_code=data.get("error_code"),
        since=parse_utc(data["since"]) if data.get("since") else None,
        until=parse_utc(data["until"]) if data.get("until") else None,
    )


class RedriveJobs:
    """Start, continue and read redrive jobs over ``ops`` (its actor starts them)."""

    def __init__(
        self,
        ops: DlqOps,
        continuation: Continuation,
        *,
        chunk_s: float | None = None,
        chunk_messages: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ops = ops
        self.store = ops.store
        self.continuation = continuation
        self.chunk_s = CHUNK_S if chunk_s is None else chunk_s
        self.chunk_messages = CHUNK_MESSAGES if chunk_messages is None else chunk_messages
        self.monotonic = monotonic

    def _now(self) -> datetime:
        return self.ops.deps.clock.now()

    def _save(self, job: RedriveJob) -> None:
        self.store.put_key(JOB_PREFIX + job.job_id, job.to_record())

    def _audit(self, job: RedriveJob, action: str, evidence: dict[str, Any]) -> None:
        uow = self.store.unit_of_work(self.ops.actor, self._now())
        uow.append_audit(JOB_PREFIX + job.job_id, action=action, evidence=evidence)
        uow.commit()

    def start(
        self,
        filters: DlqFilter,
        *,
        rate: float | None = None,
        limit: int | None = None,
        job_id: str | None = None,
    ) -> RedriveJob:
        """Record a job for ``filters`` (what matches now is its ``total``) and continue it.

        ``job_id``: a job named by its cause (an approved request), started at most once: if it
        exists, it is continued (a chunk under way makes that a no-op) and returned as it is, its
        start's audit record written if a crash left it unwritten."""
        if job_id is not None and (found := self.store.get_key(JOB_PREFIX + job_id)) is not None:
            job = RedriveJob.from_record(found)
            trail = self.store.audit_trail(JOB_PREFIX + job_id)
            if not any(r.action == JOB_STARTED for r in trail):
                self._audit(job, JOB_STARTED, self._started(job))
            if not job.done:
                self.continuation(job.job_id)
            return job
        now = self._now()
        self.ops.hold_large_redrive(filters, limit, rate)
        total = self.ops.count(filters)
        job = RedriveJob(
            job_id=job_id or uuid.uuid4().hex[:12],
            filters=filters.as_dict(),
            rate=rate,
            limit=limit,
            created_by=self.ops.actor,
            created_at=now,
            updated_at=now,
            total=total,
            remaining=total if limit is None else min(total, limit),
        )
        self._save(job)
        self._audit(job, JOB_STARTED, self._started(job))
        self.continuation(job.job_id)
        return job

    def _started(self, job: RedriveJob) -> dict[str, Any]:
        """The evidence of a job's start: its filters, and the request it carries out, if any."""
        return {
            "filters": job.filters,
            "rate": job.rate,
            "limit": job.limit,
            **approval_evidence(self.ops.approval),
        }

    def get(self, job_id: str) -> RedriveJob:
        data = self.store.get_key(JOB_PREFIX + job_id)
        if data is None or "job" not in data:
            raise RedriveJobNotFound.of(job_id)
        return RedriveJob.from_record(data)

    def poll(self, job_id: str) -> RedriveJob:
        """The job; a running job whose record went quiet for ``STALE_S`` is continued again."""
        job = self.get(job_id)
        if not job.done and self._now() - job.updated_at > timedelta(seconds=STALE_S):
            quiet = iso(job.updated_at)
            log.warning("redrive job %s went quiet since %s: continuing it again", job_id, quiet)
            self.continuation(job_id)
        return job

    def run_chunk(self, job_id: str) -> RedriveJob:
        """One chunk of the job: redrive until the chunk's time or message budget is spent, add
        it up, and continue the job unless it is done. A chunk already under way (its lease is
        held) makes this one a no-op."""
        job = self.get(job_id)
        if job.done:
            return job
        lease = f"{JOB_PREFIX}{job_id}#lease"
        if not self.store.claim_key(lease, self._now(), timedelta(seconds=LEASE_S)):
            return job
        try:
            job = self._chunk(self.get(job_id))
        except Exception as exc:  # recorded on the job; the messages stay in the DLQ, resumable
            log.exception("redrive job %s: a chunk failed", job_id)
            job.state = JobState.FAILED
            job.error = f"{type(exc).__name__}: {exc}"
            job.updated_at = self._now()
            self._save(job)
            self._audit(job, "dlq-redrive-job-failed", {"error": job.error, **self._figures(job)})
            return job
        finally:
            self.store.release_key(lease)
        if not job.done:
            self.continuation(job_id)
        return job

    def _chunk(self, job: RedriveJob) -> RedriveJob:
        filters = filters_from(job.filters)
        limit = None if job.limit is None else max(job.limit - job.moved, 0)
        if limit == 0:
            report = RedriveReport("", False, "queue", filters)
        else:
            started = self.monotonic()
            judged = [0]

            def progress(_: RedriveItem) -> None:
                judged[0] += 1

            def stop() -> bool:
                return self.monotonic() - started >= self.chunk_s or judged[0] >= self.chunk_messages

            report = self.ops.redrive(filters, rate=job.rate, limit=limit, progress=progress, stop=stop)
        job.chunks += 1
        job.examined += report.examined
        job.moved += report.moved
        job.cleaned += report.outcomes[CLEANED_UP] + report.outcomes[DUPLICATE_REMOVED]
        job.skipped = report.outcomes[SKIPPED]
        job.failed = report.outcomes[FAILED]
        for outcome, n in report.outcomes.items():
            if outcome not in (SKIPPED, FAILED):
                job.outcomes[outcome] = job.outcomes.get(outcome, 0) + n
        job.remaining = max(self.ops.count(filters) - job.skipped - job.failed, 0)
        if job.limit is not None:
            job.remaining = min(job.remaining, max(job.limit - job.moved, 0))
        job.updated_at = self._now()
        if not report.stopped or job.remaining == 0:
            job.state = JobState.FINISHED_WITH_FAILURES if job.failed else JobState.SUCCEEDED
            job.remaining = 0
        self._save(job)
        if job.done:
            self._audit(job, "dlq-redrive-job-finished", {"state": job.state.value, **self._figures(job)})
        return job

    @staticmethod
    def _figures(job: RedriveJob) -> dict[str, Any]:
        return {
            "total": job.total,
            "moved": job.moved,
            "cleaned": job.cleaned,
            "skipped": job.skipped,
            "failed": job.failed,
            "chunks": job.chunks,
        }


def continue_job(deps: Deps, job_id: str, continuation: Continuation, **budget: Any) -> RedriveJob:
    """Run the next chunk of a job, acting as the operator who started it (the actor of its
    audit records), whoever continues it (a thread, the function invoking itself)."""
    creator = RedriveJobs(DlqOps(deps, "", wait_s=0), continuation).get(job_id).created_by
    return RedriveJobs(DlqOps(deps, creator, wait_s=0), continuation, **budget).run_chunk(job_id)


class ThreadContinuation:
    """Runs each chunk in a background thread: the local stand-in for the function's async
    self-invocation (``rebound console``, ``rebound local up``)."""

    def __init__(self, deps: Callable[[], Deps]) -> None:
        self.deps = deps

    def __call__(self, job_id: str) -> None:
        def run() -> None:
            try:
                continue_job(self.deps(), job_id, self)
            except Exception:  # the job record says so when it can; a poll continues a quiet job
                log.exception("redrive job %s: the chunk's thread failed", job_id)

        threading.Thread(target=run, name=f"redrive-job-{job_id}", daemon=True).start()


class LambdaContinuation:
    """Invokes the ops API function itself asynchronously with ``{CONTINUE: job_id}``; the
    handler runs the chunk (``rebound.handlers.ops_api``)."""

    def __init__(self, function_name: str, client: Any) -> None:
        self.function_name = function_name
        self.client = client

    def __call__(self, job_id: str) -> None:
        self.client.invoke(
            FunctionName=self.function_name,
            InvocationType="Event",
            Payload=json.dumps({CONTINUE: job_id}).encode(),
        )
