"""A strict attribute node: exposes exactly the contract entries below one path, nothing else.

Reads of undeclared attributes raise `ContractViolation` (an AttributeError, so `getattr(x, n, d)`
still works) naming the attribute, the reading site and where the real ModelRunner sets it; soft
reads through getattr/hasattr are logged, not fatal. Writes are type-checked; undeclared writes are
refused. Lazy defaults (Factory) are built on first read, so torch loads only when a test needs it.
"""

from __future__ import annotations

import linecache
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsakit.contracts.schema import NAMESPACE, Contract, ContractEntry, Factory, Role, type_matches
from dsakit.errors import ContractViolation, UsageError
from dsakit.mocks import read_log

_MOCKS_DIR = str(Path(__file__).resolve().parent)
_SOFT_READ = r"""\b(getattr|hasattr)\s*\([^()]*?,\s*['"]{name}['"]"""


def _reading_frame() -> Any:
    """The first frame outside dsakit's mocks: the code that read the attribute."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_MOCKS_DIR):
        frame = frame.f_back
    return frame


def _site(frame: Any) -> str:
    if frame is None:
        return "<unknown>"
    filename = frame.f_code.co_filename
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return f"{filename}:{frame.f_lineno} in {qualname}"


def _is_soft_read(frame: Any, name: str) -> bool:
    if frame is None:
        return False
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    return re.search(_SOFT_READ.format(name=re.escape(name)), line) is not None


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


class StrictNode:
    """The attributes of one contract path (the runner itself has path "")."""

    __slots__ = (
        "_dsakit_contract", "_dsakit_path", "_dsakit_role", "_dsakit_root", "_dsakit_values", "_dsakit_omit",
        "_dsakit_building",
    )

    def __init__(
        self,
        contract: Contract,
        path: str,
        role: Role,
        root: StrictNode | None,
        overrides: Mapping[str, Any],
        omit: frozenset[str],
    ) -> None:
        object.__setattr__(self, "_dsakit_contract", contract)
        object.__setattr__(self, "_dsakit_path", path)
        object.__setattr__(self, "_dsakit_role", role)
        object.__setattr__(self, "_dsakit_root", root if root is not None else self)
        object.__setattr__(self, "_dsakit_omit", omit)
        object.__setattr__(self, "_dsakit_building", 0)  # >0 while a contract default is built
        values: dict[str, Any] = {}
        object.__setattr__(self, "_dsakit_values", values)
        children = contract.children(path)
        nested: dict[str, dict[str, Any]] = {}
        for key, value in overrides.items():
            head, _, rest = key.partition(".")
            if head not in children:
                raise UsageError(self._unknown_message(head, "override"))
            if rest:
                if children[head].type != NAMESPACE:
                    raise UsageError(
                        f"override {self._full(head)}.{rest}: {self._full(head)} is a "
                        f"{children[head].type}, not a nested object"
                    )
                nested.setdefault(head, {})[rest] = value
            elif children[head].type == NAMESPACE and isinstance(value, Mapping):
                nested.setdefault(head, {}).update(value)
            else:
                self._check_type(children[head], value, "override")
                values[head] = value
        for name, entry in children.items():
            if name in values:
                continue
            if entry.type == NAMESPACE:
                values[name] = StrictNode(contract, entry.path, role, self._dsakit_root, nested.get(name, {}), omit)
            else:
                values[name] = _UNSET

    # ------------------------------------------------------------------ helpers

    def _full(self, name: str) -> str:
        return f"{self._dsakit_path}.{name}" if self._dsakit_path else name

    def _unknown_message(self, name: str, what: str) -> str:
        declared = ", ".join(sorted(self._dsakit_contract.children(self._dsakit_path))) or "none"
        where = f"model_runner.{self._dsakit_path}" if self._dsakit_path else "model_runner"
        return (
            f"unknown {what} {self._full(name)!r}: the role contract declares no such attribute on "
            f"{where}; declared here: {declared}"
        )

    def _check_type(self, entry: ContractEntry, value: Any, what: str) -> None:
        if not type_matches(entry.type, value, entry.optional):
            expected = entry.type + (" or None" if entry.optional else "")
            raise UsageError(
                f"{what} model_runner.{entry.path}={value!r}: expected {expected}, got {type(value).__name__}"
            )
        if entry.path == "is_draft_worker" and value != (self._dsakit_role is Role.DRAFT):
            raise UsageError(
                f"{what} model_runner.is_draft_worker={value!r} contradicts role={self._dsakit_role.value!r}: "
                f"build MockModelRunner(role={'draft' if value else 'target'!r}) instead"
            )

    def _violation(self, name: str, kind: str, frame: Any) -> ContractViolation:
        from dsakit.source_scan import runner_site

        path = self._full(name)
        site = _site(frame)
        role = self._dsakit_role.value
        read_log.record(read_log.ContractRead(kind, role, path, site))
        real = runner_site(path.split(".", 1)[0])
        if kind == read_log.OMITTED:
            entry = self._dsakit_contract.get(path)
            readers = "; ".join(entry.readers) if entry and entry.readers else "see the contract"
            message = (
                f"model_runner.{path} was omitted from this MockModelRunner (role={role}) but is read at "
                f"{site}. The role contract declares it (read by: {readers}); the real ModelRunner: {real}."
            )
            code = "contract-omitted-read"
        elif kind == read_log.WRITE:
            message = (
                f"cannot set model_runner.{path} (role={role}) at {site}: not in the dsakit role contract "
                f"(the real ModelRunner: {real}). Declare it in contracts/model_runner_contract.py."
            )
            code = "contract-undeclared-write"
        else:
            message = (
                f"model_runner.{path} is not in the dsakit role contract (role={role}): read at {site}; "
                f"the real ModelRunner: {real}. Declare it in contracts/model_runner_contract.py with its "
                f"type, per-role default and reader so every mock provides it."
            )
            code = "contract-undeclared-read"
        return ContractViolation(message, attribute=path, code=code, reading_site=site)

    # ------------------------------------------------------------------ attribute protocol

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (copy, pickle, numpy): not contract reads
        values = self._dsakit_values
        path = self._full(name)
        if name not in values:
            frame = _reading_frame()
            if _is_soft_read(frame, name):
                read_log.record(read_log.ContractRead(read_log.SOFT, self._dsakit_role.value, path, _site(frame)))
                raise ContractViolation(
                    f"model_runner.{path} is not in the role contract (soft read)",
                    attribute=path, code="contract-soft-read", reading_site=_site(frame),
                )
            raise self._violation(name, read_log.UNDECLARED, frame)
        root = self._dsakit_root
        if path in self._dsakit_omit and not root._dsakit_building:
            # Defaults derived from an omitted value (req_to_token_pool.size from
            # max_running_requests) still build: only the code under test must not see it.
            raise self._violation(name, read_log.OMITTED, _reading_frame())
        value = values[name]
        if value is _UNSET:
            entry = self._dsakit_contract.entries[path]
            value = entry.default_for(self._dsakit_role)
            if isinstance(value, Factory):
                object.__setattr__(root, "_dsakit_building", root._dsakit_building + 1)
                try:
                    factory, value = value, value.build(root)
                finally:
                    object.__setattr__(root, "_dsakit_building", root._dsakit_building - 1)
                if not type_matches(entry.type, value, entry.optional):
                    raise UsageError(
                        f"the contract default of model_runner.{path} ({factory.describe}) built "
                        f"{value!r}, not the declared {entry.type}: fix contracts/model_runner_contract.py"
                    )
            elif isinstance(value, (list, dict)):
                value = type(value)(value)  # never share a mutable default between mocks
            values[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        entry = self._dsakit_contract.get(self._full(name))
        if entry is None:
            raise self._violation(name, read_log.WRITE, _reading_frame())
        self._check_type(entry, value, "setting")
        self._dsakit_values[name] = value

    def __delattr__(self, name: str) -> None:
        raise UsageError(f"cannot delete model_runner.{self._full(name)}: build the mock with omit=(...) instead")

    def __dir__(self) -> list[str]:
        return sorted(self._dsakit_values)

    def __repr__(self) -> str:
        where = f"model_runner.{self._dsakit_path}" if self._dsakit_path else "model_runner"
        return f"<strict {where} role={self._dsakit_role.value}>"
