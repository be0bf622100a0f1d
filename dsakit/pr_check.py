"""`dsakit pr-check --base TREE --pr TREE [--devices ...] -- PYTEST_ARGS`: the PR gate, per device.

Owns: a base and a PR run per device (the real device where this machine is it, simulated
elsewhere; side by side), one rerun of what failed (flaky), the verdict per test x device, the diff
of the two trees' model_runner reads, the selection's mocks those new reads break, the PR comment,
the JSON and the exit code (1: a regression, or a must-run gate run on no device; 0: only
pre-existing failures; 2: bad input). Never imports torch or SGLang here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsakit.errors import UsageError
from dsakit.gates.device_model import REAL, SIMULATED, real_device, simulated_model
from dsakit.node.markdown import Comment, FailureRow, FailureSection, SkipGroup, Table
from dsakit.node.pr_vs_base import Run, classify, fingerprint_mismatch, package_dir, run_selection
from dsakit.outcomes import FAILING, signature
from dsakit.output_paths import output_file, writable_dir

DEFAULT_DEVICES = ("sm90", "sm100", "sm103", "gfx942")
VERDICTS = ("regression", "flaky", "pre-existing", "fixed", "not-run", "skip-change", "passed")


@dataclass(frozen=True)
class Verdict:
    test: str
    device: str
    verdict: str
    base: str | None
    pr: str | None
    detail: str = ""
    explanation: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"test": self.test, "device": self.device, "verdict": self.verdict, "base": self.base,
                "pr": self.pr, "detail": self.detail, "explanation": self.explanation}


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

    @property
    def label(self) -> str:
        return f"{self.device} (real)" if self.runs_as == REAL else f"{self.device} (simulated)"


# ---------------------------------------------------------------- inputs


def parse_devices(spec: str | None) -> list[str]:
    if not spec:
        return list(DEFAULT_DEVICES)
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


def _run(check: DeviceCheck, tree_label: str, src: str, pytest_args: Sequence[str], workdir: Path,
         timeout: float | None) -> Run:
    label = f"{check.device}-{tree_label}"
    report = workdir / f"{label}.report.json"
    run = run_selection(label, src, [*pytest_args, f"--dsakit-device={check.runs_as}", f"--dsakit-report={report}"],
                        workdir, timeout=timeout)
    if tree_label == "pr" and report.is_file():  # each test's declared gates, for --must-run
        check.pr_gates = {t: tuple(e.get("gates", ())) for t, e in json.loads(report.read_text()).get("tests", {}).items()}
    return run


def _rerun_failures(check: DeviceCheck, tree_label: str, src: str, run: Run, pytest_args: Sequence[str],
                    workdir: Path, timeout: float | None) -> Run | None:
    failing = [t for t, o in run.tests.items() if o["outcome"] in FAILING]
    if not failing:
        return None
    only = workdir / f"{check.device}-{tree_label}-rerun.txt"
    only.write_text("\n".join(failing) + "\n", encoding="utf-8")
    label = f"{check.device}-{tree_label}-rerun"
    return run_selection(label, src, [*pytest_args, f"--dsakit-device={check.runs_as}",
                                      f"--dsakit-record-only={only}"], workdir, timeout=timeout)


def run_device(check: DeviceCheck, base_src: str, pr_src: str, pytest_args: Sequence[str], workdir: Path,
               timeout: float | None) -> DeviceCheck:
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two trees of one device side by side
        base = pool.submit(_run, check, "base", base_src, pytest_args, workdir, timeout)
        pr = pool.submit(_run, check, "pr", pr_src, pytest_args, workdir, timeout)
        check.base, check.pr = base.result(), pr.result()
    for tree_label, src, run in (("base", base_src, check.base), ("pr", pr_src, check.pr)):
        rerun = _rerun_failures(check, tree_label, src, run, pytest_args, workdir, timeout)
        if rerun is not None:
            check.reruns[tree_label] = rerun
    check.verdicts = verdicts(check)
    return check


# ---------------------------------------------------------------- verdicts


def _flaky(check: DeviceCheck, tree_label: str, nodeid: str) -> bool:
    rerun = check.reruns.get(tree_label)
    again = rerun.tests.get(nodeid) if rerun is not None else None
    return again is not None and again["outcome"] not in FAILING


def _explanation(outcome: dict[str, Any] | None) -> str:
    return str((outcome or {}).get("explained", ""))


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
            verdict = "skip-change"
        elif (b is None or b["outcome"] == "skipped") and (p is None or p["outcome"] == "skipped"):
            verdict = "not-run"
        else:
            verdict = "passed"
        detail = change.detail or (signature(p) if pr_fails and p else "")
        result.append(Verdict(change.nodeid, check.device, verdict, change.base, change.pr, detail,
                              _explanation(p if pr_fails else b)))
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


def _reads_by_key(src: str) -> dict[tuple[str, str], list[Any]]:
    from dsakit.sglang_release import release_from_tree
    from dsakit.upstream.source_scan import scan_runner_reads

    reads: dict[tuple[str, str], list[Any]] = {}
    for read in scan_runner_reads(release_from_tree(src)):
        if not read.soft:
            reads.setdefault((read.path, read.function), []).append(read)
    return reads


def read_changes(base_src: str, pr_src: str, devices: Sequence[str]) -> list[ReadChange]:
    from dsakit.audit.guard_eval import verdicts as guard_verdicts

    profiles = {d: simulated_model(d) for d in devices}

    def fires(guard: str) -> tuple[str, ...]:
        return tuple(v.device for v in guard_verdicts(guard, profiles) if v.fires)

    base, pr = _reads_by_key(base_src), _reads_by_key(pr_src)
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
    from dsakit.sglang_release import release_from_tree

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

    def all_verdicts(self) -> list[Verdict]:
        return [v for c in self.checks for v in c.verdicts]

    def of(self, verdict: str) -> list[Verdict]:
        return [v for v in self.all_verdicts() if v.verdict == verdict]

    def must_run_failures(self) -> dict[str, str]:
        failures: dict[str, str] = {}
        for code in self.must_run:
            ran = [c.label for c in self.checks if c.pr is not None and any(
                code in c.pr_gates.get(t, ()) and o["outcome"] != "skipped" for t, o in c.pr.tests.items())]
            if not ran:
                failures[code] = "no test behind it ran on any device in the PR runs"
        return failures

    def exit_code(self) -> int:
        return 1 if self.of("regression") or self.must_run_failures() else 0

    def label(self, device: str) -> str:
        return next(c.label for c in self.checks if c.device == device)


def _rows(verdicts: list[Verdict], pr_check: PrCheck) -> tuple[FailureRow, ...]:
    return tuple(FailureRow(v.test, pr_check.label(v.device), v.detail + (
        f" — {v.explanation.splitlines()[1].strip()}" if v.explanation.count("\n") >= 1 else "")) for v in verdicts)


def comment(pr_check: PrCheck) -> Comment:
    counts = {k: len(pr_check.of(k)) for k in VERDICTS}
    summary = [f"base `{pr_check.base_src}`, PR `{pr_check.pr_src}` on "
               + ", ".join(c.label for c in pr_check.checks),
               ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no test ran"]
    for code, why in pr_check.must_run_failures().items():
        summary.append(f"must-run gate `{code}`: {why}")
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
    return Comment(
        title="dsakit pr-check",
        summary=summary,
        failures=[
            FailureSection("Regressions (pass on base, fail on the PR)", _rows(pr_check.of("regression"), pr_check)),
            FailureSection("Flaky (the outcome changed on a rerun)", _rows(pr_check.of("flaky"), pr_check)),
            FailureSection("Pre-existing failures (fail on base and PR), by device and signature",
                           _rows(sorted(pr_check.of("pre-existing"), key=lambda v: (v.device, v.detail, v.test)),
                                 pr_check)),
            FailureSection("Fixed by the PR", _rows(pr_check.of("fixed"), pr_check)),
        ],
        lead_tables=[reads, removed] if removed.rows else [reads],
        skips=not_run,
    )


def _not_run_groups(pr_check: PrCheck) -> list[SkipGroup]:
    """Tests that ran on no device in either tree, grouped by their skip reason code."""
    from dsakit.gates.inventory import UNCODED, reasons_from_message

    ran = {v.test for v in pr_check.all_verdicts() if v.verdict != "not-run"}
    groups: dict[str, dict[str, Any]] = {}
    for check in pr_check.checks:
        assert check.pr is not None
        for nodeid, outcome in check.pr.tests.items():
            if outcome["outcome"] != "skipped" or nodeid in ran:
                continue
            reason = str(outcome.get("reason", ""))
            coded = reasons_from_message(reason)
            code = coded[0].code if coded else UNCODED
            group = groups.setdefault(code, {"reason": reason, "entries": 0, "devices": [], "tests": []})
            group["entries"] += 1
            if check.label not in group["devices"]:
                group["devices"].append(check.label)
            if nodeid not in group["tests"]:
                group["tests"].append(nodeid)
    return [SkipGroup(code, g["reason"], g["entries"], ", ".join(g["devices"]), "no device", tuple(sorted(g["tests"])))
            for code, g in sorted(groups.items(), key=lambda kv: -kv[1]["entries"])]


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
        "must_run": {"codes": list(pr_check.must_run), "failed": pr_check.must_run_failures()},
        "exit": pr_check.exit_code(),
    }


# ---------------------------------------------------------------- the command


def run_pr_check(base_src: str, pr_src: str, pytest_args: Sequence[str], *, devices: str | None = None,
                 json_path: str | None = None, markdown_path: str | None = None, must_run: str = "",
                 keep: str | None = None, timeout: float | None = None) -> int:
    from dsakit.gates.table import split_codes, validate_codes
    from dsakit.node.markdown import render

    for src in (base_src, pr_src):
        package_dir(src)  # a path that is not a tree: exit 2 before anything runs
    chosen = parse_devices(devices)
    codes = validate_codes(split_codes(must_run)) if must_run else ()
    json_out = output_file(json_path, "--json") if json_path is not None else None
    markdown_out = output_file(markdown_path, "--markdown") if markdown_path is not None else None
    if keep:
        writable_dir(keep, "--keep")
    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    workdir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="dsakit-pr-check-"))
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        checks = [DeviceCheck(d, runs_as(d)) for d in chosen]
        print(f"dsakit pr-check: base {base_src} vs PR {pr_src} on {', '.join(c.label for c in checks)}", flush=True)
        parallel = max(1, min(len(checks), (os.cpu_count() or 2) // 2))
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [pool.submit(run_device, c, base_src, pr_src, pytest_args, workdir, timeout) for c in checks]
            for future in futures:
                future.result()
        reads = broken_mocks(read_changes(base_src, pr_src, chosen), suites_in(pytest_args), pr_src, chosen)
        result = PrCheck(base_src, pr_src, checks, reads, codes)
        text = render(comment(result))
        print(text)
        if json_out is not None:
            json_out.write_text(json.dumps(as_json(result), indent=2) + "\n")
        if markdown_out is not None:
            markdown_out.write_text(text)
        code = result.exit_code()
        print(f"dsakit pr-check: {len(result.of('regression'))} regression(s), {len(result.of('pre-existing'))} "
              f"pre-existing failure(s), {len(result.of('flaky'))} flaky -> exit {code}", file=sys.stderr)
        return code
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
