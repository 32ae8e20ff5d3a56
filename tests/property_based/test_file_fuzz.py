"""Bad task and scenario files are a ConfigError naming the key, never anything else (issue 14).

Hypothesis mangles a valid file: it drops keys, replaces values with values of any JSON type,
adds keys that do not exist, and writes YAML text that may not parse. Loading either succeeds or
raises ``ConfigError`` with the file and a key path; no other exception escapes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebound.config.loader import load_policy_book, load_yaml, parse_task_document
from rebound.domain.errors import ConfigError
from rebound.settings import default_config_dir
from rebound_local.scenario import parse_scenario

pytestmark = pytest.mark.property_based
ROOT = Path(__file__).resolve().parents[2]
TASKS = load_yaml(ROOT / "config" / "demo" / "tasks.yaml")
SCENARIO = load_yaml(ROOT / "scenarios" / "faults-2h.yaml")
RECOVERY = load_yaml(ROOT / "scenarios" / "hostile-recovery.yaml")  # operators' recoveries
BOOK = load_policy_book(default_config_dir())
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["*/5 * * * *", "rate(5 minutes)", "1h", "2026-03-07T00:00:00Z", "http://10.0.0.1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            out += paths(inner, (*prefix, index))
    return out


@st.composite
def mangled(draw: st.DrawFn, original: Any) -> Any:
    data = copy.deepcopy(original)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        where = draw(st.sampled_from(paths(data)))
        if not where:
            continue
        parent = data
        for part in where[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "drop":
            del parent[where[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values)
        else:
            parent[where[-1]] = draw(json_values)
    return data


def expect_config_error_or_success(load: Any) -> None:
    try:
        load()
    except ConfigError as exc:
        assert exc.file and exc.problem, exc.to_dict()


@FUZZ
@given(data=mangled(TASKS))
def test_a_mangled_task_file_is_a_config_error_or_valid(data: Any) -> None:
    expect_config_error_or_success(lambda: parse_task_document(data, "tasks.yaml", BOOK))


@FUZZ
@given(data=mangled(SCENARIO))
def test_a_mangled_scenario_is_a_config_error_or_valid(data: Any) -> None:
    expect_config_error_or_success(lambda: parse_scenario(data, "scenario.yaml", ROOT / "scenarios"))


@FUZZ
@given(data=mangled(RECOVERY))
def test_a_mangled_recovery_scenario_is_a_config_error_or_valid(data: Any) -> None:
    expect_config_error_or_success(lambda: parse_scenario(data, "scenario.yaml", ROOT / "scenarios"))


@FUZZ
@given(text=st.text(max_size=300))
def test_any_yaml_text_is_a_config_error_or_valid(
    text: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "tasks.yaml"
    path.write_text(text, encoding="utf-8")

    def load() -> None:
        parse_task_document(load_yaml(path), str(path), BOOK)

    expect_config_error_or_success(load)


def test_the_originals_are_valid() -> None:
    assert parse_task_document(TASKS, "tasks.yaml", BOOK).tasks
    assert parse_scenario(yaml.safe_load(yaml.safe_dump(SCENARIO)), "s.yaml", ROOT / "scenarios").tasks
    assert parse_scenario(RECOVERY, "s.yaml", ROOT / "scenarios").scenario.operations
