"""`dsakit pr-check --base TREE --pr TREE [--devices ...] -- PYTEST_ARGS`: the PR gate, per device.

Owns: a base and a PR run per device (the real device where this machine is it, simulated
elsewhere; side by side), one rerun of what failed (flaky), the verdict per test x device, the diff
of the two trees' model_runner reads, the selection's mocks those new reads break, each simulated
device's branch coverage (base vs PR) and the device-gated branches the PR changes that no run
covered, the PR comment, the JSON and the exit code (1: a regression, a test the PR newly skips, or a
must-run gate run on no device; 0: only pre-existing failures; 2: bad input, or a run that compared
nothing). Never imports torch or SGLang here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dsakit.errors import UsageError
from dsakit.devices import pr_gate_keys
from dsakit.gates.device_branches import SECTION as BRANCHES, BranchChange, BranchRecord, touched_branches
from dsakit.gates.device_model import REAL, SIMULATED, real_device, simulated_model
from dsakit.gates.skip_causes import Cause
from dsakit.compare.markdown import Comment, FailureRow, FailureSection, SkipGroup, Table
from dsakit.compare.pr_vs_base import (Run, classify, fingerprint_mismatch, in_tree, package_dir, run_selection,
                                    skip_reason)
from dsakit.gates.outcomes import FAILING, signature
from dsakit.node.process_group import check_timeout, interruptible, stop_all
from dsakit.output_paths import OutputFile, output_file, writable_dir

VERDICTS = ("regression", "newly-skipped", "flaky", "pre-existing", "fixed", "not-run", "skip-change", "passed")
FAILING_VERDICTS = ("regression", "newly-skipped")  # either fails the gate: exit 1


@dataclass(frozen=True)
class Verdict:
    test: str
    device: str
    verdict: str
    base: str | None
    pr: str | None
    detail: str = ""
    explanation: str = ""
    base_reason: str = ""  # the base run's outcome with its skip reason or failure signature
    pr_reason: str = ""  # the same for the PR run

    def as_dict(self) -> dict[str, Any]:
        return {"test": self.test, "device": self.device, "verdict": self.verdict, "base": self.base,
                "pr": self.pr, "detail": self.detail, "explanation": self.explanation,
                "base_reason": self.base_reason, "pr_reason": self.pr_reason}


@dataclass
class DeviceCheck:
    """The base and PR runs of one device, their reruns, and the verdicts."""

    device: str  # a simulated profile key, or "real"
    runs_as: str  # the device name passed to --dsakit-device
    base: Run | None = None
    pr: Run | None = None
    reruns: dict[str, Run] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    pr_gates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    branches: dict[str, dict[str, Any]] = field(default_factory=dict)  # tree -> its report's device_branches

    def branch_records(self, tree_label: str) -> list[BranchRecord]:
        section = self.branches.get(tree_label) or {}
        return [BranchRecord.from_dict(b) for b in section.get("branches") or () if isinstance(b, dict)]

    @property
    def label(self) -> str:
        return f"{self.device} (real)" if self.runs_as == REAL else f"{self.device} (simulated)"


# ---------------------------------------------------------------- inputs


def parse_devices(spec: str | None) -> list[str]:
    if not spec:
        return list(pr_gate_keys())
    if spec.strip() == "all":
        return [key for key in SIMULATED if key != "cpu"]
    names = [simulated_model(part.strip()).key for part in spec.split(",") if part.strip()]
    if not names:
        raise UsageError(f"--devices {spec!r} names no device; valid: all or a list of {', '.join(SIMULATED)}")
    return list(dict.fromkeys(names))


def runs_as(device: str) -> str:
    """'real' where this machine is the device (same vendor and arch), else the device itself."""
    real, wanted = real_device(), simulated_model(device)
    same = real.is_gpu and real.vendor == wanted.vendor and (
        real.gfx == wanted.gfx if wanted.vendor == "amd" else real.sm == wanted.sm)
    return REAL if same else device


# ---------------------------------------------------------------- running


def _xdist_workers(pytest_args: Sequence[str], cpus: int | None = None) -> int:
    """Processes one run starts: its `-n N` / `--numprocesses N` workers, else 1 (`-n auto`: all CPUs)."""
    for i, arg in enumerate(pytest_args):
        value = None
        if arg in ("-n", "--numprocesses") and i + 1 < len(pytest_args):
            value = pytest_args[i + 1]
        elif arg.startswith("--numprocesses="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-n") and len(arg) > 2:
            value = arg[2:]
        if value is not None:
            return max(1, int(value)) if value.isdigit() else (cpus or _cpus())
    return 1


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parallel_runs(runs: int, pytest_args: Sequence[str], cpus: int | None = None) -> int:
    """How many of the `runs` pytest runs go at once: the CPUs over the processes each starts, at
    least 2 so a device's base and PR always run side by side."""
    cpus = cpus or _cpus()
    return max(1, min(runs, max(2, cpus // _xdist_workers(pytest_args, cpus))))


@dataclass(frozen=True)
class _Plan:
    pytest_args: tuple[str, ...]
    workdir: Path
    timeout: float | None
    env: dict[str, str]  # OMP_NUM_THREADS: the CPUs split over the runs in flight


def _run_tree(check: DeviceCheck, tree_label: str, src: str, plan: _Plan) -> None:
    """One tree's run on one device, then its rerun of what failed (flaky), into `check`."""
    label = f"{check.device}-{tree_label}"
    report = plan.workdir / f"{label}.report.json"
    device = f"--dsakit-device={check.runs_as}"
    run = run_selection(label, src, [*plan.pytest_args, device, f"--dsakit-report={report}"], plan.workdir,
                        timeout=plan.timeout, env_overrides=plan.env)
    data = json.loads(report.read_text()) if report.is_file() else {}
    if tree_label == "pr" and data:  # each test's declared gates, for --must-run
        check.pr_gates = {t: tuple(e.get("gates", ())) for t, e in data.get("tests", {}).items()}
    if isinstance(data.get(BRANCHES), dict):  # a simulated device's branch coverage
        check.branches[tree_label] = data[BRANCHES]
    setattr(check, tree_label, run)
    # a failed subtest is rerun with its test (a subtest id is not a pytest node id)
    failing = list(dict.fromkeys(o.get("subtest_of", t) for t, o in run.tests.items() if o["outcome"] in FAILING))
    if failing:
        only = plan.workdir / f"{label}-rerun.txt"
        output_file(only, "--keep").write_text("\n".join(failing) + "\n")
        check.reruns[tree_label] = run_selection(
            f"{label}-rerun", src, [*plan.pytest_args, device, f"--dsakit-record-only={only}"], plan.workdir,
            timeout=plan.timeout, env_overrides=plan.env)


def run_all(checks: Sequence[DeviceCheck], base_src: str, pr_src: str, pytest_args: Sequence[str], workdir: Path,
            timeout: float | None) -> None:
    """Every device's base and PR run side by side in separate processes (never one warm
    interpreter: the two trees are two `sglang` packages, and a fork after CUDA is initialised is
    unsafe; bench/README.md, "pr-check"), as many at once as the CPUs carry."""
    from dsakit.node.gpu_pinning import THREADS_ENV, cpu_threads_per_worker

    parallel = parallel_runs(2 * len(checks), pytest_args)
    threads = cpu_threads_per_worker(parallel * _xdist_workers(pytest_args))
    plan = _Plan(tuple(pytest_args), workdir, timeout, {THREADS_ENV: str(threads)} if threads else {})
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(_run_tree, check, tree_label, src, plan)
                   for check in checks for tree_label, src in (("base", base_src), ("pr", pr_src))]
        try:
            for future in futures:
                future.result()
        except BaseException:
            stop_all()  # before the pool waits for its threads: their runs end now, no rerun starts
            raise
    for check in checks:
        check.verdicts = verdicts(check)


# ---------------------------------------------------------------- verdicts


def _flaky(check: DeviceCheck, tree_label: str, nodeid: str) -> bool:
    rerun = check.reruns.get(tree_label)
    again = rerun.tests.get(nodeid) if rerun is not None else None
    return again is not None and again["outcome"] not in FAILING


def _explanation(outcome: dict[str, Any] | None) -> str:
    return str((outcome or {}).get("explained", ""))


def outcome_text(outcome: dict[str, Any] | None) -> str:
    """One run's outcome of a test in words: `skipped: <reason>`, `failed: <signature>`, `passed`,
    or `not collected`."""
    if outcome is None:
        return "not collected"
    if outcome["outcome"] == "skipped":
        return "skipped: " + skip_reason(outcome)
    if outcome["outcome"] in FAILING:
        return f"{outcome['outcome']}: {signature(outcome)}"
    return str(outcome["outcome"])


def verdicts(check: DeviceCheck) -> list[Verdict]:
    assert check.base is not None and check.pr is not None
    result: list[Verdict] = []
    for change in classify(check.base.tests, check.pr.tests):
        b, p = check.base.tests.get(change.nodeid), check.pr.tests.get(change.nodeid)
        kind = change.kind
        base_fails, pr_fails = bool(b and b["outcome"] in FAILING), bool(p and p["outcome"] in FAILING)
        if (pr_fails and _flaky(check, "pr", change.nodeid)) or (base_fails and _flaky(check, "base", change.nodeid)):
            verdict = "flaky"
        elif kind == "regression" or (kind == "added" and pr_fails):
            verdict = "regression"
        elif kind in ("pre-existing", "failing-differently"):
            verdict = "pre-existing"
        elif kind == "fixed":
            verdict = "fixed"
        elif kind == "skip-change":
            # passed on base, skipped on the PR: the PR stops running it on this device (a dispatch
            # change that sends a B300 down a path the test does not cover skips, never fails)
            newly = b is not None and p is not None and (b["outcome"], p["outcome"]) == ("passed", "skipped")
            verdict = "newly-skipped" if newly else "skip-change"
        elif (b is None or b["outcome"] == "skipped") and (p is None or p["outcome"] == "skipped"):
            verdict = "not-run"
        else:
            verdict = "passed"
        detail = change.detail or (signature(p) if pr_fails and p else "")
        result.append(Verdict(change.nodeid, check.device, verdict, change.base, change.pr, detail,
                              _explanation(p if pr_fails else b), outcome_text(b), outcome_text(p)))
    return result


# ---------------------------------------------------------------- the trees' model_runner reads


@dataclass(frozen=True)
class ReadChange:
    """A model_runner read the PR adds, removes, or puts under another guard."""

    kind: str  # added, removed, guard-changed
    path: str
    function: str
    site: str
    guard: str
    before: str = ""  # the base's guard (guard-changed)
    fires_on: tuple[str, ...] = ()
    breaks: tuple[str, ...] = ()  # mocks of the selection that lack it, with the devices

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "function": self.function, "site": self.site,
                "guard": self.guard, "before": self.before, "fires_on": list(self.fires_on),
                "breaks": list(self.breaks)}


Reads = dict[tuple[str, str], list[Any]]  # (path, function) -> the non-soft reads there


def tree_reads(flag: str, src: str) -> Reads:
    """A tree's model_runner reads (and what its ModelRunner sets, read for the audit), scanned
    before anything runs: a file of the static part that does not parse is bad input naming the
    tree, `file:line` and the problem (a broken PR cannot be compared; its runs would say nothing
    about a file no test imports), never a traceback or a silent pass."""
    from dsakit.errors import UnparsableSource
    from dsakit.stack.sglang_release import release_from_tree
    from dsakit.sglang_facts.runner_source import runner_assignments
    from dsakit.sglang_facts.backend_reads import scan_runner_reads

    release = release_from_tree(src)
    try:
        found = scan_runner_reads(release)
        runner_assignments(release)
    except UnparsableSource as error:
        raise UsageError(f"the {flag} tree {src}: {error.what}; pr-check compares two trees whose backends "
                         "and ModelRunner parse: fix the file and run again") from None
    reads: Reads = {}
    for read in found:
        if not read.soft:
            reads.setdefault((read.path, read.function), []).append(read)
    return reads


def read_changes(base: Reads, pr: Reads, devices: Sequence[str]) -> list[ReadChange]:
    from dsakit.audit.guard_eval import verdicts as guard_verdicts

    profiles = {d: simulated_model(d) for d in devices}

    def fires(guard: str) -> tuple[str, ...]:
        return tuple(v.device for v in guard_verdicts(guard, profiles) if v.fires)

    changes: list[ReadChange] = []
    for key, reads in pr.items():
        guards = sorted({r.guard for r in reads})
        first = reads[0]
        if key not in base:
            changes.append(ReadChange("added", key[0], key[1], str(first.site), first.guard, fires_on=fires(first.guard)))
        elif guards != sorted({r.guard for r in base[key]}):
            before = " or ".join(sorted({r.guard or "always" for r in base[key]}))
            changes.append(ReadChange("guard-changed", key[0], key[1], str(first.site), first.guard, before,
                                      fires(first.guard)))
    for key, reads in base.items():
        if key not in pr:
            changes.append(ReadChange("removed", key[0], key[1], str(reads[0].site), reads[0].guard))
    return changes


def broken_mocks(changes: list[ReadChange], suites: Sequence[str], pr_src: str, devices: Sequence[str]) -> list[ReadChange]:
    """Each added / re-guarded read with the selection's mocks that lack it (dsakit audit of the PR tree)."""
    from dsakit.audit.command import audit, python_files
    from dsakit.stack.sglang_release import release_from_tree

    files = [str(p) for p in python_files(suites)] if suites else []
    if not files or not changes:
        return changes
    result = audit(files, {d: simulated_model(d) for d in devices}, release_from_tree(pr_src))
    lacking: dict[str, list[str]] = {}
    for mock in getattr(result, "mocks", []):
        for missing in getattr(mock, "missing", []):
            for found in missing.reads:
                where = ", ".join(found.fails_on) or "no device by default"
                value = mock.mock
                name = f"{value.label} ({value.site})" if value.site else value.label
                lacking.setdefault(str(found.read.site), []).append(f"{name} on {where}")
    return [ReadChange(c.kind, c.path, c.function, c.site, c.guard, c.before, c.fires_on,
                       tuple(dict.fromkeys(lacking.get(c.site, ())))) if c.kind != "removed" else c
            for c in changes]


_CLASS_LACKS = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
_CONTRACT_LACKS = re.compile(r"model_runner\.([\w.]+) is not in the dsakit role contract \(role=(\w+)\)")


def _mock_lacking(detail: str, path: str) -> str | None:
    """The mock a failure signature says lacks model_runner.`path`, or None when it names no such read."""
    found = _CONTRACT_LACKS.search(detail)
    if found and found.group(1) == path:
        return f"dsakit.MockModelRunner(role={found.group(2)})"
    found = _CLASS_LACKS.search(detail)
    if found and found.group(2) == path.rsplit(".", 1)[-1]:
        return found.group(1)
    return None


def failing_mocks(changes: list[ReadChange], checks: Sequence[DeviceCheck]) -> list[ReadChange]:
    """Each added / re-guarded read with the mocks its regressions show lacking it (what the static
    audit cannot trace: a runner built by a harness or a fixture), per test file and device."""
    result: list[ReadChange] = []
    for change in changes:
        found: dict[tuple[str, str], dict[str, int]] = {}
        for check in checks:
            for v in check.verdicts:
                mock = _mock_lacking(v.detail, change.path) if v.verdict == "regression" else None
                if mock is not None:
                    where = found.setdefault((mock, v.test.split("::")[0]), {})
                    where[check.device] = where.get(check.device, 0) + 1
        seen = [f"{mock} in {path} on " + ", ".join(f"{d} ({n} regressions)" for d, n in on.items())
                for (mock, path), on in found.items()]
        result.append(replace(change, breaks=(*change.breaks, *seen)) if seen and change.kind != "removed" else change)
    return result


def suites_in(pytest_args: Sequence[str]) -> list[str]:
    """The files and folders of a pytest selection (node ids cut to their file)."""
    paths: list[str] = []
    for arg in pytest_args:
        if arg.startswith("-"):
            continue
        path = arg.split("::")[0]
        if Path(path).exists():
            paths.append(path)
    return paths


# ---------------------------------------------------------------- the report


@dataclass
class PrCheck:
    base_src: str
    pr_src: str
    checks: list[DeviceCheck]
    reads: list[ReadChange]
    must_run: tuple[str, ...] = ()
    branch_changes: list[BranchChange] = field(default_factory=list)  # device branches the PR changes

    def all_verdicts(self) -> list[Verdict]:
        return [v for c in self.checks for v in c.verdicts]

    def of(self, verdict: str) -> list[Verdict]:
        return [v for v in self.all_verdicts() if v.verdict == verdict]

    def must_run_failures(self) -> dict[str, str]:
        failures: dict[str, str] = {}
        for code in self.must_run:
            ran = [c.label for c in self.checks if c.pr is not None and any(
                code in c.pr_gates.get(o.get("pytest_nodeid", t), ()) and o["outcome"] != "skipped"
                for t, o in c.pr.tests.items())]
            if not ran:
                failures[code] = "no test behind it ran on any device in the PR runs"
        return failures

    def unusable(self) -> tuple[list[str], bool]:
        """Sentences for runs that compared nothing (collection errors, no tests: pytest exit 2-5),
        and whether the PR alone broke collection somewhere (a regression)."""
        from dsakit.compare.pr_vs_base import unusable_runs

        lines: list[str] = []
        pr_only = False
        for check in self.checks:
            assert check.base is not None and check.pr is not None
            found, by_pr = unusable_runs(check.base, check.pr)
            lines += [f"{check.label}: {line}" for line in found]
            pr_only = pr_only or by_pr
        return lines, pr_only

    def exit_code(self) -> int:
        """1: a regression, a test the PR newly skips, a must-run gate run nowhere, or the PR breaking
        collection; 2: a run that compared nothing for another reason (the selection or a tree is
        wrong); else 0."""
        lines, pr_only = self.unusable()
        if any(self.of(v) for v in FAILING_VERDICTS) or self.must_run_failures() or pr_only:
            return 1
        return 2 if lines else 0

    def label(self, device: str) -> str:
        return next(c.label for c in self.checks if c.device == device)


_TESTS_PER_ROW = 4  # test ids named in one grouped row before "and N more"


def _rows(verdicts: list[Verdict], pr_check: PrCheck) -> tuple[FailureRow, ...]:
    """One row per device and signature (the read's explanation after it), its tests listed."""
    groups: dict[tuple[str, str], list[str]] = {}
    order = {c.device: i for i, c in enumerate(pr_check.checks)}
    for v in sorted(verdicts, key=lambda v: (order.get(v.device, 0), v.detail, v.test)):
        explained = f" — {v.explanation.splitlines()[1].strip()}" if v.explanation.count("\n") >= 1 else ""
        groups.setdefault((pr_check.label(v.device), v.detail + explained), []).append(v.test)
    rows = []
    for (where, sig), tests in groups.items():
        named = ", ".join(f"`{t}`" for t in tests[:_TESTS_PER_ROW])
        more = len(tests) - _TESTS_PER_ROW
        rows.append(FailureRow(named + (f" and {more} more" if more > 0 else ""), where, sig))
    return tuple(rows)


def _section(title: str, verdicts: list[Verdict], pr_check: PrCheck) -> FailureSection:
    """A failure section: its rows group tests by device and signature; the note counts test x device."""
    rows = _rows(verdicts, pr_check)
    note = f"{len(verdicts)} test x device in {len(rows)} row(s) (one per device and signature)" if verdicts else ""
    return FailureSection(title, rows, note=note)


def comment(pr_check: PrCheck) -> Comment:
    counts = {k: len(pr_check.of(k)) for k in VERDICTS}
    summary = [f"base `{pr_check.base_src}`, PR `{pr_check.pr_src}` on "
               + ", ".join(c.label for c in pr_check.checks),
               "test x device: " + (", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no test ran")]
    for code, why in pr_check.must_run_failures().items():
        summary.append(f"must-run gate `{code}`: {why}")
    unusable, pr_only = pr_check.unusable()
    summary += [f"**{line}**" + (" (the PR breaks the selection: a regression)" if pr_only else "") for line in unusable]
    for check in pr_check.checks:
        assert check.base is not None and check.pr is not None
        mismatch = fingerprint_mismatch(check.base, check.pr)
        if mismatch:
            summary.append(f"{check.label}: the two runs differ in environment: {'; '.join(mismatch)}")
    added = [r for r in pr_check.reads if r.kind != "removed"]
    reads = Table("model_runner reads the PR adds or re-guards, and the mocks they break",
                  ("change", "read", "site", "guard", "fires on", "mocks that lack it"),
                  tuple((r.kind, f"model_runner.{r.path} in {r.function}", r.site,
                         r.guard or "always" + (f" (was: {r.before})" if r.before else ""),
                         ", ".join(r.fires_on) or "-", "; ".join(r.breaks) or "none in the selection")
                        for r in added))
    removed = Table("model_runner reads the PR removes", ("read", "site"),
                    tuple((f"model_runner.{r.path} in {r.function}", r.site)
                          for r in pr_check.reads if r.kind == "removed"))
    not_run = _not_run_groups(pr_check)
    summary += _branch_summary(pr_check)
    summary += _why(pr_check)
    changed = pr_check.of("skip-change")
    skip_changes = Table(f"Skip changes ({len(changed)}): skipped on one tree only, or for another reason",
                         ("test", "device", "base", "PR"),
                         tuple((f"`{v.test}`", pr_check.label(v.device), v.base_reason, v.pr_reason) for v in changed))
    return Comment(
        title="dsakit pr-check",
        summary=summary,
        failures=[
            _section("Regressions (pass on base, fail on the PR)", pr_check.of("regression"), pr_check),
            _section("Newly skipped (pass on base, skip on the PR: the PR stops running them there), by device "
                     "and skip reason", pr_check.of("newly-skipped"), pr_check),
            _section("Pre-existing failures (fail on base and PR), by device and signature",
                     pr_check.of("pre-existing"), pr_check),
            _section("Flaky or order-dependent (passed when the failures were rerun alone)",
                     pr_check.of("flaky"), pr_check),
            _section("Fixed by the PR", pr_check.of("fixed"), pr_check),
        ],
        lead_tables=([reads, removed] if removed.rows else [reads]) + _branch_table(pr_check),
        skips=not_run,
        tables=[skip_changes] if changed else [],
        list_limit=_TESTS_PER_ROW,
    )


def _causes(check: DeviceCheck, tests: Any = None) -> list[tuple[str, Cause]]:
    """The PR run's skips on one device (of `tests` only, when given), each with its cause."""
    from dsakit.gates.inventory import reasons_from_message
    from dsakit.gates.skip_causes import explain

    assert check.pr is not None
    release = check.pr.sglang.get("version")
    causes = []
    for nodeid, outcome in check.pr.tests.items():
        if outcome["outcome"] != "skipped" or (tests is not None and nodeid not in tests):
            continue
        message = skip_reason(outcome)
        causes.append((nodeid, explain(message, reasons_from_message(message), release, check.device)))
    return causes


def _why(pr_check: PrCheck) -> list[str]:
    """One "why these skipped" paragraph per device, of its PR run."""
    from dsakit.gates.skip_causes import group_causes, why_paragraph

    return [why_paragraph(groups, f"{check.label}, PR run") for check in pr_check.checks
            if check.pr is not None and (groups := group_causes(_causes(check)))]


def _not_run_groups(pr_check: PrCheck) -> list[SkipGroup]:
    """Tests that ran on no device in either tree, grouped by their skip's cause (each test x
    device once), with where each group would run."""
    from dsakit.gates.skip_causes import UNCODED, group_causes, runs_on_here

    ran = {v.test for v in pr_check.all_verdicts() if v.verdict != "not-run"}
    here: dict[str, list[tuple[str, bool]]] = {}
    causes: list[tuple[str, Cause]] = []
    devices: dict[str, list[str]] = {}
    for check in pr_check.checks:
        here.setdefault(check.device, []).append((check.label, check.runs_as != REAL))
        assert check.pr is not None
        not_run = {t for t in check.pr.tests if t not in ran}
        for nodeid, cause in _causes(check, not_run):
            causes.append((nodeid, cause))
            labels = devices.setdefault(cause.code, [])
            if check.label not in labels:
                labels.append(check.label)
    return [SkipGroup(g.code, g.reason, g.count, ", ".join(devices[g.code]), "no device",
                      tuple(sorted(set(g.tests))), runs_on_here(g.runs_on, "; ".join(g.notes), here),
                      tuple(g.messages.most_common()) if g.code == UNCODED else ())
            for g in group_causes(causes)]


def changed_branches(checks: Sequence[DeviceCheck], base: Path, pr: Path) -> list[BranchChange]:
    """The device-gated branches of the PR runs whose lines the PR's diff of that file touches (the
    two trees' text, difflib), each with what every simulated device's PR run did with it."""
    def texts(file: str) -> tuple[str | None, str | None]:
        def read(package: Path) -> str | None:
            try:
                return (package / file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return None

        return read(base), read(pr)

    return touched_branches([(c.label, r) for c in checks for r in c.branch_records("pr")], texts)


def _coverage(check: DeviceCheck, tree: str) -> dict[str, int]:
    records = check.branch_records(tree)
    return {"ran": sum(r.ran for r in records), "total": len(records)}


def _branch_summary(pr_check: PrCheck) -> list[str]:
    """Each simulated device's branch coverage, PR vs base, and the PR's changed branches no run covered."""
    lines = []
    for check in pr_check.checks:
        if "pr" in check.branches:
            pr, base = _coverage(check, "pr"), _coverage(check, "base") if "base" in check.branches else None
            lines.append(f"{check.label}: device branches: PR {pr['ran']} of {pr['total']} took the device's arm"
                         + (f" (base {base['ran']} of {base['total']})" if base is not None else ""))
    uncovered = [c for c in pr_check.branch_changes if not c.covered]
    if uncovered:
        lines.append(f"**the PR changes {len(uncovered)} device branch(es) that no run covered**: "
                     + "; ".join(f"`{c.where}` ({c.change}: `{c.branch.decision}`)" for c in uncovered))
    return lines


def _branch_table(pr_check: PrCheck) -> list[Table]:
    if not pr_check.branch_changes:
        return []
    return [Table("Device branches the PR changes", ("branch", "change", "lines", "runs"),
                  tuple((f"{c.branch.site}: {c.branch.decision}", c.change, c.where, c.runs())
                        for c in pr_check.branch_changes))]


def as_json(pr_check: PrCheck) -> dict[str, Any]:
    return {
        "base": pr_check.base_src, "pr": pr_check.pr_src,
        "devices": [{"device": c.device, "runs_as": c.runs_as, "label": c.label,
                     "base_exit": c.base.returncode if c.base else None,
                     "pr_exit": c.pr.returncode if c.pr else None,
                     "sglang": {"base": c.base.sglang if c.base else None, "pr": c.pr.sglang if c.pr else None}}
                    for c in pr_check.checks],
        "counts": {k: len(pr_check.of(k)) for k in VERDICTS},
        "verdicts": [v.as_dict() for v in pr_check.all_verdicts()],
        "reads": [r.as_dict() for r in pr_check.reads],
        "device_branches": {c.label: {tree: _coverage(c, tree) for tree in ("base", "pr") if tree in c.branches}
                            for c in pr_check.checks if c.branches},
        "branch_changes": [change.as_dict() for change in pr_check.branch_changes],
        "must_run": {"codes": list(pr_check.must_run), "failed": pr_check.must_run_failures()},
        "why": _why(pr_check),
        "unusable_runs": pr_check.unusable()[0],
        "exit": pr_check.exit_code(),
    }


# ---------------------------------------------------------------- the command


def run_pr_check(base_src: str, pr_src: str, pytest_args: Sequence[str], *, devices: str | None = None,
                 json_path: str | None = None, markdown_path: str | None = None, must_run: str = "",
                 keep: str | None = None, timeout: float | None = None) -> int:
    from dsakit.gates.table import split_codes, validate_codes

    base_package, pr_package = (package_dir(src) for src in (base_src, pr_src))  # not a tree: exit 2 now
    chosen = parse_devices(devices)
    codes = validate_codes(split_codes(must_run, "--must-run")) if must_run else ()
    json_out = output_file(json_path, "--json") if json_path is not None else None
    markdown_out = output_file(markdown_path, "--markdown") if markdown_path is not None else None
    if keep:
        writable_dir(keep, "--keep")
    check_timeout(timeout)  # inf: leave it out; nan, 0, negative: not a limit
    if base_package.resolve() == pr_package.resolve():
        raise UsageError(f"--base {base_src} and --pr {pr_src} are the same tree ({base_package.resolve()}): "
                         "every test would be compared with itself, so no regression could show; pass the "
                         "PR's tree to --pr")
    reads = (tree_reads("--base", base_src), tree_reads("--pr", pr_src))  # a file that does not parse: exit 2
    with interruptible():  # Ctrl-C or SIGTERM: every run ends, then the workdir goes (unless --keep)
        return _pr_check_in(Path(keep) if keep else Path(tempfile.mkdtemp(prefix="dsakit-pr-check-")), keep=bool(keep),
                            base_src=base_src, pr_src=pr_src, pytest_args=pytest_args, chosen=chosen, codes=codes,
                            json_out=json_out, markdown_out=markdown_out, timeout=timeout, reads=reads)


def _pr_check_in(workdir: Path, *, keep: bool, base_src: str, pr_src: str, pytest_args: Sequence[str],
                 chosen: Sequence[str], codes: tuple[str, ...], json_out: OutputFile | None,
                 markdown_out: OutputFile | None, timeout: float | None, reads: tuple[Reads, Reads]) -> int:
    from dsakit.compare.markdown import render

    try:
        workdir.mkdir(parents=True, exist_ok=True)
        checks = [DeviceCheck(d, runs_as(d)) for d in chosen]
        print(f"dsakit pr-check: base {base_src} vs PR {pr_src} on {', '.join(c.label for c in checks)}", flush=True)
        run_all(checks, base_src, pr_src, pytest_args, workdir, timeout)
        changes = broken_mocks(read_changes(*reads, chosen), suites_in(pytest_args), pr_src, chosen)
        result = PrCheck(base_src, pr_src, checks, failing_mocks(changes, checks), codes,
                         changed_branches(checks, package_dir(base_src), package_dir(pr_src)))
        text = render(comment(result))
        print(text)
        if json_out is not None:
            json_out.write_json(as_json(result))
        if markdown_out is not None:
            markdown_out.write_text(text)
        code = result.exit_code()
        if code == 2:
            for check in checks:
                for run in (check.base, check.pr):
                    if run is not None and run.returncode in (2, 3, 4, 5):
                        print(f"--- last output of the {run.label} run:\n{run.output_tail}", file=sys.stderr)
            print("dsakit pr-check: nothing was compared on some device; fix the selection (pytest args after --) "
                  "or the trees and run again", file=sys.stderr)
        print(f"dsakit pr-check: {len(result.of('regression'))} regression(s), "
              + (f"{newly} newly skipped, " if (newly := len(result.of('newly-skipped'))) else "")
              + f"{len(result.of('pre-existing'))} "
              f"pre-existing failure(s), {len(result.of('flaky'))} flaky"
              + (f", {uncovered} changed device branch(es) no run covered" if (uncovered := sum(
                  not c.covered for c in result.branch_changes)) else "") + f" -> exit {code}", file=sys.stderr)
        return code
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
