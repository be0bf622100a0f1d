"""Which of SGLang's device-gated branches a simulated run took: a completed run is not a judged one.

Owns finding the `if`s of SGLang's DSA / DeepSeek-V4 backends, metadata and top-k dispatch
(`PROBE_SCAN_FILES`) whose guard reads a device probe (the spellings of `audit.device_guards`),
deciding each guard on the simulated device and on this machine's (`audit.guard_eval`), watching
which lines of those files run (`sys.monitoring` where Python has it, else a trace function that
follows only those files' frames), and saying for every branch the two devices decide differently
whether the simulated device's arm ran, and where not, why (a reason of
`gates.device_branches.NEVER_RAN`, from the lines and from the probes SGLang's imported modules
hold while the simulation lasts). Reads SGLang's files and modules, never imports them.
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
from dsakit.gates.device_branches import decision_text
from dsakit.gates.device_model import DeviceModel
from dsakit.reasons import Reason
from dsakit.stack.sglang_release import PROBE_SCAN_FILES

@dataclass(frozen=True)
class DeviceBranch:
    """One `if` whose guard reads a device probe, or a device decision made as a value.

    file       release-relative (srt/layers/attention/dsa_backend.py)
    line       the `if` (or `elif`) line; for a value, the line that computes it
    guard      its test, as source
    function   the enclosing function's qualified name ("" at module level)
    entry      the enclosing function's first body line (module level: the `if` line)
    body       the first line of the arm the guard's truth takes (a value: `line`, both arms are on it)
    orelse     the first line of the other arm (None: no else, the code after the `if` runs)
    value      "" for an `if`; else how the decision is handed on: "fuse_index_store=" (a keyword
               argument), "return " (a function's result), "if-else " (a conditional expression),
               "self.use_mha = " (an assignment: a dispatch flag kept for later).
               The line ran under the simulation: the simulated device's value was passed.
    end        the `if` statement's last line (its arms included)
    """

    file: str
    line: int
    guard: str
    function: str
    entry: int
    body: int
    orelse: int | None
    value: str = ""
    end: int = 0

    @property
    def site(self) -> str:
        return f"sglang/{self.file}:{self.line}"

    @property
    def text(self) -> str:
        return decision_text(self.value, self.guard)

    @property
    def module(self) -> str:
        """Its module's dotted name (srt/x/y.py -> sglang.srt.x.y)."""
        parts = ["sglang", *self.file.removesuffix(".py").split("/")]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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

    def _entry(self, line: int) -> int:
        functions = [(n, first) for n, first in self.scope if first]
        return functions[-1][1] if functions else line

    def visit_If(self, node: ast.If) -> None:
        if _reads_device(node.test):
            self.found.append(DeviceBranch(
                self.file, node.lineno, ast.unparse(node.test), ".".join(n for n, _ in self.scope),
                self._entry(node.lineno), node.body[0].lineno, node.orelse[0].lineno if node.orelse else None,
                end=node.end_lineno or node.lineno))
        self.generic_visit(node)

    def _value(self, expr: ast.expr, how: str) -> None:
        """A device decision handed on as a value (`fuse_index_store=is_sm100_or_newer()`, `return
        ... and get_platform().is_blackwell`, `self.use_mha = ...`): no arm has a line of its own, the
        line that computes it is both: the value's first line, which runs first (a multi-line
        assignment's `self.use_mha = (` line may report no line event of its own; a conditional
        expression's arms are found as its own)."""
        if isinstance(expr, ast.IfExp) or not _reads_device(expr):
            return
        line = expr.lineno
        self.found.append(DeviceBranch(self.file, line, ast.unparse(expr), ".".join(n for n, _ in self.scope),
                                       self._entry(line), line, line, how, end=expr.end_lineno or line))

    def _assigned(self, targets: Sequence[ast.expr], value: ast.expr | None) -> None:
        """A device decision kept for later (`self.use_mha = (... and (device_sm == 90 or ...) and ...)`:
        SGLang's prefill dispatch): a test of one (`and` / `or`, a comparison, a `not`). A probe's bare
        answer kept under a name (`device_sm = get_device_sm()`) decides nothing yet and is left out."""
        if value is None or len(targets) != 1 or not isinstance(value, (ast.BoolOp, ast.Compare, ast.UnaryOp)):
            return
        if isinstance(value, ast.UnaryOp) and not isinstance(value.op, ast.Not):
            return
        self._value(value, f"{ast.unparse(targets[0])} = ")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned([node.target], node.value)
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None:
            self._value(node.value, f"{node.arg}=")
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self._value(node.value, "return ")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        if _reads_device(node.test):
            line = node.test.lineno
            self.found.append(DeviceBranch(self.file, line, ast.unparse(node.test),
                                           ".".join(n for n, _ in self.scope), self._entry(line), line, line,
                                           "if-else ", end=node.end_lineno or line))
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
    reason  where the arm did not run, what dsakit can tell of why (a code of
            `dsakit.gates.device_branches.NEVER_RAN`)
    """

    branch: DeviceBranch
    takes: str
    status: str
    reason: Reason | None = None

    @property
    def why(self) -> str:
        return self.reason.message if self.reason is not None else ""

    def as_dict(self) -> dict[str, Any]:
        b = self.branch
        return {"site": b.site, "file": b.file, "line": b.line, "body": b.body, "end": b.end, "guard": b.guard,
                "function": b.function, "takes": self.takes, "status": self.status, "why": self.why,
                "reason": self.reason.as_dict() if self.reason is not None else None,
                **({"value": b.value.strip()} if b.value else {})}


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
        elif sim.fires != here.fires:  # both can, one unconditionally: its arm is the device's, and the
            # simulated else arm of `not is_sm100_or_newer() or blocks <= 0` also needs the condition false
            found.append((branch, sim.fires, "" if sim.fires else f"not ({sim.condition})"))
    return found


# ---------------------------------------------------------------- probes that answered for this machine


@dataclass(frozen=True)
class ProbeSnapshot:
    """What of SGLang had answered before the simulation began (taken as the watch starts):
    the `sglang` modules imported then (a conftest or a plugin imported them: their import-time
    branches ran for this machine, their module constants hold its answers), and the lru-cached
    functions of the branches' modules that held answers, (module, name) -> entries."""

    imported: frozenset[str]
    filled: Mapping[tuple[str, str], int]

    @classmethod
    def take(cls, branch_modules: Iterable[str], modules: Mapping[str, Any] | None = None) -> ProbeSnapshot:
        modules = sys.modules if modules is None else modules
        imported = frozenset(n for n in list(modules) if n == "sglang" or n.startswith("sglang."))
        filled: dict[tuple[str, str], int] = {}
        for name in set(branch_modules) & imported:
            for attribute, value in list(vars(modules[name]).items()):
                entries = _cached_entries(value)
                if entries:
                    filled[(name, attribute)] = entries
        return cls(imported, filled)


def _cached_entries(value: Any) -> int:
    info = getattr(value, "cache_info", None)
    if not callable(info):
        return 0
    try:
        return int(info().currsize)
    except Exception:  # noqa: BLE001 - a cache_info of another kind: not a probe cache
        return 0


def _cleared_by_simulation(module: str, name: str, function: Any) -> bool:
    """The simulation clears it on entry (`probe_patches._clear_caches`): every lru cache of
    SGLang's probe module, and the cached probes of the declared table where they are bound."""
    from dsakit.simulation.probes import COMMON, PROBES

    home = (str(getattr(function, "__module__", "")), str(getattr(function, "__name__", name)))
    cached = {(m, p.name) for p in PROBES if p.kind == "cached" for m in p.modules}
    return home[0] == COMMON or (module, name) in cached or home in cached


def probe_evidence(branches: Iterable[tuple[DeviceBranch, bool, str]], simulated: DeviceModel,
                   snapshot: ProbeSnapshot, modules: Mapping[str, Any] | None = None) -> dict[str, Reason]:
    """Per branch site, where the live state shows it: a module-level branch whose module was
    imported before the simulation began, or a guard's probe that answers for this machine under
    the simulation (a module constant computed before it began or one the probe table does not
    patch, an lru-cached probe filled before it began that it does not clear). Read while the
    simulation is active; `modules`: sys.modules."""
    modules = sys.modules if modules is None else modules
    found: dict[str, Reason] = {}
    for branch, _, _ in branches:
        before = branch.module in snapshot.imported
        if not branch.function and before:
            found[branch.site] = Reason(
                "imported-before-simulation",
                f"{branch.module} was imported before the simulation began (by a conftest or a plugin): this "
                f"import-time branch ran then, for this machine, unwatched")
            continue
        module = modules.get(branch.module)
        if module is None:
            continue
        reason = _stale_probe(branch, simulated, snapshot, module, before)
        if reason is not None:
            found[branch.site] = reason
    return found


def _stale_probe(branch: DeviceBranch, simulated: DeviceModel, snapshot: ProbeSnapshot, module: Any,
                 before: bool) -> Reason | None:
    try:
        test = ast.parse(branch.guard, mode="eval").body
    except SyntaxError:
        return None
    names = vars(module)
    for node in ast.walk(test):
        entry = spelling_for(node) if isinstance(node, ast.expr) else None
        if entry is None:
            continue
        expected = entry.value(simulated)
        if isinstance(node, ast.Name) and node.id in names:
            live = names[node.id]
            if not isinstance(live, (bool, int, tuple, type(None))) or live == expected:
                continue
            if before:
                return Reason("probe-cached-before-simulation",
                              f"`{node.id}` of {branch.module} was computed at import before the simulation began "
                              f"(the module was imported first): it holds {live!r}, this machine's answer; "
                              f"{simulated.key} answers {expected!r}")
            return Reason("probe-not-simulated",
                          f"`{node.id}` of {branch.module} holds {live!r} under the simulation, {simulated.key} "
                          f"answers {expected!r}: a module constant dsakit's probe table does not patch "
                          "(dsakit/simulation/probes.py)")
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            function = names.get(name) if isinstance(name, str) else None
            held = snapshot.filled.get((branch.module, str(name)), 0)
            if function is not None and held and not _cleared_by_simulation(branch.module, str(name), function):
                return Reason("probe-cached-before-simulation",
                              f"`{name}()` is lru-cached and held {held} answer(s) of this machine's before the "
                              "simulation began, which the simulation does not clear: it answered for this "
                              f"machine, not {simulated.key}")
    return None


def verdicts(branches: Iterable[tuple[DeviceBranch, bool, str]], ran: Mapping[str, Iterable[int]],
             device_key: str, evidence: Mapping[str, Reason] | None = None,
             unwatched: str = "") -> list[BranchVerdict]:
    """Each branch's verdict from the lines that ran, with its reason where its arm did not run
    (`evidence`: what the live probes showed, `probe_evidence`; `unwatched`: why no line was watched)."""
    seen = {file: set(lines) for file, lines in ran.items()}
    evidence = evidence or {}
    out = []
    for branch, holds, needs in branches:
        lines = seen.get(branch.file, set())
        arm = branch.body if holds else branch.orelse
        takes = (("body" if holds else "else") if not branch.value else "True" if holds else "False") + (
            f" where {needs}" if needs else "")
        known = evidence.get(branch.site)
        # a guard without an else that the simulated device answers False falls through: it ran
        # its arm where the `if` ran and the body never did
        if arm in lines if arm is not None else branch.line in lines and branch.body not in lines:
            out.append(BranchVerdict(branch, takes, "ran"))
        elif unwatched:
            out.append(BranchVerdict(branch, takes, "not-reached", Reason("not-watched", f"not watched: {unwatched}")))
        elif branch.line in lines and known is not None and known.code != "imported-before-simulation":
            out.append(BranchVerdict(branch, takes, "other-arm", known))
        elif branch.line in lines and needs and not branch.value:
            out.append(BranchVerdict(branch, takes, "other-arm", Reason(
                "arm-needs-configuration",
                f"the guard was reached; {device_key}'s arm also needs {needs}, which no test set")))
        elif branch.line in lines:
            out.append(BranchVerdict(branch, takes, "other-arm", Reason(
                "probe-answered-here",
                f"the guard was reached and took the other arm: a probe answered for this machine, not "
                f"{device_key} (a device read dsakit does not simulate, or a value derived from one)")))
        elif known is not None and known.code == "imported-before-simulation":
            out.append(BranchVerdict(branch, takes, "not-reached", known))
        elif branch.entry in lines:
            out.append(BranchVerdict(branch, takes, "not-reached", Reason(
                "guard-not-reached",
                f"the gate was never reached: {branch.function or 'the module'} ran but returned or branched "
                "before this guard")))
        else:
            where = f"{branch.function}()" if branch.function else "its module"
            out.append(BranchVerdict(branch, takes, "not-reached", Reason(
                "configuration-never-built",
                f"{where} never ran: the suite never builds that configuration")))
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
        self.snapshot: ProbeSnapshot | None = None  # taken where this process runs the simulation
        self.evidence: dict[str, Reason] = {}  # site -> what the live probes showed (a worker's, merged)

    def start(self) -> None:
        if self.branches:
            self.snapshot = ProbeSnapshot.take({b.module for b, _, _ in self.branches})
            self.watch.start()

    def read_probes(self) -> None:
        """What the probes answer now, while the simulation is active (it ends at unconfigure)."""
        if self.snapshot is not None:
            self.evidence.update(probe_evidence(self.branches, self.simulated, self.snapshot))

    def stop(self) -> None:
        self.watch.stop()

    def verdicts(self) -> list[BranchVerdict]:
        return verdicts(self.branches, self.watch.ran, self.simulated.key, self.evidence, self.watch.unavailable)

    # ------------------------------------------------------------ the session's part

    def pytest_sessionfinish(self) -> None:
        self.read_probes()  # before the session's hand-over (trylast) and the summary: the simulation still holds

    def worker_output(self) -> dict[str, Any]:
        """An xdist worker's lines and the probes it saw answer for its machine: its controller reports
        every worker's."""
        return {"lines": self.watch.as_lines(), "probes": {site: r.as_dict() for site, r in self.evidence.items()}}

    def merge(self, data: Mapping[str, Any]) -> None:
        self.watch.merge(data.get("lines", {}))
        for site, reason in (data.get("probes") or {}).items():
            self.evidence.setdefault(site, Reason(str(reason["code"]), str(reason["message"])))


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
            line += f"; {len(found) - len(ran)} never did ({_by_code(found)})" + ("" if verbose else "; -v lists them")
        lines = [line]
        if verbose:
            lines += [f"  {v.branch.site}: {v.branch.text} -> {v.takes}: "
                      + ("ran" if v.reason is None else str(v.reason)) for v in found]
        return lines

    def as_json(self) -> dict[str, Any]:
        found = self.verdicts()
        return {"device": self.simulated.key, "real": self.real.describe(),
                "watched": not self.watch.unavailable, "why_not_watched": self.watch.unavailable,
                "ran": sum(v.status == "ran" for v in found), "total": len(found),
                "branches": [v.as_dict() for v in found]}


def _by_code(found: Iterable[BranchVerdict]) -> str:
    """`configuration-never-built 3, guard-not-reached 1`: the never-ran branches by reason, furthest first."""
    from dsakit.gates.device_branches import rank

    codes: dict[str, int] = {}
    for v in found:
        if v.reason is not None:
            codes[v.reason.code] = codes.get(v.reason.code, 0) + 1
    return ", ".join(f"{c} {n}" for c, n in sorted(codes.items(), key=lambda i: rank(Reason(i[0], ""))))
