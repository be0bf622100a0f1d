"""`dsakit compare --base SRC --pr SRC -- PYTEST_ARGS`: one selection, two SGLang trees, what changed.

Owns: the overlay that puts a tree in front of the installed SGLang, one run per tree (through
`dsakit.compare.recorder`), error signatures, the classification of each test, the
fingerprint check, the table, the JSON, the PR comment (`--markdown`, rendered by
`dsakit.compare.markdown`) and the exit code (1 when something regressed or the PR broke collection; 2 for usage
errors, refused fingerprints and runs that compared nothing). Never imports torch or SGLang here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsakit.errors import UsageError
from dsakit.node.process_group import check_timeout, interruptible, run_in_own_group
from dsakit.output_paths import OutputFile, output_file, writable_dir
from dsakit.node.pytest_invocation import plugin_args
from dsakit.gates.outcomes import FAILING, signature
from dsakit.reasons import Reason

if TYPE_CHECKING:
    from dsakit.compare.markdown import Comment

CLASSES = ("regression", "fixed", "pre-existing", "failing-differently", "skip-change", "added",
           "removed", "unchanged")

# ---------------------------------------------------------------- trees


def package_dir(src: str) -> Path:
    """The `sglang` package directory of a tree (checkout, unpacked wheel, or the package itself)."""
    from dsakit.stack.sglang_release import release_from_tree

    return release_from_tree(src).package_dir


def overlay(src: str, into: Path) -> Path:
    """A directory whose only entry is `sglang` -> the tree's package: put first on PYTHONPATH it
    shadows the installed SGLang and nothing else."""
    target = package_dir(src)
    into.mkdir(parents=True, exist_ok=True)
    link = into / "sglang"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
    return into


# ---------------------------------------------------------------- one run


@dataclass
class Run:
    label: str
    src: str
    returncode: int
    seconds: float
    env: dict[str, Any] = field(default_factory=dict)
    sglang: dict[str, Any] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    crashed: str | None = None
    output_tail: str = ""


def _crash_message(output: str, returncode: int = 0) -> str:
    for pattern in (r"Fatal Python error: .*", r"Segmentation fault.*", r"Aborted.*",
                    r"RuntimeError: CUDA error: .*", r"worker '[^']*' crashed.*"):
        found = re.search(pattern, output)
        if found:
            return found.group(0)
    if returncode < 0:
        import signal

        try:
            return f"the test process was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"the test process was killed by signal {-returncode}"
    return "the test process died"


def load_record(path: Path, label: str, src: str, returncode: int, seconds: float, output: str) -> Run:
    run = Run(label, src, returncode, seconds, output_tail="\n".join(output.splitlines()[-20:]))
    started: list[str] = []
    ended = False
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            kind = record.get("kind")
            if kind == "env":
                run.env, run.sglang = record["fingerprint"], record["sglang"]
            elif kind == "start":
                started.append(record["nodeid"])
            elif kind == "test":
                run.tests[record["nodeid"]] = record
            elif kind == "end":
                ended = True
    if not ended:
        run.crashed = _crash_message(output, returncode)
        for nodeid in started:  # the test(s) in flight when the process died
            if nodeid not in run.tests:
                run.tests[nodeid] = {"nodeid": nodeid, "outcome": "crashed", "message": run.crashed,
                                     "frame": ""}
    return run


def run_selection(label: str, src: str, pytest_args: Sequence[str], workdir: Path, *,
                  timeout: float | None = None, env_overrides: Mapping[str, str] | None = None) -> Run:
    tree = overlay(src, workdir / f"{label}-overlay")
    record = workdir / f"{label}.jsonl"
    env = {**os.environ, **(env_overrides or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "dsakit.compare.recorder", f"--dsakit-record={record}",
               "-p", "no:cacheprovider", "-q", *pytest_args]
    tic = time.perf_counter()
    # its own process group: a timeout or an interrupt ends the run's xdist workers and children too
    done = run_in_own_group(command, env=env, timeout=timeout)
    code, output = (124, f"{done.output}\nFatal Python error: timed out") if done.timed_out else (done.returncode, done.output)
    run = load_record(record, label, src, code, time.perf_counter() - tic, output)
    output_file(workdir / f"{label}.log", "--keep").write_text(output)
    if not run.env:
        raise UsageError(f"the {label} run ({src}) recorded nothing (pytest exit {code}); last output:\n"
                         + run.output_tail)
    return run


# ---------------------------------------------------------------- classification


@dataclass(frozen=True)
class Change:
    nodeid: str
    kind: str
    base: str | None
    pr: str | None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"test": self.nodeid, "class": self.kind, "base": self.base, "pr": self.pr, "detail": self.detail}


# a path inside a run's overlay (`<workdir>/<label>-overlay/sglang/...`) reads as its path in the
# tree: the same skip in the base and the PR run names two overlays
_OVERLAY_PATH = re.compile(r"[^\s'\"(:]*-overlay/(?=sglang/)")


def in_tree(text: str) -> str:
    """`text` with every path inside a run's overlay read as its path in the SGLang tree."""
    return _OVERLAY_PATH.sub("", text)


def skip_reason(outcome: dict[str, Any]) -> str:
    """A skipped outcome's reason on one line, paths inside an overlay read as paths in the tree."""
    return in_tree(re.sub(r"\s+", " ", str(outcome.get("reason", "")))).strip()


def _skip_key(outcome: dict[str, Any]) -> str:
    """The skip reason without line numbers: a PR that moves the skipping call is the same skip."""
    return re.sub(r"\.py:\d+", ".py", skip_reason(outcome))


# Classes: regression (passed or skipped in base, failed / error / crashed in the PR), fixed (failed
# in base, passes in the PR), pre-existing (fails in both with the same signature), failing-differently
# (fails in both, different signatures), skip-change (skipped in one run only, or for another
# reason), added / removed (collected in one run only), unchanged.
def classify(base: dict[str, dict[str, Any]], pr: dict[str, dict[str, Any]]) -> list[Change]:
    changes: list[Change] = []
    for nodeid in list(dict.fromkeys([*base, *pr])):
        b, p = base.get(nodeid), pr.get(nodeid)
        if b is None:
            assert p is not None
            changes.append(Change(nodeid, "added", None, p["outcome"], _describe(p)))
            continue
        if p is None:
            changes.append(Change(nodeid, "removed", b["outcome"], None, _describe(b)))
            continue
        bo, po = b["outcome"], p["outcome"]
        b_fail, p_fail = bo in FAILING, po in FAILING
        if p_fail and not b_fail:
            was = f" (was skipped: {skip_reason(b)})" if bo == "skipped" else ""
            changes.append(Change(nodeid, "regression", bo, po, signature(p) + was))
        elif b_fail and not p_fail:
            detail = f"was: {signature(b)}" + (f"; now skipped: {skip_reason(p)}" if po == "skipped" else "")
            changes.append(Change(nodeid, "fixed" if po != "skipped" else "skip-change", bo, po, detail))
        elif b_fail and p_fail:
            sb, sp = signature(b), signature(p)
            if sb == sp:
                changes.append(Change(nodeid, "pre-existing", bo, po, sp))
            else:
                changes.append(Change(nodeid, "failing-differently", bo, po, f"base: {sb} | pr: {sp}"))
        elif bo == "skipped" or po == "skipped":
            if bo != po:
                changes.append(Change(nodeid, "skip-change", bo, po, skip_reason(b if bo == "skipped" else p)))
            elif _skip_key(b) != _skip_key(p):
                changes.append(Change(nodeid, "skip-change", bo, po,
                                      f"base: {skip_reason(b)} | pr: {skip_reason(p)}"))
            else:
                changes.append(Change(nodeid, "unchanged", bo, po))
        else:
            changes.append(Change(nodeid, "unchanged", bo, po))
    return changes


def _describe(outcome: dict[str, Any]) -> str:
    if outcome["outcome"] in FAILING:
        return signature(outcome)
    if outcome["outcome"] == "skipped":
        return skip_reason(outcome)
    return ""


def fingerprint_mismatch(base: Run, pr: Run) -> list[str]:
    diffs: list[str] = []
    for key in ("python", "implementation", "device"):
        if base.env.get(key) != pr.env.get(key):
            diffs.append(f"{key}: base {base.env.get(key)!r} vs pr {pr.env.get(key)!r}")
    bp, pp = base.env.get("packages", {}), pr.env.get("packages", {})
    for name in sorted(set(bp) | set(pp)):
        if bp.get(name) != pp.get(name):
            diffs.append(f"{name}: base {bp.get(name)} vs pr {pp.get(name)}")
    return diffs


# ---------------------------------------------------------------- report


def format_table(base: Run, pr: Run, changes: list[Change], mismatch: list[str]) -> list[str]:
    counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in CLASSES}
    lines = [
        f"dsakit compare: base = SGLang {base.sglang.get('version')} ({base.src}), "
        f"pr = SGLang {pr.sglang.get('version')} ({pr.src})",
        f"environment: python {base.env.get('python')}, torch {base.env.get('packages', {}).get('torch')}, "
        f"device {base.env.get('device')}"
        + ("; MISMATCH: " + "; ".join(mismatch) if mismatch else "; same fingerprint in both runs"),
        f"runs: base exit {base.returncode} in {base.seconds:.1f} s, pr exit {pr.returncode} in {pr.seconds:.1f} s",
    ]
    for run in (base, pr):
        if run.crashed:
            lines.append(f"  {run.label} run did not finish: {run.crashed}")
    lines.append("")
    lines.append("  ".join(f"{kind} {counts[kind]}" for kind in CLASSES))
    shown = [c for c in changes if c.kind != "unchanged"]
    if shown:
        width = min(max(len(c.nodeid) for c in shown), 90)
        lines.append("")
        lines.append(f"{'class':20s} {'test':{width}s} {'base':8s} {'pr':8s} detail")
        order = {kind: i for i, kind in enumerate(CLASSES)}
        for c in sorted(shown, key=lambda c: (order[c.kind], c.nodeid)):
            lines.append(f"{c.kind:20s} {c.nodeid:{width}s} {c.base or '-':8s} {c.pr or '-':8s} {c.detail[:160]}")
    return lines


def comment(base: Run, pr: Run, changes: list[Change], mismatch: list[str]) -> Comment:
    """The PR comment: regressions first, then failures that changed or stayed (with signatures),
    fixes, and the PR run's skips by reason code (covered when the base run ran the test)."""
    from dsakit.gates.inventory import reasons_from_message
    from dsakit.gates.skip_causes import UNCODED, explain, group_causes, why_paragraph
    from dsakit.compare.markdown import NOT_COVERED, Comment, FailureRow, FailureSection, SkipGroup

    counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in CLASSES}
    where = {"regression": "PR", "failing-differently": "base and PR", "pre-existing": "base and PR",
             "fixed": "base (passes in the PR)"}
    titles = {"regression": "Regressions", "failing-differently": "Failing differently",
              "pre-existing": "Pre-existing failures", "fixed": "Fixed"}
    sections = [FailureSection(titles[kind], tuple(FailureRow(c.nodeid, where[kind], c.detail)
                                                  for c in changes if c.kind == kind))
                for kind in ("regression", "failing-differently", "pre-existing", "fixed")]
    release = pr.sglang.get("version")
    causes = []
    for nodeid, outcome in pr.tests.items():
        if outcome["outcome"] == "skipped":
            message = skip_reason(outcome)
            # both runs share the device: a kernel-launch skip's cause names no other one
            causes.append((nodeid, explain(message, reasons_from_message(message), release, "this device")))
    skips = []
    groups = group_causes(causes)
    for group in groups:
        tests = group.tests
        ran_in_base = [t for t in tests if base.tests.get(t, {}).get("outcome") not in (None, "skipped")]
        uncovered = tuple(t for t in tests if t not in ran_in_base)
        covered = f"base run ({len(ran_in_base)} of {len(tests)})" if ran_in_base else NOT_COVERED
        skips.append(SkipGroup(group.code, group.reason, group.count, f"PR run (SGLang {release})",
                               covered, uncovered, group.runs_on_text(),
                               tuple(group.messages.most_common()) if group.code == UNCODED else ()))
    summary = [
        f"base: SGLang {base.sglang.get('version')} (`{base.src}`), PR: SGLang {pr.sglang.get('version')} (`{pr.src}`)",
        f"device {base.env.get('device')}; "
        + ("environment MISMATCH: " + "; ".join(mismatch) if mismatch else "same environment fingerprint"),
        ", ".join(f"{kind} {counts[kind]}" for kind in CLASSES),
        *(f"{run.label} run did not finish: {run.crashed}" for run in (base, pr) if run.crashed),
        *([why_paragraph(groups, "the PR run")] if groups else []),
    ]
    return Comment("dsakit compare: PR vs base", summary, sections, skips)


# pytest's own exit codes (pytest.ExitCode) that mean a run compared nothing
_UNUSABLE = {2: "was interrupted (collection errors or Ctrl-C)", 3: "hit a pytest internal error",
             4: "was a pytest usage error (a missing path or a bad option)",
             5: "collected no tests"}


def unusable_runs(base: Run, pr: Run) -> tuple[list[str], bool]:
    """Sentences for runs whose pytest exit code means nothing was compared, and whether the PR
    alone is at fault (its collection broke while the base's did not: a regression, exit 1)."""
    lines = [f"the {run.label} run ({run.src}) {_UNUSABLE[run.returncode]} (pytest exit {run.returncode})"
             for run in (base, pr) if run.crashed is None and run.returncode in _UNUSABLE]
    pr_only = bool(lines) and base.returncode not in _UNUSABLE and pr.returncode in (2, 3)
    return lines, pr_only


def run_compare(base_src: str, pr_src: str, pytest_args: Sequence[str], *, json_path: str | None = None,
                allow_env_mismatch: bool = False, keep: str | None = None,
                timeout: float | None = None, markdown_path: str | None = None) -> int:
    for src in (base_src, pr_src):
        package_dir(src)  # UsageError now, before any run, for a path that is not a tree
    json_out = output_file(json_path, "--json") if json_path is not None else None
    markdown_out = output_file(markdown_path, "--markdown") if markdown_path is not None else None
    kept = writable_dir(keep, "--keep") if keep is not None else None
    check_timeout(timeout)
    with interruptible():  # Ctrl-C or SIGTERM: both runs end, then the workdir goes (unless --keep)
        workdir = kept if kept is not None else Path(tempfile.mkdtemp(prefix="dsakit-compare-"))
        try:
            workdir.mkdir(parents=True, exist_ok=True)
            return _compare_in(workdir, base_src, pr_src, pytest_args, json_out=json_out,
                               allow_env_mismatch=allow_env_mismatch, keep=kept is not None, timeout=timeout,
                               markdown_out=markdown_out)
        finally:
            if kept is None:
                shutil.rmtree(workdir, ignore_errors=True)


def _compare_in(workdir: Path, base_src: str, pr_src: str, pytest_args: Sequence[str], *,
                json_out: OutputFile | None, allow_env_mismatch: bool, keep: bool,
                timeout: float | None, markdown_out: OutputFile | None) -> int:
    base = run_selection("base", base_src, pytest_args, workdir, timeout=timeout)
    pr = run_selection("pr", pr_src, pytest_args, workdir, timeout=timeout)
    mismatch = fingerprint_mismatch(base, pr)
    changes = classify(base.tests, pr.tests)
    print("\n".join(format_table(base, pr, changes, mismatch)))
    unusable, pr_only = unusable_runs(base, pr)
    if json_out is not None:
        data = {
            "base": {"src": base_src, "sglang": base.sglang, "exit": base.returncode, "crashed": base.crashed},
            "pr": {"src": pr_src, "sglang": pr.sglang, "exit": pr.returncode, "crashed": pr.crashed},
            "environment": base.env, "environment_mismatch": mismatch, "pytest_args": list(pytest_args),
            "counts": {kind: sum(1 for c in changes if c.kind == kind) for kind in CLASSES},
            "unusable_runs": unusable,
            "tests": [c.as_dict() for c in changes],
            "logs": str(workdir) if keep else None,
        }
        json_out.write_json(data)
    if markdown_out is not None:
        from dsakit.compare.markdown import render

        markdown_out.write_text(render(comment(base, pr, changes, mismatch)))
    if keep:
        print(f"(logs and per-test records: {workdir})")
    if unusable:
        for line in unusable:
            print(f"dsakit compare: {line}", file=sys.stderr)
        for run in (base, pr):
            if run.returncode in _UNUSABLE:
                print(f"--- last output of the {run.label} run:\n{run.output_tail}", file=sys.stderr)
        if pr_only:
            print("dsakit compare: the PR breaks the selection: a regression", file=sys.stderr)
            return 1
        print("dsakit compare: nothing was compared; fix the selection (pytest args after --) or "
              "the trees and run again", file=sys.stderr)
        return 2
    if mismatch and not allow_env_mismatch:
        print("dsakit compare: refused: the two runs do not share the environment fingerprint "
              "(pass --allow-env-mismatch to classify anyway)", file=sys.stderr)
        return 2
    return 1 if any(c.kind == "regression" for c in changes) else 0
