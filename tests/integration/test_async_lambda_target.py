"""A ``lambda`` target with ``mode: async`` is an ``Event`` invoke: Lambda queues it and answers at
once, and the function reports with the completion token its event carries."""

from __future__ import annotations

from typing import Any

import pytest
from test_lambda_target import FUNCTION, FakeLambda, a_call

from rebound.adapters.targets.aws_lambda import LambdaInvoker
from rebound.domain.target_specs import LambdaTarget

pytestmark = pytest.mark.integration


def test_an_async_lambda_target_is_invoked_as_an_event_and_a_sync_one_is_not(clock: Any) -> None:
    fake = FakeLambda()
    invoker = LambdaInvoker(fake.client_for, clock)  # type: ignore[arg-type]
    fake.returns = b""  # an Event invoke answers 202 with an empty body
    started = invoker.invoke(LambdaTarget(type="lambda", function=FUNCTION, mode="async"), a_call(clock))
    assert started.ok
    invoker.invoke(LambdaTarget(type="lambda", function=FUNCTION), a_call(clock))
    assert [c["InvocationType"] for c in fake.calls] == ["Event", "RequestResponse"]
