"""Checking the audit trail: every keyed hash chain intact, and every run rebuildable from its trail.

A chain proves the records were not edited, removed, reordered, inserted or moved from another
chain: links and hashes show the first three, and each record's MAC (``rebound.domain.audit``;
the key is the store's ``AuditKeys``) shows a record written by someone without the key, whose
hash alone would verify. Records written before the chain was keyed verify by hash alone and are
reported as unkeyed. For a run, rebuilding it from
its records (``rebound.domain.audit.rebuild_run``) must also reproduce the stored run: a field
that differs means the run was written without its audit record.

Verifying only reads: the audit table, the runs, and the day keys. A writer's keys derive a day's
key with ``GenerateMac``; an auditor's (``keys``, a ``VerifyingAuditKeys``) take the day keys a
writer exported (for ``day_labels``) and confirm each with ``VerifyMac``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import partial
from queue import Queue
from typing import Any

from rebound.domain.audit import (
    AuditFields,
    ChainCheck,
    CheckMac,
    mac_label,
    stored_run_mismatches,
    trail_mismatches,
    verify_chain,
    verify_fields,
)
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import NotFound, ValidationFailed
from rebound.domain.ids import RUN_PREFIX, fire_time, run_subject
from rebound.domain.retention import expired, records_may_have_expired
from rebound.domain.run import Run
from rebound.engine.deps import Deps
from rebound.engine.ports import AuditArchive, AuditKeys

MAX_EXPORTED_DAYS = 3660
"""The most day keys one ``day_keys`` export derives (one ``GenerateMac`` each): ten years."""
AUDIT_SEGMENTS = 8
"""Parallel scan segments ``verify_all`` reads the audit table and the runs table in (one
thread each)."""
AUDIT, RUNS = "audit", "runs"
ARCHIVE_OBJECT_RECORDS = 1000
"""Records per object ``archive_missing`` writes (as the archiver's batches at most)."""


@dataclass(frozen=True)
class ArchiveFill:
    """What ``AuditOps.archive_missing`` found and did."""

    in_table: int
    already_archived: int
    archived: int
    """Records written to the archive now (or that would be, in a dry run)."""
    objects: list[str]
    dry_run: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "in_table": self.in_table,
            "already_archived": self.already_archived,
            "archived": self.archived,
            "objects": self.objects,
            "dry_run": self.dry_run,
        }


@dataclass(frozen=True)
class AuditResult:
    subject: str
    ok: bool
    records: int
    detail: str
    mismatched: list[str] = field(default_factory=list)
    unkeyed: int = 0
    """Records verified by hash alone (written before the chain was keyed)."""

    @property
    def keying(self) -> str:
        """``keyed``, ``unkeyed`` (no record has a MAC) or ``partly-unkeyed`` (older records do not)."""
        if not self.unkeyed:
            return "keyed"
        return "unkeyed" if self.unkeyed == self.records else "partly-unkeyed"

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "ok": self.ok,
            "records": self.records,
            "detail": self.detail,
            "mismatched_fields": self.mismatched,
            "unkeyed_records": self.unkeyed,
            "keying": self.keying,
        }


class AuditOps:
    def __init__(self, deps: Deps, keys: AuditKeys | None = None) -> None:
        """``keys`` checks the MACs: the store's own (a writer's) unless given (an auditor's)."""
        self.deps = deps
        self.store = deps.store
        self.keys = keys or deps.store.audit_keys

    def day_labels(self, since: date, until: date) -> list[str]:
        """The labels of the days ``since`` to ``until`` (inclusive) whose keys a writer may hand
        an auditor (``rebound.adapters.audit_keys.day_keys_document``): never a day after today,
        whose key would sign records not yet written."""
        today = self.deps.clock.now().date()
        if until > today:
            raise ValidationFailed(
                f"until {until.isoformat()} is after today ({today.isoformat()}): a later day's key "
                "would sign records not written yet",
                key_path="until",
            )
        if since > until:
            raise ValidationFailed(
                f"since {since.isoformat()} is after until {until.isoformat()}", key_path="since"
            )
        days = (until - since).days + 1
        if days > MAX_EXPORTED_DAYS:
            raise ValidationFailed(
                f"{days} days asked for: at most {MAX_EXPORTED_DAYS} per export", key_path="since"
            )
        return [mac_label((since + timedelta(days=n)).isoformat()) for n in range(days)]

    def verify(self, target: str, *, archive: bool = False) -> AuditResult:
        """Verify one subject: a run id, or a full subject such as ``workorder#wo-...``; with
        ``archive``, its records in the audit archive and the table together, from #1."""
        subject = target if "#" in target else run_subject(target)
        if archive:
            trails = self._archived(subject)
            run_id = subject.removeprefix(RUN_PREFIX)
            result = self._judge(subject, trails.get(subject, []), lambda: self.store.get_run(run_id))
        else:
            result = self._verify(subject)
        if result.records == 0:
            raise NotFound(f"no audit records for {subject}", subject=subject)
        return result

    def verify_archive(self, progress: Callable[[AuditResult], None] | None = None) -> list[AuditResult]:
        """Every chain in the audit archive and the table together, each from #1: what expired
        from the table is read from the archive (``rebound.adapters.audit_archive``)."""
        trails = self._archived(None)
        results = []
        for subject in sorted(trails):
            result = self._judge(subject, trails[subject], partial(self.store.get_run, _run_id(subject)))
            results.append(result)
            if progress:
                progress(result)
        return results

    def archive_missing(
        self,
        since: date | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> ArchiveFill:
        """Archive every record of the table (written on ``since`` or after) that the archive does
        not hold: what the stream lost (the archiver failed for longer than its 24 hours), or wrote
        before the stream existed. One object per day and thousand records; ``progress`` hears
        how many records each object held."""
        archive = self._archive()
        held = {
            (name, int(f["seq"]), str(f["hash"]))
            for name, trail in archive.trails(since=since - timedelta(days=1) if since else None).items()
            for f in trail
        }
        first = since.isoformat() if since else ""
        live = [f for trail in self._table_trails().values() for f in trail if str(f["at"]) >= first]
        missing = [f for f in live if (str(f["subject"]), int(f["seq"]), str(f["hash"])) not in held]
        by_day: dict[str, list[AuditFields]] = {}
        for fields in sorted(missing, key=lambda f: (str(f["at"]), str(f["subject"]), int(f["seq"]))):
            by_day.setdefault(str(fields["at"])[:10], []).append(fields)
        objects: list[str] = []
        for day_records in by_day.values():
            for start in range(0, len(day_records), ARCHIVE_OBJECT_RECORDS):
                chunk = day_records[start : start + ARCHIVE_OBJECT_RECORDS]
                if not dry_run:
                    objects.append(archive.put_records(chunk))
                if progress:
                    progress(len(chunk))
        return ArchiveFill(len(live), len(live) - len(missing), len(missing), objects, dry_run)

    def _table_trails(self) -> dict[str, list[AuditFields]]:
        """Every chain in the audit table, as stored, read a scan segment after another."""
        trails: dict[str, list[AuditFields]] = {}
        for segment in range(AUDIT_SEGMENTS):
            for part in self.store.audit_segment_parts(segment, AUDIT_SEGMENTS):
                trails.update(part)
        return trails

    def _archive(self) -> AuditArchive:
        if self.deps.audit_archive is None:
            raise NotFound(
                "this environment has no audit archive (deploy this version of the stack, or run "
                "`rebound local up` again, to create it)",
                table="archive",
            )
        return self.deps.audit_archive

    def _archived(self, subject: str | None) -> dict[str, list[AuditRecord]]:
        """The archive's records and the table's (of ``subject``, or all), merged by subject: a
        record in both is one record if they are the same, two (a broken chain) if not."""
        merged: dict[str, dict[tuple[int, str], AuditFields]] = {}
        for name, trail in self._archive().trails(subject=subject).items():
            for fields in trail:
                merged.setdefault(name, {})[(int(fields["seq"]), str(fields["hash"]))] = fields
        if subject is not None:
            live = {subject: [r.model_dump(mode="json") for r in self.store.audit_trail(subject)]}
        else:
            live = self._table_trails()
        for name, trail in live.items():
            for fields in trail:
                merged.setdefault(name, {}).setdefault((int(fields["seq"]), str(fields["hash"])), fields)
        return {
            name: [AuditRecord.model_validate(f) for _, f in sorted(records.items())]
            for name, records in merged.items()
        }

    def verify_all(
        self,
        progress: Callable[[AuditResult], None] | None = None,
        segments: int = AUDIT_SEGMENTS,
        on_total: Callable[[int], None] | None = None,
    ) -> list[AuditResult]:
        """Verify every subject; the results in subject order.

        The audit table and the runs table are read in ``segments`` parallel scan segments each,
        all at once but for the first page (a thread per segment, pages as large as the store
        answers: smaller ones cost the local cloud more per page, docs/performance.md),
        and the records and runs are checked as stored, with no model built of each (``verify_fields``,
        ``stored_run_mismatches``), as each page arrives: a chain once its trail is whole; a run
        once its chain and its item are both in (they are in unrelated segments of their
        tables), or, with no item, once every runs segment is in. ``on_total`` hears how many
        subjects there are once every audit segment is in; ``progress`` hears each result as it
        is decided.

        The first audit segment's first page is read and checked before any other segment is
        asked for: checking it derives the day keys its records need (a writer's keys ask KMS,
        ``GenerateMac``, once a day covered) while the store answers nothing else. Asked behind
        every segment's first 1 MB page, that one call held every check up (0.7 s against the
        local cloud, for 10,000 chains checked in about 2 s).

        The cyclic garbage collector is paused for the pass (``_cyclic_gc_paused``).

        A trail and its run are read at different moments, so a run that changed in between looks
        like a mismatch: every subject that fails in the bulk pass is verified again on its own
        (with models, as ``verify`` does), and only that result is reported.
        """
        check = self.keys.check
        results: list[AuditResult] = []
        runs: dict[str, dict[str, Any]] = {}
        waiting: dict[str, tuple[list[AuditFields], ChainCheck]] = {}
        parts: Queue[tuple[str, Any]] = Queue()
        subjects = 0

        def decided(result: AuditResult) -> None:
            if not result.ok:
                result = self._verify(result.subject)
            results.append(result)
            if progress:
                progress(result)

        def read(kind: str, segment: int) -> None:
            reader = self.store.audit_segment_parts if kind == AUDIT else self.store.runs_segment_parts
            try:
                for part in reader(segment, segments):
                    parts.put((kind, part))
            except BaseException as exc:
                parts.put((kind, exc))
                raise
            parts.put((kind, None))

        with _cyclic_gc_paused(), ThreadPoolExecutor(max_workers=2 * segments) as pool:
            later = [(kind, n) for kind in (AUDIT, RUNS) for n in range(segments)]
            pool.submit(read, *later.pop(0))
            left = {AUDIT: segments, RUNS: segments}
            while left[AUDIT] or left[RUNS]:
                kind, part = parts.get()
                if isinstance(part, BaseException):
                    raise part
                if part is None:
                    left[kind] -= 1
                    if kind == AUDIT and not left[AUDIT] and on_total is not None:
                        on_total(subjects)
                    if kind == RUNS and not left[RUNS]:
                        for subject, (trail, chain) in waiting.items():
                            decided(_run_verdict(subject, trail, chain, runs.get(_run_id(subject))))
                        waiting.clear()
                elif kind == RUNS:
                    runs.update(part)
                    for run_id in part:
                        held = waiting.pop(RUN_PREFIX + run_id, None)
                        if held is not None:
                            decided(_run_verdict(RUN_PREFIX + run_id, *held, part[run_id]))
                else:
                    subjects += len(part)
                    for subject, trail in part.items():
                        chain = verify_fields(subject, trail, check)
                        run_id = _run_id(subject)
                        if not chain.ok or run_id == subject or run_id in runs or not left[RUNS]:
                            decided(_run_verdict(subject, trail, chain, runs.get(run_id)))
                        else:
                            waiting[subject] = (trail, chain)
                for job in later:  # the first part is checked: every other segment now
                    pool.submit(read, *job)
                later.clear()
        results.sort(key=lambda r: r.subject)
        return results

    def subjects(self) -> list[str]:
        return self.store.audit_subjects()

    def _verify(self, subject: str) -> AuditResult:
        run_id = subject.removeprefix(RUN_PREFIX)
        return self._judge(subject, self.store.audit_trail(subject), lambda: self.store.get_run(run_id))

    def _judge(self, subject: str, trail: list[AuditRecord], run: Callable[[], Run | None]) -> AuditResult:
        """The verdict on one subject's trail (for a run, ``run`` reads the stored run).

        Where the environment expires records (``Settings.retention``), a run's trail may begin
        after #1 once ``audit_days`` have passed since its scheduled time (the first records
        expired from the table), and a finished run's item may be gone ``runs_days`` after its
        last record (it expired before its records): both verify, and say so."""
        retention = self.deps.settings.retention
        is_run = subject.startswith(RUN_PREFIX)
        stored = run() if is_run and trail else None
        since = stored.scheduled_for if stored is not None else fire_time(_run_id(subject))
        now = self.deps.clock.now() if retention is not None else None
        expiring = is_run and now is not None and records_may_have_expired(retention, since, now)
        first = trail[0].seq if trail and expiring else 1
        check = verify_chain(subject, trail, self.keys.check, from_seq=first)
        if not check.ok or not is_run or not trail:
            return AuditResult(subject, check.ok, check.records, check.detail, unkeyed=check.unkeyed)
        if stored is None and now is not None and expired(retention, trail[-1].to_state, trail[-1].at, now):
            return AuditResult(
                subject,
                True,
                check.records,
                f"{check.detail}; the run ended {trail[-1].to_state} and expired from the table "
                f"(retention.runs_days)",
                unkeyed=check.unkeyed,
            )
        if stored is None:
            return AuditResult(
                subject, False, check.records, "the trail exists but the run does not", unkeyed=check.unkeyed
            )
        if first > 1:
            return AuditResult(
                subject,
                True,
                check.records,
                f"{check.detail}; the run is not rebuilt from part of its trail",
                unkeyed=check.unkeyed,
            )
        mismatched = trail_mismatches(stored, trail)
        if mismatched:
            return AuditResult(
                subject,
                False,
                check.records,
                f"chain intact, but the stored run differs from its trail in: {', '.join(mismatched)}",
                mismatched,
                check.unkeyed,
            )
        return AuditResult(
            subject,
            True,
            check.records,
            f"{check.detail}; the run rebuilds from its trail",
            unkeyed=check.unkeyed,
        )


def _judge_stored(
    subject: str, trail: list[AuditFields], runs: Mapping[str, dict[str, Any]], check: CheckMac
) -> AuditResult:
    """``AuditOps._judge`` of a trail and its run as stored (``verify_fields``,
    ``stored_run_mismatches``): a pass here is a pass there; a failure is decided again there."""
    chain = verify_fields(subject, trail, check)
    return _run_verdict(subject, trail, chain, runs.get(_run_id(subject)))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside (back on after, if it was on before).

    The bulk pass keeps every trail and run it reads until it ends, tens of thousands of dicts;
    each full collection walks them all, and collections are set off by allocating, which the
    pass does for every item: with the collector on, reading 10,000 chains took twice the CPU
    (1.06 s against 0.50; docs/performance.md). Nothing the pass makes is cyclic garbage;
    reference counting still frees everything it drops. Two passes at once leave the collector
    on once the first that found it on ends."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _run_id(subject: str) -> str:
    """The run id of a run's subject (any other subject unchanged)."""
    return subject.removeprefix(RUN_PREFIX)


def _run_verdict(
    subject: str, trail: list[AuditFields], chain: ChainCheck, stored: dict[str, Any] | None
) -> AuditResult:
    """``_judge_stored`` of a trail whose chain was checked (``chain``) and its run as stored
    (``stored``, ``None`` if there is none; unused unless the subject is a run's)."""
    if not chain.ok or not subject.startswith(RUN_PREFIX):
        return AuditResult(subject, chain.ok, chain.records, chain.detail, unkeyed=chain.unkeyed)
    try:
        mismatched = ["(missing)"] if stored is None else stored_run_mismatches(stored, trail)
    except ValueError as exc:  # pydantic's ValidationError: the trail does not rebuild a run
        mismatched = [f"(does not rebuild: {exc.__class__.__name__})"]
    if mismatched:
        return AuditResult(subject, False, chain.records, "differs from its trail", mismatched, chain.unkeyed)
    return AuditResult(
        subject,
        True,
        chain.records,
        f"{chain.detail}; the run rebuilds from its trail",
        unkeyed=chain.unkeyed,
    )
