"""``rebound.adapters.metrics.PowertoolsMetrics``: every metric carries the environment's
dimension. Powertools keeps dimensions per process; building another for the same environment
keeps it, and one for another environment (a test or bench process) replaces it, neither with a
warning."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from aws_lambda_powertools import Metrics as PtMetrics

from rebound.adapters.metrics import PowertoolsMetrics

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _clean_powertools_state() -> Iterator[None]:
    """Powertools keeps metrics and dimensions per process: start with none, and put back what
    the process had (handlers built by earlier tests keep their environment's dimension)."""
    shared = PtMetrics(namespace="Rebound")
    defaults, dimensions = dict(shared.default_dimensions), dict(shared.dimension_set)
    shared.clear_default_dimensions()
    shared.dimension_set.clear()
    shared.clear_metrics()
    yield
    shared.clear_metrics()
    shared.clear_default_dimensions()
    shared.dimension_set.clear()
    shared.default_dimensions.update(defaults)
    shared.dimension_set.update(dimensions)


def _dimensions_of_one_metric(metrics: PowertoolsMetrics) -> dict[str, str]:
    metrics.count("runs.started")
    document = metrics._metrics.serialize_metric_set()
    metrics._metrics.clear_metrics()
    names = document["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
    return {name: document[name] for name in names}


@pytest.mark.parametrize(
    ("first", "second"),
    [("dev", "dev"), ("dev", "prod")],
    ids=["the same environment keeps it", "another environment replaces it"],
)
def test_a_second_one_carries_its_environment_without_a_warning(first: str, second: str) -> None:
    PowertoolsMetrics(environment=first)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        later = PowertoolsMetrics(environment=second)
    assert _dimensions_of_one_metric(later)["environment"] == second
