"""The workstream part of ``make demo`` on the local cloud: the story it prints is what happened."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from test_cli_harness import Cloud, cloud_fixture

from rebound.domain.workstream_runs import StepState, WorkstreamState
from rebound_local.demo_workstream import run_workstream_demo

pytestmark = pytest.mark.e2e
local_cloud = cloud_fixture()


def test_the_demo_workstream_fails_is_rolled_back_resumed_and_completes(local_cloud: Cloud) -> None:
    buffer = io.StringIO()
    demo = run_workstream_demo(Console(file=buffer, width=140), local_cloud.stack)
    assert demo.failed_first
    assert demo.transform_attempts == 3, "retried up to its policy's max_attempts, then dead-lettered"
    assert "ledger-extract" in demo.not_rolled_back
    assert demo.run.state is WorkstreamState.COMPLETED
    assert {s.state for s in demo.run.steps} == {StepState.SUCCEEDED}
    text = buffer.getvalue()
    assert "✖ ledger-transform" in text and "the workstream is completed" in text
    orders = [o for o in local_cloud.deps.store.work_orders() if o.subject.startswith("workstream#")]
    assert [o.severity.value for o in orders] == ["critical"]
