"""Run a callback when a module has finished importing (now, if it already has).

Owns the one meta-path finder a whole-run simulation uses to patch torch, Triton, the JIT loaders
and SGLang's probe modules the moment they exist, so a suite that never imports them pays nothing.
Must not change what is imported or how: it wraps the loader the other finders return.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable
from typing import Any

Callback = Callable[[types.ModuleType], None]


class _AfterExec(importlib.abc.Loader):
    """The real loader, with the callbacks run once the module's code has run."""

    def __init__(self, loader: Any, name: str, owner: AfterImport) -> None:
        self._loader = loader
        self._name = name
        self._owner = owner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._owner.arrived(self._name):
            callback(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, get_source, is_package, ...
        return getattr(self._loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    """`hooks.watch("torch", patch_torch)`; `hooks.close()` removes the finder."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {}
        self._finding: set[str] = set()
        sys.meta_path.insert(0, self)

    def watch(self, name: str, callback: Callback) -> None:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        self._callbacks.setdefault(name, []).append(callback)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        callbacks = self._callbacks.get(fullname)
        if not callbacks or fullname in self._finding:
            return None
        self._finding.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    # a find_spec that never loads (a gate's probe) keeps the callbacks waiting
                    spec.loader = _AfterExec(spec.loader, fullname, self)
                    return spec
            return None
        finally:
            self._finding.discard(fullname)

    def arrived(self, name: str) -> list[Callback]:
        """The callbacks of a module that has just run its code (each runs once)."""
        return self._callbacks.pop(name, [])

    def close(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self._callbacks.clear()
