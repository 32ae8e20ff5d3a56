"""Every read and write of the store, in memory; commits go through ``apply``."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from rebound import resources as r
from rebound.adapters import dlq_items as rec
from rebound.adapters.audit_keys import LocalAuditKeys
from rebound.adapters.memory.unit_of_work import (
    TABLES,
    Item,
    MemoryUnitOfWork,
    Staged,
    copy_item,
    stored_item,
)
from rebound.adapters.staging import StagingStore
from rebound.domain.audit import GENESIS, AuditFields
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import Conflict, OperationalError
from rebound.domain.jsonutil import dumps, plain_loads
from rebound.domain.run import Run, RunState, in_state_index
from rebound.domain.stored import StoredTask
from rebound.domain.task import TenantSettings
from rebound.domain.timefmt import iso
from rebound.domain.work_order import WorkOrder, WorkOrderState
from rebound.engine.ports import (
    AuditKeys,
    DlqEntry,
    DlqPage,
    DlqQuery,
    DlqSpanPage,
    DlqStatus,
    RunPage,
    parse_run_cursor,
    run_cursor,
)

if TYPE_CHECKING:
    from rebound.engine.ports import Store


@dataclass(frozen=True)
class Emitted:
    """An outbox event as committed."""

    event_id: str
    detail_type: str
    source: str
    subject: str
    created_at: str
    detail: dict[str, Any]


class MemoryStore(StagingStore):
    """Every read and write of ``rebound.engine.ports.Store``, in memory."""

    check_unpublished = True  # the tests' store checks every event's shape, published or not

    def __init__(
        self,
        event_source: str = r.SPEC.event_source,
        on_failed_commit: Callable[[], None] | None = None,
        audit_keys: AuditKeys | None = None,
        published: frozenset[str] | None = None,
    ) -> None:
        self.event_source = event_source
        self.published = published
        self.audit_keys: AuditKeys = audit_keys or LocalAuditKeys()
        """Keys every audit record (a local secret plays the KMS key unless given)."""
        self.on_failed_commit = on_failed_commit
        """Called when a commit fails for any reason but a conflict (as the DynamoDB store does)."""
        self._lock = threading.RLock()
        self._tables: dict[str, dict[Hashable, Item]] = {name: {} for name in TABLES}
        self.expiries: dict[str, int] = {}
        """Runs' ``ttl`` set by ``set_run_expiry`` (nothing expires in memory)."""
        self.relisted: dict[str, int] = {}
        """Runs ``relist_running`` put in ``by_state``, with the revision it did it at."""

    def unit_of_work(self, actor: str, at: datetime) -> MemoryUnitOfWork:
        return MemoryUnitOfWork(self, actor, at)

    # --- the one place that writes ------------------------------------------------------------
    def apply(self, staged: list[Staged]) -> None:
        """Judge every guard on the state as it is, then write every change; or write nothing."""
        doing = "commit " + ", ".join(s.label for s in staged[:4]) + (" ..." if len(staged) > 4 else "")
        with self._lock:
            items = [(s, self._tables[s.table].get(s.key)) for s in staged]
            if len({(s.table, s.key) for s in staged}) < len(staged):
                if self.on_failed_commit is not None:
                    self.on_failed_commit()
                raise OperationalError(
                    f"{doing}: a transaction cannot include multiple operations on one item"
                )
            failed = [s.label for s, item in items if s.guard is not None and not s.guard(item)]
            if failed:
                raise Conflict(f"{doing}: the record changed underneath us", failed=failed)
            for s, item in items:
                written = s.write(item)
                if written is None:
                    self._tables[s.table].pop(s.key, None)
                else:
                    self._tables[s.table][s.key] = written

    def _read(self, table: str, key: Hashable) -> Item | None:
        with self._lock:
            item = self._tables[table].get(key)
            return copy_item(item) if item is not None else None

    def _all(self, table: str, where: Callable[[Item], bool] = lambda _: True) -> list[Item]:
        with self._lock:
            return [copy_item(item) for item in self._tables[table].values() if where(item)]

    # --- tasks ------------------------------------------------------------------------------
    def get_task(self, task_id: str) -> StoredTask | None:
        data = self._read("tasks", task_id)
        return StoredTask.from_record(data) if data else None

    def list_tasks(self) -> list[StoredTask]:
        return sorted((StoredTask.from_record(d) for d in self._all("tasks")), key=lambda s: s.task.id)

    # --- runs -------------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run | None:
        data = self._read("runs", run_id)
        return Run.model_validate(data) if data else None

    def get_runs(self, run_ids: list[str]) -> dict[str, Run]:
        wanted = set(run_ids)
        return {
            d["run_id"]: Run.model_validate(d) for d in self._all("runs", lambda d: d["run_id"] in wanted)
        }

    def existing_runs(self, run_ids: list[str], *, consistent: bool = True) -> set[str]:
        wanted = set(run_ids)
        return {str(d["run_id"]) for d in self._all("runs", lambda d: d["run_id"] in wanted)}

    def runs_segment_parts(
        self, segment: int, segments: int, page_size: int | None = None
    ) -> Iterator[dict[str, dict[str, Any]]]:
        items = self._all("runs", _in_segment("run_id", segment, segments))
        yield from _parts({str(d["run_id"]): d for d in items}, page_size)

    def runs_for_task(
        self,
        task_id: str,
        since: datetime | None = None,
        until: datetime | None = None,
        newest_first: bool = True,
        limit: int | None = None,
    ) -> list[Run]:
        """The ``by_task_keys`` index: by ``scheduled_for``, ``since`` and ``until`` included."""
        low = iso(since) if since else ""
        high = iso(until) if until else "\uffff"
        items = self._all("runs", lambda d: d["task_id"] == task_id and low <= d["scheduled_for"] <= high)
        items.sort(key=lambda d: (d["scheduled_for"], d["run_id"]), reverse=newest_first)
        return [Run.model_validate(d) for d in items[:limit]]

    def runs_in_state(
        self, state: RunState, *, updated_before: datetime | None = None, limit: int | None = None
    ) -> list[Run]:
        """The ``by_state`` index: oldest ``updated_at`` first, ``updated_before`` excluded."""
        before = iso(updated_before) if updated_before else "\uffff"
        items = self._all(
            "runs", lambda d: d["state"] == state.value and d["updated_at"] < before and self._indexed(d)
        )
        items.sort(key=lambda d: (d["updated_at"], d["run_id"]))
        return [Run.model_validate(d) for d in items[:limit]]

    def _in_state(self, state: RunState, since: datetime | None) -> list[Item]:
        low = iso(since) if since else ""
        items = self._all(
            "runs", lambda d: d["state"] == state.value and d["updated_at"] >= low and self._indexed(d)
        )
        return sorted(items, key=lambda d: (d["updated_at"], d["run_id"]), reverse=True)

    def runs_in_state_page(
        self, state: RunState, *, since: datetime | None = None, limit: int = 100, after: str | None = None
    ) -> RunPage:
        """The ``by_state`` index backwards from ``after``: latest change first."""
        items = self._in_state(state, since)
        if after is not None:
            bound = parse_run_cursor(after)
            items = [d for d in items if (d["updated_at"], d["run_id"]) < bound]
        runs = [Run.model_validate(d) for d in items[:limit]]
        return RunPage(runs, run_cursor(runs[-1]) if len(items) > limit else None)

    def count_runs_in_state(
        self, state: RunState, *, since: datetime | None = None, at_most: int | None = None
    ) -> int:
        return len(self._in_state(state, since))

    def scan_runs(self) -> Iterator[Run]:
        for data in self._all("runs"):
            yield Run.model_validate(data)

    def _indexed(self, data: Item) -> bool:
        """Whether ``by_state`` lists a stored run: ``in_state_index``, or put there by
        ``relist_running`` since its last write (a write of the run stores it anew)."""
        return in_state_index(data) or self.relisted.get(data["run_id"]) == data.get("rev", 0)

    def relist_running(self, run: Run) -> bool:
        with self._lock:
            data = self._tables["runs"].get(run.run_id)
            if data is None or data.get("rev", 0) != run.rev or self._indexed(data):
                return False
            self.relisted[run.run_id] = run.rev
            return True

    def relist_by_fire(self, run: Run) -> bool:
        return False  # a task's runs are a filter here: every run is listed with its task

    def unlist_clean_success(self, run: Run) -> bool:
        return False  # the index is a filter here (``in_state_index``): no stored layout to move

    def set_run_expiry(self, run_id: str, rev: int, expires_at: int) -> bool:
        with self._lock:
            item = self._tables["runs"].get(run_id)
            if item is None or run_id in self.expiries or int(item.get("rev", 0)) != rev:
                return False
            self.expiries[run_id] = expires_at
            return True

    def scan_runs_page(self, *, limit: int = 100, after: str | None = None) -> tuple[list[Run], str | None]:
        items, cursor = self._page("runs", "run_id", limit, after)
        return [Run.model_validate(d) for d in items], cursor

    def scan_work_orders_page(
        self, *, limit: int = 100, after: str | None = None
    ) -> tuple[list[WorkOrder], str | None]:
        items, cursor = self._page("workorders", "work_order_id", limit, after)
        return [WorkOrder.model_validate(d) for d in items], cursor

    def _page(self, table: str, key: str, limit: int, after: str | None) -> tuple[list[Item], str | None]:
        """A scan's page in key order (DynamoDB's is in hash order: callers rely on neither)."""
        items = sorted(
            self._all(table, lambda d: after is None or str(d[key]) > after), key=lambda d: str(d[key])
        )
        page = items[:limit]
        return page, (str(page[-1][key]) if len(items) > limit else None)

    # --- audit ------------------------------------------------------------------------------
    def audit_trail(self, subject: str) -> list[AuditRecord]:
        items = self._all("audit", lambda d: d["subject"] == subject)
        return [AuditRecord.model_validate(d) for d in sorted(items, key=lambda d: int(d["seq"]))]

    def audit_head(self, subject: str) -> tuple[int, str]:
        trail = self.audit_trail(subject)
        return (trail[-1].seq, trail[-1].hash) if trail else (0, GENESIS)

    def audit_subjects(self) -> list[str]:
        with self._lock:
            return sorted({str(item["subject"]) for item in self._tables["audit"].values()})

    def audit_segment_parts(
        self, segment: int, segments: int, page_size: int | None = None
    ) -> Iterator[dict[str, list[AuditFields]]]:
        trails: dict[str, list[AuditFields]] = {}
        mine = _in_segment("subject", segment, segments)
        for data in sorted(self._all("audit", mine), key=lambda d: int(d["seq"])):
            trails.setdefault(str(data["subject"]), []).append(plain_loads(dumps(data)))
        yield from _parts(trails, page_size)

    # --- work orders ------------------------------------------------------------------------
    def get_work_order(self, work_order_id: str) -> WorkOrder | None:
        data = self._read("workorders", work_order_id)
        return WorkOrder.model_validate(data) if data else None

    def work_orders(
        self, state: WorkOrderState | None = None, *, opened_since: datetime | None = None
    ) -> list[WorkOrder]:
        items = self._all("workorders", lambda d: state is None or d["state"] == state.value)
        orders = (WorkOrder.model_validate(d) for d in items)
        return sorted(
            (o for o in orders if opened_since is None or o.opened_at >= opened_since),
            key=lambda w: w.opened_at,
        )

    # --- control records ----------------------------------------------------------------------
    def claim_key(
        self, key: str, at: datetime, ttl: timedelta, data: Mapping[str, Any] | None = None
    ) -> bool:
        """Record ``key`` unless it exists and has not expired. True if this call recorded it."""
        item = stored_item(
            {"pk": key, "created_at": iso(at), "expires_at": int((at + ttl).timestamp()), **(data or {})}
        )
        with self._lock:
            current = self._tables["control"].get(key)
            expires = current.get("expires_at") if current is not None else None
            if current is not None and not (
                isinstance(expires, int | float) and expires < int(at.timestamp())
            ):
                return False
            self._tables["control"][key] = item
            return True

    def put_key(self, key: str, data: Mapping[str, Any]) -> None:
        """Write a small record with no expiry (a watermark, a counter's baseline)."""
        item = stored_item({"pk": key, **data})
        with self._lock:
            self._tables["control"][key] = item

    def get_key(self, key: str) -> dict[str, Any] | None:
        return self._read("control", key)

    def get_keys(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        found = {key: self._read("control", key) for key in dict.fromkeys(keys)}
        return {key: data for key, data in found.items() if data is not None}

    def release_key(self, key: str) -> None:
        with self._lock:
            self._tables["control"].pop(key, None)

    # --- tenants ----------------------------------------------------------------------------
    def get_tenant(self, tenant: str) -> TenantSettings | None:
        data = self._read("tenants", tenant)
        return TenantSettings.model_validate(data["settings"]) if data else None

    # --- policies ---------------------------------------------------------------------------
    def latest_policy(self, name: str) -> dict[str, Any] | None:
        versions = self.policy_versions(name)
        return versions[-1] if versions else None

    def policy_versions(self, name: str) -> list[dict[str, Any]]:
        return sorted(self._all("policies", lambda d: d["name"] == name), key=lambda d: int(d["version"]))

    def stored_policy_names(self) -> list[str]:
        return sorted({str(d["name"]) for d in self._all("policies")})

    # --- the DLQ's record ----------------------------------------------------------------------
    def add_dlq_entry(self, entry: DlqEntry) -> bool:
        """Record a DLQ message found without a record. False if it had one (kept as it is)."""
        item = stored_item(rec.to_record(entry))
        with self._lock:
            if entry.message_id in self._tables[rec.TABLE]:
                return False
            self._tables[rec.TABLE][entry.message_id] = item
            return True

    def get_dlq_entry(self, message_id: str) -> DlqEntry | None:
        data = self._read(rec.TABLE, message_id)
        return rec.from_record(data) if data else None

    def get_dlq_entries(self, message_ids: list[str]) -> dict[str, DlqEntry]:
        wanted = set(message_ids)
        return {
            d["message_id"]: rec.from_record(d)
            for d in self._all(rec.TABLE, lambda d: d["message_id"] in wanted)
        }

    def dlq_entries(self, query: DlqQuery) -> DlqPage:
        """The ``by_task`` (sparse) or ``by_status`` index: by ``dlq_at``, bounds included."""
        return rec.page(self._dlq_listed(query), query.limit)

    def dlq_spans(self, query: DlqQuery) -> DlqSpanPage:
        return rec.span_page(self._dlq_listed(query), query.limit)

    def _dlq_listed(self, query: DlqQuery) -> list[Item]:
        low, high = rec.key_range(query.since, query.until)
        now = int(query.present_at.timestamp()) if query.present_at is not None else None
        changed = iso(query.changed_since) if query.changed_since is not None else None

        def listed(d: Item) -> bool:
            key = d.get("dlq_at")
            return (
                key is not None
                and (
                    d.get("dlq_task") == query.task_id
                    if query.task_id is not None
                    else d["status"] == query.status.value
                )
                and (low is None or key >= low)
                and (high is None or key <= high)
                and (query.after is None or key > query.after)
                and (query.tenant is None or d.get("tenant") == query.tenant)
                and (query.error_code is None or d.get("error_code") == query.error_code)
                and (now is None or d["expires_at"] > now)
                and (changed is None or str(d.get("changed_at") or "") >= changed)
            )

        items = sorted(self._all(rec.TABLE, listed), key=lambda d: str(d["dlq_at"]))
        return items[: query.limit + 1]

    def mark_dlq_entries(
        self, message_ids: list[str], status: DlqStatus, *, at: datetime, actor: str
    ) -> None:
        changes = rec.left(status, at, actor)
        with self._lock:
            for message_id in message_ids:
                item = self._tables[rec.TABLE].get(message_id) or {"message_id": message_id}
                item = {**item, **changes}
                item.pop("dlq_task", None)
                self._tables[rec.TABLE][message_id] = item

    # --- for tests ----------------------------------------------------------------------------
    @property
    def events(self) -> list[Emitted]:
        """Every outbox event committed, in commit order."""
        return [
            Emitted(
                d["event_id"],
                d["detail_type"],
                d["source"],
                d["subject"],
                d["created_at"],
                json.loads(d["detail"]),
            )
            for d in self._all("outbox")
        ]


if TYPE_CHECKING:
    _: Store = MemoryStore()  # mypy: a MemoryStore is a Store wherever one is expected


def _in_segment(key: str, segment: int, segments: int) -> Callable[[Item], bool]:
    """Whether an item is in ``segment`` of ``segments``: a stable hash of its partition key, as
    DynamoDB's parallel scan splits a table."""
    return lambda item: zlib.crc32(str(item[key]).encode()) % segments == segment


V = TypeVar("V")


def _parts(whole: dict[str, V], page_size: int | None) -> Iterator[dict[str, V]]:
    """``whole`` in parts of ``page_size`` keys (one part if ``None``), as a scan's pages come."""
    keys = list(whole)
    step = page_size or max(len(keys), 1)
    for start in range(0, max(len(keys), 1), step):
        yield {key: whole[key] for key in keys[start : start + step]}
