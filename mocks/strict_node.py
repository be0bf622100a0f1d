"""A strict namespace: exposes exactly the contract entries below one path, nothing else.

Undeclared reads raise `ContractViolation` (an AttributeError) naming the attribute, the reading
site and where the real ModelRunner sets it (the declared table, `dsakit.contracts.runner_sites`;
never a scan of SGLang source); soft getattr/hasattr reads are logged. Writes are
type-checked, undeclared writes refused. Defaults and nested namespaces are built on first read.
(`StrictNamespace`: "node" means a GPU node; the file keeps its name while mutation runs use it.)
"""

from __future__ import annotations

import linecache
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dsakit.contracts.schema import NAMESPACE, Contract, ContractEntry, Factory, Role, type_matches
from dsakit import active
from dsakit.errors import ContractViolation, UsageError
from dsakit.mocks.call_site import call_site
# not `from dsakit.mocks import read_log`: that takes a stale package attribute where sys.modules lost
# the module (pytester's in-process runs drop it), and the run's summary would not find the reads
import dsakit.mocks.read_log as read_log

if TYPE_CHECKING:
    from dsakit.contracts.runner_sites import RunnerSite

_MOCKS_DIR = str(Path(__file__).parent) + "/"  # where dsakit.mocks' code runs from: frames to skip
_SOFT_READ = r"""\b(getattr|hasattr)\s*\([^()]*?,\s*['"]{name}['"]"""


def _reading_frame() -> Any:
    """The first frame outside dsakit's mocks: the code that read the attribute."""
    frame: Any = sys._getframe(1)  # FrameType | None once it walks past the outermost frame
    while frame is not None and frame.f_code.co_filename.startswith(_MOCKS_DIR):
        frame = frame.f_back
    return frame


_CALL_LINES = 20  # how far a call the reading line opens is followed (a getattr spread over lines)


def _reading_text(frame: Any) -> str:
    """The source the frame is executing: its line (where the call starts), and the lines after it
    until the parentheses it opens close (`getattr(\n    runner, "x", None)`)."""
    text, depth = "", 0
    for number in range(frame.f_lineno, frame.f_lineno + _CALL_LINES):
        line = linecache.getline(frame.f_code.co_filename, number)
        text += line
        depth += line.count("(") - line.count(")")
        if depth <= 0 or not line:
            break
    return text


def _is_soft_read(frame: Any, name: str) -> bool:
    if frame is None:
        return False
    return re.search(_SOFT_READ.format(name=re.escape(name)), _reading_text(frame)) is not None


def _how_to_declare(path: str, real: RunnerSite, site: str, written: bool) -> str:
    from dsakit.contracts.extension import SET_BY_BACKEND, declaration_example

    set_by = real.set_by or "<file:line where the real ModelRunner sets it>"
    if written and real.set_by is None:
        set_by = SET_BY_BACKEND  # the code writing it is what sets it: the real runner never does
    reader = site.rsplit(" in ", 1)[1] if " in " in site else "MyBackend.__init__"
    return (
        "If your backend really reads it, declare it in your suite's pyproject.toml so every mock "
        "provides it (type, per-role default, where the real runner sets it):\n"
        + declaration_example(path, set_by, reader)
        + "\nthen `dsakit contract check --backend-src DIR` checks your backend's reads against it."
    )


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


# What the validated overrides of one namespace become: (direct values by name, plans of the nested
# namespaces by name). A namespace's own dict of values is built from it on first access.
_Plan = tuple[dict[str, Any], dict[str, "_Plan"]]
_NO_PLAN: _Plan = ({}, {})


def _unknown_message(contract: Contract, path: str, name: str, what: str) -> str:
    declared = ", ".join(sorted(contract.children(path))) or "none"
    where = f"model_runner.{path}" if path else "model_runner"
    full = f"{path}.{name}" if path else name
    return (
        f"unknown {what} {full!r}: the role contract declares no such attribute on "
        f"{where}; declared here: {declared}"
    )


def _check_type(entry: ContractEntry, role: Role, value: Any, what: str) -> None:
    if not type_matches(entry.type, value, entry.optional):
        expected = entry.type + (" or None" if entry.optional else "")
        if entry.type == NAMESPACE:
            expected = (f"a namespace (a strict nested object: a mapping of its attributes such as "
                        f"{entry.name}={{...}} or {entry.name}__<attribute>=..., or an object with those "
                        "attributes)" + (" or None" if entry.optional else ""))
        raise UsageError(
            f"{what} model_runner.{entry.path}={value!r}: expected {expected}, got {type(value).__name__}"
        )
    if entry.path == "is_draft_worker" and value != (role is Role.DRAFT):
        raise UsageError(
            f"{what} model_runner.is_draft_worker={value!r} contradicts role={role.value!r}: "
            f"build MockModelRunner(role={'draft' if value else 'target'!r}) instead, or turn a target "
            f"into a draft with MockModelRunner.draft_from(runner)"
        )


def _plan(contract: Contract, path: str, role: Role, overrides: Mapping[str, Any]) -> _Plan:
    """Validate the overrides of the namespace at `path` and of every one below it, now: a bad
    override is refused where the mock is built, even though the namespaces are built on first use."""
    if not overrides:
        return _NO_PLAN
    children = contract.children(path)
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if head not in children:
            raise UsageError(_unknown_message(contract, path, head, "override"))
        full = children[head].path
        if rest:
            if children[head].type != NAMESPACE:
                raise UsageError(
                    f"override {full}.{rest}: {full} is a {children[head].type}, not a nested object"
                )
            nested.setdefault(head, {})[rest] = value
        elif children[head].type == NAMESPACE and isinstance(value, Mapping):
            nested.setdefault(head, {}).update(value)
        else:
            _check_type(children[head], role, value, "override")
            direct[head] = value
    plans = {
        name: _plan(contract, entry.path, role, nested[name])
        for name, entry in children.items()  # declaration order: the same first error as the eager build
        if entry.type == NAMESPACE and name in nested and name not in direct
    }
    return direct, plans


class StrictNamespace:
    """The attributes of one contract path (the runner itself has path "").

    Built in steps: the constructor validates the overrides of the whole subtree (bad ones raise
    UsageError there) and stores them as a plan; the namespace's dict of values is made on its first
    attribute access, and each nested namespace and contract default on its first read. A runner that
    a test only passes through costs a few attribute stores; one that is read builds only the
    levels that are read. Errors raised on access are the same as if everything had been eager.
    """

    __slots__ = (
        "_dsakit_contract", "_dsakit_path", "_dsakit_role", "_dsakit_root", "_dsakit_values", "_dsakit_omit",
        "_dsakit_building", "_dsakit_plan",
    )
    _dsakit_contract: Contract
    _dsakit_path: str
    _dsakit_role: Role
    _dsakit_root: StrictNamespace | None
    _dsakit_values: dict[str, Any] | None
    _dsakit_omit: frozenset[str]
    _dsakit_building: int
    _dsakit_plan: _Plan

    def __init__(
        self,
        contract: Contract,
        path: str,
        role: Role,
        root: StrictNamespace | None,
        overrides: Mapping[str, Any],
        omit: frozenset[str],
    ) -> None:
        plan = _plan(contract, path, role, overrides)
        sealed = type(self)
        object.__setattr__(self, "__class__", unsealed(sealed))
        self._dsakit_fill(contract, path, role, root, plan, omit)
        self.__class__ = sealed

    def _dsakit_fill(
        self, contract: Contract, path: str, role: Role, root: StrictNamespace | None, plan: _Plan, omit: frozenset[str]
    ) -> None:
        """Set the fields of a node that is still its class's twin (`unsealed`): plain slot stores."""
        self._dsakit_contract = contract
        self._dsakit_path = path
        self._dsakit_role = role
        # None for the runner itself: no self-reference cycle, so an untouched runner is freed at
        # once by reference counting instead of waiting for the cyclic GC
        self._dsakit_root = root
        self._dsakit_omit = omit
        self._dsakit_building = 0  # >0 while a contract default is built (on the root)
        self._dsakit_plan = plan
        self._dsakit_values = None  # None until first access: _dsakit_materialize

    def _dsakit_materialize(self) -> dict[str, Any]:
        """This namespace's values: its direct overrides, every other declared name unset. Nested
        namespaces and contract defaults are built when first read (`__getattr__`)."""
        values = dict.fromkeys(self._dsakit_contract.child_names(self._dsakit_path), _UNSET)
        values.update(self._dsakit_plan[0])
        object.__setattr__(self, "_dsakit_values", values)
        return values

    def _dsakit_child(self, entry: ContractEntry, root: StrictNamespace) -> StrictNamespace:
        """The nested namespace of a namespace entry, with the overrides validated for it at construction."""
        child = object.__new__(unsealed(StrictNamespace))
        plan = self._dsakit_plan[1].get(entry.name, _NO_PLAN)
        child._dsakit_fill(self._dsakit_contract, entry.path, self._dsakit_role, root, plan, self._dsakit_omit)
        child.__class__ = StrictNamespace
        return child

    def _dsakit_become(self, role: Role) -> None:
        """Switch this namespace and every one built below it to `role` (MockModelRunner.draft_from):
        values already read or set stay, defaults not read yet follow the new role."""
        object.__setattr__(self, "_dsakit_role", role)
        for value in (self._dsakit_values or {}).values():
            if isinstance(value, StrictNamespace):
                value._dsakit_become(role)

    @property
    def _dsakit_built(self) -> bool:
        """Has this namespace's level been built (by an attribute read, write or dir())?"""
        return self._dsakit_values is not None

    # ------------------------------------------------------------------ helpers

    def _full(self, name: str) -> str:
        return f"{self._dsakit_path}.{name}" if self._dsakit_path else name

    def _unknown_message(self, name: str, what: str) -> str:
        return _unknown_message(self._dsakit_contract, self._dsakit_path, name, what)

    def _check_type(self, entry: ContractEntry, value: Any, what: str) -> None:
        _check_type(entry, self._dsakit_role, value, what)

    def _violation(self, name: str, kind: str, frame: Any) -> ContractViolation:
        from dsakit.contracts.runner_sites import runner_site

        path = self._full(name)
        site = call_site(frame)
        simulated = active.simulated_device()  # the leaf's stack: asking imports no simulation
        device = simulated.key if simulated is not None else ""
        # the device whose branch read it: a simulated one is named, or the report blames the wrong GPU
        on = f" on simulated {device} ({simulated.name})" if simulated is not None else ""
        role = self._dsakit_role.value
        read_log.record(read_log.ContractRead(kind, role, path, site))
        found = runner_site(path)  # the declared table (contracts/runner_sites.json): no SGLang source is parsed
        real = found.phrase
        if kind == read_log.OMITTED:
            entry = self._dsakit_contract.get(path)
            readers = "; ".join(entry.readers) if entry and entry.readers else "see the contract"
            message = (
                f"model_runner.{path} was omitted from this MockModelRunner (role={role}) but is read at "
                f"{site}{on}. The role contract declares it (read by: {readers}); the real ModelRunner: {real}."
            )
            code = "contract-omitted-read"
        elif kind == read_log.WRITE:
            message = (
                f"cannot set model_runner.{path} (role={role}) at {site}{on}: not in the dsakit role contract "
                f"(the real ModelRunner: {real}). {_how_to_declare(path, found, site, written=True)}"
            )
            code = "contract-undeclared-write"
        else:
            message = (
                f"model_runner.{path} is not in the dsakit role contract (role={role}): read at {site}{on}; "
                f"the real ModelRunner: {real}. {_how_to_declare(path, found, site, written=False)}"
            )
            code = "contract-undeclared-read"
        return ContractViolation(message, attribute=path, code=code, reading_site=site, device=device)

    # ------------------------------------------------------------------ attribute protocol

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (copy, pickle, numpy): not contract reads
        values = self._dsakit_values
        if values is None:
            values = self._dsakit_materialize()
        path = self._full(name)
        if name not in values:
            frame = _reading_frame()
            if _is_soft_read(frame, name):
                read_log.record(read_log.ContractRead(read_log.SOFT, self._dsakit_role.value, path, call_site(frame)))
                raise ContractViolation(
                    f"model_runner.{path} is not in the role contract (soft read)",
                    attribute=path, code="contract-soft-read", reading_site=call_site(frame),
                )
            raise self._violation(name, read_log.UNDECLARED, frame)
        root = self._dsakit_root if self._dsakit_root is not None else self
        if path in self._dsakit_omit and not root._dsakit_building:
            # Defaults derived from an omitted value (req_to_token_pool.size from
            # max_running_requests) still build: only the code under test must not see it.
            raise self._violation(name, read_log.OMITTED, _reading_frame())
        value = values[name]
        if value is _UNSET:
            entry = self._dsakit_contract.entries[path]
            if entry.type == NAMESPACE:
                value = values[name] = self._dsakit_child(entry, root)
                return value
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
        values = self._dsakit_values
        if values is None:
            values = self._dsakit_materialize()
        values[name] = value
        root = self._dsakit_root if self._dsakit_root is not None else self
        root._dsakit_written(self._full(name), value)

    def _dsakit_written(self, path: str, value: Any) -> None:
        """A write below this root (MockModelRunner keeps them, so a copy carries them)."""

    def __reduce__(self) -> Any:
        raise TypeError(
            f"cannot copy or pickle {self!r} on its own: it belongs to a MockModelRunner; copy the "
            "runner (copy.deepcopy(runner), pickle.dumps(runner)) and read the attribute from the copy")

    def __delattr__(self, name: str) -> None:
        raise UsageError(f"cannot delete model_runner.{self._full(name)}: build the mock with omit=(...) instead")

    def __dir__(self) -> list[str]:
        values = self._dsakit_values
        return sorted(values if values is not None else self._dsakit_materialize())

    def __repr__(self) -> str:
        where = f"model_runner.{self._dsakit_path}" if self._dsakit_path else "model_runner"
        return f"<strict {where} role={self._dsakit_role.value}>"


_Node = TypeVar("_Node", bound=StrictNamespace)
_UNSEALED: dict[type[Any], type[Any]] = {}


def unsealed(cls: type[_Node]) -> type[_Node]:
    """`cls`'s twin without the strict `__setattr__` (object's own, in C): the same slots, so a node
    is filled as the twin with plain slot stores, then becomes a `cls` by one `__class__` assignment.
    A slot store costs ~100 instructions, `object.__setattr__` (the strict class's only way in)
    ~1,400, and the runner fixtures build a runner for every test (bench/README.md, "Kit overhead")."""
    twin = _UNSEALED.get(cls)
    if twin is None:
        twin = _UNSEALED[cls] = type(f"Unsealed{cls.__name__}", (cls,), {
            "__slots__": (), "__setattr__": object.__setattr__, "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
            "__doc__": f"A {cls.__name__} being built (dsakit.mocks.strict_node.unsealed)."})
    return twin
