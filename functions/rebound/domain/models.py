"""The domain models, re-exported from the modules that define them (for one step: import from
those modules)."""

from __future__ import annotations

from rebound.domain.audit_record import (
    AuditRecord as AuditRecord,
)
from rebound.domain.backoff import JitterMode as JitterMode
from rebound.domain.basics import (
    ERROR_CODE_PATTERN as ERROR_CODE_PATTERN,
)
from rebound.domain.basics import (
    MAX_ASYNC_DURATION_S as MAX_ASYNC_DURATION_S,
)
from rebound.domain.basics import (
    MAX_PAYLOAD_BYTES as MAX_PAYLOAD_BYTES,
)
from rebound.domain.basics import (
    MAX_TASK_TIMEOUT_S as MAX_TASK_TIMEOUT_S,
)
from rebound.domain.basics import (
    TASK_ID_PATTERN as TASK_ID_PATTERN,
)
from rebound.domain.basics import (
    TASK_KEY_PATTERN as TASK_KEY_PATTERN,
)
from rebound.domain.basics import (
    TENANT_PATTERN as TENANT_PATTERN,
)
from rebound.domain.basics import (
    ErrorCode as ErrorCode,
)
from rebound.domain.basics import (
    Severity as Severity,
)
from rebound.domain.basics import (
    Strict as Strict,
)
from rebound.domain.basics import (
    TaskId as TaskId,
)
from rebound.domain.basics import (
    TaskKey as TaskKey,
)
from rebound.domain.basics import (
    Tenant as Tenant,
)
from rebound.domain.retry_policy import (
    POLICY_FIELDS as POLICY_FIELDS,
)
from rebound.domain.retry_policy import (
    PolicyOverride as PolicyOverride,
)
from rebound.domain.retry_policy import (
    RetryPolicy as RetryPolicy,
)
from rebound.domain.retry_policy import (
    TargetBudget as TargetBudget,
)
from rebound.domain.run import (
    Attempt as Attempt,
)
from rebound.domain.run import (
    AttemptOutcome as AttemptOutcome,
)
from rebound.domain.run import (
    BudgetOverrides as BudgetOverrides,
)
from rebound.domain.run import (
    Run as Run,
)
from rebound.domain.run import (
    RunState as RunState,
)
from rebound.domain.run import (
    Trigger as Trigger,
)
from rebound.domain.run import (
    with_changes as with_changes,
)
from rebound.domain.schedule_spec import (
    CatchUpPolicy as CatchUpPolicy,
)
from rebound.domain.schedule_spec import (
    DstSpec as DstSpec,
)
from rebound.domain.schedule_spec import (
    OverlapPolicy as OverlapPolicy,
)
from rebound.domain.schedule_spec import (
    ScheduleSpec as ScheduleSpec,
)
from rebound.domain.schedule_spec import (
    SlaSpec as SlaSpec,
)
from rebound.domain.target_specs import (
    _CREDENTIAL_HEADER as _CREDENTIAL_HEADER,
)
from rebound.domain.target_specs import (
    MODE_DESCRIPTION as MODE_DESCRIPTION,
)
from rebound.domain.target_specs import (
    SECRET_REFERENCE_PATTERN as SECRET_REFERENCE_PATTERN,
)
from rebound.domain.target_specs import (
    SIM_ENVIRONMENTS as SIM_ENVIRONMENTS,
)
from rebound.domain.target_specs import (
    HttpTarget as HttpTarget,
)
from rebound.domain.target_specs import (
    LambdaTarget as LambdaTarget,
)
from rebound.domain.target_specs import (
    SecretHeader as SecretHeader,
)
from rebound.domain.target_specs import (
    SecretReference as SecretReference,
)
from rebound.domain.target_specs import (
    SimAsync as SimAsync,
)
from rebound.domain.target_specs import (
    SimBehavior as SimBehavior,
)
from rebound.domain.target_specs import (
    SimOutage as SimOutage,
)
from rebound.domain.target_specs import (
    SimTarget as SimTarget,
)
from rebound.domain.target_specs import (
    Target as Target,
)
from rebound.domain.target_specs import (
    TargetMode as TargetMode,
)
from rebound.domain.target_specs import (
    TargetRules as TargetRules,
)
from rebound.domain.target_specs import (
    is_credential_header as is_credential_header,
)
from rebound.domain.task import (
    _PATTERN_SCALARS as _PATTERN_SCALARS,
)
from rebound.domain.task import (
    MAX_EVENT_PATTERN_BYTES as MAX_EVENT_PATTERN_BYTES,
)
from rebound.domain.task import (
    Task as Task,
)
from rebound.domain.task import (
    TaskFile as TaskFile,
)
from rebound.domain.task import (
    TaskState as TaskState,
)
from rebound.domain.task import (
    TenantSettings as TenantSettings,
)
from rebound.domain.task import (
    _check_pattern as _check_pattern,
)
from rebound.domain.work_order import (
    Delivery as Delivery,
)
from rebound.domain.work_order import (
    DeliveryStatus as DeliveryStatus,
)
from rebound.domain.work_order import (
    Resolution as Resolution,
)
from rebound.domain.work_order import (
    WorkOrder as WorkOrder,
)
from rebound.domain.work_order import (
    WorkOrderState as WorkOrderState,
)
