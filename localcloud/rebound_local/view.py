"""What ``rebound local up`` shows while it runs: a Rich dashboard, or plain log lines.

Both read the local cloud's state straight from moto's backends (``rebound_local.observe``),
about once a second, without API calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rebound_local import motopatch, observe
from rebound_local.stack import LocalStack

RUN_STATES = (
    "pending",
    "running",
    "failed",
    "retry_scheduled",
    "succeeded",
    "dead_lettered",
    "replayed",
    "skipped",
    "cancelled",
)
Event = tuple[datetime, str, dict[str, Any]]


@dataclass
class Status:
    """One look at the system."""

    now: datetime
    queues: list[observe.QueueDepth]
    runs: dict[str, int]
    schedules: observe.ScheduleCounts
    work_orders_open: int
    latest_work_orders: list[dict[str, Any]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    @property
    def retries_scheduled(self) -> int:
        return self.runs.get("retry_scheduled", 0)

    @property
    def dlq(self) -> observe.QueueDepth | None:
        return next((q for q in self.queues if q.logical == "dlq"), None)


def look(stack: LocalStack, events: int = 10) -> Status:
    s = stack.settings
    cloud = stack.cloud
    orders = observe.count_by_index(cloud, s.table("workorders"), "by_state")
    return Status(
        now=stack.clock.now(),
        queues=observe.queue_depths(cloud, s),
        runs=observe.runs_by_state(cloud, s.table("runs")),
        schedules=observe.schedule_counts(cloud),
        work_orders_open=orders.get("open", 0),
        latest_work_orders=_latest_open_orders(stack, 5),
        events=list(stack.runtime.recent_events)[-events:],
    )


def _latest_open_orders(stack: LocalStack, limit: int) -> list[dict[str, Any]]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    table_name = stack.settings.table("workorders")
    with motopatch.LOCK:
        table = stack.cloud.dynamodb_backend().get_table(table_name)
        partitions = motopatch._index_of(table)
        keys = list(partitions.buckets.get("by_state", {}).get(DynamoType({"S": "open"}), set()))[:500]
        items = [table.get_item(h, r) for h, r in keys]
        decoded = [observe.decode_item(item) for item in items if item is not None]
    decoded.sort(key=lambda o: str(o.get("opened_at")), reverse=True)
    return decoded[:limit]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def describe_event(event: Event) -> str:
    at, kind, data = event
    detail: dict[str, Any] = {}
    raw = data.get("detail")
    if isinstance(raw, str):
        try:
            detail = json.loads(raw)
        except ValueError:
            detail = {}
    parts = [str(detail[k]) for k in ("run_id", "subject", "state", "error_code", "reason") if detail.get(k)]
    return f"{at:%H:%M:%S} {kind} {' '.join(parts)}".rstrip()


class Dashboard:
    """The live view: header, queues, runs, dead letters and work orders, latest events."""

    def __init__(self, stack: LocalStack, header: str) -> None:
        self.stack = stack
        self.header = header
        self.started = time.monotonic()

    def render(self) -> RenderableType:
        status = look(self.stack)
        stats = self.stack.runtime.stats
        uptime = time.monotonic() - self.started
        head = Text.from_markup(
            f"{self.header}\n"
            f"schedule time [bold]{status.now:%Y-%m-%d %H:%M:%S}[/bold] UTC   up {_age(uptime)}   "
            f"{stats.schedules_fired} fires, {sum(stats.invocations.values())} invocations, "
            f"{sum(stats.errors.values())} errors   (Ctrl-C stops and saves)"
        )
        queues = Table(title="Queues", expand=True)
        for column in ("queue", "visible", "in flight", "delayed", "oldest"):
            queues.add_column(column, justify="left" if column == "queue" else "right")
        for depth in status.queues:
            name = f"[red]{depth.logical}[/red]" if depth.is_dlq and depth.total else depth.logical
            queues.add_row(
                name, str(depth.visible), str(depth.in_flight), str(depth.delayed), _age(depth.oldest_age_s)
            )

        runs = Table(title="Runs by state", expand=True)
        runs.add_column("state")
        runs.add_column("runs", justify="right")
        for state in RUN_STATES:
            if status.runs.get(state):
                runs.add_row(state, str(status.runs[state]))
        dlq = status.dlq
        loop = Table(title="Retry loop", expand=True, show_header=False)
        loop.add_column("what")
        loop.add_column("value", justify="right")
        loop.add_row("retries scheduled", str(status.retries_scheduled))
        loop.add_row("one-time retry schedules", str(status.schedules.one_time))
        loop.add_row("task schedules", f"{status.schedules.recurring} ({status.schedules.disabled} paused)")
        loop.add_row("DLQ depth", str(dlq.total if dlq else 0))
        loop.add_row("DLQ oldest", _age(dlq.oldest_age_s if dlq else None))
        loop.add_row("open work orders", str(status.work_orders_open))
        for order in status.latest_work_orders:
            loop.add_row(
                f"  {order.get('work_order_id')}", f"{order.get('subject')} {order.get('error_code') or ''}"
            )

        events = Text("\n".join(describe_event(e) for e in reversed(status.events)) or "(none yet)")
        top = Table.grid(expand=True)
        top.add_column(ratio=3)
        top.add_column(ratio=2)
        top.add_column(ratio=3)
        top.add_row(queues, runs, loop)
        return Group(Panel(head, title="rebound local up"), top, Panel(events, title="Latest events"))


class PlainLog:
    """``--no-view``: new events as lines, and a status line every ``every_s`` seconds."""

    def __init__(self, stack: LocalStack, every_s: float = 10.0) -> None:
        self.stack = stack
        self.every_s = every_s
        self._last_status = time.monotonic()
        self._last_event: Event | None = None

    def new_events(self) -> list[Event]:
        events = list(self.stack.runtime.recent_events)
        if self._last_event is not None:
            for index in range(len(events) - 1, -1, -1):
                if events[index] is self._last_event:
                    events = events[index + 1 :]
                    break
        if events:
            self._last_event = events[-1]
        return events

    def lines(self, force_status: bool = False) -> Iterable[str]:
        for event in self.new_events():
            yield f"event {describe_event(event)}"
        if force_status or time.monotonic() - self._last_status >= self.every_s:
            self._last_status = time.monotonic()
            yield status_line(look(self.stack, events=0))


def status_line(status: Status) -> str:
    queues = " ".join(f"{q.logical}={q.visible}/{q.in_flight}/{q.delayed}" for q in status.queues)
    runs = " ".join(f"{k}={v}" for k, v in sorted(status.runs.items())) or "none"
    dlq = status.dlq
    return (
        f"status {status.now:%Y-%m-%dT%H:%M:%S}Z runs[{runs}] queues(visible/in-flight/delayed)[{queues}] "
        f"retries_scheduled={status.retries_scheduled} dlq={dlq.total if dlq else 0} "
        f"dlq_oldest={_age(dlq.oldest_age_s if dlq else None)} open_work_orders={status.work_orders_open}"
    )
