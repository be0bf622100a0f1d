"""Mutation testing of whole core modules, in one pytest session: mutmut 2's mutants, a fork per mutant.

Owns: the verdict of every mutant of the named modules (killed / timeout / survived / no test
reaches it) and the per-module table. Must not write into the checkout: a mutant lives only in a
forked child's memory (bytecode writing is off there).

One run (bench/README.md, "Mutation testing"): the parent starts pytest on the focused tests,
collects them once (torch, SGLang, the tests and dsakit imported once) and takes over the test
loop. A baseline child runs every test under a profiler that records which functions of the
modules each test calls. Then per mutant the parent forks a child that
- for a mutant inside a function: swaps that function's code object for the mutated one (every
  reference to the function, in dsakit or in a test module, sees it) and runs only the tests that
  call the function, stopping at the first failure;
- for any other mutant (module constants, class bodies, signatures, decorators) or one whose
  function is only called while importing: drops everything imported from the checkout, serves the
  mutated module through an import hook and runs a fresh `pytest.main` on every usable test.
The parent ends a child's process group at its timeout. Needs `mutmut<3` importable (only its
operators are used): install it with `--target` into a folder of its own, put that on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import gc
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_ROOT_PREFIX, _BENCH_PREFIX = str(ROOT) + os.sep, str(ROOT / "bench") + os.sep
# Plain asserts: rewriting the tests and plugins was most of a fresh child's start, and the core
# modules hold no bare `assert` whose rewritten message a test reads. No plugin autoload: only
# dsakit's and syrupy's are needed (xdist, pytest-split, randomly only add start time).
_PYTEST_ARGS = ["-q", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
                "-p", "no:threadexception", "-p", "dsakit.plugin", "-p", "syrupy", "--no-header"]

# The core, in groups that share focused tests: (modules, tests). Paths are the checkout's layout
# on 2026-12-01; a module that moved is named by its new path here.
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "mocks": (["mocks/model_runner.py", "mocks/strict_node.py", "mocks/read_log.py", "mocks/runner_scope.py",
               "contracts/schema.py"],
              ["tests/mocks/test_mock_model_runner.py", "tests/mocks/test_mutation_gaps_mocks.py",
               "tests/mocks/test_mutation_gaps_runner_scope.py", "tests/mocks/test_mutation_gaps_schema.py",
               "contracts/test_model_runner_contract.py"]),
    "gates": (["dsakit/gates/table.py"],
              ["tests/gates/test_gates_table.py", "tests/gates/test_device_model.py", "tests/gates/test_mutation_gaps_gates.py"]),
    "contract_check": (["dsakit/sglang_facts/contract_check.py"],
                       ["tests/sglang_facts/test_contract_check.py", "tests/sglang_facts/test_mutation_gaps_contract_check.py"]),
    "checks": (["dsakit/topk/checks.py"],
               ["tests/topk/test_topk_checks.py", "tests/topk/test_mutation_gaps_checks.py", "contracts/test_topk_selection.py"]),
    "audit": ([f"dsakit/audit/{m}.py" for m in (  # smallest first
        "explain", "attr_tree", "guard_eval", "release_match", "command", "registry", "findings",
        "suite_device", "device_guards", "report", "usage", "mock_finder")],
              ["tests/audit/test_audit.py", "tests/audit/test_mutation_gaps_audit.py", "tests/audit/test_audit_guard_eval.py",
               "tests/audit/test_audit_explain.py", "tests/audit/test_mutation_gaps_report.py",
               "tests/audit/test_mutation_gaps_release_match.py", "tests/audit/test_mutation_gaps_registry.py",
               "tests/audit/test_mutation_gaps_suite_device.py", "tests/audit/test_mutation_gaps_command.py",
               "tests/audit/test_mutation_gaps_usage.py", "tests/audit/test_mutation_gaps_mock_finder.py",
               "tests/audit/test_mutation_gaps_findings.py", "tests/audit/test_mutation_gaps_device_guards.py",
               "tests/audit/test_audit_suites.py", "tests/audit/test_audit_precision.py"]),
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
    route: str = ""      # "swap" (code object of one function) or "fresh" (a fresh import)
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
        found.append(Mutant(module, mid.line_number + 1, mid.index, str(source), diff, _kind(before, after)))
    return found


def _kind(before: list[str], after: list[str]) -> str:
    """"wording" where only a message literal changed (mutmut wraps its body in XX ... XX): two
    words or more; a short literal (":", " in ", a code) is data the code works with: "code"."""
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) == len(after) and len(changed) == 1:
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

def function_spans(path: Path) -> list[tuple[int, int, int]]:
    """(body first line, body last line, code first line) of every function in `path`; the code
    first line is what `co_firstlineno` says (the first decorator's line where decorated)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.append((node.body[0].lineno, node.end_lineno or node.lineno, first))
    return spans


def enclosing(spans: list[tuple[int, int, int]], line: int) -> list[int]:
    """The code first lines of the functions whose body holds `line`, innermost first; empty where
    the line runs at import (module level, class bodies, a def's signature and decorators)."""
    holding = [s for s in spans if s[0] <= line <= s[1]]
    return [s[2] for s in sorted(holding, key=lambda s: -s[0])]


def live_functions(module: types.ModuleType, filename: str) -> dict[int, list[types.FunctionType]]:
    """The function objects of `module` by code first line: module functions, methods, static and
    class methods, properties, and what functools wrappers wrap. Nested functions are not live:
    the code object of the function around them carries theirs."""
    found: dict[int, list[types.FunctionType]] = {}
    seen: set[int] = set()

    def add(obj: Any) -> None:
        for _ in range(5):  # functools.wraps chains (lru_cache, ...)
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
                continue
            if isinstance(obj, property):
                for part in (obj.fget, obj.fset, obj.fdel):
                    if part is not None:
                        add(part)
                return
            if isinstance(obj, types.FunctionType):
                if os.path.realpath(obj.__code__.co_filename) == filename:
                    found.setdefault(obj.__code__.co_firstlineno, []).append(obj)
            wrapped = getattr(obj, "__wrapped__", None)
            if wrapped is None:
                return
            obj = wrapped

    def walk_class(cls: type) -> None:
        if id(cls) in seen:
            return
        seen.add(id(cls))
        for value in list(vars(cls).values()):
            if isinstance(value, type) and value.__module__ == module.__name__:
                walk_class(value)
            else:
                add(value)

    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            walk_class(value)
        else:
            add(value)
    return found


def codes_by_first_line(code: types.CodeType) -> dict[tuple[int, str], types.CodeType]:
    found: dict[tuple[int, str], types.CodeType] = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found[(const.co_firstlineno, const.co_qualname)] = const
            found.update(codes_by_first_line(const))
    return found


# ---------------------------------------------------------------- serving a fresh import

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


def _from_checkout(module: Any) -> bool:
    file = getattr(module, "__file__", None)
    # no realpath: what loads from the checkout loads through its path (mocks/ and contracts/
    # through dsakit/'s links to them), and thousands of realpath calls cost a child 0.4 s
    return isinstance(file, str) and file.startswith(_ROOT_PREFIX) and not file.startswith(_BENCH_PREFIX)


def _fresh_pytest(mutant: Mutant, tests: list[str], scratch: Path) -> int:
    """In a forked child: forget everything imported from the checkout, serve the mutant, run pytest."""
    for name, module in list(sys.modules.items()):
        if _from_checkout(module):
            del sys.modules[name]
    sys.meta_path.insert(0, _ServeMutant(ROOT / mutant.module, mutant.source))
    import pytest

    basetemp = scratch / f"fresh-{os.getpid()}"
    return int(pytest.main(["-x", *_PYTEST_ARGS, "--rootdir", str(ROOT), "--basetemp", str(basetemp),
                            "-p", "no:terminal", *tests]))


def _fork(run: Any, log: str) -> int:
    """Fork a child (its own process group, output to `log`) that exits with `run()`'s value."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setpgid(0, 0)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            sys.dont_write_bytecode = True
            code = run()
        except BaseException:  # noqa: BLE001 -- whatever happens, the child must not return
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def _clear_caches(files: set[str], tables_only: bool) -> None:
    """Empty the functools caches defined in `files` (the modules under test); with `tables_only`
    only those of functions without arguments (the gate table, ...), whose one answer every later
    test would otherwise read without calling the function."""
    import inspect

    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not _from_checkout(module) or os.path.realpath(file) not in files:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) or not callable(getattr(value, "cache_clear", None)):
                continue
            if tables_only:
                try:
                    if inspect.signature(value).parameters:
                        continue
                except (TypeError, ValueError):
                    continue
            value.cache_clear()


def _end_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- the pytest session that drives it

class _Profile:
    """Which functions of the target modules run, per test (sys.setprofile: call events only)."""

    def __init__(self, targets: dict[str, str]) -> None:
        self.targets = targets  # realpath -> module as named
        self._by_filename: dict[str, str | None] = {}
        self.current = "<import>"
        self.calls: dict[str, set[tuple[str, int]]] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        module = self._by_filename.get(code.co_filename, "")
        if module == "":
            module = self.targets.get(os.path.realpath(code.co_filename))
            self._by_filename[code.co_filename] = module
        if module is not None:
            self.calls.setdefault(self.current, set()).add((module, code.co_firstlineno))

    def start(self) -> None:
        sys.setprofile(self)
        threading.setprofile(self)

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


class _Reports:
    def __init__(self) -> None:
        self.failed = False
        self.skipped = False
        self.seconds = 0.0

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.failed |= bool(report.failed)
        self.skipped |= bool(report.skipped)
        self.seconds += report.duration


def _run_items(session: Any, items: list[Any], stop_on_failure: bool,
               each: Any = None) -> tuple[int, dict[str, dict[str, Any]]]:
    """Run `items` through pytest's own protocol (setup, call, teardown; fixtures shared as in a
    normal run). Returns the exit code (1 on a failure) and per test: failed, skipped, seconds."""
    outcomes: dict[str, dict[str, Any]] = {}
    code = 0
    for n, item in enumerate(items):
        reports = _Reports()
        session.config.pluginmanager.register(reports)
        if each is not None:
            each(item)
        try:
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[n + 1] if n + 1 < len(items) else None)
        finally:
            session.config.pluginmanager.unregister(reports)
        outcomes[item.nodeid] = {"failed": reports.failed, "skipped": reports.skipped, "seconds": reports.seconds}
        if reports.failed:
            code = 1
            if stop_on_failure:
                break
    return code, outcomes


class Driver:
    """A pytest plugin: collection is pytest's; the test loop is the mutation run."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        self.args = args
        self.scratch = scratch
        self.targets = {os.path.realpath(ROOT / m): m for m in args.modules}
        self.profile = _Profile(self.targets)
        self.table: list[dict[str, Any]] = []
        self.mutants: list[Mutant] = []
        self.durations: dict[str, float] = {}

    def pytest_configure(self, config: Any) -> None:
        self.profile.start()  # calls made while importing and collecting: "<import>"

    def pytest_runtestloop(self, session: Any) -> bool:
        self.profile.stop()
        # create the session's basetemp here, once: pytest makes it lazily, with rm -rf + mkdir, and
        # every forked child would otherwise do that itself, deleting the tmp_path of the child
        # running beside it (or failing on its mkdir): a test error, counted as a kill
        session.config._tmp_path_factory.getbasetemp()
        started = time.monotonic()
        items = list(session.items)
        by_id = {item.nodeid: item for item in items}
        base = self.baseline(session, items)
        usable = [i.nodeid for i in items if i.nodeid in base["outcomes"]
                  and not base["outcomes"][i.nodeid]["failed"] and not base["outcomes"][i.nodeid]["skipped"]
                  and base["outcomes"][i.nodeid]["seconds"] <= self.args.max_test_seconds
                  and "pytester" not in getattr(i, "fixturenames", ())]
        failed = [t for t, o in base["outcomes"].items() if o["failed"]]
        print(f"baseline: {len(items)} tests, {len(usable)} used ({len(failed)} failed, "
              f"{sum(o['skipped'] for o in base['outcomes'].values())} skipped, the rest slower than "
              f"{self.args.max_test_seconds} s or pytester runs); {time.monotonic() - started:.0f} s", flush=True)
        for t in failed:
            print(f"  failed in the baseline (left out): {t}", flush=True)
        calls = {t: {(m, line) for m, line in c} for t, c in base["calls"].items()}
        imported = {(m, line) for m, line in self.profile.calls.get("<import>", set())}
        durations = {t: o["seconds"] for t, o in base["outcomes"].items()}
        self.durations = durations
        gc.collect()
        gc.freeze()  # children's collections skip what the parent loaded (and copy less of it)

        wanted = {tuple(x.rsplit(":", 1)) for x in self.args.only_lines.split(",") if x}
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from mutation_triage import label  # bench/mutation_triage.py: the survivors' kinds

        for module in self.args.modules:
            t0 = time.monotonic()
            path = ROOT / module
            mutants = mutants_of(module)
            if wanted:
                mutants = [m for m in mutants if (module, str(m.line)) in wanted]
            loaded = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None)
                      and os.path.realpath(m.__file__) == os.path.realpath(path)]
            live: dict[int, list[Any]] = {}
            for copy in loaded:  # the same file may be loaded under two names: swap in every copy
                for first, functions in live_functions(copy, os.path.realpath(path)).items():
                    live.setdefault(first, []).extend(functions)
            spans = function_spans(path)
            plans = [self.plan(m, spans, live, calls, imported, usable) for m in mutants]
            self.run_mutants(session, mutants, plans, by_id, durations)
            for m in mutants:
                if m.verdict not in ("killed", "timeout"):
                    m.label, m.reason = label(m)
            row = summarize(module, mutants, time.monotonic() - t0)
            self.table.append(row)
            self.mutants.extend(mutants)
            print(format_row(row), flush=True)
            self.write_json()  # after each module: a stopped run keeps what it measured
        print()
        print(format_table(self.table))
        print(f"\n{time.monotonic() - started:.0f} s in all; load average {os.getloadavg()[0]:.1f}")
        return True

    def write_json(self) -> None:
        if self.args.json:
            self.args.json.write_text(json.dumps({
                "tests": self.args.tests, "table": self.table,
                "mutants": [{k: v for k, v in m.__dict__.items() if k != "source"} for m in self.mutants]},
                indent=1) + "\n", encoding="utf-8")

    def baseline(self, session: Any, items: list[Any]) -> dict[str, Any]:
        out = self.scratch / "baseline.json"
        log = str(self.scratch / "baseline.log")

        def run() -> int:
            profile = _Profile(self.targets)

            def each(item: Any) -> None:
                # a test counts as calling the function behind a cached table (the gate table, ...)
                # even where an earlier test filled the cache; caches taking arguments (a scan of a
                # tree) stay: emptying them would make every test rescan
                _clear_caches(set(self.targets), tables_only=True)
                profile.current = item.nodeid

            profile.start()
            _, outcomes = _run_items(session, items, stop_on_failure=False, each=each)
            profile.stop()
            out.write_text(json.dumps({"outcomes": outcomes,
                                       "calls": {t: sorted(c) for t, c in profile.calls.items()}}), encoding="utf-8")
            return 0

        pid = _fork(run, log)
        _, status = os.waitpid(pid, 0)
        _end_group(pid)
        if not out.exists():
            raise SystemExit(f"the baseline run died (status {status}):\n{Path(log).read_text(errors='replace')[-4000:]}")
        return dict(json.loads(out.read_text(encoding="utf-8")))

    def plan(self, mutant: Mutant, spans: list[tuple[int, int, int]], live: dict[int, list[Any]],
             calls: dict[str, set[tuple[str, int]]], imported: set[tuple[str, int]],
             usable: list[str]) -> tuple[str, list[str], Any]:
        """(route, tests, swap): which tests to run and how the child applies the mutant."""
        holders = enclosing(spans, mutant.line)
        if not holders:
            return "fresh", usable, None
        key = (mutant.module, holders[0])
        # fastest first: a child stops at the first failure, so a killed mutant mostly costs its
        # fastest test; a survivor runs them all either way
        tests = sorted((t for t in usable if key in calls.get(t, set())), key=lambda t: self.durations.get(t, 1.0))
        if not tests:
            return ("fresh", usable, None) if key in imported else ("none", [], None)
        same_lines = mutant.source.count("\n") == (ROOT / mutant.module).read_text(encoding="utf-8").count("\n")
        outer = next((first for first in reversed(holders) if first in live), None) if same_lines else None
        if outer is None:
            return "fresh", usable, None
        try:
            code = compile(mutant.source, live[outer][0].__code__.co_filename, "exec", dont_inherit=True)
        except SyntaxError:
            return "fresh", usable, None
        new = codes_by_first_line(code).get((outer, live[outer][0].__code__.co_qualname))
        if new is None:
            return "fresh", usable, None
        return "swap", tests, (live[outer], new)

    def run_mutants(self, session: Any, mutants: list[Mutant], plans: list[tuple[str, list[str], Any]],
                    by_id: dict[str, Any], durations: dict[str, float]) -> None:
        running: dict[int, tuple[int, float, float, str]] = {}  # pid -> (mutant, start, timeout, log)
        queue = list(range(len(mutants)))
        while queue or running:
            while queue and len(running) < self.args.jobs:
                n = queue.pop(0)
                mutant, (route, tests, swap) = mutants[n], plans[n]
                mutant.route, mutant.tests_run = route, len(tests)
                if route == "none":
                    mutant.verdict = "no test"
                    self.progress(mutant)
                    continue
                log = str(self.scratch / f"m{n}.log")

                def run(mutant: Mutant = mutant, route: str = route, tests: list[str] = tests,
                        swap: Any = swap) -> int:
                    if route == "fresh":
                        return _fresh_pytest(mutant, tests, self.scratch)
                    functions, code = swap
                    for function in functions:
                        function.__code__ = code
                    _clear_caches(set(self.targets), tables_only=False)  # no answer cached from the original code
                    return _run_items(session, [by_id[t] for t in tests], stop_on_failure=True)[0]

                # generous: on 2 loaded cores a child running 160 tests has taken 30 s; a timeout
                # counts as killed, so a tight one would inflate the score
                timeout = 30.0 + 10.0 * sum(durations.get(t, 1.0) for t in tests) + (20.0 if route == "fresh" else 0.0)
                running[_fork(run, log)] = (n, time.monotonic(), timeout, log)
            time.sleep(0.005)
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
                    # 1: a test failed; 2-4: the mutant broke collection, a conftest or the plugin's
                    # import; 3 is also the child's own crash code; < 0: it crashed the interpreter
                    verdict = "survived" if code == 0 else "killed" if code in (1, 2, 3, 4) or code < 0 else f"exit {code}"
                del running[pid]
                mutants[n].verdict = verdict
                mutants[n].seconds = round(elapsed, 2)
                if verdict != "survived" and not verdict.startswith("exit"):
                    os.unlink(log) if os.path.exists(log) else None
                self.progress(mutants[n])

    def progress(self, m: Mutant) -> None:
        if m.verdict not in ("killed", "timeout"):
            print(f"{m.verdict:8s} {m.module}:{m.line} #{m.index} ({m.kind}, {m.route}, {m.tests_run} tests, "
                  f"{m.seconds:.1f} s)\n{m.diff}", flush=True)


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
    parser.add_argument("--table-from", nargs="+", type=Path, default=None, metavar="JSON",
                        help="print one table from earlier --json files (a later file's verdict wins), "
                             "survivors labelled by today's bench/mutation_triage.py")
    args = parser.parse_args(argv)
    if args.table_from:
        print(table_from(args.table_from))
        return 0
    if args.group:
        if args.modules or args.tests:
            parser.error("--group names the modules and tests itself: give either --group or MODULES --tests")
        args.modules, args.tests = GROUPS[args.group]
    elif not args.modules or not args.tests:
        parser.error("name the modules to mutate and --tests, or a --group")
    for module in args.modules:
        if not (ROOT / module).is_file():
            parser.error(f"{module}: no such file in {ROOT}; name a module by its path in the checkout")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import pytest

    with tempfile.TemporaryDirectory(prefix="dsakit-mutation-") as scratch_dir:
        scratch = Path(scratch_dir)
        driver = Driver(args, scratch)
        code = pytest.main([*_PYTEST_ARGS, "-s", "--rootdir", str(ROOT), "--basetemp", str(scratch / "basetemp"),
                            *args.tests], plugins=[driver])
        if not driver.table:
            print(f"pytest exited {code} before the mutation run", file=sys.stderr)
            return 2
    return 0


def table_from(files: list[Path]) -> str:
    """One table from earlier runs: a mutant's verdict in a later file wins (a re-test of the
    survivors with --only-lines after adding tests), its module's seconds add up."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mutation_triage import label

    verdicts: dict[str, dict[tuple[int, int], Mutant]] = {}
    seconds: dict[str, float] = {}
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        for row in data["table"]:
            seconds[row["module"]] = seconds.get(row["module"], 0.0) + row["seconds"]
        for record in data["mutants"]:
            mutant = Mutant(**{**record, "source": ""})
            verdicts.setdefault(mutant.module, {})[(mutant.line, mutant.index)] = mutant
    rows = []
    for module, found in verdicts.items():
        for mutant in found.values():
            mutant.label, mutant.reason = ("", "") if mutant.verdict in ("killed", "timeout") else label(mutant)
        rows.append(summarize(module, list(found.values()), seconds[module]))
    return format_table(rows)


def summarize(module: str, mutants: list[Mutant], seconds: float) -> dict[str, Any]:
    killed = sum(m.verdict in ("killed", "timeout") for m in mutants)
    survivors = [m for m in mutants if m.verdict not in ("killed", "timeout")]
    kinds = {k: sum(m.label == k for m in survivors) for k in ("wording", "equivalent", "real")}
    counted = len(mutants) - kinds["equivalent"]
    return {"module": module, "mutants": len(mutants), "killed": killed,
            "timeouts": sum(m.verdict == "timeout" for m in mutants), **kinds,
            "score": round(100 * killed / counted, 1) if counted else 100.0,
            "seconds": round(seconds), "per_mutant_s": round(seconds / max(1, len(mutants)), 2)}


def format_row(row: dict[str, Any]) -> str:
    name = row["module"] if row["module"].startswith("**") else f"`{row['module']}`"
    return (f"| {name} | {row['mutants']} | {row['killed']} ({row.get('timeouts', 0)} timeouts) | {row['wording']} | "
            f"{row['equivalent']} | {row['real']} | {row['score']}% | {row['per_mutant_s']} s |")


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ("| module | mutants | killed | wording left | equivalent | real left | score | s / mutant |\n"
            "|---|---|---|---|---|---|---|---|")
    total: dict[str, Any] = {"module": "**total**", "mutants": sum(r["mutants"] for r in rows),
                             "killed": sum(r["killed"] for r in rows), "timeouts": sum(r.get("timeouts", 0) for r in rows),
                             **{k: sum(r[k] for r in rows) for k in ("wording", "equivalent", "real")}}
    counted = total["mutants"] - total["equivalent"]
    total["score"] = round(100 * total["killed"] / counted, 1) if counted else 100.0
    total["per_mutant_s"] = round(sum(r["seconds"] for r in rows) / max(1, total["mutants"]), 2)
    return "\n".join([head, *(format_row(r) for r in rows), format_row(total)])


if __name__ == "__main__":
    sys.exit(main())
