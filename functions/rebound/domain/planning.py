"""The conflict and SLA defaults of ``default_policy.yaml``: what the pre-flight dry run
(``rebound.domain.prediction.preflight``) and the SLA report (``rebound.ops.sla_report``) judge against.

They sit in their own sections of the file (``conflicts:`` and ``sla:``), next to the retry
defaults, because they are defaults an operator tunes for the whole environment, as they tune the
retry defaults. Neither section changes what the engine does at run time: the engine's own limits
stay on the task (``overlap``, ``mutex_group``, ``sla``) and on the retry policy (``max_wait``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rebound.domain.basics import Strict
from rebound.domain.durations import Seconds

CONFLICTS_SECTION = "conflicts"
SLA_SECTION = "sla"


class ConflictDefaults(Strict):
    """How the dry run predicts and judges collisions between runs."""

    expected_duration: Literal["observed", "timeout"] = Field(
        default="observed",
        description="how long the dry run assumes a run lasts: 'observed' (the median of the task's "
        "last recorded attempts, a sim target's duration_s, else its timeout) or 'timeout' (the worst case)",
    )
    mutex_max_wait: Annotated[Seconds, Field(gt=0, le=7 * 86400)] = Field(
        default=600.0,
        description="a run predicted to wait longer than this for a mutex, resource or overlap slot "
        "makes its conflict a high-severity warning",
    )
    self_overlap: Literal["warn", "ignore"] = Field(
        default="warn",
        description="warn: runs of one task that overlap each other are a warning even with overlap: "
        "allow_all (they run side by side and count twice against the tenant's quota)",
    )
    min_quota_headroom: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="warn when a tenant's free slots at an instant would fall below this "
        "(below 0 means runs wait for the quota)",
    )
    catch_up_storm: int = Field(
        default=5,
        ge=2,
        le=10_000,
        description="a paused task whose resume would release at least this many runs at once is a storm",
    )


class SlaDefaults(Strict):
    """What the SLA report counts as on time, and the objectives it flags."""

    on_time_within: Annotated[Seconds, Field(gt=0, le=86400)] = Field(
        default=60.0,
        description="a first attempt started within this of when it was due is on time "
        "(the on-time metric and its alarm use 60 s)",
    )
    on_time_target: float = Field(
        default=98.0, gt=0, le=100, description="percent on time a task or tenant should reach"
    )
    start_delay_p99_objective: Annotated[Seconds, Field(gt=0, le=86400)] = Field(
        default=300.0, description="the p99 start delay a task or tenant should stay within"
    )


class PlanningDefaults(Strict):
    """Both sections, as the policy book carries them."""

    conflicts: ConflictDefaults = Field(default_factory=ConflictDefaults)
    sla: SlaDefaults = Field(default_factory=SlaDefaults)
