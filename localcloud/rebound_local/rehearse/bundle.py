"""What a rehearsed function's interpreter has on its path, in Lambda's order.

1. The **code asset** the template deploys (``aws:asset:path`` of the function in ``cdk.out``).
2. The **dependency layer**, installed for this machine from the same requirements and pins the
   layer asset is built from (the hashed lock ``requirements/runtime.txt``, ``--require-hashes``,
   binary wheels only); the asset itself holds manylinux aarch64 wheels for CPython 3.13.
3. **boto3 as the Lambda runtime provides it**: boto3 and what it needs (botocore, s3transfer,
   jmespath, dateutil, six, urllib3), linked from this environment, and nothing else.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rebound_local.rehearse.template import REPO_ROOT

RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six.py", "urllib3")
"""What the Lambda Python runtime has on its path besides the standard library."""


class BundleError(RuntimeError):
    pass


def build_dir(root: Path = REPO_ROOT) -> Path:
    return root / "build" / "rehearse"


def layer_for_host(root: Path = REPO_ROOT) -> Path:
    """The dependency layer's packages for this interpreter and platform (cached by its inputs)."""
    requirements = root / "requirements" / "runtime.txt"
    digest = hashlib.sha256(requirements.read_bytes() + b"\0" + sys.version.encode()).hexdigest()[:16]
    final = build_dir(root) / f"layer-{digest}"
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".layer-", dir=final.parent))
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "--only-binary=:all:", "--target", str(staging), "--require-hashes", "-r", str(requirements),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "PIP_NO_INPUT": "1"}
    )
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundleError(
            f"installing the layer's packages for this machine failed:\n{result.stderr.strip()}"
        )
    shutil.rmtree(staging / "bin", ignore_errors=True)
    try:
        staging.rename(final)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def lambda_runtime(root: Path = REPO_ROOT) -> Path:
    """A directory holding only boto3 and its dependencies, linked from this environment."""
    import boto3

    site = Path(boto3.__file__).resolve().parents[1]
    final = build_dir(root) / f"runtime-boto3-{boto3.__version__}"
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".runtime-", dir=final.parent))
    for name in RUNTIME_PACKAGES:
        source = site / name
        if not source.exists():
            raise BundleError(f"{name} is not installed beside boto3 in {site}")
        (staging / name).symlink_to(source)
    try:
        staging.rename(final)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def function_path(code: Path, root: Path = REPO_ROOT) -> list[str]:
    if not (code / "rebound").is_dir():
        raise BundleError(f"{code} is not Rebound's code asset (no rebound/ inside)")
    return [str(code), str(layer_for_host(root)), str(lambda_runtime(root))]
