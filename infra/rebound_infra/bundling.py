"""Lambda assets built without Docker, cached under ``build/`` by a hash of their inputs.

Two assets, each keyed by its own inputs only:

- the **dependencies layer**: ``requirements/runtime.txt`` (``runtime.in`` at the pinned versions,
  each file's hash beside it) installed with ``--require-hashes`` as manylinux aarch64 wheels for
  CPython 3.13 (``pip install --platform manylinux2014_aarch64 --only-binary=:all: --target ...``).
  Powertools is bundled here. boto3 is not: the Lambda runtime provides it.
- the **code**: the ``functions/rebound`` package as ``rebound/``, with ``config/tasks/*.yaml``
  copied to ``rebound/_config/`` (see ``rebound.settings.default_config_dir``).

A build is cached under ``build/`` by the hash of its inputs, so editing a handler rebuilds the
code asset and leaves the layer alone, and repeated synths reuse ``build/``. The code asset's hash
(``AssetHashType.CUSTOM``) is that input hash; the layer's is the hash of the files the build
produced (``content_hash``), so what is deployed is named by what it contains, whatever the
index served.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.13"
IMPLEMENTATION = "cp"
# Bump to rebuild every cached asset after a change to how they are built.
BUILD_FORMAT = "3"
SKIP_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache"})
SKIP_SUFFIXES = (".pyc", ".pyo")


class BundlingError(RuntimeError):
    pass


@dataclass(frozen=True)
class Sources:
    """Where the inputs live, relative to the repository root."""

    root: Path

    @property
    def package(self) -> Path:
        return self.root / "functions" / "rebound"

    @property
    def task_config(self) -> Path:
        return self.root / "config" / "tasks"

    @property
    def runtime_requirements(self) -> Path:
        """The layer's hashed lock (``make constraints`` writes it from ``runtime.in``)."""
        return self.root / "requirements" / "runtime.txt"

    @property
    def build_dir(self) -> Path:
        return self.root / "build" / "lambda"


@dataclass(frozen=True)
class BuiltAsset:
    path: Path
    hash: str


def _files(directory: Path, pattern: str = "**/*") -> list[Path]:
    out = []
    for path in sorted(directory.glob(pattern)):
        rel = path.relative_to(directory)
        if not path.is_file() or SKIP_DIRS.intersection(rel.parts) or path.name.endswith(SKIP_SUFFIXES):
            continue
        out.append(path)
    return out


def _digest(parts: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, content in parts:
        h.update(name.encode())
        h.update(b"\0")
        h.update(hashlib.sha256(content).digest())
    return h.hexdigest()


def code_files(src: Sources) -> dict[str, Path]:
    """Bundle path -> source file, for every file of the code asset."""
    files = {f"rebound/{p.relative_to(src.package).as_posix()}": p for p in _files(src.package)}
    for path in _files(src.task_config, "*.yaml"):
        files[f"rebound/_config/{path.name}"] = path
    return files


def code_hash(src: Sources) -> str:
    files = code_files(src)
    return _digest([("format", BUILD_FORMAT.encode())] + [(k, files[k].read_bytes()) for k in sorted(files)])


def dependencies_hash(src: Sources) -> str:
    return _digest(
        [
            ("format", BUILD_FORMAT.encode()),
            ("target", f"{PLATFORM}/{IMPLEMENTATION}{PYTHON_VERSION}".encode()),
            ("runtime.txt", src.runtime_requirements.read_bytes()),
        ]
    )


def content_hash(directory: Path) -> str:
    """The hash of a built directory: every file's path and bytes."""
    return _digest((p.relative_to(directory).as_posix(), p.read_bytes()) for p in _files(directory))


KEEP_BUILDS = 4


def _publish(staging: Path, final: Path) -> None:
    """Move a finished build into place (a concurrent build of the same hash may have won), and
    drop all but the newest few builds of the same kind."""
    try:
        staging.rename(final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    kind = final.name.split("-", 1)[0]
    builds = sorted(final.parent.glob(f"{kind}-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[KEEP_BUILDS:]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)


def build_code(src: Sources) -> BuiltAsset:
    digest = code_hash(src)
    final = src.build_dir / f"code-{digest[:16]}"
    if not final.is_dir():
        src.build_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".code-", dir=src.build_dir))
        for rel, path in code_files(src).items():
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        _publish(staging, final)
    return BuiltAsset(final, digest)


def pip_command(src: Sources, target: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--platform",
        PLATFORM,
        "--implementation",
        IMPLEMENTATION,
        "--python-version",
        PYTHON_VERSION,
        "--only-binary=:all:",
        "--target",
        str(target),
        "--require-hashes",
        "-r",
        str(src.runtime_requirements),
    ]


def build_dependencies(src: Sources) -> BuiltAsset:
    """The layer directory (``python/`` inside, as Lambda expects for Python layers)."""
    digest = dependencies_hash(src)
    final = src.build_dir / f"deps-{digest[:16]}"
    if not final.is_dir():
        src.build_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".deps-", dir=src.build_dir))
        command = pip_command(src, staging / "python")
        env = {**os.environ, "PIP_NO_INPUT": "1"}
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise BundlingError(
                "installing the Lambda dependencies failed (it needs the package index once; "
                f"later synths reuse {src.build_dir}):\n$ {' '.join(command)}\n{result.stderr.strip()}"
            )
        for cache in (staging / "python").rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(staging / "python" / "bin", ignore_errors=True)  # console scripts: unused
        _publish(staging, final)
    return BuiltAsset(final, content_hash(final))


@dataclass(frozen=True)
class LambdaAssets:
    """Both assets, built once per app so every stack gets the same ones."""

    code: BuiltAsset
    dependencies: BuiltAsset


def build_assets(src: Sources) -> LambdaAssets:
    return LambdaAssets(code=build_code(src), dependencies=build_dependencies(src))
