"""Run a command on the package as an install lays it out: dsakit/ with mocks/ and contracts/ inside.

Owns the copy of the checkout in that layout, read from pyproject's [tool.setuptools] package-dir
(the one place the mapping is written). Tools that read packages from folders (lint-imports'
grimp, mypy) cannot follow setuptools' editable finder. Must not write into the checkout: the
copy lives in a temporary folder, removed when the command ends, whatever its outcome.

    python scripts/installed_layout.py lint-imports --no-cache --no-logo
    python scripts/installed_layout.py mypy dsakit
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli below 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
_SKIP = shutil.ignore_patterns("__pycache__", "__snapshots__", "*.egg-info")


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pyproject's package-dir: import name -> folder of the checkout (`dsakit.mocks` -> `mocks`)."""
    with open(root / "pyproject.toml", "rb") as handle:
        mapping: dict[str, str] = tomllib.load(handle)["tool"]["setuptools"]["package-dir"]
    return mapping


def lay_out(dest: Path, root: Path = ROOT) -> Path:
    """Copy each mapped folder to where its import name puts it, parents first, plus pyproject.toml."""
    for name, folder in sorted(package_dirs(root).items(), key=lambda item: item[0].count(".")):
        shutil.copytree(root / folder, dest.joinpath(*name.split(".")), ignore=_SKIP)
    shutil.copy(root / "pyproject.toml", dest / "pyproject.toml")
    return dest


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python scripts/installed_layout.py COMMAND [ARG ...]  (e.g. lint-imports)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dsakit-layout-") as tree:
        # run inside the copy: lint-imports puts its working folder first on sys.path, mypy reads it
        return subprocess.run(argv, cwd=lay_out(Path(tree))).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
