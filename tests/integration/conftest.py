"""The route tests of the ops API run once, inside the rights check.

``test_ops_api_rights`` runs every test of the modules in ``api_support.ROUTE_TEST_FILES`` while it records
the AWS calls the handler makes, and checks each against the ops API's role in every environment's
template. Collected on their own as well, each would run twice in ``make test``; so a session
collects these files only when they are named on the command line
(``pytest tests/integration/test_ops_api.py``), and otherwise each route test runs and fails as a
case of the rights check, under its own name
(``test_every_call_a_route_makes_...[test_ops_api::test_a_task_is_registered]``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from api_support import ROUTE_TEST_FILES


def named(path: Path, config: pytest.Config) -> bool:
    """Whether ``path`` (or a test in it) was given on the command line."""
    here = Path(config.invocation_params.dir)
    for arg in config.invocation_params.args:
        if arg.startswith("-"):
            continue
        given = Path(arg.split("::", 1)[0])
        if (here / given).resolve() == path.resolve():
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name in ROUTE_TEST_FILES and collection_path.parent == Path(__file__).parent:
        return True if not named(collection_path, config) else None
    return None
