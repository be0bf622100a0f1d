"""Does a scanned suite match the SGLang tree it is judged against? Its `from sglang... import X` lines.

Owns the check of each scanned file's imports from `sglang.*` against the tree's source (modules,
top-level names, submodules), worded as one warning line per file. Static: parses the tree, never
imports it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from dsakit.stack import sglang_source
from dsakit.audit.suite_files import SourceFile
from dsakit.stack.sglang_release import SGLangRelease


@functools.lru_cache(maxsize=512)
def _module_names(path: Path) -> frozenset[str] | None:
    """Top-level names a module defines or imports; None when anything may exist (`*`, `__getattr__`)."""
    tree = sglang_source.tree(path)
    if tree is None:
        return None
    names: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:  # module level, including what `if` / `try` / `with` blocks there bind
        node = pending.pop()
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            pending.extend(node.body)
            pending.extend(getattr(node, "orelse", []))
            pending.extend(getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                pending.extend(handler.body)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if node.name == "__getattr__":
                return None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return frozenset(names)


def _module_file(release: SGLangRelease, dotted: str) -> Path | None:
    relative = "/".join(dotted.split(".")[1:])
    for candidate in (release.file(relative + ".py"), release.file(relative + "/__init__.py")):
        if candidate.is_file():
            return candidate
    if relative == "":
        init = release.file("__init__.py")
        return init if init.is_file() else None
    return None


def missing_imports(file: SourceFile, release: SGLangRelease) -> list[str]:
    """`sglang.x.y.Name` for every name `file` imports from `sglang.*` that the tree lacks."""
    missing: list[str] = []
    for node in ast.walk(file.tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module != "sglang" and not node.module.startswith("sglang."):
            continue
        module = _module_file(release, node.module)
        if module is None:
            if not release.file("/".join(node.module.split(".")[1:])).is_dir():
                missing.append(f"{node.module} (no such module)")
            continue
        names = _module_names(module)
        for alias in node.names:
            if alias.name == "*" or names is None or alias.name in names:
                continue
            sub = "/".join([*node.module.split(".")[1:], alias.name])
            if release.file(sub + ".py").is_file() or release.file(sub).is_dir():
                continue
            missing.append(f"{node.module}.{alias.name}")
    return list(dict.fromkeys(missing))


def mismatch_line(file: SourceFile, release: SGLangRelease) -> str | None:
    """One warning line for a file that imports names the tree lacks (None when it matches)."""
    missing = missing_imports(file, release)
    if not missing:
        return None
    noun = "name" if len(missing) == 1 else "names"
    return (f"{file.display} imports {len(missing)} {noun} SGLang {release.version} lacks: "
            f"{', '.join(missing)}; judged anyway (the suite may be for another release: --sglang-src DIR)")
