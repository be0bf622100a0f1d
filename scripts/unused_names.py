"""List the names dsakit defines that nothing uses: a function, class, method or module-level
constant of dsakit/ (mocks/ and contracts/ included) whose identifier occurs, as a word, only at
its own definition in every tracked file of the repository (code, tests, scripts, docs, data).

    python scripts/unused_names.py            # one `file:line name` per unused name, then the count
    python scripts/unused_names.py --count    # the count alone

Names that something outside the source calls by convention are not counted: pytest hooks
(`pytest_*`), dunders, `test_*` functions, ast visitors' `visit_*`, and the methods of an interface
another library calls (CALLED_FROM_OUTSIDE, each with its caller). Exit 0 always: it reports;
tests/project/test_unused_names.py holds the rule.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dsakit", "mocks", "contracts")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BY_CONVENTION = re.compile(r"^(pytest_\w+|__\w+__|test_\w*|visit_\w+|generic_visit)$")
# (file, name) -> who calls it by name from outside this repository (an interface dsakit implements)
CALLED_FROM_OUTSIDE = {
    ("dsakit/simulation/kernels.py", "get_current_target"): "Triton's active driver (the simulated device's target)",
    ("dsakit/simulation/kernels.py", "get_current_device"): "Triton's active driver",
    ("dsakit/simulation/kernels.py", "is_active"): "Triton's active driver",
    ("dsakit/simulation/runtime.py", "wait_event"): "torch.cuda.Stream's interface, on the CPU stand-in stream",
    ("dsakit/simulation/runtime.py", "record_event"): "torch.cuda.Stream's interface, on the CPU stand-in stream",
    ("dsakit/topk/snapshot.py", "get_file_basename"): "syrupy's SnapshotExtension interface",
    ("dsakit/topk/snapshot.py", "matches_test_location"): "syrupy's SnapshotExtension interface",
}


def _tracked(root: Path) -> list[Path]:
    """The repository's files: git's (tracked, and new ones it does not ignore), else the tree's."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):  # an unpacked sdist: no git
        return [path for path in root.rglob("*") if path.is_file() and not any(
            part.startswith(".") or part in ("__pycache__", "build", "dist") for part in path.relative_to(root).parts)]
    return [root / name for name in listed.stdout.split("\0") if name and (root / name).is_file()]


def _definitions(path: Path) -> list[tuple[str, int]]:
    """(name, line) of the functions, classes, methods and module-level constants `path` defines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int]] = []

    def visit(body: list[ast.stmt], module_level: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.name, node.lineno))
            elif isinstance(node, ast.ClassDef):
                found.append((node.name, node.lineno))
                visit(node.body, module_level=False)
            elif module_level and isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.extend((t.id, node.lineno) for t in targets if isinstance(t, ast.Name))

    visit(tree.body, module_level=True)
    return found


def unused_names(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file relative to `root`, line, name) of each name that occurs once in the repository."""
    words: Counter[str] = Counter()
    sources: list[Path] = []
    for path in _tracked(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images, wheels) hold no names
        words.update(_WORD.findall(text))
        if path.suffix == ".py" and path.relative_to(root).parts[0] in PACKAGES:
            sources.append(path)
    unused: list[tuple[str, int, str]] = []
    for path in sorted(sources):
        for name, line in _definitions(path):
            relative = path.relative_to(root).as_posix()
            if words[name] <= 1 and not _BY_CONVENTION.match(name) and (relative, name) not in CALLED_FROM_OUTSIDE:
                unused.append((relative, line, name))
    return unused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", action="store_true", help="print the count alone")
    args = parser.parse_args(argv)
    found = unused_names()
    if not args.count:
        for file, line, name in found:
            print(f"{file}:{line} {name}")
    print(len(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
