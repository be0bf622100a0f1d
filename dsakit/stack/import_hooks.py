"""Patching other packages for the length of a run, undone at its end.

Owns the one meta-path finder that runs a callback when a module has finished importing (now, if it
already has): the whole-run simulation patches torch, Triton, the JIT loaders and SGLang's probe
modules the moment they exist, and the kernel-launch contracts wrap entry points, so a suite that
never imports them pays nothing; `Patches` (setattr with undo); `rebind_everywhere` (a function
replaced in every module that bound it). Must not change what is imported or how: the finder wraps
the loader the other finders return. A leaf: imports nothing of dsakit.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
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


_MISSING = object()


class Patches:
    """setattr with undo, and undo callbacks; `restore` undoes all of it in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        old = owner.__dict__.get(name, _MISSING) if isinstance(owner, types.ModuleType) else getattr(owner, name, _MISSING)

        def undo() -> None:
            if old is _MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            else:
                setattr(owner, name, old)

        setattr(owner, name, value)
        self._undo.append(undo)

    def setdefault_env(self, name: str, value: str) -> None:
        """os.environ[name] = value unless the user set it; removed again on restore."""
        if name in os.environ:
            return
        os.environ[name] = value

        def undo() -> None:
            os.environ.pop(name, None)

        self._undo.append(undo)

    def callback(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def restore(self) -> None:
        errors: list[BaseException] = []
        while self._undo:
            try:
                self._undo.pop()()
            except Exception as error:  # noqa: BLE001 - keep restoring the rest
                errors.append(error)
        if errors:
            raise errors[0]


def rebind_everywhere(patches: Patches, original: Any, replacement: Any) -> None:
    """Replace `original` in every loaded module that bound it (`from x import f` copies the name)."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is original:
                try:
                    patches.set(module, name, replacement)
                except AttributeError:  # a module that refuses new values (torch's config modules)
                    continue
