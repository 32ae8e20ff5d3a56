"""Build the engine's dependencies once per Lambda container, at first use (never at import).

The local runtime and the tests install their own ``Deps`` with ``use()``: same handlers, other
clock, metrics sink and fault points.
"""

from __future__ import annotations

import random
import threading
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

    from rebound.adapters.secrets import SecretResolver
    from rebound.adapters.targets.dispatch import TargetDispatcher
    from rebound.engine.deps import Deps
    from rebound.engine.ports import Clock, CrashPoints, Fanout, Flags, Metrics
    from rebound.settings import Settings


@cache
def aws_config() -> Config:
    """The botocore configuration of every client Rebound builds: standard retries, short connects."""
    from botocore.config import Config

    return Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)


def __getattr__(name: str) -> Any:
    if name == "AWS_CONFIG":  # the name callers import; built on first use, not at import
        return aws_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_lock = threading.Lock()
_deps: Deps | None = None


def deps() -> Deps:
    """The container's dependencies, built on first call from the environment."""
    global _deps
    if _deps is None:
        with _lock:
            if _deps is None:
                from rebound.settings import settings_from_env

                _deps = build_deps(settings_from_env())
    return _deps


def use(value: Deps | None) -> None:
    """Install (or with ``None`` forget) the dependencies every handler will use."""
    global _deps
    with _lock:
        _deps = value


def sla_webhook(settings: Settings, secrets: SecretResolver, clock: Clock) -> list[Any]:
    """The SLA-breach webhook, where the environment names one (``notifications.sla_webhook_url``)."""
    if not settings.sla_webhook_url:
        return []
    from rebound.adapters.sla_webhook import SlaWebhookChannel

    return [SlaWebhookChannel(settings.sla_webhook_url, secrets, settings.sla_webhook_secret, clock)]


def feature_flags(
    settings: Settings, session: boto3.session.Session, kwargs: dict[str, Any], clock: Clock, metrics: Metrics
) -> Flags:
    """The environment's flags (``Settings.flags``): AppConfig, read through Powertools' feature
    flags utility, kept ``MAX_AGE_S`` on ``clock``; every flag on where none is set."""
    from rebound.engine.ports import DefaultFlags

    if not settings.flags:
        return DefaultFlags()
    from aws_lambda_powertools.utilities.feature_flags import AppConfigStore

    from rebound.adapters.flags import ClockedStore, FlagAdmin, FlagReader

    _, application, environment, profile, strategy = settings.flags.split(":")
    data = session.client("appconfigdata", **kwargs)

    def fresh() -> AppConfigStore:
        # max_age 0: every read asks AppConfigData; ClockedStore keeps them on Rebound's clock.
        return AppConfigStore(
            environment=environment, application=application, name=profile, max_age=0, boto3_client=data
        )

    admin = FlagAdmin(
        session.client("appconfig", **kwargs), application, profile, environment, strategy, fresh
    )
    return FlagReader(ClockedStore(fresh(), monotonic=lambda: clock.now().timestamp()), metrics, admin)


def build_deps(
    settings: Settings,
    *,
    session: boto3.session.Session | None = None,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
    faults: CrashPoints | None = None,
    targets: TargetDispatcher | None = None,
    fanout: Fanout | None = None,
    client_kwargs: dict[str, Any] | None = None,
) -> Deps:
    # Imported here, not at the top: a handler module's import stays small (a cold start imports
    # what the first invocation uses, when it uses it; docs/performance.md, "Cold import").
    import boto3

    from rebound.adapters.archive import DynamoArchive
    from rebound.adapters.audit_archive import S3AuditArchive
    from rebound.adapters.audit_keys import KmsAuditKeys
    from rebound.adapters.bus import EventBridgeBus
    from rebound.adapters.completion_keys import SecretCompletionKeys
    from rebound.adapters.dynamo import DynamoStore
    from rebound.adapters.metrics import PowertoolsMetrics
    from rebound.adapters.notify import ChannelNotifier, notification_channels
    from rebound.adapters.queues import CloudWatchQueueAges, SqsQueues, queue_name
    from rebound.adapters.scheduler import SchedulerSchedules, ScheduleTarget
    from rebound.adapters.secrets import SecretResolver
    from rebound.adapters.streams import StreamReader
    from rebound.adapters.targets.registry import default_targets
    from rebound.config.loader import load_policy_book
    from rebound.domain.errors import ConfigError
    from rebound.engine.deps import Deps
    from rebound.engine.policies import PolicyService
    from rebound.engine.ports import ARCHIVE_TABLE, NoCompletionKey, NoCrashes, SystemClock, ThreadFanout
    from rebound.engine.telemetry import AUDIT_FAILURE

    session = session or boto3.session.Session()
    kwargs: dict[str, Any] = {"config": aws_config(), **(client_kwargs or {})}
    clock = clock or SystemClock()
    metrics = metrics or PowertoolsMetrics(environment=settings.environment)
    sink = metrics
    dynamodb = session.client("dynamodb", **kwargs)
    archive_table = settings.tables.get(ARCHIVE_TABLE)
    if not settings.audit_key_id:
        raise ConfigError(
            "resources",
            "audit_key_id",
            "no KMS key keys the audit chain: deploy this version of the stack (or run `rebound local "
            "up` again), which creates it",
        )
    store = DynamoStore(
        dynamodb,
        settings.tables,
        settings.event_source,
        on_failed_commit=lambda: sink.count(AUDIT_FAILURE),
        sleep=clock.sleep,
        rng=random.Random(settings.jitter_seed) if settings.jitter_seed is not None else None,
        audit_keys=KmsAuditKeys(session.client("kms", **kwargs), settings.audit_key_id, pause=clock.sleep),
        published=settings.published_events(),
        faults=faults,
        runs_by_task=settings.runs_by_task,
        retention=settings.retention,
        now=clock.now,
    )
    queues = SqsQueues(
        session.client("sqs", **kwargs), {name: ref.url for name, ref in settings.queues.items()}
    )
    schedules = SchedulerSchedules(
        session.client("scheduler", **kwargs),
        settings.schedule_group,
        ScheduleTarget(
            queue_arn=settings.queue("execution").arn,
            role_arn=settings.scheduler_role_arn,
            dead_letter_arn=settings.queue("scheduler_dlq").arn,
        ),
    )
    secrets = SecretResolver(
        lambda: session.client("ssm", **kwargs), lambda: session.client("secretsmanager", **kwargs)
    )
    channels = notification_channels(
        sns=session.client("sns", **kwargs) if settings.topic_arn else None,
        topic_arn=settings.topic_arn,
        secrets=secrets,
        pagerduty_secret=settings.pagerduty_secret,
        slack_secret=settings.slack_secret,
    )
    flags = feature_flags(settings, session, kwargs, clock, metrics)
    if settings.flags:
        from rebound.domain.flags import AUDIT_STREAMING

        store.streaming = lambda: flags.enabled(AUDIT_STREAMING)
    return Deps(
        settings=settings,
        clock=clock,
        store=store,
        queues=queues,
        schedules=schedules,
        bus=EventBridgeBus(session.client("events", **kwargs), settings.bus_name),
        targets=targets
        or default_targets(
            session, clock, kwargs, settings.target_rules, settings.environment, settings.tenant_secrets_role
        ),
        notifier=ChannelNotifier(channels, sla_webhook(settings, secrets, clock)),
        policies=PolicyService(store, load_policy_book(settings.config_dir), settings.deployed_policies),
        metrics=metrics,
        faults=faults or NoCrashes(),
        flags=flags,
        fanout=fanout or ThreadFanout(),
        streams=StreamReader(lambda: session.client("dynamodbstreams", **kwargs)),
        archive=DynamoArchive(dynamodb, archive_table) if archive_table else None,
        audit_archive=(
            S3AuditArchive(lambda: session.client("s3", **kwargs), settings.archive_bucket)
            if settings.archive_bucket
            else None
        ),
        completion_keys=(
            SecretCompletionKeys(secrets, settings.completion_key)
            if settings.completion_key
            else NoCompletionKey()
        ),
        queue_ages=CloudWatchQueueAges(
            lambda: session.client("cloudwatch", **kwargs),
            {name: queue_name(ref.url) for name, ref in settings.queues.items()},
            clock.now,
        ),
    )
