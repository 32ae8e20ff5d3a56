"""The CLI as a new user installs it: a wheel built from the project, installed in a fresh virtual
environment outside the repository, run from a directory that has no ``config/``.

Offline: the wheel is built with the development environment's setuptools (no build isolation)
and installed without an index; its dependencies are the development environment's packages,
reached through a ``.pth`` line (whose own ``.pth`` files, the editable install among them, are
not processed, so ``rebound`` comes from the wheel alone). ``local up`` provisions the default
policies the way ``local demo`` does (``rebound.settings.default_config_dir``), in seconds instead
of the demo's half minute; ``policies list`` and ``tasks apply --dry-run`` then run against it. The
demo itself is not run here (about 25 s); that the files it reads are the wheel's is checked.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SOURCES = (
    "functions",
    "cli",
    "localcloud",
    "infra",
    "config/tasks",
    "config/demo",
    "pyproject.toml",
    "setup.py",
    "README.md",
)
TASKS = """
tasks:
  - id: wheel-heartbeat
    tenant: acme
    schedule: {cron: "*/5 * * * *", timezone: UTC}
    target: {type: sim, behavior: {ok: true}}
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh virtual environment with the project's wheel installed."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for rel in SOURCES:
        src, dst = REPO / rel, source / rel
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (root / "dist").glob("rebound-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], check=True
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "dev-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory with no ``config/`` in it or above it."""
    return tmp_path_factory.mktemp("elsewhere")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REBOUND_CONFIG_DIR", "PYTHONPATH")}
    env.pop("AWS_ENDPOINT_URL", None)
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _rebound(bin_dir: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "rebound"), *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def endpoint(installed: Path, elsewhere: Path) -> Iterator[dict[str, str]]:
    """``rebound local up`` of the installed wheel; the environment that reaches it."""
    port = _free_port()
    aws = {
        "AWS_ACCESS_KEY_ID": "anything",
        "AWS_SECRET_ACCESS_KEY": "anything",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    log = elsewhere / "up.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [str(installed / "rebound"), "local", "up", "--no-view", "--no-console", "--port", str(port)],
            cwd=elsewhere,
            env=_env(**aws),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while "ready" not in log.read_text().splitlines() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert proc.poll() is None, log.read_text()
        yield {**aws, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "REBOUND_ENV": "local"}
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_the_installed_wheel_carries_its_default_policies(installed: Path, elsewhere: Path) -> None:
    found = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "import rebound.settings as s, rebound_local.demo as d, rebound_local.demo_workstream as w; "
            "print(s.__file__); print(s.default_config_dir()); print(d.DEMO_TASKS); print(w.DEMO_WORKSTREAM)",
        ],
        cwd=elsewhere,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    venv = str(installed.parent)
    assert found[0].startswith(venv), found  # the wheel's code, not the checkout's
    assert found[1].startswith(venv) and found[1].endswith("rebound/_config"), found
    assert {p.name for p in Path(found[1]).iterdir()} >= {"default_policy.yaml", "retry-policies.yaml"}
    for demo_file in found[2:]:  # what `local demo` applies
        assert demo_file.startswith(venv) and Path(demo_file).is_file(), found


def test_version_from_anywhere(installed: Path, elsewhere: Path) -> None:
    result = _rebound(installed, elsewhere, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "rebound, version 0.1.0"


def test_policies_list_and_apply_dry_run_from_anywhere(
    installed: Path, elsewhere: Path, endpoint: dict[str, str]
) -> None:
    listed = _rebound(installed, elsewhere, "-o", "json", "policies", "list", **endpoint)
    assert listed.returncode == 0, listed.stderr
    assert "default" in {p["name"] for p in json.loads(listed.stdout)}

    (elsewhere / "tasks.yaml").write_text(TASKS)
    planned = _rebound(
        installed, elsewhere, "-o", "json", "tasks", "apply", "-f", "tasks.yaml", "--dry-run", **endpoint
    )
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["dry_run"] is True
    assert [(p["id"], p["change"]) for p in plan["plan"]] == [("acme.wheel-heartbeat", "create")]
