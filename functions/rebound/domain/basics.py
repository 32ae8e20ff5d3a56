"""Shared types of the domain models: the patterns of ids, keys and error codes, size limits,
``Strict`` (refuses unknown keys) and ``Severity``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

TASK_ID_PATTERN = r"^[a-z0-9_-]{1,48}$"
TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,47}$"
TASK_KEY_PATTERN = r"^([a-z0-9][a-z0-9_-]{0,47}\.)?[a-z0-9_-]{1,48}$"
"""A task's key: ``<tenant>.<id>`` (``rebound.domain.tenancy``), or a bare id written before tenancy."""
ERROR_CODE_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_TASK_TIMEOUT_S = 270
"""The executor function runs for at most 300 s; an attempt must fit inside it with margin."""
MAX_ASYNC_DURATION_S = 86400
"""An asynchronous attempt (``target.mode: async``) may run at most a day, heartbeats permitting."""

TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN, description="[a-z0-9_-], at most 48 characters")]
TaskKey = Annotated[
    str,
    Field(
        pattern=TASK_KEY_PATTERN,
        description="[a-z0-9_-], at most 48 characters; stored as <tenant>.<id> (the loader adds the tenant)",
    ),
]
Tenant = Annotated[str, Field(pattern=TENANT_PATTERN)]
ErrorCode = Annotated[str, Field(pattern=ERROR_CODE_PATTERN)]


class Strict(BaseModel):
    """Refuses unknown keys so that a typo in a file is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- retry policies


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


WAIT_POLL_S = 30.0
"""How often a run waiting for a slot looks again (the executor's poll; the pre-flight predicts
with it)."""
