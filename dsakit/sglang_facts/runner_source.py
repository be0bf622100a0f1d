"""What SGLang's ModelRunner and ServerArgs source says (AST only: nothing is imported, no GPU needed).

Owns where the real `ModelRunner` (and its EAGLE workers) assigns or defines its attributes, the
ServerArgs fields, the `file:line` a message names for them, and the source-site helpers the backend
scan (`backend_reads`) shares. Never imports torch or SGLang.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from dsakit.stack import sglang_source
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import (
    MODEL_RUNNER_FILE,
    SERVER_ARGS_FILE,
    SERVER_ARGS_FILES,
    SGLangRelease,
)


@dataclass(frozen=True)
class SourceSite:
    """A place in the SGLang tree, relative to the package dir's parent (``sglang/srt/...:123``)."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def relative_file(release: SGLangRelease, path: Path) -> str:
    try:
        return str(path.resolve().relative_to(release.package_dir.parent))
    except ValueError:
        return str(path)


def parse_source(path: Path, shown: str | None = None) -> ast.Module:
    """The AST of one SGLang source file (from the source index); UsageError naming `file:line`
    when it does not parse or is not UTF-8 (a merge-conflicted or half-edited tree), never a traceback."""
    return sglang_source.source(path).require(shown)


def self_targets(target: ast.expr) -> list[str]:
    """Attribute names assigned on `self` by one assignment target (tuples unpacked)."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return [target.attr]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in self_targets(element)]
    if isinstance(target, ast.Starred):
        return self_targets(target.value)
    return []


def _class_assignments(cls: ast.ClassDef, *, on_self: bool = True) -> dict[str, int]:
    """name -> first line where the class defines it (class body) or assigns it on self (methods).

    `on_self=False` keeps the class body only: what `dir(cls)` shows, hence what
    `MagicMock(spec=cls)` allows (instance attributes set in `__init__` are not on the class).
    """
    found: dict[str, int] = {}

    def note(name: str, line: int) -> None:
        if name not in found or line < found[name]:
            found[name] = line

    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            note(item.name, item.lineno)  # methods and properties are attributes too
            for node in ast.walk(item) if on_self else ():
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    targets = [node.target]
                for target in targets:
                    for name in self_targets(target):
                        note(name, target.lineno)
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name):
                    note(target.id, item.lineno)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            note(item.target.id, item.lineno)
    return found


@dataclass(frozen=True)
class _SourceFile:
    """One parsed file of the tree: its classes and what its top-level imports bind."""

    path: Path
    relative: str
    classes: dict[str, ast.ClassDef]
    imports: dict[str, str]  # local name -> dotted target ("sglang.srt.x.Class" or a module)


def _module_path(release: SGLangRelease, dotted: str) -> Path | None:
    """The file of an `sglang.` module in this tree (a module file or a package's __init__)."""
    parts = dotted.split(".")
    if parts[0] != "sglang" or len(parts) < 2:
        return None
    base = release.package_dir.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _source_file(release: SGLangRelease, path: Path) -> _SourceFile:
    relative = relative_file(release, path)
    tree = parse_source(path, relative)
    package = ("sglang." + str(path.relative_to(release.package_dir).with_suffix("")).replace("/", "."))
    package = package.rsplit(".", 1)[0] if path.name != "__init__.py" else package.removesuffix(".__init__")
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                imports[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imports[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    return _SourceFile(path, relative, classes, imports)


def _base_classes(release: SGLangRelease, file: _SourceFile, cls: ast.ClassDef,
                  files: dict[Path, _SourceFile]) -> list[tuple[_SourceFile, ast.ClassDef]]:
    """The bases of `cls` that this tree defines: in the same file, or imported from another
    `sglang.` module (`from .x import Mixin`, `from sglang.x import Mixin`, `x.Mixin`)."""
    found = (_class_named(release, file, dotted, files, depth=0)
             for dotted in (dotted_name(base) for base in cls.bases) if dotted is not None)
    return [hit for hit in found if hit is not None]


def _class_named(release: SGLangRelease, file: _SourceFile, dotted: str, files: dict[Path, _SourceFile],
                 depth: int) -> tuple[_SourceFile, ast.ClassDef] | None:
    """The class a (dotted) name denotes in `file`, following imports and re-exports into the tree."""
    head, _, rest = dotted.partition(".")
    if not rest and head in file.classes:
        return file, file.classes[head]
    target = file.imports.get(head)
    if target is None or depth > 4:  # not from this tree (object, typing.Generic) or a re-export loop
        return None
    module, _, name = (f"{target}.{rest}" if rest else target).rpartition(".")
    path = _module_path(release, module)
    if path is None:
        return None
    if path not in files:
        files[path] = _source_file(release, path)
    return _class_named(release, files[path], name, files, depth + 1)


def dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted_name(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _runner_classes(release: SGLangRelease) -> list[tuple[_SourceFile, ast.ClassDef]]:
    """`ModelRunner` and its base classes and mixins this tree defines, in this file or another,
    most derived first (classes that are not its bases, such as `ModelRunnerOutput`, do not count)."""
    path = release.file(MODEL_RUNNER_FILE)
    files = {path: _source_file(release, path)}
    main = files[path]
    if "ModelRunner" not in main.classes:
        return []
    order: list[tuple[_SourceFile, ast.ClassDef]] = []
    pending = [(main, main.classes["ModelRunner"])]
    while pending:
        file, cls = pending.pop(0)
        if any(c is cls for _, c in order):
            continue
        order.append((file, cls))
        pending.extend(_base_classes(release, file, cls, files))
    return order


@functools.lru_cache(maxsize=16)
def runner_assignments(release: SGLangRelease, *, on_self: bool = True) -> dict[str, SourceSite]:
    """Attributes the real `ModelRunner` assigns or defines, each with its first site.

    Covers the `ModelRunner` class and the mixin/base classes it inherits that the tree defines,
    in model_runner.py or another file (0.5.14's ModelRunnerKVCacheMixin sets the pools in
    model_runner_kv_cache_mixin.py). UsageError naming file:line when one of them does not parse.
    `on_self=False`: class-level names only (methods, properties, class attributes).
    """
    sites: dict[str, SourceSite] = {}
    for file, cls in _runner_classes(release):
        for name, line in _class_assignments(cls, on_self=on_self).items():
            sites.setdefault(name, SourceSite(file.relative, line))
    return sites


def _owner(cls: ast.ClassDef, line: int) -> str:
    """`Class.method` whose body holds `line` (a method's own `def` line included), else `Class`."""
    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                item.lineno <= line <= (item.end_lineno or item.lineno):
            return f"{cls.name}.{item.name}"
    return cls.name


@functools.lru_cache(maxsize=16)
def runner_owners(release: SGLangRelease) -> dict[str, str]:
    """For each name `runner_assignments` finds: the method (`ModelRunner.__init__`) or class body
    (`ModelRunner`) of its first site, in the same class order."""
    owners: dict[str, str] = {}
    for _, cls in _runner_classes(release):
        for name, line in _class_assignments(cls).items():
            owners.setdefault(name, _owner(cls, line))
    return owners


def runner_files(release: SGLangRelease) -> tuple[str, ...]:
    """The files `runner_assignments` reads: model_runner.py and those of its bases and mixins."""
    return tuple(dict.fromkeys(file.relative for file, _ in _runner_classes(release)))


@functools.lru_cache(maxsize=8)
def server_args_fields(release: SGLangRelease) -> dict[str, SourceSite]:
    """ServerArgs fields (annotated class-body names) with their declaring line: the `ServerArgs`
    class of server_args.py and every class of arg_groups/fields/*.py, whichever the release has."""
    main = release.file(SERVER_ARGS_FILE)
    found: dict[str, SourceSite] = {}
    for path in release.python_files(SERVER_ARGS_FILES):
        tree = parse_source(path, relative_file(release, path))
        for cls in tree.body:
            if not isinstance(cls, ast.ClassDef) or (path == main and cls.name != "ServerArgs"):
                continue
            for item in cls.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found.setdefault(item.target.id, SourceSite(relative_file(release, path), item.lineno))
    return found


def _field_site(release: SGLangRelease, head_site: SourceSite, attribute: str) -> str:
    """A dotted attribute below what the runner sets: the field's own declaration where dsakit
    scans it (ServerArgs), never the line that sets the parent object."""
    head, _, rest = attribute.partition(".")
    field = rest.split(".", 1)[0]
    if head != "server_args":
        return f"ModelRunner sets {head} at {head_site}; where {head}.{field} is set is not scanned"
    fields = server_args_fields(release)
    if not fields:
        return (f"ModelRunner sets server_args at {head_site}; this tree holds no ServerArgs source "
                f"({' or '.join(SERVER_ARGS_FILES)}), so server_args.{field} is not checked")
    declared = fields.get(field)
    if declared is None:
        return (f"not a ServerArgs field: SGLang {release.version} declares no server_args.{field} "
                f"(ModelRunner sets server_args itself at {head_site})")
    return f"{declared} (ServerArgs field {field}; ModelRunner sets server_args at {head_site})"


def runner_site(attribute: str, release: SGLangRelease | None = None) -> str:
    """Where the real ModelRunner sets `attribute` (its first dotted part), as a phrase for messages.

    Never raises: a missing SGLang installation or an unreadable model_runner.py becomes a phrase.
    """
    name = attribute.split(".", 1)[0]
    if release is None:
        from dsakit.stack.sglang_release import installed_release

        try:
            release = installed_release()
        except UsageError:
            return "unknown (SGLang is not installed here, so the real ModelRunner cannot be scanned)"
    try:
        site = runner_assignments(release).get(name)
        if site is not None and name != attribute:
            return _field_site(release, site, attribute)
    except UsageError as error:  # a ModelRunner file that does not parse (parse_source names it)
        return f"unknown ({error})"
    except (OSError, SyntaxError, UnicodeDecodeError) as error:  # ServerArgs files
        return f"unknown (cannot read {MODEL_RUNNER_FILE}: {error})"
    if site is None:
        return f"the real ModelRunner never sets it (SGLang {release.version})"
    it = "it" if name == attribute else name
    return f"{site} (ModelRunner sets {it})"
