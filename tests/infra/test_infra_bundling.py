"""Lambda bundles without Docker: the layout Lambda needs, and asset hashes that change only when
their own inputs change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rebound_infra.app import REPO_ROOT
from rebound_infra.bundling import (
    PLATFORM,
    Sources,
    build_code,
    build_dependencies,
    code_hash,
    content_hash,
    dependencies_hash,
    pip_command,
)

pytestmark = pytest.mark.infra


@pytest.fixture
def repo_copy(tmp_path: Path) -> Sources:
    """The inputs of both assets, copied so a test can change them."""
    for rel in ("functions/rebound", "config/tasks", "requirements"):
        shutil.copytree(REPO_ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns("__pycache__"))
    return Sources(tmp_path)


def test_editing_a_handler_changes_the_code_asset_only(repo_copy: Sources) -> None:
    code, deps = code_hash(repo_copy), dependencies_hash(repo_copy)
    handler = repo_copy.package / "handlers" / "executor.py"
    handler.write_text(handler.read_text() + "\n# changed\n")
    assert code_hash(repo_copy) != code
    assert dependencies_hash(repo_copy) == deps


def test_editing_a_task_config_file_changes_the_code_asset(repo_copy: Sources) -> None:
    code = code_hash(repo_copy)
    policy = repo_copy.task_config / "default_policy.yaml"
    policy.write_text(policy.read_text() + "\n# changed\n")
    assert code_hash(repo_copy) != code


def test_changing_a_pin_changes_the_dependencies_only(repo_copy: Sources) -> None:
    code, deps = code_hash(repo_copy), dependencies_hash(repo_copy)
    lock = repo_copy.runtime_requirements
    lock.write_text(lock.read_text() + "# changed\n")
    assert dependencies_hash(repo_copy) != deps
    assert code_hash(repo_copy) == code


def test_bytecode_caches_and_unrelated_files_do_not_change_any_hash(repo_copy: Sources) -> None:
    code, deps = code_hash(repo_copy), dependencies_hash(repo_copy)
    cache = repo_copy.package / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "x.cpython-311.pyc").write_bytes(b"\0")
    (repo_copy.root / "README.md").write_text("unrelated")
    assert (code_hash(repo_copy), dependencies_hash(repo_copy)) == (code, deps)


def test_the_code_bundle_is_the_rebound_package_with_its_task_config(repo_copy: Sources) -> None:
    built = build_code(repo_copy)
    assert (built.path / "rebound" / "handlers" / "executor.py").is_file()
    assert (built.path / "rebound" / "handlers" / "ops_api.py").is_file()
    assert (built.path / "rebound" / "_config" / "default_policy.yaml").is_file()
    assert (built.path / "rebound" / "_config" / "retry-policies.yaml").is_file()
    assert not list(built.path.rglob("__pycache__"))
    assert build_code(repo_copy).path == built.path  # cached by its hash


def test_dependencies_are_wheels_for_arm64_python_3_13_without_boto3() -> None:
    src = Sources(REPO_ROOT)
    command = pip_command(src, Path("/tmp/x"))
    assert "--only-binary=:all:" in command
    assert command[command.index("--platform") + 1] == PLATFORM == "manylinux2014_aarch64"
    assert command[command.index("--python-version") + 1] == "3.13"
    assert command[command.index("-r") + 1] == str(src.runtime_requirements)
    assert "--require-hashes" in command
    built = build_dependencies(src)
    assert built.hash == content_hash(built.path), "the layer is named by what it contains"
    layer = built.path / "python"
    assert (layer / "aws_lambda_powertools").is_dir()
    assert (layer / "pydantic").is_dir()
    (native,) = list((layer / "pydantic_core").glob("_pydantic_core*.so"))
    assert "cpython-313-aarch64" in native.name
    assert not (layer / "boto3").exists()  # the Lambda runtime provides boto3


def test_the_layers_hash_follows_its_built_files(tmp_path: Path) -> None:
    built = tmp_path / "deps"
    (built / "python" / "pkg").mkdir(parents=True)
    (built / "python" / "pkg" / "__init__.py").write_text("x = 1\n")
    first = content_hash(built)
    assert content_hash(built) == first
    (built / "python" / "pkg" / "__init__.py").write_text("x = 2\n")  # another file served for one pin
    assert content_hash(built) != first
