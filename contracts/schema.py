"""The shape of a role contract: entries, roles, declared types and default factories.

Data only; never imports torch or SGLang at module level. Type names such as "torch.dtype" are
resolved on first use, so a contract can be loaded, printed and checked on a machine without torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, KeysView
from enum import Enum
from typing import Any

from dsakit.errors import UsageError
from dsakit.reasons import FrozenRecord


class Role(str, Enum):
    TARGET = "target"
    DRAFT = "draft"

    @classmethod
    def parse(cls, name: str | Role) -> Role:
        role = _ROLES_BY_VALUE.get(name) if type(name) is str else None
        if role is not None:  # the exact value, as the fixtures pass it: no Enum lookup
            return role
        if isinstance(name, Role):
            return name
        try:
            return cls(str(name).strip().lower())
        except ValueError:
            raise UsageError(
                f"unknown role {name!r}; expected one of: {', '.join(r.value for r in cls)}"
            ) from None


_ROLES_BY_VALUE: dict[str, Role] = {role.value: role for role in Role}


def parse_roles(spec: str | Iterable[str]) -> list[str]:
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    # "target,target" names one role: each role runs once
    roles = list(dict.fromkeys(Role.parse(n).value for n in names if str(n).strip()))
    if not roles:
        raise UsageError("no role given; expected a comma-separated subset of: target, draft")
    return roles


def validate_roles_option(spec: str, *, what: str = "--dsakit-roles", collecting: bool = False) -> list[str]:
    """`parse_roles` for a pytest option (a usage error) or, while `collecting`, a marker (that
    file's collection error): one line naming the value, no traceback."""
    import pytest

    try:
        return parse_roles(spec)
    except UsageError as error:
        message = f"{what}={spec!r}: {error}"
    if collecting:
        pytest.fail(message, pytrace=False)
    raise pytest.UsageError(message)


class Factory(FrozenRecord):
    """A default computed when first read, from the mock runner being built (lazy torch)."""

    __match_args__ = ('build', 'describe')

    def __init__(self, build: Callable[[Any], Any], describe: str) -> None:
        self.__dict__.update(build=build, describe=describe)

    build: Callable[[Any], Any]
    describe: str

    def __repr__(self) -> str:
        return f"<{self.describe}>"


NAMESPACE = "namespace"
"""Type of an entry whose value is a strict nested object built from the entries below it."""


class ContractEntry(FrozenRecord):
    """One attribute a backend may read from `model_runner`.

    path     dotted path below the runner: "max_running_requests", "model_config.context_len"
    type     declared type: a builtin name ("int", "bool", "str", "list[str]"), a dotted name
             resolved lazily ("torch.dtype"), "object" (anything) or NAMESPACE
    target   default for a target worker (a value or a Factory)
    draft    default for a draft worker (defaults to the target's)
    optional None is allowed besides the declared type
    readers  who reads it, with the condition when the read is conditional
    note     why the default is what it is, or what the real runner does
    set_by   where the real ModelRunner sets it (declared by a downstream suite's extension;
             dsakit's own entries are checked against the runner's source instead)
    declared_in  "" for dsakit's contract, else the pyproject.toml that declares the entry
    writers  who writes it on a runner besides ModelRunner itself (a write the real runner allows,
             e.g. the attention kit's draft-runner setup); the entry documents it as writable
    feature  the SGLang release feature (dsakit.stack.sglang_release.FEATURES) whose ModelRunner has
             it; `dsakit contract check` on a release without the feature does not require it
    set_outside_runner  who sets it on the runner when ModelRunner itself never does
    device_reads  (backend class, gate codes) pairs: the backend reads the entry only on devices
             where every gate code opens (dsakit.gates.table), e.g. ("DeepseekSparseAttnBackend",
             ("sm>=10.0",)); empty when no read depends on the device"""

    __match_args__ = ('path', 'type', 'target', 'draft', 'optional', 'readers', 'note', 'same_for_roles',
                      'set_by', 'declared_in', 'writers', 'feature', 'set_outside_runner', 'device_reads')

    def __init__(self, path: str,
                 type: str,
                 target: Any = None,
                 draft: Any = None,
                 optional: bool = False,
                 readers: tuple[str, ...] = (),
                 note: str = "",
                 same_for_roles: bool = True,
                 set_by: str = "",
                 declared_in: str = "",
                 writers: tuple[str, ...] = (),
                 feature: str = "",
                 set_outside_runner: str = "",
                 device_reads: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> None:
        self.__dict__.update(path=path, type=type, target=target, draft=draft, optional=optional,
                             readers=readers, note=note, same_for_roles=same_for_roles, set_by=set_by,
                             declared_in=declared_in, writers=writers, feature=feature,
                             set_outside_runner=set_outside_runner, device_reads=device_reads)

    path: str
    type: str
    target: Any
    draft: Any
    optional: bool
    readers: tuple[str, ...]
    note: str
    same_for_roles: bool
    set_by: str
    declared_in: str
    writers: tuple[str, ...]
    feature: str
    set_outside_runner: str
    device_reads: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def writable(self) -> bool:
        """Declared as written by code outside ModelRunner (the kit's draft-runner setup)."""
        return bool(self.writers)

    def default_for(self, role: Role) -> Any:
        if role is Role.DRAFT and not self.same_for_roles:
            return self.draft
        return self.target

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def parent(self) -> str:
        return self.path.rsplit(".", 1)[0] if "." in self.path else ""


def per_role(target: Any, draft: Any) -> dict[str, Any]:
    """Keyword arguments for an entry whose default differs by role."""
    return {"target": target, "draft": draft, "same_for_roles": False}


# ---------------------------------------------------------------- declared-type checks

_BUILTINS: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "bool": bool,
    "str": str,
    "list": list,
    "tuple": tuple,
    "dict": dict,
}


# values that cannot stand for a nested object such as model_config (True, 5, "x", [..])
_NOT_AN_OBJECT = (bool, int, float, complex, str, bytes, list, tuple, set, frozenset)


def _resolve_dotted(name: str) -> type:
    module_name, _, attr = name.rpartition(".")
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"contract type {name!r} cannot be resolved here: {error}") from None
    if not isinstance(value, type):
        raise UsageError(f"contract type {name!r} is not a class")
    return value


def type_matches(type_name: str, value: Any, optional: bool = False) -> bool:
    """Does `value` satisfy a declared type? bool never passes for int (True is no batch size)."""
    if value is None:
        return optional
    if type_name == "object":
        return True
    if type_name == NAMESPACE:  # a mapping of its attributes, or an object (the real SGLang one)
        return not isinstance(value, _NOT_AN_OBJECT)
    if type_name.startswith("list[") and type_name.endswith("]"):
        inner = type_name[5:-1]
        return isinstance(value, (list, tuple)) and all(type_matches(inner, v) for v in value)
    if "|" in type_name:
        return any(type_matches(part.strip(), value) for part in type_name.split("|"))
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name in _BUILTINS:
        return isinstance(value, _BUILTINS[type_name])
    return isinstance(value, _resolve_dotted(type_name))


_NO_CHILDREN: dict[str, ContractEntry] = {}


class Contract:
    """An ordered, validated set of entries with lookups by path and by parent."""

    def __init__(self, name: str, entries: Iterable[ContractEntry]) -> None:
        self.name = name
        self.entries: dict[str, ContractEntry] = {}
        # parent path -> {name: entry}, in declaration order: every MockModelRunner asks once per
        # namespace (6 per runner, i.e. per test using a runner fixture); scanning all entries each time
        # was ~85% of building a runner (bench/bench_kit_overhead.py)
        self._children: dict[str, dict[str, ContractEntry]] = {}
        for entry in entries:
            if entry.path in self.entries:
                raise ValueError(f"contract {name}: duplicate entry {entry.path!r}")
            if entry.parent and entry.parent not in self.entries:
                raise ValueError(f"contract {name}: {entry.path!r} declared before its parent {entry.parent!r}")
            if entry.parent and self.entries[entry.parent].type != NAMESPACE:
                raise ValueError(f"contract {name}: parent of {entry.path!r} is not a namespace")
            self.entries[entry.path] = entry
            self._children.setdefault(entry.parent, {})[entry.name] = entry

    def __iter__(self) -> Any:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, path: object) -> bool:
        return path in self.entries

    def get(self, path: str) -> ContractEntry | None:
        return self.entries.get(path)

    def children(self, parent: str) -> dict[str, ContractEntry]:
        return dict(self._children.get(parent, {}))  # a copy: callers may not edit the index

    def child_names(self, parent: str) -> KeysView[str]:
        """The names below `parent` in declaration order, without copying the index (a strict mock
        builds each namespace's values from them)."""
        return self._children.get(parent, _NO_CHILDREN).keys()

    def top_level(self) -> dict[str, ContractEntry]:
        return self.children("")


# ---------------------------------------------------------------- documentation


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(contract: Contract) -> str:
    """The contract as a Markdown table (the README's, and `dsakit contract table`): attribute,
    type, per-role defaults, who reads it, and for a suite's own entries where it is declared."""
    lines = ["| `model_runner.` attribute | type | target default | draft default | read by |",
             "|---|---|---|---|---|"]
    for entry in contract:
        kind = entry.type + (" or None" if entry.optional else "")
        if entry.type == NAMESPACE:
            target = draft = "(strict object)"
        else:
            target = f"`{entry.target!r}`"
            draft = "same" if entry.same_for_roles else f"`{entry.draft!r}`"
        readers = "; ".join(entry.readers) or "-"
        if entry.declared_in:
            readers += f" (declared in {entry.declared_in}; set by {entry.set_by})"
        cells = (f"`{entry.path}`", kind, target, draft, readers)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
