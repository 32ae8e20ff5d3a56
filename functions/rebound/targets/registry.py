"""The invokers available to the executor."""

from __future__ import annotations

from typing import Any

import boto3

from rebound.engine.ports import Clock
from rebound.targets.base import TargetInvoker, Targets
from rebound.targets.sim import SimInvoker


def default_targets(session: boto3.session.Session, clock: Clock, client_kwargs: dict[str, Any]) -> Targets:
    invokers: dict[str, TargetInvoker] = {"sim": SimInvoker(clock)}
    return Targets(invokers)
