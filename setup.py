"""The packages, and the default task configuration (config/tasks) shipped inside ``rebound`` as
``rebound/_config``, where ``rebound.settings.default_config_dir`` finds it once installed."""

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
packages.append("rebound._config")
package_dir["rebound._config"] = "config/tasks"

setup(packages=packages, package_dir=package_dir)
