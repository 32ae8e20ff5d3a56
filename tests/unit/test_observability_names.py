"""One service name per function, in its logs and its metrics alike."""

from __future__ import annotations

import importlib

import pytest

from rebound import resources as r


@pytest.mark.parametrize("spec", r.SPEC.functions, ids=lambda s: s.logical)
def test_a_function_logs_and_counts_under_one_service_name(spec: r.FunctionSpec) -> None:
    module = importlib.import_module(spec.handler.rsplit(".", 1)[0])
    expected = r.service_name(spec.logical)
    assert module.logger.service == expected
    metrics = getattr(module, "metrics", None)
    if metrics is not None:  # the ops API counts nothing
        assert metrics.service == expected


def test_a_service_name_is_the_function_s_name_with_hyphens() -> None:
    assert r.service_name("retry_scheduler") == "rebound-retry-scheduler"
    assert r.service_name("sweeper") == "rebound-sweeper"
