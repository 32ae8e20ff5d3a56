"""Feature flags (``rebound.domain.flags``) on the local cloud's AppConfig stand-in: listed and set
(audited), read by the engine within the cache window, each built flag's effect, and what happens
when they cannot be read."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from api_support import call, ok
from botocore.exceptions import ClientError
from pydantic import ValidationError

from rebound import resources, wiring
from rebound.adapters.flags import FLAG_READ_FAILURE, MAX_AGE_S, ClockedStore, FlagReader
from rebound.domain.errors import FeatureDisabled, OperationalError, ValidationFailed
from rebound.domain.flags import (
    AUDIT_STREAMING,
    DLQ_INSPECTOR,
    FLAGS,
    TASK_RETRY_QUEUE,
    TASK_SCHEDULER_V3,
    TASK_SLA_MONITOR,
)
from rebound.domain.run import RunState
from rebound.engine.deps import Deps
from rebound.engine.retry_scheduler import RetryScheduler
from rebound.handlers import executor
from rebound.ops.dlq import DlqOps
from rebound.ops.flags import FlagOps, flags_subject
from rebound.settings import Settings
from support import Context, detail_types, fire, register, sqs_event, task

pytestmark = pytest.mark.integration

RUN = "job:20260307T090000Z"


def switch(deps: Deps, name: str, on: bool) -> dict[str, Any]:
    result = FlagOps(deps, "arn:aws:iam::123456789012:user/alice").set(name, on, "incident 4711")
    deps.clock.sleep(MAX_AGE_S + 1)  # the handlers' read of the flags expires
    return result


def test_every_flag_is_listed_on_by_default(deps: Deps) -> None:
    listed = FlagOps(deps, "reader").list()
    assert [(f["name"], f["on"]) for f in listed] == [(name, True) for name in FLAGS]


def test_a_flag_set_is_audited_with_the_actor_and_read_by_the_engine_within_the_cache(deps: Deps) -> None:
    admin = deps.flags.admin  # type: ignore[attr-defined]
    handler = FlagReader(
        ClockedStore(admin.fresh(), monotonic=lambda: deps.clock.now().timestamp()), deps.metrics
    )
    assert deps.flags.enabled(TASK_RETRY_QUEUE) and handler.enabled(TASK_RETRY_QUEUE)
    result = FlagOps(deps, "arn:aws:iam::123456789012:user/alice").set(TASK_RETRY_QUEUE, False, "incident")
    assert result["changed"] and result["version"] == 2
    assert not deps.flags.enabled(TASK_RETRY_QUEUE)  # the process that set it reads it at once
    assert handler.enabled(TASK_RETRY_QUEUE)  # another keeps its read for MAX_AGE_S, asking nothing
    deps.clock.sleep(MAX_AGE_S + 1)
    assert not handler.enabled(TASK_RETRY_QUEUE)
    [record] = deps.store.audit_trail(flags_subject(deps.settings.environment))
    assert (record.actor, record.action, record.from_state, record.to_state) == (
        "arn:aws:iam::123456789012:user/alice",
        "flag-set",
        "on",
        "off",
    )
    assert record.evidence == {"flag": TASK_RETRY_QUEUE, "version": 2, "reason": "incident"}

    again = FlagOps(deps, "someone").set(TASK_RETRY_QUEUE, False)  # already off: nothing recorded
    assert not again["changed"] and len(deps.store.audit_trail(flags_subject(deps.settings.environment))) == 1


def test_an_unknown_flag_is_refused_naming_the_flags(deps: Deps) -> None:
    with pytest.raises(ValidationFailed, match="no feature flag 'task-retry'; the flags are audit-streaming"):
        FlagOps(deps, "someone").set("task-retry", False)


def test_retries_off_dead_letters_a_failed_run_at_once_and_on_again_retries(wired: Deps) -> None:
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    switch(wired, TASK_RETRY_QUEUE, False)
    executor.lambda_handler(sqs_event(fire("job")), Context())
    assert RetryScheduler(wired).on_failed(RUN, 1) == "dead-lettered"
    run = wired.store.get_run(RUN)
    assert run is not None and run.state is RunState.DEAD_LETTERED and run.attempt == 1
    dead = next(r for r in wired.store.audit_trail(f"run#{RUN}") if r.to_state == "dead_lettered")
    assert dead.evidence["reason"] == "retries_disabled_by_flag"

    switch(wired, TASK_RETRY_QUEUE, True)
    executor.lambda_handler(sqs_event(fire("job", "2026-03-07T09:05:00Z")), Context())
    assert RetryScheduler(wired).on_failed("job:20260307T090500Z", 1) == "retry-scheduled"


def test_the_dlq_inspector_off_answers_disabled_in_this_environment(deps: Deps) -> None:
    from rebound.handlers import ops_api

    switch(deps, DLQ_INSPECTOR, False)
    with pytest.raises(FeatureDisabled, match="the DLQ inspector is disabled in this environment"):
        DlqOps(deps, "reader")
    wiring.use(deps)
    try:
        status, body = call(ops_api, "GET", "/dlq")
        assert (status, body["code"], body["flag"]) == (409, "FEATURE_DISABLED", DLQ_INSPECTOR)
        assert ok(ops_api, "GET", "/flags")[1] == {
            "name": DLQ_INSPECTOR,
            "on": False,
            "default": True,
            "what": FLAGS[DLQ_INSPECTOR],
        }
    finally:
        wiring.use(None)


def test_the_sla_monitor_off_judges_no_breach(wired: Deps) -> None:
    slow = task("job", sla={"max_duration": "1s"}, target={"type": "sim", "behavior": {"duration_s": 5}})
    register(wired, slow)
    switch(wired, TASK_SLA_MONITOR, False)
    executor.lambda_handler(sqs_event(fire("job")), Context())
    run = wired.store.get_run(RUN)
    assert run is not None and run.state is RunState.SUCCEEDED and run.sla_breaches == []


class Refusing:
    """An AppConfigData client that cannot be reached."""

    def start_configuration_session(self, **_: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "StartConfigurationSession"
        )

    def get_latest_configuration(self, **_: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "GetLatestConfiguration"
        )


def test_unreadable_flags_keep_their_last_known_value_then_their_default_and_say_so(
    deps: Deps, caplog: pytest.LogCaptureFixture
) -> None:
    admin = deps.flags.admin  # type: ignore[attr-defined]
    admin.publish({TASK_RETRY_QUEUE: False})
    store = ClockedStore(admin.fresh(), max_age=0)
    reader = FlagReader(store, deps.metrics)
    assert reader.enabled(TASK_RETRY_QUEUE) is False  # read once: known
    store.store._conf_store.client = Refusing()  # AppConfigData stops answering
    with caplog.at_level(logging.WARNING):
        assert reader.enabled(TASK_RETRY_QUEUE) is False  # the last known value
        assert reader.enabled(DLQ_INSPECTOR) is True  # never read: its default
    assert deps.metrics.counts[FLAG_READ_FAILURE] == 2  # type: ignore[attr-defined]
    assert "feature flags unreadable" in caplog.text


def test_the_local_cloud_serves_the_deployed_version_not_the_newest(deps: Deps) -> None:
    """A hosted version that is not deployed is not read (AppConfigData's semantics, which the
    local cloud's stand-in keeps)."""
    admin = deps.flags.admin  # type: ignore[attr-defined]
    admin.client.create_hosted_configuration_version(
        ApplicationId=admin.application,
        ConfigurationProfileId=admin.profile,
        Content=b'{"task-retry-queue": {"default": false}}',
        ContentType="application/json",
    )
    assert admin.values()[TASK_RETRY_QUEUE] is True
    admin.publish({TASK_RETRY_QUEUE: False})
    assert admin.values()[TASK_RETRY_QUEUE] is False


def test_a_flags_location_that_is_not_one_is_refused_naming_the_setting(deps: Deps) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({**deps.settings.model_dump(), "flags": "appconfig:app"})
    assert [e["loc"][-1] for e in caught.value.errors()] == ["flags"]


def test_audit_streaming_off_publishes_only_the_events_rebound_consumes(wired: Deps) -> None:
    wired.store.published = None  # the environment publishes every event (outbox.publish: ['*'])
    consumed = resources.consumed_detail_types()
    register(wired, task("job", target={"type": "sim", "behavior": {"always_fail": True}}))
    executor.lambda_handler(sqs_event(fire("job")), Context())
    outside = {t for t in detail_types(wired) if t not in consumed}
    assert outside and "task.execution.failed" in detail_types(wired)  # both kinds, flag on

    switch(wired, AUDIT_STREAMING, False)
    before = len(detail_types(wired))
    executor.lambda_handler(sqs_event(fire("job", "2026-03-07T09:05:00Z")), Context())
    published = detail_types(wired)[before:]
    assert "task.execution.failed" in published  # the retry scheduler's input is still published
    assert not [t for t in published if t not in consumed]
    run = wired.store.get_run("job:20260307T090500Z")
    assert run is not None and run.state is RunState.FAILED
    assert [r.to_state for r in wired.store.audit_trail(f"run#{run.run_id}")] == ["running", "failed"]


def test_scheduler_v3_off_fires_at_the_exact_instant_and_warns_of_nothing(wired: Deps) -> None:
    from rebound.ops.preflight import PreflightOps, parse_window

    jittered = task("job", schedule={"cron": "0 * * * *", "stagger": "60s", "jitter_window": "5m"})
    register(wired, jittered)
    [name] = wired.store.get_task("job").schedule_names  # type: ignore[union-attr]
    assert wired.schedules.get(name)["FlexibleTimeWindow"] == {  # type: ignore[index]
        "Mode": "FLEXIBLE",
        "MaximumWindowInMinutes": 5,
    }
    mutex = {
        "tasks": [
            {
                "id": i,
                "tenant": "acme",
                "schedule": {"cron": "0 * * * *"},
                "mutex_group": "m",
                "timeout_s": 270,
                "target": {"type": "sim", "behavior": {"duration_s": 120}},
            }
            for i in ("a", "b")
        ]
    }
    ops = PreflightOps(wired)
    assert ops.dryrun(ops.parse(mutex), parse_window("2h")).warnings  # on: the collision is warned

    result = switch(wired, TASK_SCHEDULER_V3, False)
    assert result["schedules_written"] == 1
    assert wired.schedules.get(name)["FlexibleTimeWindow"] == {"Mode": "OFF"}  # type: ignore[index]
    executor.lambda_handler(sqs_event(fire("job")), Context())  # not deferred to its stagger offset
    run = wired.store.get_run(RUN)
    assert run is not None and run.state is RunState.SUCCEEDED
    assert run.due_at in (None, run.scheduled_for)
    report = PreflightOps(wired).dryrun(ops.parse(mutex), parse_window("2h"))
    assert report.warnings == [] and {t.task_id: t.fires for t in report.tasks} == {
        "acme.a": 2,
        "acme.b": 2,
        "job": 2,
    }

    assert switch(wired, TASK_SCHEDULER_V3, True)["schedules_written"] == 1
    assert wired.schedules.get(name)["FlexibleTimeWindow"]["Mode"] == "FLEXIBLE"  # type: ignore[index]


def test_a_change_whose_audit_record_failed_is_recorded_when_the_operator_runs_it_again(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = FlagOps(deps, "arn:aws:iam::123456789012:user/alice")
    failing = OperationalError("the audit table is throttled")

    def refused(*_: Any, **__: Any) -> None:
        raise failing

    monkeypatch.setattr(ops, "_record", refused)
    with pytest.raises(OperationalError):
        ops.set(TASK_RETRY_QUEUE, False, "incident")  # published, its record not written
    monkeypatch.undo()
    again = ops.set(TASK_RETRY_QUEUE, False, "incident")
    assert again["changed"] is False and again["recorded"] is True
    [record] = deps.store.audit_trail(flags_subject(deps.settings.environment))
    assert record.to_state == "off" and record.evidence == {
        "flag": TASK_RETRY_QUEUE,
        "found_set": True,
        "reason": "incident",
    }
    assert "recorded" not in ops.set(TASK_RETRY_QUEUE, False)  # recorded now: nothing more
