"""Named and default retry policies load from config/tasks and bad files say where they are wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebound.config.loader import load_policy_book
from rebound.domain.errors import ConfigError, PolicyNotFound

pytestmark = pytest.mark.unit
CONFIG = Path(__file__).resolve().parents[2] / "config" / "tasks"


def test_shipped_policies_load_with_the_documented_defaults() -> None:
    book = load_policy_book(CONFIG)
    default = book.policy("default")
    assert default.base_delay == 120
    assert {"default", "quick", "patient", "critical"} <= set(book.names())
    assert book.policy("critical").severity.value == "critical"


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(PolicyNotFound, match="known: critical, default"):
        load_policy_book(CONFIG).policy("nope")


def write(tmp_path: Path, defaults: str, policies: str) -> Path:
    (tmp_path / "default_policy.yaml").write_text(defaults)
    (tmp_path / "retry-policies.yaml").write_text(policies)
    return tmp_path


DEFAULTS = "max_attempts: 3\nbase_delay: 120s\nmultiplier: 2\nmax_delay: 1h\n"


@pytest.mark.parametrize(
    ("defaults", "policies", "file", "key_path", "problem"),
    [
        (
            DEFAULTS,
            "policies:\n  default: {}\n  fast: {max_attempts: 0}\n",
            "retry-policies.yaml",
            "fast.max_attempts",
            "greater than or equal to 1",
        ),
        (
            DEFAULTS,
            "policies:\n  default: {}\n  fast: {base_delaay: 3s}\n",
            "retry-policies.yaml",
            "policies.fast.base_delaay",
            "unknown key",
        ),
        (
            DEFAULTS,
            "policies:\n  default: {}\n  fast: {base_delay: soon}\n",
            "retry-policies.yaml",
            "fast.base_delay",
            "expected a duration",
        ),
        (DEFAULTS, "policies:\n  fast: {}\n", "retry-policies.yaml", "policies", "'default' is required"),
        (
            DEFAULTS + "jitter: sometimes\n",
            "policies:\n  default: {}\n",
            "default_policy.yaml",
            "jitter",
            "Input should be",
        ),
        (DEFAULTS, "policies: [a, b]\n", "retry-policies.yaml", "policies", "expected a mapping"),
        (
            DEFAULTS,
            "policies:\n  default: {max_attempts: 3\n",
            "retry-policies.yaml",
            "line",
            "not valid YAML",
        ),
    ],
)
def test_a_bad_policy_file_names_file_key_and_problem(
    tmp_path: Path, defaults: str, policies: str, file: str, key_path: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_policy_book(write(tmp_path, defaults, policies))
    assert err.value.file.endswith(file)
    assert key_path in err.value.key_path
    assert problem in err.value.problem


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"default_policy\.yaml: file not found"):
        load_policy_book(tmp_path)
