"""The run's session is the one registrar and the one worker hand-over (issue 44 item 2): its parts
answer one protocol (`dsakit.session.Part`) and no other module registers a hook object or touches
xdist's `workeroutput`. Counted from the source (AST), so a part that registers its own hooks or
hands its own data over fails here with its file.

`python tests/project/test_session_parts.py [ROOT]` prints the counts of any checkout (the issue's
before and after)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOOKSPECS = ("fault_hookspec.py",)  # hook specifications, not implementations


def _modules(root: Path) -> list[tuple[str, ast.Module]]:
    found = []
    for folder in ("dsakit", "mocks"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name not in HOOKSPECS:
                found.append((path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8"))))
    return found


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _names_workeroutput(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr == "workeroutput")
            or (isinstance(node, ast.Name) and node.id == "workeroutput")
            or (isinstance(node, ast.Constant) and node.value == "workeroutput"))


def counts(root: Path = ROOT) -> dict[str, list[str]]:
    """Per measure, the sites it counts (file, or file:function)."""
    hooks, registrars, writers, readers, finders, host_label = [], [], [], [], [], []
    for file, tree in _modules(root):
        for function in _functions(tree):
            if function.name.startswith("pytest_"):
                hooks.append(f"{file}:{function.name}")
            inner = list(ast.walk(function))
            stores = any(isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                         and _names_workeroutput(node.value) for node in inner)
            mentions = any(_names_workeroutput(node) for node in inner)
            takes_node = any(arg.arg == "node" for arg in function.args.args)
            if stores:
                writers.append(f"{file}:{function.name}")
            elif mentions and takes_node:  # xdist's node: a worker that went down
                readers.append(f"{file}:{function.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                    and ast.unparse(node.func.value).endswith("pluginmanager")):
                registrars.append(file)
            if isinstance(node, ast.ClassDef) and any(isinstance(item, ast.FunctionDef) and item.name == "find_spec"
                                                      for item in node.body):
                finders.append(f"{file}:{node.name}")
            if isinstance(node, ast.Constant) and node.value == "DSAKIT_HOST_LABEL":
                host_label.append(file)
    return {"hook implementations": hooks, "modules registering hook objects": sorted(set(registrars)),
            "workeroutput writers": writers, "workeroutput readers": readers,
            "meta-path finders": finders, "$DSAKIT_HOST_LABEL readers": host_label}


def test_only_the_session_registers_hook_objects() -> None:
    assert counts()["modules registering hook objects"] == ["dsakit/session.py"]


def test_one_worker_hand_over_and_one_merge() -> None:
    found = counts()
    assert found["workeroutput writers"] == ["dsakit/session.py:pytest_sessionfinish"]
    assert found["workeroutput readers"] == ["dsakit/session.py:pytest_testnodedown"]


def test_one_import_watcher_and_one_host_label_reader() -> None:
    found = counts()
    # the import watcher, the stand-in modules of absent kernel libraries, a bare checkout's mapping
    assert sorted(found["meta-path finders"]) == ["dsakit/__init__.py:_CheckoutFinder",
                                                  "dsakit/simulation/kernels.py:StandInFinder",
                                                  "dsakit/stack/import_hooks.py:ImportWatch"]
    assert found["$DSAKIT_HOST_LABEL readers"] == ["dsakit/options.py"]  # the option table's row


def test_the_hook_implementations_are_the_plugins_and_the_parts_own() -> None:
    """Every hook implementation, by file: the plugin's hand-offs, the session's once-per-run hooks,
    and the per-test hooks (or the ordered ones) of the parts that keep them."""
    by_file: dict[str, int] = {}
    for site in counts()["hook implementations"]:
        file = site.partition(":")[0]
        by_file[file] = by_file.get(file, 0) + 1
    # 35 on the protocol's branch; the merge added the device-branch part's sessionfinish (it reads its
    # probes while the simulation holds) and counts warm/targets.py's collector, once node/warm.py
    assert sum(by_file.values()) == 37, by_file


if __name__ == "__main__":
    measured = counts(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    for measure, sites in measured.items():
        print(f"{measure}: {len(sites)}")
        for site in sites:
            print(f"    {site}")
