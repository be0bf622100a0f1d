"""A downstream suite's own contract entries (`[tool.dsakit.contract."<path>"]` in its pyproject.toml)
and the effective contract: dsakit's role contract plus them.

Owns: reading and validating the declarations (`set_by = "backend"`: the suite's backend sets the
entry itself), `effective_contract(config_or_rootdir)` (the one function the fixtures,
`MockModelRunner`, `dsakit contract check` and the audit call) and the active run's contract.
Must not import torch or SGLang; never edits dsakit's own table; a pyproject.toml without a
`[tool.dsakit...]` table is not parsed (a suite that does not use dsakit pays nothing).
"""

from __future__ import annotations

import functools
import keyword
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from dsakit import active
from dsakit.errors import UsageError

if TYPE_CHECKING:
    from dsakit.contracts.schema import Contract, ContractEntry

TABLE = "tool.dsakit.contract"
_KEYS = {"type": str, "target": object, "draft": object, "optional": bool, "readers": list, "set_by": str,
         "note": str}
_REQUIRED = ("type", "set_by")
NAMESPACE = "namespace"  # dsakit.contracts.schema.NAMESPACE, spelled here so loading this module stays cheap
_PLAIN_TYPES = ("int", "float", "bool", "str", "list", "tuple", "dict", "object", NAMESPACE)
# `set_by = "backend"`: the suite's own backend sets model_runner.<path> (the real ModelRunner never
# does); `dsakit contract check --backend-src` checks that the backend assigns it before reading it
SET_BY_BACKEND = "backend"
VALID_TYPES = ("int, float, bool, str, list, tuple, dict, list[T] (e.g. list[str]), object (anything), "
               "namespace (a parent of declared children), A | B, or a dotted class name (e.g. torch.dtype)")


def declaration_example(path: str, set_by: str = "<file:line where the real ModelRunner sets it>",
                        reader: str = "MyBackend.__init__") -> str:
    """What a suite adds to its pyproject.toml to declare `path` (for violation messages); `reader`
    is the function that read it, `set_by` where it is set (`backend` when the backend sets it)."""
    return (
        f'[tool.dsakit.contract."{path}"]\n'
        f'type = "int"                 # int, float, bool, str, list[str], object, namespace, or a dotted class\n'
        f"target = 0                   # default for a target worker\n"
        f"draft = 0                    # default for a draft worker (omit: same as target)\n"
        f'readers = ["{reader}"]\n'
        f'set_by = "{set_by}"' + ("             # your backend sets it itself" if set_by == SET_BY_BACKEND else
                                  "  # or \"backend\" when your backend sets it itself")
    )


def _check_type_name(type_name: str, where: str) -> None:
    """A declared type is one of VALID_TYPES; a misspelt one is refused naming them, not as a
    dotted name it never was."""
    import difflib
    import re

    for part in (p.strip() for p in type_name.split("|")):
        inner = part[5:-1].strip() if part.startswith("list[") and part.endswith("]") else part
        if inner == "None":
            raise UsageError(f"{where}: type = {type_name!r}: None is not a type here; declare the type "
                             "without it and add `optional = true`")
        if inner in _PLAIN_TYPES or re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", inner):
            continue
        close = difflib.get_close_matches(inner, [*_PLAIN_TYPES, "integer"], n=1)
        hint = {"integer": "int"}.get(close[0], close[0]) if close else ""
        suggestion = f"; did you mean {hint!r}?" if hint and hint != inner else ""
        raise UsageError(f"{where}: type = {type_name!r} is not a type dsakit knows{suggestion} "
                         f"Valid types: {VALID_TYPES}")


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - pytest itself depends on tomli below 3.11
        import tomli as tomllib
    try:
        with path.open("rb") as handle:
            data: dict[str, Any] = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"cannot read the dsakit contract extension in {path}: {error}") from None
    return data


def _default(path: str, type_name: str, value: Any, role: str, optional: bool, where: str) -> Any:
    """A declared default, checked against the declared type. A dotted type (torch.dtype) takes the
    dotted name of its value ("torch.bfloat16"), resolved when first read."""
    from dsakit.contracts.schema import Factory, type_matches

    if value is None:
        if not optional and type_name not in ("object", NAMESPACE):
            raise UsageError(f"{where}: {role} default missing; give `{role} = ...` or `optional = true`")
        return None
    if type_name.split("[", 1)[0].split("|", 1)[0].strip() in _PLAIN_TYPES or "|" in type_name:
        if not type_matches(type_name, value, optional):
            raise UsageError(f"{where}: {role} = {value!r} is not a {type_name}")
        return value
    if not isinstance(value, str) or "." not in value:
        raise UsageError(f"{where}: the {role} default of a {type_name} entry is the dotted name of "
                         f'its value, e.g. {role} = "torch.bfloat16"; got {value!r}')
    module_name, _, attr = value.rpartition(".")

    def build(runner: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(module_name), attr)

    return Factory(build, value)


def parse_declarations(table: dict[str, Any], source: str, base: Contract | None = None) -> list[ContractEntry]:
    """The entries of one `[tool.dsakit.contract]` table; bad declarations raise UsageError naming the key."""
    from dsakit.contracts.schema import ContractEntry

    if base is None:
        from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT

        base = MODEL_RUNNER_CONTRACT
    entries: list[ContractEntry] = []
    known = set(base.entries)
    for path, spec in table.items():
        where = f'{source}: [{TABLE}."{path}"]'
        if not all(part.isidentifier() and not keyword.iskeyword(part) for part in path.split(".")):
            raise UsageError(f"{where}: {path!r} is not an attribute path: each dot-separated part must be a "
                             "Python identifier (letters, digits and _, not starting with a digit, not a keyword) "
                             'that a backend reads as model_runner.<path>, e.g. "sliding_window_size" or '
                             '"model_config.my_field"')
        if not isinstance(spec, dict):
            raise UsageError(f"{where}: expected a table with type, target, set_by; got {spec!r}")
        unknown = sorted(set(spec) - set(_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_KEYS)}")
        missing = [key for key in _REQUIRED if key not in spec]
        if missing:
            raise UsageError(f"{where}: missing {', '.join(missing)} (type: the declared type; set_by: "
                             "where the real ModelRunner sets it, e.g. 'model_runner.py:1353', or "
                             f"{SET_BY_BACKEND!r} when your backend sets it itself)")
        for key, kind in _KEYS.items():
            if key in spec and kind is not object and not isinstance(spec[key], kind):
                raise UsageError(f"{where}: {key} must be a {kind.__name__}, got {spec[key]!r}")
        if path in known:
            raise UsageError(f"{where}: model_runner.{path} is already declared by dsakit's role contract; "
                             "change its value per test with an override: MockModelRunner(overrides="
                             f'{{"{path}": ...}}) instead')
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if parent and parent not in known:
            raise UsageError(f"{where}: its parent model_runner.{parent} is not declared; declare "
                             f'[{TABLE}."{parent}"] with type = "namespace" first')
        type_name: str = spec["type"]
        _check_type_name(type_name, where)
        if not spec["set_by"].strip():
            raise UsageError(f"{where}: set_by is empty; give where the real ModelRunner sets it "
                             f"(e.g. 'model_runner.py:1353') or {SET_BY_BACKEND!r}")
        optional = bool(spec.get("optional", False))
        target = _default(path, type_name, spec.get("target"), "target", optional, where)
        same = "draft" not in spec
        draft = target if same else _default(path, type_name, spec["draft"], "draft", optional, where)
        entries.append(ContractEntry(
            path, type_name, target, draft, optional=optional,
            readers=tuple(str(r) for r in spec.get("readers", ())),
            note=str(spec.get("note", "")), same_for_roles=same,
            set_by=spec["set_by"], declared_in=source,
        ))
        known.add(path)
    return entries


def pyproject_of(rootdir: Path) -> Path | None:
    """The pyproject.toml at `rootdir` or the nearest one above it."""
    for directory in (rootdir, *rootdir.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=16)
def _contract_of(pyproject: Path | None, stamp: tuple[int, int]) -> Contract:
    """The contract of one pyproject.toml version (`stamp`: mtime in ns and size)."""
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT
    from dsakit.contracts.schema import Contract

    if pyproject is None:
        return MODEL_RUNNER_CONTRACT
    table = _load_toml(pyproject).get("tool", {}).get("dsakit", {}).get("contract")
    if not table:
        return MODEL_RUNNER_CONTRACT
    if not isinstance(table, dict):
        raise UsageError(f"{pyproject}: [{TABLE}] must be a table of tables, one per attribute path")
    extension = parse_declarations(table, str(pyproject))
    try:
        return Contract(f"model_runner + {pyproject}", [*MODEL_RUNNER_CONTRACT, *extension])
    except ValueError as error:  # order of nested declarations
        raise UsageError(str(error)) from None


def effective_contract(config_or_rootdir: pytest.Config | Path | str | None = None) -> Contract:
    """dsakit's role contract plus the entries the suite declares in its pyproject.toml
    (`[tool.dsakit.contract."<path>"]`). A pytest Config reads the pyproject.toml of its rootdir
    (or its inifile when that is one); a path reads the nearest pyproject.toml at or above it;
    None is the active pytest run's contract (or dsakit's own outside pytest)."""
    if config_or_rootdir is None:
        return active_contract()
    if isinstance(config_or_rootdir, (str, Path)):
        pyproject = pyproject_of(Path(config_or_rootdir).resolve())
    else:
        inipath = config_or_rootdir.inipath
        pyproject = (inipath if inipath is not None and inipath.name == "pyproject.toml"
                     else pyproject_of(config_or_rootdir.rootpath))
    stat = pyproject.stat() if pyproject is not None else None
    return _contract_of(pyproject, (stat.st_mtime_ns, stat.st_size) if stat is not None else (0, 0))


# ---------------------------------------------------------------- the active run's contract


def active_contract() -> Contract:
    """The innermost configured pytest run's contract (its DsakitSession's); dsakit's own outside
    pytest or where the suite declares nothing."""
    run = active.run()
    contract = run.contract if run is not None else None
    if contract is not None:
        return cast("Contract", contract)  # a DsakitSession holds a Contract or None
    # every runner asks: sys.modules answers once it is loaded (a from-import inside a function
    # costs every call ~8,700 instructions on Python 3.11; bench/README.md, "Kit overhead")
    loaded = sys.modules.get("dsakit.contracts.model_runner_contract")
    if loaded is not None:
        return loaded.MODEL_RUNNER_CONTRACT  # type: ignore[no-any-return]
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT

    return MODEL_RUNNER_CONTRACT


def _declares_anything(config: pytest.Config) -> bool:
    """Does the run's pyproject.toml mention a dsakit table at all (a text search, no TOML parse)?"""
    inipath = config.inipath
    pyproject = (inipath if inipath is not None and inipath.name == "pyproject.toml"
                 else pyproject_of(config.rootpath))
    try:
        return pyproject is not None and "tool.dsakit" in pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def suite_contract(config: pytest.Config) -> Contract | None:
    """pytest_configure: the suite's declarations, read and validated now (a bad one is a usage error
    before any test runs); None where it declares nothing (dsakit's own contract, loaded on first use).
    The run's DsakitSession holds it: every mock of the run is built from it."""
    if not _declares_anything(config):
        return None
    try:
        return effective_contract(config)
    except UsageError as error:
        raise pytest.UsageError(str(error)) from None
