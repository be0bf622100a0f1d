"""A dsakit checkout on PYTHONPATH (a GPU node with no install): `dsakit.mocks` and `dsakit.contracts`
are the checkout's top-level `mocks/` and `contracts/`, as pyproject's package-dir maps them in a
wheel and in an editable install.

Owns: that one mapping, as the last meta-path finder (an install's own mapping answers first).
Must not: make `mocks` or `contracts` importable under any other name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

MAPPED = ("mocks", "contracts")  # pyproject [tool.setuptools] package-dir: dsakit.<name> = "<name>"


class CheckoutFinder:
    """A meta-path finder (duck-typed: importlib.abc costs every `import dsakit` ~6 ms) that finds
    dsakit.mocks / dsakit.contracts in the checkout `root`; their submodules then come from the
    package's own path."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        package, _, leaf = name.partition(".")
        if package != "dsakit" or leaf not in MAPPED:
            return None
        import importlib.util

        folder = os.path.join(self.root, leaf)
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


def checkout_root(package_dir: str) -> str | None:
    """The checkout `package_dir` (dsakit/) sits in, when the mapped folders are beside it and not
    inside it (a wheel has them inside); else None."""
    root = os.path.dirname(package_dir)
    beside = all(os.path.isfile(os.path.join(root, leaf, "__init__.py")) for leaf in MAPPED)
    inside = any(os.path.isdir(os.path.join(package_dir, leaf)) for leaf in MAPPED)
    if beside and not inside and os.path.isfile(os.path.join(root, "pyproject.toml")):
        return root
    return None


def install(package_dir: str) -> None:
    """Called while `dsakit` imports: adds the finder only where nothing else maps the folders (a
    wheel and an editable install do; then sys.meta_path is left as it was)."""
    root = checkout_root(package_dir)
    if root is None or any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
        return
    import importlib.util

    if importlib.util.find_spec(f"dsakit.{MAPPED[0]}") is None:
        sys.meta_path.append(CheckoutFinder(root))
