"""Mutation testing of whole core modules, in-process: mutmut 2's mutants, one fork per mutant.

Owns: the verdict of every mutant of the named modules (killed / timeout / survived / no test reaches
it) and the per-module table. Must not write into the checkout: a mutant's source is served to the
forked child through an import hook, never written to disk (bytecode writing is off in the child).

How one run goes (bench/README.md, "Mutation testing"):
1. a baseline child runs the focused tests once under a profiler that records which functions of
   the modules each test calls, and which third-party modules the tests import;
2. the parent imports those third-party modules (torch, SGLang, syrupy, ...) once;
3. per mutant the parent forks; the child serves the mutated module, runs `pytest.main` on only the
   tests that call the mutated function (all passing focused tests for a mutant outside any
   function: module constants, class bodies, signatures, decorators) with `-x`, and exits; the
   parent ends the child's process group at the timeout.
Needs `mutmut<3` importable (it is only used for its operators): install it with `--target` into a
folder of its own and put that folder on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import gc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_ROOT_PREFIX, _BENCH_PREFIX = str(ROOT) + os.sep, str(ROOT / "bench") + os.sep
# Plain asserts: pytest's rewriting of the tests and plugins cost most of a child's start; the
# core modules hold no bare `assert` whose rewritten message a test reads. No plugin autoload:
# only dsakit's and syrupy's are needed (xdist, pytest-split, randomly would only add start time).
_PYTEST_ARGS = ["-q", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
                "-p", "no:threadexception", "-p", "dsakit.plugin", "-p", "syrupy", "--no-header"]


# The core, in groups that share focused tests: (modules, tests). Paths are the checkout's layout
# on 2026-12-01; a module that moved is named by its new path here.
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "mocks": (["mocks/model_runner.py", "mocks/strict_node.py", "mocks/read_log.py", "mocks/runner_scope.py",
               "contracts/schema.py"],
              ["tests/test_mock_model_runner.py", "contracts/test_model_runner_contract.py"]),
    "gates": (["dsakit/gates/table.py"], ["tests/test_gates_table.py", "tests/test_device_model.py"]),
    "contract_check": (["dsakit/upstream/contract_check.py"], ["tests/test_contract_check.py"]),
    "checks": (["dsakit/topk/checks.py"], ["tests/test_topk_checks.py", "contracts/test_topk_selection.py"]),
    "audit": ([f"dsakit/audit/{m}.py" for m in (
        "attr_tree", "command", "device_guards", "explain", "findings", "guard_eval", "mock_finder",
        "registry", "release_match", "report", "suite_device", "usage")],
              ["tests/test_audit.py", "tests/test_audit_guard_eval.py", "tests/test_audit_explain.py",
               "tests/test_audit_suites.py", "tests/test_audit_precision.py"]),
}


# ---------------------------------------------------------------- mutants (mutmut 2's operators)

@dataclass
class Mutant:
    module: str          # path relative to the checkout root
    line: int            # 1-based
    index: int           # mutmut's index of this mutant on its line
    source: str          # the whole mutated module
    diff: str
    kind: str            # "wording" when only a message literal changed, else "code"
    verdict: str = ""
    tests_run: int = 0
    seconds: float = 0.0
    label: str = ""      # survivors: wording / equivalent / real, from bench/mutation_triage.py
    reason: str = ""


def mutants_of(module: str) -> list[Mutant]:
    """Every mutmut 2 mutant of `module` (path relative to ROOT), in source order."""
    from mutmut import Context, list_mutations, mutate

    path = ROOT / module
    original = path.read_text(encoding="utf-8")
    ids = sorted(list_mutations(Context(source=original, filename=str(path))),
                 key=lambda m: (m.line_number, m.index))
    found: list[Mutant] = []
    for mid in ids:
        source, count = mutate(Context(source=original, mutation_id=mid, filename=str(path)))
        if count != 1:
            raise SystemExit(f"{module}: mutant {mid} applied {count} times")
        before, after = original.splitlines(True), str(source).splitlines(True)
        diff = "".join(difflib.unified_diff(before, after, f"a/{module}", f"b/{module}", n=0))
        found.append(Mutant(module, mid.line_number + 1, mid.index, str(source), diff,
                            _kind(before, after)))
    return found


def _kind(before: list[str], after: list[str]) -> str:
    """"wording" where only a message literal changed (mutmut wraps its body in XX ... XX): two
    words or more; a short literal (":", " in ", a code) is data the code works with: "code"."""
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    if len(changed) == 1:
        old, new = changed[0]
        literal = re.search(r"""(["'])XX(.*?)XX\1""", new)
        if _strip_xx(new) == old and literal and len(re.findall(r"[A-Za-z]{2,}", literal.group(2))) >= 2:
            return "wording"
    return "code"


def _strip_xx(line: str) -> str:
    for quote in ('"', "'"):
        line = line.replace(quote + "XX", quote).replace("XX" + quote, quote)
    return line


# ---------------------------------------------------------------- which function holds a line

def function_keys(path: Path) -> list[tuple[int, int, int]]:
    """(body first line, body last line, code first line) of every function in `path`; the code
    first line is what `co_firstlineno` says (the first decorator's line where decorated)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.append((node.body[0].lineno, node.end_lineno or node.lineno, first))
    return spans


def enclosing_function(spans: list[tuple[int, int, int]], line: int) -> int | None:
    """The code first line of the innermost function whose body holds `line`; None where the line
    runs at import (module level, class bodies, a def's signature and decorators)."""
    best: tuple[int, int, int] | None = None
    for span in spans:
        if span[0] <= line <= span[1] and (best is None or span[0] >= best[0]):
            best = span
    return None if best is None else best[2]


# ---------------------------------------------------------------- serving a mutant in the child

class _ServeMutant(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the target module under any name (the import path may go through a symlink) and
    executes the mutated source in its place."""

    def __init__(self, target: Path, source: str) -> None:
        self.target = os.path.realpath(target)
        self.stem = target.stem
        self.source = source

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.rpartition(".")[2] != self.stem:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or os.path.realpath(spec.origin) != self.target:
            return None
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        origin = module.__spec__.origin if module.__spec__ else None
        exec(compile(self.source, origin or self.target, "exec", dont_inherit=True), module.__dict__)


def _under_root(module: types.ModuleType) -> bool:
    file = getattr(module, "__file__", None)
    # no realpath: what loads from the checkout loads through its path (mocks/ and contracts/
    # through dsakit/'s links to them), and thousands of realpath calls cost a child 0.4 s
    return bool(file) and file.startswith(_ROOT_PREFIX) and not file.startswith(_BENCH_PREFIX)


def _installed(module: types.ModuleType) -> bool:
    """Built in, the standard library or an installed package: what the parent may import."""
    file = getattr(module, "__file__", None)
    if not file:
        return True
    real = os.path.realpath(file)
    return any(real.startswith(os.path.realpath(p) + os.sep) for p in {sys.prefix, sys.base_prefix})


def _child_pytest(args: list[str], plugins: list[Any], log: str) -> int:
    """In a forked child: fresh imports of everything under the checkout, then pytest."""
    for name, module in list(sys.modules.items()):
        if _under_root(module):
            del sys.modules[name]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import pytest

    return int(pytest.main([*args, "--rootdir", str(ROOT)], plugins=plugins))


def _fork(run: Any) -> int:
    """Fork a child that calls `run()` and exits with its return value; returns the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setpgid(0, 0)
            os.chdir(ROOT)
            code = run()
        except BaseException:  # noqa: BLE001 -- whatever happens, the child must not return
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


# ---------------------------------------------------------------- the baseline with coverage

class _Recorder:
    """Which functions of the target modules each test calls (sys.setprofile: call events only)."""

    def __init__(self, targets: list[Path]) -> None:
        self.targets = {os.path.realpath(t): str(t.relative_to(ROOT)) for t in targets}
        self._by_filename: dict[str, str | None] = {}
        self.current: str | None = None
        self.calls: dict[str, set[tuple[str, int]]] = {}
        self.durations: dict[str, float] = {}
        self.failed: set[str] = set()
        self.skipped: set[str] = set()
        self.fixtures: dict[str, list[str]] = {}

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        filename = code.co_filename
        module = self._by_filename.get(filename, "")
        if module == "":
            module = self.targets.get(os.path.realpath(filename))
            self._by_filename[filename] = module
        if module is not None and self.current is not None:
            self.calls.setdefault(self.current, set()).add((module, code.co_firstlineno))

    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
        self.current = item.nodeid
        self.fixtures[item.nodeid] = list(getattr(item, "fixturenames", []))
        return None

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        if report.failed:
            self.failed.add(report.nodeid)
        if report.skipped:
            self.skipped.add(report.nodeid)

    def pytest_sessionstart(self, session: Any) -> None:
        import threading

        sys.setprofile(self.profile)
        threading.setprofile(self.profile)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        import threading

        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def baseline(targets: list[Path], tests: list[str], scratch: Path) -> dict[str, Any]:
    out = scratch / "baseline.json"

    def run() -> int:
        recorder = _Recorder(targets)
        code = _child_pytest([*_PYTEST_ARGS, *tests], [recorder], str(scratch / "baseline.log"))
        third_party = [name for name, module in list(sys.modules.items())
                       if isinstance(module, types.ModuleType) and _installed(module)
                       and name != "__main__" and not name.startswith("mutmut")]
        out.write_text(json.dumps({
            "exit": code, "modules": third_party, "durations": recorder.durations,
            "failed": sorted(recorder.failed), "skipped": sorted(recorder.skipped),
            "fixtures": recorder.fixtures,
            "calls": {t: sorted(c) for t, c in recorder.calls.items()}}), encoding="utf-8")
        return 0

    pid = _fork(run)
    _, status = os.waitpid(pid, 0)
    if not out.exists():
        log = (scratch / "baseline.log").read_text(errors="replace")[-4000:]
        raise SystemExit(f"the baseline run died (status {status}):\n{log}")
    return dict(json.loads(out.read_text(encoding="utf-8")))


def prewarm(modules: list[str]) -> int:
    """Import in the parent what the tests import from outside the checkout, so that every forked
    child starts with torch, SGLang and pytest already loaded."""
    loaded = 0
    for name in modules:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            loaded += 1
        except BaseException:  # noqa: BLE001 -- a module that only imports in context stays lazy
            pass
    return loaded


# ---------------------------------------------------------------- running the mutants

def select_tests(mutant: Mutant, spans: list[tuple[int, int, int]], calls: dict[str, set[tuple[str, int]]],
                 usable: list[str]) -> list[str]:
    first = enclosing_function(spans, mutant.line)
    if first is None:
        return usable
    key = (mutant.module, first)
    return [t for t in usable if key in calls.get(t, set())]


def run_all(mutants: list[Mutant], selected: list[list[str]], durations: dict[str, float], jobs: int,
            scratch: Path, progress: Any) -> None:
    running: dict[int, tuple[int, float, float, str]] = {}  # pid -> (mutant index, start, timeout, log)
    queue = list(range(len(mutants)))
    done = 0
    while queue or running:
        while queue and len(running) < jobs:
            n = queue.pop(0)
            mutant, tests = mutants[n], selected[n]
            if not tests:
                mutant.verdict = "no test"
                done += 1
                progress(done, mutant)
                continue
            log = str(scratch / f"m{n}.log")
            target = ROOT / mutant.module

            def run(mutant: Mutant = mutant, tests: list[str] = tests, target: Path = target,
                    log: str = log) -> int:
                sys.dont_write_bytecode = True
                sys.meta_path.insert(0, _ServeMutant(target, mutant.source))
                return _child_pytest(["-x", *_PYTEST_ARGS, *tests], [], log)

            timeout = 10.0 + 4.0 * sum(durations.get(t, 1.0) for t in tests)
            running[_fork(run)] = (n, time.monotonic(), timeout, log)
            mutants[n].tests_run = len(tests)
        time.sleep(0.01)
        for pid, (n, start, timeout, log) in list(running.items()):
            finished, status = os.waitpid(pid, os.WNOHANG)
            elapsed = time.monotonic() - start
            if finished == 0:
                if elapsed <= timeout:
                    continue
                _end_group(pid)
                os.waitpid(pid, 0)
                verdict = "timeout"
            else:
                _end_group(pid)  # whatever the tests left running
                code = os.waitstatus_to_exitcode(status)
                verdict = {0: "survived", 1: "killed", 2: "killed", 3: "killed"}.get(code, f"exit {code}")
                if code < 0:
                    verdict = "killed"  # the mutant crashed the interpreter
                if code == 5:
                    raise SystemExit(f"no tests ran for {mutants[n].module}:{mutants[n].line}; see {log}")
            del running[pid]
            mutants[n].verdict = verdict
            mutants[n].seconds = round(elapsed, 2)
            if verdict != "survived":
                try:
                    os.unlink(log)
                except FileNotFoundError:
                    pass
            done += 1
            progress(done, mutants[n])


def _end_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="source files to mutate, relative to the checkout root")
    parser.add_argument("--tests", nargs="+", default=[], help="the focused test files or node ids")
    parser.add_argument("--group", choices=sorted(GROUPS), default=None,
                        help="a group of core modules with its focused tests (instead of MODULES --tests)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-test-seconds", type=float, default=3.0,
                        help="leave out tests slower than this in the baseline (subprocess runs: "
                             "they never see the mutant anyway)")
    parser.add_argument("--json", type=Path, default=None, help="write every verdict here")
    parser.add_argument("--only-lines", default="", help="MODULE:LINE,... re-test only these mutants")
    args = parser.parse_args(argv)
    if args.group:
        if args.modules or args.tests:
            parser.error("--group names the modules and tests itself: give either --group or MODULES --tests")
        args.modules, args.tests = GROUPS[args.group]
    elif not args.modules or not args.tests:
        parser.error("name the modules to mutate and --tests, or a --group")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    targets = [ROOT / m for m in args.modules]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dsakit-mutation-") as scratch_dir:
        scratch = Path(scratch_dir)
        base = baseline(targets, args.tests, scratch)
        if base["exit"] not in (0, 1):
            raise SystemExit(f"the focused tests did not run (pytest exit {base['exit']}); "
                             f"see the baseline log")
        bad = set(base["failed"]) | set(base["skipped"])
        slow = {t for t, s in base["durations"].items() if s > args.max_test_seconds}
        subprocess_runs = {t for t, f in base["fixtures"].items() if "pytester" in f or "testdir" in f}
        usable = sorted((t for t in base["durations"] if t not in bad | slow | subprocess_runs),
                        key=lambda t: base["durations"][t])
        calls = {t: {(m, line) for m, line in c} for t, c in base["calls"].items()}
        print(f"baseline: {len(base['durations'])} tests, {len(usable)} used "
              f"({len(bad)} failed or skipped, {len(slow - bad)} slower than {args.max_test_seconds} s, "
              f"{len(subprocess_runs - bad - slow)} pytester runs left out); "
              f"{time.monotonic() - started:.0f} s", flush=True)
        for t in sorted(set(base["failed"])):
            print(f"  failed in the baseline (left out): {t}", flush=True)
        loaded = prewarm(base["modules"])
        gc.collect()
        gc.freeze()  # the children's collections skip torch's and SGLang's objects (and copy less)
        print(f"parent: {loaded} modules imported once", flush=True)

        wanted = {tuple(x.rsplit(":", 1)) for x in args.only_lines.split(",") if x}
        table: list[dict[str, Any]] = []
        every: list[Mutant] = []
        for target, module in zip(targets, args.modules):
            mutants = mutants_of(module)
            if wanted:
                mutants = [m for m in mutants if (module, str(m.line)) in wanted]
            spans = function_keys(target)
            selected = [select_tests(m, spans, calls, usable) for m in mutants]
            t0 = time.monotonic()

            def progress(done: int, m: Mutant, total: int = len(mutants)) -> None:
                if m.verdict not in ("killed", "timeout"):
                    print(f"[{done}/{total}] {m.verdict:8s} {m.module}:{m.line} #{m.index} ({m.kind}, "
                          f"{m.tests_run} tests, {m.seconds:.1f} s)\n{m.diff}", flush=True)

            run_all(mutants, selected, base["durations"], args.jobs, scratch, progress)
            seconds = time.monotonic() - t0
            from mutation_triage import label  # bench/mutation_triage.py: the survivors' kinds

            for m in mutants:
                if m.verdict not in ("killed", "timeout"):
                    m.label, m.reason = label(m)
            row = summarize(module, mutants, seconds)
            table.append(row)
            every.extend(mutants)
            print(format_row(row), flush=True)
        print()
        print(format_table(table))
        print(f"\n{time.monotonic() - started:.0f} s in all; load average {os.getloadavg()[0]:.1f}")
        if args.json:
            args.json.write_text(json.dumps({
                "tests": args.tests, "table": table,
                "mutants": [{k: v for k, v in m.__dict__.items() if k != "source"} for m in every]},
                indent=1) + "\n", encoding="utf-8")
    return 0


def summarize(module: str, mutants: list[Mutant], seconds: float) -> dict[str, Any]:
    killed = sum(m.verdict in ("killed", "timeout") for m in mutants)
    survivors = [m for m in mutants if m.verdict not in ("killed", "timeout")]
    kinds = {k: sum(m.label == k for m in survivors) for k in ("wording", "equivalent", "real")}
    counted = len(mutants) - kinds["equivalent"]
    return {"module": module, "mutants": len(mutants), "killed": killed, **kinds,
            "score": round(100 * killed / counted, 1) if counted else 100.0,
            "seconds": round(seconds), "per_mutant_s": round(seconds / max(1, len(mutants)), 2)}


def format_row(row: dict[str, Any]) -> str:
    return (f"| `{row['module']}` | {row['mutants']} | {row['killed']} | {row['wording']} | "
            f"{row['equivalent']} | {row['real']} | {row['score']}% | {row['per_mutant_s']} s |")


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ("| module | mutants | killed | wording left | equivalent | real left | score | s / mutant |\n"
            "|---|---|---|---|---|---|---|---|")
    total = {"module": "**total**", "mutants": sum(r["mutants"] for r in rows),
             "killed": sum(r["killed"] for r in rows),
             **{k: sum(r[k] for r in rows) for k in ("wording", "equivalent", "real")}}
    counted = total["mutants"] - total["equivalent"]
    total["score"] = round(100 * total["killed"] / counted, 1) if counted else 100.0
    total["per_mutant_s"] = round(sum(r["seconds"] for r in rows) / max(1, total["mutants"]), 2)
    return "\n".join([head, *(format_row(r) for r in rows), format_row(total).replace("`**", "**").replace("**`", "**")])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
