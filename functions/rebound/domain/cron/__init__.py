"""Cron and schedule expressions: Unix cron (what users write) and EventBridge Scheduler (what AWS runs).

Rebound lets users write ordinary Unix 5-field cron (``schedule.cron``) and deploys it as one or more
EventBridge Scheduler ``cron(...)`` expressions evaluated in the task's IANA time zone. This package is the
single place that knows both dialects; import from the package, whose names are these modules':

* ``unix`` - :func:`validate_unix_cron` checks a Unix expression (croniter semantics) and names the bad field.
* ``translate`` - :func:`unix_to_aws`: the EventBridge Scheduler expressions whose fire times, together, are
  exactly the Unix expression's fire times (as local wall-clock times in the same zone); :func:`translate`
  adds notes saying why an expression became several schedules (or lost a part that never fires).
* ``aws`` - :class:`AwsCron` / :func:`parse_schedule_expression`: an evaluator for ``cron(...)``,
  ``rate(...)`` and ``at(...)`` written from the AWS documentation, independent of croniter, so that the two
  cross-check each other; EventBridge Scheduler's documented semantics are quoted there.
* ``fires`` - :func:`next_fire`: when EventBridge Scheduler itself fires, with its documented DST behaviour;
  :func:`unix_fire_times` / :func:`fire_times_between`: when *Rebound* promises to fire a Unix expression,
  with a :class:`DstPolicy` saying what happens to wall-clock matches that a DST change removes or repeats,
  and :func:`scheduler_delivers` telling which of those fires EventBridge Scheduler delivers by itself (the
  rest are delivered by Rebound through its run ledger).
* ``fields`` - what the dialects share: :class:`CronError`, field descriptions and wall-clock calendars.
"""

from __future__ import annotations

from rebound.domain.cron.aws import AWS_MAX_EXPRESSION_LENGTH as AWS_MAX_EXPRESSION_LENGTH
from rebound.domain.cron.aws import AtExpression, AwsCron, RateExpression, parse_schedule_expression
from rebound.domain.cron.fields import AWS_MAX_YEAR as AWS_MAX_YEAR
from rebound.domain.cron.fields import AWS_MIN_YEAR as AWS_MIN_YEAR
from rebound.domain.cron.fields import CronError
from rebound.domain.cron.fires import NOTE_REPEAT as NOTE_REPEAT
from rebound.domain.cron.fires import NOTE_SHIFTED as NOTE_SHIFTED
from rebound.domain.cron.fires import (
    DstPolicy,
    FireTime,
    fire_times_between,
    next_fire,
    scheduler_delivers,
    unix_fire_times,
)
from rebound.domain.cron.translate import Translation, translate, unix_to_aws
from rebound.domain.cron.translate import _assemble as _assemble
from rebound.domain.cron.unix import validate_unix_cron

__all__ = [
    "AtExpression",
    "AwsCron",
    "CronError",
    "DstPolicy",
    "FireTime",
    "RateExpression",
    "Translation",
    "fire_times_between",
    "next_fire",
    "parse_schedule_expression",
    "scheduler_delivers",
    "translate",
    "unix_fire_times",
    "unix_to_aws",
    "validate_unix_cron",
]
