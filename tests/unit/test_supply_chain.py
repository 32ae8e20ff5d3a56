"""What is installed is what was pinned: every dependency, pip and uv by version and file hash,
the CDK CLI by version, and the package's license as an SPDX expression."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s\\]+)")


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """``name -> (version, hashes)`` of a hashed lock; each entry must pin and hash."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current: str | None = None
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = PIN.match(stripped)
        if match:
            current = match.group(1).lower().replace("_", "-")
            entries[current] = (match.group(2), [])
        elif stripped.startswith("--hash=sha256:") and current is not None:
            entries[current][1].append(stripped.split(":", 1)[1].rstrip(" \\"))
        else:
            raise AssertionError(f"{path.name}:{number}: neither a pin nor its hash: {stripped!r}")
    return entries


@pytest.mark.parametrize("name", ["constraints.txt", "runtime.txt", "pip.txt"])
def test_every_locked_requirement_is_pinned_with_the_hashes_of_its_files(name: str) -> None:
    entries = locked(REQUIREMENTS / name)
    assert entries, name
    for package, (_, hashes) in entries.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), f"{name}: {package}"


def test_the_layer_installs_what_the_project_pins_and_what_its_functions_import() -> None:
    everything, layer = locked(REQUIREMENTS / "constraints.txt"), locked(REQUIREMENTS / "runtime.txt")
    assert {p: v for p, (v, _) in layer.items()} == {p: everything[p][0] for p in layer}
    wanted = {
        line.split("#")[0].strip().lower()
        for line in (REQUIREMENTS / "runtime.in").read_text().splitlines()
        if line.split("#")[0].strip()
    }
    assert wanted <= set(layer), wanted - set(layer)
    assert "boto3" not in layer, "the Lambda runtime provides boto3"


def test_every_install_checks_hashes_and_pip_and_the_cdk_cli_are_pinned() -> None:
    makefile = (REPO / "Makefile").read_text()
    installs = [
        line
        for line in makefile.splitlines()
        if ("$(PIP_INSTALL)" in line or "$(UV_INSTALL)" in line) and "-r " in line
    ]
    assert len(installs) == 2 and all("--require-hashes" in line for line in installs)
    assert "--require-hashes -r requirements/constraints.txt" in makefile
    assert "--require-hashes -r requirements/pip.txt" in makefile
    assert "--no-build-isolation -e ." in makefile, "the package is built with the pinned setuptools"
    assert not re.search(r"pip>=|-U pip|--upgrade", makefile)
    assert re.search(r"^CDK := npx --yes aws-cdk@2\.\d+\.\d+$", makefile, re.M)
    assert "aws-cdk@2 " not in makefile
    assert list(locked(REQUIREMENTS / "pip.txt")) == ["pip", "uv"]


def test_the_package_declares_an_spdx_license_with_its_file_and_classifiers() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert all((REPO / f).is_file() for f in project["license-files"])
    assert "SPDX-License-Identifier: Apache-2.0" in (REPO / "LICENSE").read_text()
    assert "Programming Language :: Python :: 3.13" in project["classifiers"]
    assert not any(c.startswith("License ::") for c in project["classifiers"]), "PEP 639: the expression"
