"""Routes for asynchronous attempts' reports: ``POST /runs/{run_id}/heartbeat|complete|fail``.

Each carries the attempt's completion token and goes to ``rebound.engine.async_reports``, as the bus
events and the CLI do. An accepted report answers 200; a refused one 409 with its ``reason``
(``used``, ``timed_out``, ``expired``, ``other_run``, ``other_attempt``, ``not_running``, ...), so
a worker can tell "already done" from "too late" without parsing text.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from pydantic import BaseModel, Field

from rebound.api.app import Api
from rebound.domain.basics import ERROR_CODE_PATTERN
from rebound.domain.completion import MAX_TOKEN_CHARS
from rebound.engine.async_reports import AsyncReports, Report, ReportAnswer, ReportKind
from rebound.ops.authz import Rule, RunOf

REFUSED_STATUS = 409


class Heartbeat(BaseModel):
    token: str = Field(min_length=1, max_length=MAX_TOKEN_CHARS, description="the attempt's completion token")
    progress: float | None = Field(default=None, ge=0.0, le=1.0, description="how far the work is, 0..1")


class Complete(Heartbeat):
    output: dict[str, Any] = Field(
        default_factory=dict, description="what the work produced (kept on the run)"
    )


class Fail(Heartbeat):
    error_code: str | None = Field(
        default=None, pattern=ERROR_CODE_PATTERN, description="default TASK_FAILED"
    )
    message: str | None = Field(default=None, max_length=1000)
    retryable: bool = Field(default=True, description="false sends the run to the DLQ without retrying")


def answer(result: ReportAnswer) -> Response[str]:
    return Response(
        status_code=200 if result.accepted else REFUSED_STATUS,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(result.as_dict()),
    )


def register(api: Api) -> None:
    def reports(run_id: str) -> AsyncReports:
        """The token proves which attempt is reported; the caller must still hold its tenant."""
        return AsyncReports(api.deps(), api.caller.actor)

    reporting = Rule("runs:report", RunOf("run_id"))

    @api.post("/runs/<run_id>/heartbeat", reporting, summary="Report that an asynchronous attempt is alive")
    def heartbeat(run_id: str, body: Heartbeat) -> Response[str]:
        report = Report(ReportKind.HEARTBEAT, body.token, run_id=run_id, progress=body.progress)
        return answer(reports(run_id).report(report))

    @api.post("/runs/<run_id>/complete", reporting, summary="Report that an asynchronous attempt succeeded")
    def complete(run_id: str, body: Complete) -> Response[str]:
        report = Report(
            ReportKind.COMPLETE, body.token, run_id=run_id, progress=body.progress, output=body.output
        )
        return answer(reports(run_id).report(report))

    @api.post("/runs/<run_id>/fail", reporting, summary="Report that an asynchronous attempt failed")
    def fail(run_id: str, body: Fail) -> Response[str]:
        report = Report(
            ReportKind.FAIL,
            body.token,
            run_id=run_id,
            progress=body.progress,
            error_code=body.error_code,
            message=body.message,
            retryable=body.retryable,
        )
        return answer(reports(run_id).report(report))
