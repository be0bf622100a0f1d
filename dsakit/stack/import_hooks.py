"""Patching other packages for the length of a run, undone at its end.

Owns the run's one import watcher (`ImportWatch`, a meta-path finder): a callback when a module has
finished importing (now, if it already has): the whole-run simulation patches torch, Triton, the JIT
loaders and SGLang's probe modules the moment they exist, and the kernel-launch contracts wrap entry
points, so a suite that never imports them pays nothing; and one when a module is first looked for
(the report wrapper starts before the phase importing torch ends); `Patches` (setattr with
undo); `rebind_everywhere` (a function replaced in every module that bound it). Must not change
what is imported or how: the finder wraps the loader the other finders return. A leaf: imports nothing of dsakit.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

Callback = Callable[[types.ModuleType], None]


class _AfterExec(importlib.abc.Loader):
    """The real loader, with the callbacks run once the module's code has run."""

    def __init__(self, loader: Any, name: str, owner: ImportWatch) -> None:
        self._loader = loader
        self._name = name
        self._owner = owner

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._owner.arrived(self._name):
            callback(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, get_source, is_package, ...
        return getattr(self._loader, name)


class ImportWatch(importlib.abc.MetaPathFinder):
    """The run's one import watcher (importlib.abc is loaded in every pytest run: its assertion
    rewriter is one): `watch("torch", patch_torch)` runs the callback once the module has run its
    code (now, if it already has); `looked_for(("torch",), start)` runs `start()` when one of the
    names is first looked for, before the module runs, found or not (now, if one is loaded).
    `close()` removes it from sys.meta_path; until then a finder with nothing left to watch answers
    None at once."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {}
        self._before: list[tuple[tuple[str, ...], Callable[[], None]]] = []  # names, callback
        self._finding: set[str] = set()
        sys.meta_path.insert(0, self)

    def watch(self, name: str, callback: Callback) -> None:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        self._callbacks.setdefault(name, []).append(callback)

    def looked_for(self, names: tuple[str, ...], callback: Callable[[], None]) -> None:
        if any(name in sys.modules for name in names):
            callback()
            return
        self._before.append((names, callback))

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if self._before:
            due = [callback for names, callback in self._before if fullname in names]
            if due:
                self._before = [entry for entry in self._before if fullname not in entry[0]]
                for callback in due:
                    callback()
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
        if any(finder is self for finder in sys.meta_path):
            sys.meta_path.remove(self)
        self._callbacks.clear()
        self._before.clear()


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
