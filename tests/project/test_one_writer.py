"""One writer, one atomic write, one outcome recorder: every file dsakit writes goes through
`dsakit.output_paths` (checked up front, atomic, special files written through or refused), and
every per-test outcome is recorded by `dsakit.gates.outcomes.OutcomeRecorder`.

Read from the source (AST), so a new hand-rolled writer or recorder anywhere in dsakit/ fails here
with its file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dsakit.gates.outcomes import OutcomeRecorder

ROOT = Path(__file__).resolve().parents[2]
THE_WRITER = "dsakit/output_paths.py"

# (file, function) -> why it writes by itself: scratch files no user asked for, in dsakit's own
# temporary or lock folders, where the one writer's atomic replace would be wrong or pointless
INTERNAL = {
    ("dsakit/node/fault_isolation.py", "_exit_worker"): "a dying worker's handoff to its controller",
    ("dsakit/compare/recorder.py", "__init__"): "the compare record stream, started empty",
    ("dsakit/compare/recorder.py", "_write"): "one JSON line per test as it ends (a crash keeps them)",
    ("dsakit/node/gpu_pinning.py", "_flock"): "the GPU lock files (opened to lock, never written)",
    ("dsakit/simulation/fleet.py", "_start"): "a device run's log in the fleet's temporary folder",
}
_WRITE_METHODS = {"write_text", "write_bytes", "write_json"}
_ATOMIC_PARTS = {("os", "replace"), ("os", "rename"), ("tempfile", "mkstemp"), ("json", "dump")}


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _calls_output_file(expr: ast.AST | None) -> bool:
    return expr is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "output_file"
        for n in ast.walk(expr))


def _output_files(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names bound to an `OutputFile` in `function`: from `output_file(...)` or an annotation."""
    names = {a.arg for a in [*function.args.args, *function.args.kwonlyargs]
             if a.annotation is not None and "OutputFile" in ast.unparse(a.annotation)}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and _calls_output_file(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.withitem) and _calls_output_file(node.context_expr):
            if isinstance(node.optional_vars, ast.Name):
                names.add(node.optional_vars.id)
    return names


def _writes_by_itself(call: ast.Call, output_files: set[str]) -> str | None:
    """What a call writes without the one writer, or None."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            (func.value.id, func.attr) in _ATOMIC_PARTS:
        return f"{func.value.id}.{func.attr}"
    if isinstance(func, ast.Attribute) and func.attr in _WRITE_METHODS:
        receiver = func.value
        if _calls_output_file(receiver) or (isinstance(receiver, ast.Name) and receiver.id in output_files):
            return None
        return f"{ast.unparse(receiver)}.{func.attr}"
    opened = isinstance(func, ast.Name) and func.id == "open" or \
        isinstance(func, ast.Attribute) and func.attr == "open" and not (
            isinstance(func.value, ast.Name) and func.value.id in {"os", "tarfile"} | output_files)
    if opened:
        modes = [a for a in call.args[1:2] if isinstance(a, ast.Constant)]
        modes += [k.value for k in call.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
        if isinstance(func, ast.Attribute):
            modes += [a for a in call.args[:1] if isinstance(a, ast.Constant)]
        if any(isinstance(m.value, str) and set(m.value) & set("wax+") for m in modes):
            return f"{ast.unparse(func)}(..., {modes[0].value!r})"
    return None


def writes_outside_the_writer(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "dsakit").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name == THE_WRITER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), name)
        for function in _functions(tree):
            if (name, function.name) in INTERNAL:
                continue
            output_files = _output_files(function)
            for node in ast.walk(function):
                what = _writes_by_itself(node, output_files) if isinstance(node, ast.Call) else None
                if what:
                    found.append(f"{name}:{node.lineno} {function.name}: {what}")
    return sorted(set(found))


def test_every_file_dsakit_writes_goes_through_the_one_writer() -> None:
    found = writes_outside_the_writer(ROOT)
    assert found == [], ("write these through dsakit.output_paths.output_file(...) (or, for a scratch "
                         "file no user asked for, add it to INTERNAL with the reason):\n" + "\n".join(found))


@pytest.mark.parametrize("code", [
    "def f(p):\n    p.write_text('x')\n",
    "import os\ndef f(a, b):\n    os.replace(a, b)\n",
    "import json\ndef f(d, h):\n    json.dump(d, h)\n",
    "def f(p):\n    with open(p, 'w') as h:\n        h.write('x')\n",
    "def f(p):\n    with p.open('a', encoding='utf-8') as h:\n        h.write('x')\n",
])
def test_the_scan_catches_a_hand_rolled_write(tmp_path: Path, code: str) -> None:
    (tmp_path / "dsakit").mkdir()
    (tmp_path / "dsakit" / "x.py").write_text(code, encoding="utf-8")
    assert len(writes_outside_the_writer(tmp_path)) == 1


def test_the_scan_passes_writes_through_an_output_file(tmp_path: Path) -> None:
    (tmp_path / "dsakit").mkdir()
    (tmp_path / "dsakit" / "x.py").write_text(
        "def f(p, out: 'OutputFile | None'):\n"
        "    output_file(p, '--json').write_json({})\n"
        "    j = output_file(p, '--json') if p else None\n    j.write_text('x')\n    out.write_bytes(b'')\n"
        "    with output_file(p, '--x').open() as h:\n        h.write(b'')\n"
        "    with open(p) as h:\n        h.read()\n", encoding="utf-8")
    assert writes_outside_the_writer(tmp_path) == []


def test_one_outcome_recorder() -> None:
    """Only `OutcomeRecorder` turns phase reports into records: nobody else calls `next_outcome`."""
    callers = []
    for path in sorted((ROOT / "dsakit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id == "next_outcome":
                callers.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(callers)) == ["dsakit/gates/outcomes.py"], callers


def test_the_recorder_keeps_a_failure_over_a_later_teardown_pass() -> None:
    recorder = OutcomeRecorder()
    call = pytest.TestReport("t.py::t", ("t.py", 0, "t"), {}, "failed", "boom", "call", [], 0.1)
    teardown = pytest.TestReport("t.py::t", ("t.py", 0, "t"), {}, "passed", None, "teardown", [], 0.0)
    assert [r["outcome"] for r in recorder.record(call)] == ["failed"]
    assert recorder.record(teardown) == []
    assert recorder.outcomes["t.py::t"]["outcome"] == "failed"
