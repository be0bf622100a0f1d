"""Static scans of SGLang source (AST only: nothing is imported, no GPU needed).

Owns: where the real `ModelRunner` assigns or defines its attributes, and (see `scan_runner_reads`)
where backends read `model_runner.X`. Never imports torch or SGLang.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from dsakit.sglang_release import MODEL_RUNNER_FILE, SGLangRelease


@dataclass(frozen=True)
class SourceSite:
    """A place in the SGLang tree, relative to the package dir's parent (``sglang/srt/...:123``)."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def _relative(release: SGLangRelease, path: Path) -> str:
    try:
        return str(path.resolve().relative_to(release.package_dir.parent))
    except ValueError:
        return str(path)


def _self_targets(target: ast.expr) -> list[str]:
    """Attribute names assigned on `self` by one assignment target (tuples unpacked)."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return [target.attr]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _self_targets(element)]
    if isinstance(target, ast.Starred):
        return _self_targets(target.value)
    return []


def _class_assignments(cls: ast.ClassDef) -> dict[str, int]:
    """name -> first line where the class defines it (class body) or assigns it on self (methods)."""
    found: dict[str, int] = {}

    def note(name: str, line: int) -> None:
        if name not in found or line < found[name]:
            found[name] = line

    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            note(item.name, item.lineno)  # methods and properties are attributes too
            for node in ast.walk(item):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    targets = [node.target]
                for target in targets:
                    for name in _self_targets(target):
                        note(name, node.lineno)
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name):
                    note(target.id, item.lineno)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            note(item.target.id, item.lineno)
    return found


@functools.lru_cache(maxsize=8)
def runner_assignments(release: SGLangRelease) -> dict[str, SourceSite]:
    """Attributes the real `ModelRunner` assigns or defines, each with its first site.

    Covers the `ModelRunner` class and the mixin/base classes defined in the same file.
    """
    path = release.file(MODEL_RUNNER_FILE)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    relative = _relative(release, path)
    sites: dict[str, SourceSite] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for name, line in _class_assignments(node).items():
                if node.name == "ModelRunner" or name not in sites:
                    sites[name] = SourceSite(relative, line)
    return sites
