"""`dsakit rerun-test FILE...`: rerun test files one process each, the way SGLang's CI bot does.

Owns: reading a file's `register_*_ci(...)` registration by AST (never importing it), whether this
node matches its runner, how to run it (`python FILE` for unittest mains, else pytest), the
per-file result, the JUnit XML and the exit code. Never imports torch or SGLang here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsakit.gates.device_model import DeviceModel
from dsakit.errors import UsageError
from dsakit.node.process_group import check_timeout, interruptible, run_in_own_group
from dsakit.output_paths import output_file, writable_dir
from dsakit.node.pytest_invocation import plugin_args
from dsakit.reasons import Reason

# register_<x>_ci -> the hardware backend, as in sglang/test/ci/ci_register.py REGISTER_MAPPING
BACKENDS = {"cpu": "cpu", "cuda": "nvidia", "amd": "amd", "npu": "npu", "xpu": "xpu", "musa": "musa",
            "mlx": "mlx", "mps": "mps", "ppu": "ppu"}
_REGISTER = re.compile(r"register_([a-z]+)_ci")
_PARAM_ORDER = ("est_time", "suite", "nightly", "disabled")
# GPU models that appear in SGLang runner names, and what the device name must contain
_GPU_MODELS = {"h100": "h100", "h200": "h200", "h20": "h20", "b200": "b200", "b300": "b300",
               "gb200": "gb200", "gb300": "gb300", "5090": "5090", "mi300": "mi300", "mi325": "mi325",
               "mi35x": "mi35", "mi355": "mi355"}


@dataclass(frozen=True)
class CiRegistration:
    backend: str  # cpu, cuda, amd, ...
    est_time: float | None = None
    suite: str | None = None
    stage: str | None = None
    runner_config: str | None = None
    nightly: bool = False
    disabled: str | None = None
    line: int = 0

    @property
    def runner(self) -> str:
        """The effective suite, as SGLang's CIRegistry.effective_suite names it."""
        if self.stage and self.runner_config:
            return f"{self.stage}-test-{self.runner_config}"
        return self.suite or "(no suite)"

    def describe(self) -> str:
        parts = [f"register_{self.backend}_ci"]
        if self.runner_config:
            parts.append(f"runner_config={self.runner_config}")
        if self.stage:
            parts.append(f"stage={self.stage}")
        if self.suite:
            parts.append(f"suite={self.suite}")
        if self.est_time is not None:
            parts.append(f"est_time={self.est_time:g}s")
        if self.nightly:
            parts.append("nightly")
        if self.disabled:
            parts.append(f"disabled={self.disabled!r}")
        return " ".join(parts)

    @property
    def gpus(self) -> int:
        match = re.search(r"(\d+)-gpu", self.runner)
        return int(match.group(1)) if match else (0 if self.backend == "cpu" else 1)

    def match(self, device: DeviceModel, gpu_count: int) -> Reason | None:
        """None when this node can run the runner kind; else why not."""
        vendor = BACKENDS.get(self.backend, self.backend)
        if vendor == "cpu":
            return None
        if vendor in ("nvidia", "amd") and device.vendor != vendor:
            return Reason("ci-runner-mismatch", f"registered for {self.backend} runner {self.runner}, "
                          f"but this node is {device.describe()}")
        if vendor not in ("nvidia", "amd"):
            return Reason("ci-runner-mismatch", f"registered for {self.backend} runner {self.runner}; "
                          "dsakit nodes are CUDA, ROCm or CPU")
        if self.gpus > gpu_count:
            return Reason("ci-runner-mismatch", f"runner {self.runner} has {self.gpus} GPUs, this node "
                          f"{gpu_count}")
        return None

    def model_note(self, device: DeviceModel) -> str | None:
        """A note when the runner names another GPU model than this node's (still runs)."""
        name = device.name.lower().replace(" ", "")
        for token, needle in _GPU_MODELS.items():
            if re.search(rf"(^|-){token}($|-)", self.runner) and needle not in name:
                return f"runner {self.runner} is a {token.upper()} runner; this node is {device.name}"
        return None


def _constant(node: ast.AST) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def ci_registrations(path: Path) -> list[CiRegistration]:
    """Top-level `register_*_ci(...)` calls of a test file, read with the AST (never imported)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    except SyntaxError:
        return []  # the run reports it as this file's failure (`syntax_error` adds the note)
    found: list[CiRegistration] = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            continue
        call = stmt.value
        name = call.func.id if isinstance(call.func, ast.Name) else (
            call.func.attr if isinstance(call.func, ast.Attribute) else "")
        match = _REGISTER.fullmatch(name)
        if not match:
            continue
        values: dict[str, Any] = dict(zip(_PARAM_ORDER, (_constant(a) for a in call.args)))
        values.update({kw.arg: _constant(kw.value) for kw in call.keywords if kw.arg})
        est = values.get("est_time")
        found.append(CiRegistration(
            match.group(1),
            float(est) if isinstance(est, (int, float)) else None,
            values.get("suite") if isinstance(values.get("suite"), str) else None,
            values.get("stage") if isinstance(values.get("stage"), str) else None,
            values.get("runner_config") if isinstance(values.get("runner_config"), str) else None,
            values.get("nightly") is True,
            values.get("disabled") if isinstance(values.get("disabled"), str) else None,
            stmt.lineno,
        ))
    return found


def syntax_error(path: Path) -> str | None:
    """Where a file does not parse ("line 3: invalid syntax"), None when it parses."""
    try:
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except (OSError, ValueError) as error:
        return str(error)
    return None


def expand_test_files(arguments: Sequence[str]) -> list[Path]:
    """The files to rerun: each FILE as given, each directory expanded to its `test_*.py` /
    `*_test.py` files (sorted, recursively); UsageError for a path that is neither."""
    paths: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found = sorted({*path.rglob("test_*.py"), *path.rglob("*_test.py")})
            if not found:
                raise UsageError(f"directory {argument} holds no test_*.py or *_test.py file; pass test "
                                 "files or a directory that holds some")
            paths += found
        elif path.is_file():
            paths.append(path)
        else:
            raise UsageError(f"no such test file or directory: {argument}")
    return list(dict.fromkeys(paths))


def runs_as_script(path: Path) -> bool:
    """True when `if __name__ == "__main__":` calls unittest.main (run as `python FILE`)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return False
    for stmt in tree.body:
        if not isinstance(stmt, ast.If):
            continue
        test = stmt.test
        if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                and any(_constant(c) == "__main__" for c in test.comparators)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                owner = getattr(func, "value", None)
                if name == "main" and isinstance(owner, ast.Name) and owner.id == "unittest":
                    return True
    return False


# ---------------------------------------------------------------- running


@dataclass
class FileResult:
    path: str
    command: list[str]
    returncode: int
    seconds: float
    registrations: list[CiRegistration]
    mismatch: list[Reason] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    cases: list[dict[str, str]] = field(default_factory=list)
    output: str = ""
    junit: str = ""

    @property
    def counted(self) -> int:
        return sum(self.counts.values())

    @property
    def passed(self) -> bool:
        # exit 0 with no test counted is a process that left early (os._exit(0), sys.exit(0) at
        # import) or ran nothing: not a pass
        return self.returncode == 0 and self.counted > 0

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "command": self.command, "returncode": self.returncode,
                "passed": self.passed, "seconds": round(self.seconds, 3), "counts": self.counts,
                "registrations": [r.describe() for r in self.registrations],
                "mismatch": [m.as_dict() for m in self.mismatch], "notes": self.notes, "junit": self.junit}


_UNITTEST_LINE = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n.*?)? \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|"
                            r"unexpected success)$", re.MULTILINE)


def _unittest_counts(output: str) -> tuple[dict[str, int], list[dict[str, str]]]:
    cases = [{"name": m.group(1), "classname": m.group(2), "outcome": _unittest_outcome(m.group(3))}
             for m in _UNITTEST_LINE.finditer(output)]
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for case in cases:
        counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
    ran = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    if not cases and ran:  # not verbose: totals from the summary line
        total = int(ran.group(1))
        summary = re.search(r"^(OK|FAILED)(?: \((.*)\))?$", output, re.MULTILINE)
        extra = dict(re.findall(r"(\w+)=(\d+)", summary.group(2) or "")) if summary else {}
        counts = {"failed": int(extra.get("failures", 0)), "errors": int(extra.get("errors", 0)),
                  "skipped": int(extra.get("skipped", 0))}
        counts["passed"] = total - sum(counts.values())
    return counts, cases


def _unittest_outcome(text: str) -> str:
    if text in ("ok", "expected failure"):
        return "passed"
    if text.startswith("skipped"):
        return "skipped"
    return {"FAIL": "failed", "ERROR": "errors", "unexpected success": "failed"}.get(text, "failed")


def _junit_root(path: Path) -> ET.Element | None:
    try:
        return ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None


def _suites(root: ET.Element) -> list[ET.Element]:
    return [root] if root.tag == "testsuite" else list(root.iter("testsuite"))


def _junit_counts(root: ET.Element | None) -> dict[str, int]:
    if root is None:
        return {}
    suites = _suites(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


def _unittest_junit(result: FileResult, log_name: str) -> ET.Element:
    suite = ET.Element("testsuite", name=result.path, time=f"{result.seconds:.3f}")
    cases = result.cases or ([{"name": Path(result.path).stem, "classname": result.path, "outcome": "passed"}]
                             if result.passed else [])
    for case in cases:
        element = ET.SubElement(suite, "testcase", name=case["name"], classname=case["classname"])
        if case["outcome"] in ("failed", "errors"):
            ET.SubElement(element, "failure" if case["outcome"] == "failed" else "error",
                          message=f"see {log_name}")
        elif case["outcome"] == "skipped":
            ET.SubElement(element, "skipped")
    return suite


def _process_problem(result: FileResult) -> str:
    if result.returncode == TIMED_OUT:
        return "the file ran past --timeout; its process group was killed"
    if result.returncode == 0:
        return "exit 0 but no test was counted (the process ended before reporting, or ran no test)"
    return f"the process exited with code {result.returncode}"


def junit_document(result: FileResult, child: ET.Element | None, log_name: str) -> bytes:
    """The file's JUnit XML: pytest's own (when it wrote one) or one built from the unittest
    output; a `(process)` error case when the file did not pass and no case says why; every
    suite's tests / failures / errors / skipped recounted from its <testcase> elements."""
    root = child if child is not None else _unittest_junit(result, log_name)
    suites = _suites(root) or [ET.SubElement(root, "testsuite", name=result.path)]
    cases = [case for suite in suites for case in suite.iter("testcase")]
    if not result.passed and not any(case.find(tag) is not None for case in cases for tag in ("failure", "error")):
        process = ET.SubElement(suites[0], "testcase", name="(process)", classname=result.path)
        ET.SubElement(process, "error", message=_process_problem(result)).text = f"see {log_name}"
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in suites:
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for case in suite.iter("testcase"):
            counts["tests"] += 1
            for key, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
                counts[key] += case.find(tag) is not None
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    if root.tag == "testsuites":
        for key, value in totals.items():
            root.set(key, str(value))
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


def _safe_name(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(path).strip("/"))[:150]


TIMED_OUT = 124  # the exit code a timed-out file is reported with


def _run_in_own_group(command: list[str], *, cwd: Path | None, timeout: float | None) -> tuple[int, str, bool]:
    """(exit code, output, whether processes of the file outlived it): the file runs in a process
    group of its own, ended after the file exits or times out, and on Ctrl-C or SIGTERM."""
    run = run_in_own_group(command, cwd=cwd, timeout=timeout)
    if run.timed_out:
        return TIMED_OUT, run.output + f"\n[dsakit] timed out after {timeout:g} s", False
    return run.returncode, run.output, run.leftovers


def run_file(path: Path, junit_dir: Path, device: DeviceModel, gpu_count: int, *,
             timeout: float | None, pytest_args: Sequence[str] = ()) -> FileResult:
    registrations = ci_registrations(path)
    name = _safe_name(path)
    junit = output_file(junit_dir / f"{name}.xml", "--junitxml")
    log = output_file(junit_dir / f"{name}.log", "--junitxml")
    # a simulated device needs dsakit's plugin in the child: a script-style file runs through pytest
    script = runs_as_script(path) and not device.simulated
    if device.simulated:
        pytest_args = [*pytest_args, f"--dsakit-device={device.key}"]
    with tempfile.TemporaryDirectory(prefix="dsakit-rerun-") as scratch:
        child_xml = Path(scratch) / "junit.xml"  # pytest's own; the one kept is written below
        if script:
            command = [sys.executable, str(path), "-v"]
        else:
            command = [sys.executable, "-m", "pytest", *plugin_args(), str(path), "-q", "-rfEs",
                       f"--junitxml={child_xml}", *pytest_args]
        tic = time.perf_counter()
        code, output, leftovers = _run_in_own_group(command, cwd=path.parent if script else None,
                                                    timeout=timeout)
        seconds = time.perf_counter() - tic
        child = None if script else _junit_root(child_xml)
    result = FileResult(str(path), command, code, seconds, registrations, output=output, junit=str(junit.target))
    result.mismatch = [m for m in (r.match(device, gpu_count) for r in registrations) if m is not None]
    if registrations and len(result.mismatch) < len(registrations):
        result.mismatch = []  # some registration matches this node
    result.notes = [n for n in (r.model_note(device) for r in registrations) if n]
    result.notes += [f"disabled in CI: {r.disabled}" for r in registrations if r.disabled]
    broken = syntax_error(path)
    if broken:
        result.notes.append(f"the file does not parse ({broken}): this file fails, the others still run")
    elif not registrations:
        result.notes.append("no register_*_ci(...) call at module level: not in SGLang CI")
    if script and pytest_args:
        result.notes.append(f"pytest arguments {' '.join(pytest_args)} not passed: this file runs as "
                            "`python FILE` (a unittest main)")
    if leftovers:
        result.notes.append("processes the file started were still running after it finished: ended "
                            "(its process group got SIGTERM, then SIGKILL)")
    if script:
        result.counts, result.cases = _unittest_counts(output)
    else:
        result.counts = _junit_counts(child)
    if code == 0 and not result.counted:
        result.notes.append("exit 0 but no test was counted: the process ended before reporting "
                            "(os._exit? a sys.exit at import?) or ran no test")
    if code == TIMED_OUT:
        result.notes.append(f"timed out after {timeout:g} s: the file's process group was killed")
    # pytest writes its XML at session end: a timeout or an early exit leaves none
    junit.write_bytes(junit_document(result, child, Path(log.target).name))
    log.write_text(output)
    return result


def format_block(result: FileResult, *, show_output: bool = False) -> list[str]:
    status = "PASSED" if result.passed else ("TIMEOUT" if result.returncode == TIMED_OUT else
                                             "FAILED (no test counted)" if result.returncode == 0
                                             else "FAILED")
    counts = ", ".join(f"{v} {k}" for k, v in result.counts.items() if v) or "no test counts"
    lines = [f"==== dsakit rerun-test: {result.path} ===="]
    for reg in result.registrations:
        lines.append(f"  CI: {reg.describe()} -> runner {reg.runner}")
    verdict = "this node matches" if not result.mismatch else " | ".join(str(m) for m in result.mismatch)
    lines.append(f"  node: {verdict}")
    lines += [f"  note: {n}" for n in result.notes]
    lines.append(f"  command: {' '.join(result.command)}")
    lines.append(f"  result: {status}  {counts} in {result.seconds:.2f} s (exit {result.returncode})")
    lines.append(f"  junit: {result.junit}")
    if show_output or not result.passed:
        tail = result.output.rstrip().splitlines()
        shown = tail if show_output else tail[-30:]
        lines.append("  ---- output" + ("" if show_output else " (last 30 lines)") + " ----")
        lines += [f"  | {line}" for line in shown]
    return lines


def run_rerun_test(files: Sequence[str], *, junit_dir: str | None, timeout: float | None,
                   only_matching: bool = False, show_output: bool = False,
                   pytest_args: Sequence[str] = (), device_name: str | None = None) -> int:
    from dsakit.gates.device_model import resolve_device
    from dsakit.node.gpu_pinning import discover

    check_timeout(timeout)
    paths = expand_test_files(files)
    out_dir = writable_dir(junit_dir or "dsakit-rerun-junit", "--junitxml")
    device = resolve_device(device_name)
    gpus = len(discover(device_name).ids) if device.is_gpu else 0
    if device.is_gpu and not gpus:
        gpus = device.device_count
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"dsakit rerun-test: {len(paths)} file(s) on {device.describe()} ({gpus} GPU(s)); JUnit XML in {out_dir}")
    results: list[FileResult] = []
    with interruptible():  # Ctrl-C or SIGTERM: the running file's group ends, the JUnit dir stays
        for path in paths:
            registrations = ci_registrations(path)
            mismatch = [m for m in (r.match(device, gpus) for r in registrations) if m is not None]
            if only_matching and registrations and len(mismatch) == len(registrations):
                print(f"==== dsakit rerun-test: {path} ====\n  SKIPPED (--only-matching): "
                      + " | ".join(str(m) for m in mismatch))
                continue
            result = run_file(path, out_dir, device, gpus, timeout=timeout, pytest_args=pytest_args)
            results.append(result)
            print("\n".join(format_block(result, show_output=show_output)), flush=True)
    failed = [r for r in results if not r.passed]
    print(f"==== dsakit rerun-test: {len(results) - len(failed)} passed, {len(failed)} failed"
          + (": " + ", ".join(r.path for r in failed) if failed else "") + " ====")
    return 1 if failed else 0
