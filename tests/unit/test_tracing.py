"""One trace per run, named by the run (``rebound.domain.tracing``): X-Ray's and W3C's forms name
the same trace, every component derives the same one, and an event about no run has none."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from rebound.domain import tracing

AT = datetime(2026, 3, 7, 9, 0, tzinfo=UTC)


def test_a_runs_trace_is_its_scheduled_second_then_a_hash_of_its_id() -> None:
    trace = tracing.trace_id("acme.nightly:20260307T090000Z", AT)
    assert re.fullmatch(r"[0-9a-f]{32}", trace)
    assert int(trace[:8], 16) == int(AT.timestamp())
    assert trace == tracing.trace_id("acme.nightly:20260307T090000Z", AT), "derived, so every hop agrees"
    assert trace != tracing.trace_id("acme.nightly:20260307T091000Z", AT)


def test_the_xray_header_and_the_traceparent_name_the_same_trace() -> None:
    trace = tracing.trace_id("r1", AT)
    parent = tracing.span_id("r1", "retry-1")
    header = tracing.xray_header(trace, parent)
    assert re.fullmatch(r"Root=1-[0-9a-f]{8}-[0-9a-f]{24};Parent=[0-9a-f]{16};Sampled=1", header)
    assert header.split(";")[0] == f"Root=1-{trace[:8]}-{trace[8:]}"
    assert tracing.traceparent(trace, parent) == f"00-{trace}-{parent}-01"


def test_an_event_about_a_run_carries_its_trace_and_one_about_nothing_else_none() -> None:
    detail = {"run_id": "r1", "scheduled_for": "2026-03-07T09:00:00.000Z", "attempt": 1}
    header = tracing.detail_header(detail, "event-1")
    assert header is not None and header.startswith(f"Root=1-{tracing.trace_id('r1', AT)[:8]}-")
    assert tracing.detail_header({"work_order_id": "wo-1"}, "e") is None
    assert tracing.detail_header({"run_id": "r1", "scheduled_for": "not a time"}, "e") is None


def test_a_span_is_never_all_zero() -> None:
    assert all(tracing.span_id(str(n)) != "0" * 16 for n in range(1000))
