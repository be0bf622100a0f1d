"""pytest-dsakit's package list, found by setuptools' package discovery (everything else is pyproject.toml).

pyproject's package-dir maps the checkout's top-level mocks/ and contracts/ to dsakit.mocks and
dsakit.contracts, and pyproject's `packages.find` cannot put a folder's packages under another
name, so discovery runs here: every package (a folder with an `__init__.py`) under each folder
package-dir maps, under its import name. A new wing ships without an edit, and no generic top-level
name ("mocks", "contracts") is ever listed. tests/project/test_packaging.py holds both.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.config.pyprojecttoml import load_file

ROOT = Path(__file__).resolve().parent


def discovered_packages(root: Path = ROOT) -> list[str]:
    """Every package of each package-dir folder, under its import name (`dsakit.mocks` for mocks/)."""
    package_dir: dict[str, str] = load_file(str(root / "pyproject.toml"))["tool"]["setuptools"]["package-dir"]
    found: list[str] = []
    for name, folder in sorted(package_dir.items()):
        found += [name, *(f"{name}.{sub}" for sub in find_packages(str(root / folder)))]
    return found


if __name__ == "__main__":
    setup(packages=discovered_packages())
