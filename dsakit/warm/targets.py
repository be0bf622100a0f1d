"""`dsakit warm`: build, once and before the workers start, the JIT modules a selection needs.

Owns: the JIT target registry (`JIT_TARGETS`), which targets a selection needs (`dsakit_jit`
markers or gate codes), and the warm-up itself: one file lock per target, the real SGLang entry
points, a stamp written atomically that lets the next warm (a fresh node's, after `--import`)
skip a target still built for this stack and selection. Imports torch / SGLang only for a target
whose gates are open and whose stamp does not hold.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsakit.errors import UsageError
from dsakit.warm.jit_caches import cache_names
from dsakit.warm.stamp import state_dir
from dsakit.node.pytest_invocation import plugin_args
from dsakit.reasons import Reason

if TYPE_CHECKING:
    from dsakit.gates.device_model import DeviceModel

MARKER = "dsakit_jit"


@dataclass(frozen=True)
class JitTarget:
    """One JIT build: `build(tests, device)` compiles (or, when the cache is warm, just loads) it for
    the warm's device and returns how many kernel launches it made."""

    name: str
    description: str
    gates: tuple[str, ...]
    caches: tuple[str, ...]  # names of `dsakit.warm.jit_caches.cache_roots()` the build writes
    # gets the test ids needing it and the device the warm runs for (`dsakit warm --device`)
    build: Callable[[Sequence[str], DeviceModel], int | Built] = field(compare=False)
    unit: str = "launches"  # what build()'s count counts
    # what the build depends on besides the stack (its stamp's inputs): by default the tests run
    inputs: Callable[[Sequence[str]], Sequence[str]] = field(compare=False, default=lambda tests: tests)


@dataclass(frozen=True)
class Built:
    """A build's count, plus its own evidence for the stamp (else: the files of its caches)."""

    count: int
    evidence: dict[str, Any]


def _launch_paths(path_ids: Sequence[str], device: DeviceModel) -> int:
    """Run every applicable case on `device` (the warm's) through the named real top-k paths once
    (the tests' entry points, so the same JIT specialisations are compiled)."""
    import pytest
    import torch

    from dsakit.gates.table import closed_reasons
    from dsakit.topk.cases import select_topk_cases
    from dsakit.topk.launch import TOPK_PATHS, path_gates

    launches = 0
    for path_id in path_ids:
        path = TOPK_PATHS[path_id]
        for case in select_topk_cases():
            if path.unsupported(case) is not None or closed_reasons(path_gates(path, case), device):
                continue
            with pytest.MonkeyPatch.context() as monkeypatch:
                path.run(case, path.device, monkeypatch)
            launches += 1
    torch.cuda.synchronize()
    return launches




def _topk_target(name: str, description: str, gates: tuple[str, ...], caches: tuple[str, ...],
                 paths: tuple[str, ...]) -> JitTarget:
    def build(_tests: Sequence[str], device: DeviceModel) -> int:
        return _launch_paths(paths, device)

    def inputs(_tests: Sequence[str]) -> Sequence[str]:
        return paths

    return JitTarget(name, description, gates, caches, build, inputs=inputs)


def _topk_targets() -> tuple[JitTarget, ...]:
    """One target per JIT build the top-k entry points need (`dsakit.topk.backends`): it launches
    each of those entry points once, under their gates."""
    from dsakit.topk.backends import jit_builds

    return tuple(_topk_target(jit.name, jit.description, gates, jit.caches, paths)
                 for jit, (gates, paths) in jit_builds().items())


JIT_TARGETS: dict[str, JitTarget] = {
    t.name: t
    for t in (
        *_topk_targets(),
        JitTarget(
            "sglang-bytecode",
            "cached bytecode (.pyc) of the SGLang import chain every worker imports (without it, "
            "each worker recompiles thousands of modules when the interpreter writes no bytecode)",
            ("sglang:dsa-backend",),
            (),  # __pycache__ beside the SGLang stack's sources
            lambda _tests, _device: _compile_bytecode(),
            unit="modules compiled",
            inputs=lambda _tests: _bytecode_inputs(),
        ),
        JitTarget(
            "triton-kernels",
            "the Triton kernels SGLang's backend metadata code launches (DSA decode/extend metadata, "
            "DeepSeek-V4 page tables, SWA and compression metadata) and whatever else those tests "
            "compile (the DeepSeek-V4 forward: SGLang JIT, DeepGEMM, FlashMLA, inductor): the tests "
            "marked dsakit_jit('triton-kernels') run once, serially, in one process",
            ("cuda",),
            cache_names(),
            lambda tests, device: _run_tests_once(tests, device),
            unit="tests run",
        ),
    )
}

# Targets every selection needs (whatever its gates): each worker imports SGLang.
ALWAYS_TARGETS = ("sglang-bytecode",)


def _run_tests_once(tests: Sequence[str], device: DeviceModel) -> int:
    """Run `tests` in one plain pytest process (no xdist) on `device` (the warm's), so their JIT
    kernels land in the cache the workers read; the tests' own outcome is the suite's business, a
    crash is the build's."""
    import subprocess

    if not tests:
        return 0
    chosen = device.key if device.simulated else "real"  # the warm's device, not $DSAKIT_DEVICE's
    args = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-p", "no:xdist",
            "-p", "no:syrupy", "-q", "--no-header", "-o", "addopts=", f"--dsakit-device={chosen}", *tests]
    # a plain process even when warm itself runs inside a pytest(-xdist) worker
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    done = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    if done.returncode not in (0, 1, 5):  # 1: a test failed, which the real run will report
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise RuntimeError(f"running the {len(tests)} tests exited {done.returncode}: {tail}")
    return len(tests)


def _compile_bytecode() -> Built:
    from dsakit.warm.bytecode import warm_bytecode

    result = warm_bytecode()
    if result.unwritable:
        raise OSError(f"{result.unwritable} of {result.modules} modules' bytecode could not be written "
                      "(read-only site); set PYTHONPYCACHEPREFIX to a writable directory for the run")
    return Built(result.compiled, {"sources": result.sources})


def _bytecode_inputs() -> tuple[str, ...]:
    from dsakit.warm.bytecode import stamp_inputs

    return stamp_inputs()


def _gate_targets() -> dict[str, tuple[str, ...]]:
    from dsakit.topk.backends import jit_builds

    implied: dict[str, tuple[str, ...]] = {}
    for jit in jit_builds():
        implied[jit.implied_by] = implied.get(jit.implied_by, ()) + (jit.name,)
    return implied


# Gate codes that imply a target when a test does not name it with the marker (the top-k JIT builds').
GATE_TARGETS: dict[str, tuple[str, ...]] = _gate_targets()


def validate_targets(names: Iterable[str], targets: dict[str, JitTarget] | None = None) -> tuple[str, ...]:
    known = JIT_TARGETS if targets is None else targets
    out: list[str] = []
    for name in names:
        if name not in known:
            raise UsageError(f"unknown dsakit JIT target {name!r}; known: {', '.join(known)}")
        if name not in out:
            out.append(name)
    return tuple(out)


def targets_of_item(item: Any) -> tuple[str, ...]:
    """The targets one collected test needs: its dsakit_jit markers plus those its gate codes imply."""
    from dsakit.gates.marks import MARKER as GATE_MARKER

    named = validate_targets([t for marker in item.iter_markers(MARKER) for t in marker.args])
    codes = [c for marker in item.iter_markers(GATE_MARKER) for c in marker.args]
    return tuple(dict.fromkeys([*named, *(t for code in codes for t in GATE_TARGETS.get(code, ()))]))


# ---------------------------------------------------------------- which targets a selection needs


class _Needs:
    """A pytest plugin object: after collection, which tests need which target."""

    def __init__(self) -> None:
        self.tests: dict[str, list[str]] = {}
        self.collected = 0
        self.error: str | None = None

    def pytest_collection_finish(self, session: Any) -> None:
        # session.items is the final selection: after -k / -m / --deselect (a modifyitems hook
        # here could run before them and warm for tests pytest then drops)
        items: list[Any] = list(session.items)
        self.collected = len(items)
        for name in ALWAYS_TARGETS if items else ():
            self.tests[name] = [item.nodeid for item in items]
        for item in items:
            try:
                names = targets_of_item(item)
            except UsageError as error:
                self.error = f"{item.nodeid}: {error}"
                continue
            for name in names:
                self.tests.setdefault(name, []).append(item.nodeid)


def needed_targets(selection: Sequence[str]) -> tuple[dict[str, list[str]], int]:
    """{target: test ids} for a pytest selection (collected in-process, with the dsakit plugin),
    and how many tests were collected. UsageError when collection fails."""
    import pytest

    needs = _Needs()
    # syrupy would report every golden as unused in a collect-only run and fail it
    args = [*plugin_args(), "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:syrupy", *selection]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = pytest.main(args, plugins=[needs])
    if needs.error:
        raise UsageError(needs.error)
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        tail = "\n".join(out.getvalue().strip().splitlines()[-15:])
        raise UsageError(f"collecting {' '.join(selection) or '(rootdir)'} failed (pytest exit {int(code)}):\n{tail}")
    return needs.tests, needs.collected


# ---------------------------------------------------------------- building


@dataclass
class WarmResult:
    target: str
    status: str  # built, cached, skipped, failed
    seconds: float = 0.0
    launches: int = 0  # cached: the count of the build the stamp records
    tests: int = 0
    reasons: list[Reason] = field(default_factory=list)
    error: str = ""
    waited_s: float = 0.0  # time spent waiting for another process's build of the same target
    stale: str = ""  # built: why the stamp did not hold ("no stamp", "... is gone")
    stamp_time: str = ""  # cached: when the stamped build ran

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "seconds": round(self.seconds, 3),
                "launches": self.launches, "tests": self.tests, "waited_s": round(self.waited_s, 3),
                "reasons": [r.as_dict() for r in self.reasons], "error": self.error, "stale": self.stale,
                "stamp_time": self.stamp_time}


def warm_target(target: JitTarget, device: DeviceModel, *, test_ids: Sequence[str] = ()) -> WarmResult:
    """Build one target under its file lock for the tests that need it (their ids); skipped with
    reasons when its gates are closed; `cached` (nothing run) when its stamp still holds: the same
    stack and inputs, and every cache file (or valid .pyc) the build left is still there."""
    from filelock import FileLock

    from dsakit.gates.table import closed_reasons
    from dsakit.warm.stamp import build_evidence, cache_evidence, make_stamp, read_stamp, why_stale
    from dsakit.warm.jit_caches import cache_roots
    from dsakit.warm.tarball import stack_key

    tests = len(test_ids)
    reasons = closed_reasons(target.gates, device)
    if reasons:
        return WarmResult(target.name, "skipped", tests=tests, reasons=reasons)
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stamp_path = directory / f"{target.name}.json"
    start = time.perf_counter()
    with FileLock(str(directory / f"{target.name}.lock")):
        waited = time.perf_counter() - start
        tic = time.perf_counter()
        key, inputs = stack_key(device), list(target.inputs(test_ids))
        roots = {name: root.path for name, root in cache_roots().items()}
        stamp = read_stamp(stamp_path)
        stale = why_stale(stamp, key, inputs, roots)
        if stale is None and stamp is not None:
            return WarmResult(target.name, "cached", time.perf_counter() - tic, int(stamp.get("launches", 0)),
                              tests, waited_s=waited, stamp_time=str(stamp.get("time", "")))
        # what every root holds before: a build that writes outside its declared caches is caught
        before = cache_evidence(list(roots), roots) if target.caches else {}
        try:
            built = target.build(test_ids, device)
        except Exception as error:  # noqa: BLE001 - a failed build is reported, not raised
            return WarmResult(target.name, "failed", time.perf_counter() - tic, tests=tests,
                              error=f"{type(error).__name__}: {error}", waited_s=waited, stale=stale or "")
        seconds = time.perf_counter() - tic
        count, evidence = ((built.count, built.evidence) if isinstance(built, Built)
                           else (built, build_evidence(
                               target.caches, roots, before, cache_evidence(list(roots), roots))))
        _write_stamp(stamp_path, make_stamp(
            target.name, key, inputs, evidence, seconds=round(seconds, 3), launches=count,
            time=time.strftime("%Y-%m-%dT%H:%M:%S"), python=sys.version.split()[0]))
    return WarmResult(target.name, "built", seconds, count, tests, waited_s=waited, stale=stale or "")


def _write_stamp(path: Path, data: dict[str, Any]) -> None:
    from dsakit.output_paths import output_file

    # atomic: a reader never sees half a stamp
    output_file(path, "the warm stamp").write_json(data)


def _cache_paths(target: JitTarget) -> str:
    from dsakit.warm.jit_caches import cache_roots

    if not target.caches:
        return "__pycache__ beside the SGLang stack's sources"
    roots = cache_roots()
    return ", ".join(str(roots[name].path) for name in target.caches)


def run_warm(selection: Sequence[str], *, targets: Sequence[str] = (), as_json: bool = False,
             device_name: str | None = None) -> int:
    """`dsakit warm [--target NAME] [pytest selection...]`: exit 0 when nothing failed to build."""
    from dsakit.gates.device_model import resolve_device

    device = resolve_device(device_name)
    if targets:
        wanted: dict[str, list[str]] = {name: [] for name in validate_targets(targets)}
        collected = None
    else:
        wanted, collected = needed_targets(selection)
    results = [warm_target(JIT_TARGETS[name], device, test_ids=tests) for name, tests in wanted.items()]
    if as_json:
        print(json.dumps({"device": device.as_dict(), "collected": collected,
                          "targets": [r.as_dict() for r in results]}, indent=2))
    else:
        print(f"dsakit warm: device {device.describe()}")
        if collected is not None:
            needed = ", ".join(f"{name} ({len(t)} tests)" for name, t in wanted.items()) or "none"
            print(f"dsakit warm: {collected} tests selected; JIT targets needed: {needed}")
        for r in results:
            if r.status == "built":
                waited = f", waited {r.waited_s:.1f} s for another build" if r.waited_s >= 0.5 else ""
                print(f"  {r.target:18s} built    {r.seconds:8.2f} s  ({r.launches} {JIT_TARGETS[r.target].unit}{waited}; "
                      f"stamp: {r.stale}; caches: {_cache_paths(JIT_TARGETS[r.target])})")
            elif r.status == "cached":
                print(f"  {r.target:18s} cached   {r.seconds:8.2f} s  (stamp of {r.stamp_time} holds: same stack, "
                      f"inputs and cache files; {r.launches} {JIT_TARGETS[r.target].unit} then)")
            elif r.status == "skipped":
                print(f"  {r.target:18s} skipped  " + " | ".join(str(x) for x in r.reasons))
            else:
                print(f"  {r.target:18s} FAILED   {r.seconds:8.2f} s  {r.error}")
    return 1 if any(r.status == "failed" for r in results) else 0
