"""The packages, and the configuration they read shipped inside them: the default retry policies
(config/tasks) as ``rebound/_config``, where ``rebound.settings.default_config_dir`` finds them,
and the demo's files (config/demo) as ``rebound_local/_demo`` (``rebound_local.shipped``)."""

from setuptools import find_packages, setup

ROOTS = {
    "functions": "rebound",
    "cli": "rebound_cli",
    "localcloud": "rebound_local",
    "infra": "rebound_infra",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for where, name in ROOTS.items():
    for package in find_packages(where, include=[name, f"{name}.*"]):
        packages.append(package)
        package_dir[package] = f"{where}/{package.replace('.', '/')}"
# Directories of data files only, shipped as packages of their own (so setuptools knows them).
DATA = (
    ("rebound._config", "config/tasks"),
    ("rebound_local._demo", "config/demo"),
    ("rebound_cli.console.assets", "cli/rebound_cli/console/assets"),
)
for package, where in DATA:
    packages.append(package)
    package_dir[package] = where

setup(packages=packages, package_dir=package_dir)
