"""Which of SGLang's device-gated branches a simulated run took: a completed run is not a judged one.

Owns finding the `if`s of SGLang's DSA / DeepSeek-V4 backends, metadata and top-k dispatch
(`PROBE_SCAN_FILES`) whose guard reads a device probe (the spellings of `audit.device_guards`),
deciding each guard on the simulated device and on this machine's (`audit.guard_eval`), watching
which lines of those files run (`sys.monitoring` where Python has it, else a trace function that
follows only those files' frames), and saying for every branch the two devices decide differently
whether the simulated device's arm ran, and where not, why. Reads SGLang's files, never imports it.
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsakit.audit.device_guards import spelling_for
from dsakit.audit.guard_eval import verdict
from dsakit.gates.device_model import DeviceModel
from dsakit.release.table import PROBE_SCAN_FILES

@dataclass(frozen=True)
class DeviceBranch:
    """One `if` whose guard reads a device probe.

    file       release-relative (srt/layers/attention/dsa_backend.py)
    line       the `if` (or `elif`) line
    guard      its test, as source
    function   the enclosing function's qualified name ("" at module level)
    entry      the enclosing function's first body line (module level: the `if` line)
    body       the first line of the arm the guard's truth takes
    orelse     the first line of the other arm (None: no else, the code after the `if` runs)
    """

    file: str
    line: int
    guard: str
    function: str
    entry: int
    body: int
    orelse: int | None

    @property
    def site(self) -> str:
        return f"sglang/{self.file}:{self.line}"


def _reads_device(test: ast.expr) -> bool:
    return any(isinstance(node, ast.expr) and spelling_for(node) is not None for node in ast.walk(test))


class _Scan(ast.NodeVisitor):
    def __init__(self, file: str) -> None:
        self.file = file
        self.scope: list[tuple[str, int]] = []
        self.found: list[DeviceBranch] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append((node.name, node.body[0].lineno))
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append((node.name, 0))
        self.generic_visit(node)
        self.scope.pop()

    def visit_If(self, node: ast.If) -> None:
        if _reads_device(node.test):
            functions = [(n, line) for n, line in self.scope if line]
            self.found.append(DeviceBranch(
                self.file, node.lineno, ast.unparse(node.test), ".".join(n for n, _ in self.scope),
                functions[-1][1] if functions else node.lineno, node.body[0].lineno,
                node.orelse[0].lineno if node.orelse else None))
        self.generic_visit(node)


def _files(package_dir: Path) -> Iterator[tuple[str, Path]]:
    for relative in PROBE_SCAN_FILES:
        path = package_dir / relative
        paths = sorted(path.glob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        for file in paths:
            yield str(file.relative_to(package_dir)), file


def scan_branches(package_dir: Path) -> list[DeviceBranch]:
    """Every device-gated `if` of the scanned files of one SGLang tree, in file and line order."""
    branches: list[DeviceBranch] = []
    for relative, path in _files(package_dir):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue  # a file that does not parse is the import chain's to report
        scan = _Scan(relative)
        scan.visit(tree)
        branches += scan.found
    return branches


# ---------------------------------------------------------------- watching lines


class LineWatch:
    """The lines of the watched files that ran in this process: `sys.monitoring` (3.12+: each line
    reports once, then its event is disabled), else a trace function installed on frames of the
    watched files only. Started by the simulation, stopped when it ends."""

    def __init__(self, files: Mapping[str, Iterable[int]]) -> None:
        self.wanted = {file: frozenset(lines) for file, lines in files.items()}  # release-relative
        self.ran: dict[str, set[int]] = {file: set() for file in self.wanted}
        self._by_filename: dict[str, str | None] = {}
        self._tool: int | None = None
        self._tracing = False
        self.unavailable = ""  # why nothing could be watched

    def _relative(self, filename: str) -> str | None:
        try:
            return self._by_filename[filename]
        except KeyError:
            normalized = filename.replace("\\", "/")
            found = next((rel for rel in self.wanted if normalized.endswith(f"/sglang/{rel}")), None)
            self._by_filename[filename] = found
            return found

    def start(self) -> None:
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            tool = next((t for t in range(6) if monitoring.get_tool(t) is None), None)
            if tool is None:
                self.unavailable = "every sys.monitoring tool id is taken (a coverage or profiling tool holds them)"
                return
            monitoring.use_tool_id(tool, "dsakit device branches")
            self._tool = tool
            monitoring.register_callback(tool, monitoring.events.PY_START, self._on_start)
            monitoring.register_callback(tool, monitoring.events.LINE, self._on_line)
            monitoring.set_events(tool, monitoring.events.PY_START)
            return
        if sys.gettrace() is not None:
            self.unavailable = "another trace function holds sys.settrace (a coverage tool or debugger)"
            return
        self._tracing = True
        sys.settrace(self._trace_call)
        threading.settrace(self._trace_call)

    def stop(self) -> None:
        monitoring = getattr(sys, "monitoring", None)
        if self._tool is not None and monitoring is not None:
            monitoring.set_events(self._tool, 0)
            monitoring.register_callback(self._tool, monitoring.events.PY_START, None)
            monitoring.register_callback(self._tool, monitoring.events.LINE, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None
        if self._tracing:
            sys.settrace(None)
            threading.settrace(None)
            self._tracing = False

    # sys.monitoring
    def _on_start(self, code: Any, offset: int) -> Any:
        monitoring: Any = getattr(sys, "monitoring")
        if self._relative(code.co_filename) is not None:
            monitoring.set_local_events(self._tool, code, monitoring.events.LINE)
        return monitoring.DISABLE

    def _on_line(self, code: Any, line: int) -> Any:
        relative = self._relative(code.co_filename)
        if relative is not None and line in self.wanted[relative]:
            self.ran[relative].add(line)
        return getattr(sys, "monitoring").DISABLE

    # sys.settrace (Python 3.11)
    def _trace_call(self, frame: Any, event: str, arg: Any) -> Any:
        relative = self._relative(frame.f_code.co_filename)
        if relative is None:
            return None
        wanted, ran = self.wanted[relative], self.ran[relative]

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and frame.f_lineno in wanted:
                ran.add(frame.f_lineno)
            return local

        return local

    def as_lines(self) -> dict[str, list[int]]:
        return {file: sorted(lines) for file, lines in self.ran.items() if lines}

    def merge(self, lines: Mapping[str, Sequence[int]]) -> None:
        for file, ran in lines.items():
            self.ran.setdefault(file, set()).update(int(n) for n in ran)


# ---------------------------------------------------------------- the verdict per branch


@dataclass(frozen=True)
class BranchVerdict:
    """What one device-divergent branch did under the simulation.

    takes   the arm the simulated device takes ("body": the guard holds; "else"), and where it also
            needs configuration, which ("body where x.is_cuda")
    status  "ran" (that arm ran), "other-arm" (the `if` ran, the other arm did), "not-reached"
    why     where the arm did not run, what dsakit can tell of why
    """

    branch: DeviceBranch
    takes: str
    status: str
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        b = self.branch
        return {"site": b.site, "guard": b.guard, "function": b.function, "takes": self.takes,
                "status": self.status, "why": self.why}


def divergent(branches: Iterable[DeviceBranch], simulated: DeviceModel,
              real: DeviceModel) -> list[tuple[DeviceBranch, bool, str]]:
    """The branches whose guard the simulated device answers otherwise than this machine's:
    (branch, whether the simulated device takes the body, the configuration that arm also needs:
    "" when the device alone decides). A guard the device decides on one side and leaves to the
    configuration on the other counts: `x.is_cuda and is_sm100_or_newer()` is the SM 10.x arm."""
    found = []
    for branch in branches:
        try:
            sim, here = verdict(branch.guard, simulated.key, simulated), verdict(branch.guard, real.key, real)
        except (SyntaxError, TypeError, ValueError):
            continue
        if (sim.fires, sim.condition) == (here.fires, here.condition):
            continue
        sim_can, here_can = sim.fires or bool(sim.condition), here.fires or bool(here.condition)
        if sim_can != here_can:
            found.append((branch, sim_can, "" if sim.fires else sim.condition))
        elif sim.fires != here.fires:  # both can, one unconditionally: its arm is the device's
            found.append((branch, sim.fires, ""))
    return found


def verdicts(branches: Iterable[tuple[DeviceBranch, bool, str]], ran: Mapping[str, Iterable[int]],
             device_key: str) -> list[BranchVerdict]:
    seen = {file: set(lines) for file, lines in ran.items()}
    out = []
    for branch, holds, needs in branches:
        lines = seen.get(branch.file, set())
        arm = branch.body if holds else branch.orelse
        takes = ("body" if holds else "else") + (f" where {needs}" if needs else "")
        # a guard without an else that the simulated device answers False falls through: it ran
        # its arm where the `if` ran and the body never did
        if arm in lines if arm is not None else branch.line in lines and branch.body not in lines:
            out.append(BranchVerdict(branch, takes, "ran"))
        elif branch.line in lines and needs:
            out.append(BranchVerdict(branch, takes, "other-arm",
                                     f"the guard was reached; {device_key}'s arm also needs {needs}, which no "
                                     "test set"))
        elif branch.line in lines:
            out.append(BranchVerdict(branch, takes, "other-arm",
                                     f"the guard was reached and took the other arm: a probe answered for this "
                                     f"machine, not {device_key} (a cached probe filled before the simulation "
                                     "began, or a device read dsakit does not simulate)"))
        elif branch.entry in lines:
            out.append(BranchVerdict(branch, takes, "not-reached",
                                     f"{branch.function or 'the module'} ran but returned or branched before "
                                     "this guard"))
        else:
            where = f"{branch.function}()" if branch.function else "its module"
            out.append(BranchVerdict(branch, takes, "not-reached",
                                     f"never reached: {where} never ran (the suite never builds that "
                                     "configuration)"))
    return out


class BranchCoverage:
    """The run's device-branch coverage, under a simulated device: scans SGLang's files once at
    start, watches lines in a test-running process, hands a worker's lines to its controller, and
    answers the summary line, the `-v` listing and the report's section (a part of the run's
    DsakitSession, beside the whole-run simulation)."""

    def __init__(self, config: Any, simulated: DeviceModel, real: DeviceModel, package_dir: Path | None) -> None:
        self.config = config
        self.simulated, self.real = simulated, real
        self.branches: list[tuple[DeviceBranch, bool, str]] = []
        self.release_missing = package_dir is None
        if package_dir is not None:
            self.branches = divergent(scan_branches(package_dir), simulated, real)
        lines: dict[str, set[int]] = {}
        for branch, _, _ in self.branches:
            wanted = lines.setdefault(branch.file, set())
            wanted.update(n for n in (branch.line, branch.entry, branch.body, branch.orelse) if n is not None)
        self.watch = LineWatch(lines)

    def start(self) -> None:
        if self.branches:
            self.watch.start()

    def stop(self) -> None:
        self.watch.stop()

    def verdicts(self) -> list[BranchVerdict]:
        return verdicts(self.branches, self.watch.ran, self.simulated.key)

    # ------------------------------------------------------------ the session's part

    def worker_output(self) -> dict[str, list[int]]:
        """An xdist worker's lines: its controller reports every worker's."""
        return self.watch.as_lines()

    def merge(self, data: Mapping[str, Sequence[int]]) -> None:
        self.watch.merge(data)

    def summary(self, terminalreporter: Any) -> None:
        if not hasattr(self.config, "workerinput"):
            for line in self.summary_lines(terminalreporter.verbosity > 0):
                terminalreporter.write_line(line)

    def close(self) -> None:
        self.stop()

    def summary_lines(self, verbose: bool) -> list[str]:
        if self.release_missing:
            return ["dsakit: device branches: SGLang is not installed here, nothing to cover"]
        found = self.verdicts()
        ran = [v for v in found if v.status == "ran"]
        here = self.real.describe()
        line = (f"dsakit: device branches: {len(ran)} of {len(found)} SGLang branches that {self.simulated.key} "
                f"decides differently from {here} took {self.simulated.key}'s arm")
        if self.watch.unavailable:
            line += f" (not watched: {self.watch.unavailable})"
        elif len(ran) < len(found):
            line += f"; {len(found) - len(ran)} never did" + ("" if verbose else " (-v lists them)")
        lines = [line]
        if verbose:
            lines += [f"  {v.branch.site}: if {v.branch.guard} -> {v.takes}: "
                      + ("ran" if v.status == "ran" else v.why) for v in found]
        return lines

    def as_json(self) -> dict[str, Any]:
        found = self.verdicts()
        return {"device": self.simulated.key, "real": self.real.describe(),
                "watched": not self.watch.unavailable, "why_not_watched": self.watch.unavailable,
                "ran": sum(v.status == "ran" for v in found), "total": len(found),
                "branches": [v.as_dict() for v in found]}
