"""The ``conflicts:`` and ``sla:`` sections of ``default_policy.yaml``: shipped values, and bad
values refused naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebound.config.loader import PolicyBook, load_policy_book
from rebound.domain.errors import ConfigError

pytestmark = pytest.mark.unit
CONFIG = Path(__file__).resolve().parents[2] / "config" / "tasks"
DEFAULTS = "max_attempts: 3\nbase_delay: 120s\nmultiplier: 2\nmax_delay: 1h\nmax_wait: 1h\n"


def book_with(tmp_path: Path, extra: str) -> PolicyBook:
    (tmp_path / "default_policy.yaml").write_text(DEFAULTS + extra)
    (tmp_path / "retry-policies.yaml").write_text("policies:\n  default: {}\n")
    return load_policy_book(tmp_path)


def test_the_shipped_file_carries_the_documented_conflict_and_sla_defaults() -> None:
    planning = load_policy_book(CONFIG).planning
    assert planning.conflicts.expected_duration == "observed"
    assert planning.conflicts.mutex_max_wait == 600
    assert planning.conflicts.catch_up_storm == 5
    assert planning.sla.on_time_within == 60
    assert planning.sla.on_time_target == 98
    assert planning.sla.start_delay_p99_objective == 300


def test_missing_sections_take_their_defaults_and_leave_the_retry_policy_alone(tmp_path: Path) -> None:
    book = book_with(tmp_path, "")
    assert book.planning.conflicts.self_overlap == "warn"
    assert "conflicts" not in book.defaults


@pytest.mark.parametrize(
    ("extra", "key_path", "problem"),
    [
        ("conflicts:\n  mutex_max_wait: soon\n", "conflicts.mutex_max_wait", "expected a duration"),
        ("conflicts:\n  mutex_max_wait: 2h\n", "conflicts.mutex_max_wait", "longer than max_wait"),
        (
            "conflicts:\n  expected_duration: guess\n",
            "conflicts.expected_duration",
            "'observed' or 'timeout'",
        ),
        ("conflicts:\n  catch_up_storm: 1\n", "conflicts.catch_up_storm", "greater than or equal to 2"),
        ("conflicts: [a]\n", "conflicts", "expected a mapping of conflicts settings"),
        ("sla:\n  on_time_withn: 60s\n", "sla.on_time_withn", "unknown key"),
        ("sla:\n  on_time_target: 120\n", "sla.on_time_target", "less than or equal to 100"),
    ],
)
def test_a_bad_conflict_or_sla_default_names_the_file_and_key(
    tmp_path: Path, extra: str, key_path: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as err:
        book_with(tmp_path, extra)
    assert err.value.file.endswith("default_policy.yaml")
    assert err.value.key_path == key_path
    assert problem in err.value.problem
