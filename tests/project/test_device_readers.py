"""One reader of the run's device: a pytest run's device is its session's (`--dsakit-device`,
`$DSAKIT_DEVICE` or the ini key, as `dsakit.session.RunDevice` resolved it); only a command's
handler resolves a device by itself, from its own `--device` (else `$DSAKIT_DEVICE`).

Read from the source (AST), so a new `resolve_device(None)` in code a run reaches (the pr-vs-base
recorder and the warm's launch paths each had one: they recorded and launched on the variable's
device or this machine's, not the run's) fails here with its file and function.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THE_MODEL = "dsakit/gates/device_model.py"  # defines the resolvers
# what resolves a device name, falling back to $DSAKIT_DEVICE and then to this machine's device
RESOLVERS = {"resolve_device", "validate_device_name", "current_key", "discover"}

# (file, function) -> whose device it resolves
READERS = {
    ("dsakit/gates/capabilities.py", "run_capabilities"): "`dsakit capabilities --device`",
    ("dsakit/warm/targets.py", "run_warm"): "`dsakit warm --device`: its targets' gates and builds",
    ("dsakit/warm/tarball.py", "current_key"): "`dsakit warm --export/--import --device`: the stack key",
    ("dsakit/warm/tarball.py", "export_cache"): "`dsakit warm --export --device`",
    ("dsakit/warm/tarball.py", "_import_from"): "`dsakit warm --import --device`",
    ("dsakit/warm/tarball.py", "chain_bytecode"): "the export's key; without one (a bench script), "
                                                     "the caller's $DSAKIT_DEVICE or this machine",
    ("dsakit/node/rerun.py", "run_rerun_test"): "`dsakit rerun-test --device`",
    ("dsakit/node/gpu_pinning.py", "discover"): "the name it is given: the session's (Pinning) or "
                                                "`dsakit rerun-test --device`",
    ("dsakit/node/gpu_pinning.py", "inventory"): "the session's device name (Pinning.device_name)",
    ("dsakit/simulation/fleet.py", "fleet_devices"): "each name of the session's --dsakit-device list "
                                                     "(RunDevice), never empty",
    ("dsakit/gates/marks.py", "_from_environment"): "outside any pytest run (dsakit.require in a "
                                                    "script): there is no session to ask",
}


def _readers() -> dict[tuple[str, str], list[str]]:
    """(file, innermost function) -> the resolver calls in it, as written."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted((ROOT / "dsakit").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative == THE_MODEL:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            inner = {id(n) for f in ast.walk(function) if f is not function
                     and isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)}
            for node in ast.walk(function):
                if id(node) in inner or not isinstance(node, ast.Call):
                    continue
                name = node.func.id if isinstance(node.func, ast.Name) else None
                if name in RESOLVERS:
                    found.setdefault((relative, function.name), []).append(ast.unparse(node))
    return found


def test_only_command_handlers_resolve_a_device_by_themselves() -> None:
    found = _readers()
    unlisted = {key: calls for key, calls in found.items() if key not in READERS}
    assert not unlisted, (
        f"{unlisted}: a device read outside the session; in a pytest run take the session's device "
        "(dsakit.gates.marks.active_session().device), in a command pass the handler's --device down")
    assert sorted(set(READERS) - set(found)) == [], "a listed reader no longer reads: drop its row"


def test_a_bare_resolve_device_is_only_where_no_run_exists() -> None:
    bare = {key for key, calls in _readers().items()
            if any(call in ("resolve_device(None)", "resolve_device()") for call in calls)}
    assert bare == {("dsakit/gates/marks.py", "_from_environment")}, bare
