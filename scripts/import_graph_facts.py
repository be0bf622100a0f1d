"""Import-graph facts of a dsakit tree, read from its source (AST; nothing is imported).

    python scripts/import_graph_facts.py [TREE] [--contracts PYPROJECT] [--renames FILE] [--json]

TREE is a checkout (default: this one). The package is laid out as an install does it: dsakit/,
with mocks/ and contracts/ as dsakit.mocks and dsakit.contracts (links inside dsakit/ skipped).
The layering checked is the `[tool.importlinter]` of PYPROJECT (default: this checkout's), so an
old tree is judged by today's contracts; --renames (lines `OLD_PATH NEW_PATH`, as `git diff -M
--name-status OLD NEW` prints them) puts its modules where they live today first. Every import statement counts: module level, under
TYPE_CHECKING, and inside functions (lazy), as grimp reads them. Prints modules, imports, imports
against the declared layering (direct edges; a module no layer names is counted apart), import
cycles (wing level and module level, with and without the lazy imports) and the biggest module.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
MAPPED = {"mocks": "dsakit.mocks", "contracts": "dsakit.contracts"}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    lazy: bool  # inside a function or method


@dataclass
class Graph:
    modules: dict[str, Path] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)


def _module_files(tree: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top, package in (("dsakit", "dsakit"), *MAPPED.items()):
        base = tree / top
        if not base.is_dir() or base.is_symlink():
            continue
        for folder, dirs, files in os.walk(base):
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink() and d != "__pycache__")
            parts = here.relative_to(base).parts
            if top == "dsakit" and parts and parts[0] in MAPPED:
                continue  # a real folder dsakit/mocks would shadow nothing: the mapping wins
            for name in sorted(files):
                path = here / name
                if not name.endswith(".py") or path.is_symlink():
                    continue
                stem = [] if name == "__init__.py" else [name[:-3]]
                found[".".join([package, *parts, *stem])] = path
    return found


def _canonical(name: str) -> str:
    head, _, rest = name.partition(".")
    return f"{MAPPED[head]}.{rest}".rstrip(".") if head in MAPPED else name


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The dsakit module an imported name lands in (the longest known prefix), or None."""
    name = _canonical(name)
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterable[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    lazy_nodes = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                yield Edge(module, target, node.lineno, id(node) in lazy_nodes)


def build(tree: Path) -> Graph:
    graph = Graph(_module_files(tree))
    for module, path in graph.modules.items():
        graph.lines[module] = len(path.read_text(encoding="utf-8").splitlines())
        graph.edges.extend(dict.fromkeys(_imports(module, path, graph.modules)))  # `import a, b` of one module: once
    return graph


def _module_name(path: str) -> str:
    parts = Path(path).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return _canonical(name)


def read_renames(text: str) -> dict[str, str]:
    """Old module -> today's, from `OLD NEW` lines (a `git diff --name-status` status field first is
    skipped; other lines are ignored)."""
    renames: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and all(f.endswith(".py") for f in fields[-2:]):
            renames[_module_name(fields[-2])] = _module_name(fields[-1])
    return renames


def renamed(graph: Graph, renames: dict[str, str]) -> Graph:
    """The graph with its modules under today's names."""
    def name(module: str) -> str:
        return renames.get(module, module)

    return Graph({name(m): p for m, p in graph.modules.items()}, {name(m): n for m, n in graph.lines.items()},
                 [Edge(name(e.source), name(e.target), e.line, e.lazy) for e in graph.edges])


# ---------------------------------------------------------------- the declared layering


def _matches(module: str, pattern: str) -> bool:
    """import-linter's module expressions: `*` one name, `**` any depth (`a.**` includes `a`'s
    descendants, not `a`)."""
    regex_parts = pattern.split(".")
    parts = module.split(".")

    def match(i: int, j: int) -> bool:
        if i == len(regex_parts):
            return j == len(parts)
        if regex_parts[i] == "**":
            return any(match(i + 1, k) for k in range(j + 1, len(parts) + 1))
        return j < len(parts) and fnmatchcase(parts[j], regex_parts[i]) and match(i + 1, j + 1)

    return match(0, 0)


def _ignored(edge: Edge, patterns: Iterable[str]) -> bool:
    for text in patterns:
        source, _, target = (p.strip() for p in text.partition("->"))
        if _matches(edge.source, source) and _matches(edge.target, target):
            return True
    return False


def _within(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def against_layers(graph: Graph, contract: dict[str, object]) -> tuple[list[tuple[Edge, str]], list[str]]:
    """(imports that go up the layers or across independent siblings, modules no layer names)."""
    container = str(list(contract["containers"])[0])  # type: ignore[call-overload]
    layers = [[f"{container}.{n.strip()}" for n in str(layer).split("|")]
              for layer in contract["layers"]]  # type: ignore[attr-defined]
    ignore = list(contract.get("ignore_imports", []))  # type: ignore[call-overload]

    def place(module: str) -> tuple[int, str] | None:
        for index, names in enumerate(layers):
            for name in names:
                if _within(module, name):
                    return index, name
        return None

    wrong: list[tuple[Edge, str]] = []
    for edge in graph.edges:
        if not _within(edge.source, container) or _ignored(edge, ignore):
            continue
        here, there = place(edge.source), place(edge.target)
        if here is None or there is None:
            continue
        if there[0] < here[0]:
            wrong.append((edge, f"{here[1]} (layer {here[0]}) imports {there[1]} (layer {there[0]}, above)"))
        elif there[0] == here[0] and there[1] != here[1]:
            wrong.append((edge, f"{here[1]} imports its independent sibling {there[1]}"))
    unplaced = sorted(m for m in graph.modules if m != container and _within(m, container) and place(m) is None)
    return wrong, unplaced


def forbidden(graph: Graph, contract: dict[str, object]) -> list[tuple[Edge, str]]:
    sources = list(contract["source_modules"])  # type: ignore[call-overload]
    banned = list(contract["forbidden_modules"])  # type: ignore[call-overload]
    return [(e, f"{e.source} may not import {b}") for e in graph.edges for b in banned
            if any(_within(e.source, s) for s in sources) and _within(e.target, b)]


# ---------------------------------------------------------------- cycles


def _cycles(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    succ: dict[str, set[str]] = {n: set() for n in nodes}
    for a, b in edges:
        if a != b and a in succ and b in succ:
            succ[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on.add(child)
                work.append((child, iter(sorted(succ[child]))))
            elif child in on:
                low[node] = min(low[node], index[child])
    return sorted(found)


def _sibling_cycles(graph: Graph, edges: list[Edge], ignore: list[str]) -> list[list[str]]:
    """import-linter's acyclic_siblings: for each package, cycles among its direct children (a
    child stands for its whole subtree)."""
    found: list[list[str]] = []
    packages = sorted(m for m, p in graph.modules.items() if p.name == "__init__.py")
    kept = [e for e in edges if not _ignored(e, ignore)]
    for package in packages:
        depth = package.count(".") + 1

        def child(module: str) -> str | None:
            if not module.startswith(package + "."):
                return None
            return ".".join(module.split(".")[: depth + 1])

        children = {c for m in graph.modules if (c := child(m))}
        pairs = [(a, b) for e in kept if (a := child(e.source)) and (b := child(e.target)) and a != b]
        found += _cycles(children, pairs)
    return found


# ---------------------------------------------------------------- the facts


def facts(tree: Path, pyproject: Path, renames: dict[str, str] | None = None) -> dict[str, object]:
    graph = renamed(build(tree), renames or {})
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"]
    contracts = config["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    acyclic = next((c for c in contracts if c["type"] == "acyclic_siblings"), {})
    wrong, unplaced = against_layers(graph, layers)
    for contract in contracts:
        if contract["type"] == "forbidden":
            wrong += forbidden(graph, contract)
    ignore = list(acyclic.get("ignore_imports", []))
    eager = [e for e in graph.edges if not e.lazy]
    wings = sorted({".".join(m.split(".")[:2]) for m in graph.modules if m != "dsakit"})
    biggest = max(graph.lines, key=lambda m: graph.lines[m])
    return {
        "tree": str(tree),
        "modules": len(graph.modules),
        "wings": len(wings),
        "imports": len(graph.edges),
        "import_pairs": len({(e.source, e.target) for e in graph.edges}),  # grimp / lint-imports count these
        "imports_lazy": sum(e.lazy for e in graph.edges),
        "cross_wing_imports": sum(_wing(e.source) != _wing(e.target) for e in graph.edges),
        "cross_wing_lazy": sum(_wing(e.source) != _wing(e.target) and e.lazy for e in graph.edges),
        "against_layering": len(wrong),
        "against_layering_lazy": sum(e.lazy for e, _ in wrong),
        "against_layering_list": [f"{e.source}:{e.line}{' (lazy)' if e.lazy else ''} -> {e.target}: {why}"
                                  for e, why in sorted(wrong, key=lambda w: (w[0].source, w[0].line))],
        "unplaced_modules": unplaced,
        "wing_cycles": _cycles(wings, [(_wing(e.source), _wing(e.target)) for e in graph.edges
                                       if not _ignored(e, ignore)]),
        "wing_cycles_module_level_only": _cycles(wings, [(_wing(e.source), _wing(e.target)) for e in eager
                                                         if not _ignored(e, ignore)]),
        "module_cycles": _cycles(graph.modules, [(e.source, e.target) for e in graph.edges
                                                 if not _ignored(e, ignore)]),
        "module_cycles_module_level_only": _cycles(graph.modules, [(e.source, e.target) for e in eager
                                                                   if not _ignored(e, ignore)]),
        "sibling_cycles": _sibling_cycles(graph, graph.edges, ignore),
        "biggest_module": f"{graph.modules[biggest].relative_to(tree)} ({graph.lines[biggest]} lines)",
    }


def _wing(module: str) -> str:
    return ".".join(module.split(".")[:2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", default=str(HERE), help="a dsakit checkout (default: this one)")
    parser.add_argument("--contracts", default=str(HERE / "pyproject.toml"), metavar="PYPROJECT",
                        help="the pyproject.toml whose [tool.importlinter] is applied (default: this checkout's)")
    parser.add_argument("--renames", metavar="FILE", help="`OLD_PATH NEW_PATH` lines: judge an old tree's "
                        "modules where they live today (`git diff -M --name-status OLD HEAD` output works)")
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    args = parser.parse_args(argv)
    tree, pyproject = Path(args.tree).expanduser().resolve(), Path(args.contracts).expanduser()
    if not (tree / "dsakit" / "__init__.py").is_file():
        parser.error(f"{args.tree} is not a dsakit checkout (no dsakit/__init__.py); pass the folder holding dsakit/")
    if not pyproject.is_file():
        parser.error(f"--contracts {args.contracts}: no such file; pass a pyproject.toml with [tool.importlinter]")
    renames = None
    if args.renames:
        try:
            renames = read_renames(Path(args.renames).expanduser().read_text(encoding="utf-8"))
        except OSError as error:
            parser.error(f"--renames {args.renames}: {error.strerror or error}; pass a readable file")
    result = facts(tree, pyproject, renames)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"    {' <-> '.join(item) if isinstance(item, list) else item}")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
