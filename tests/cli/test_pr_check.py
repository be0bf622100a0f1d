"""`dsakit pr-check`: base vs PR on several devices, real SGLang trees.

The base is the installed SGLang; the PR is the same tree with one file changed (a shadow tree of
links, so nothing is copied but that file): `DeepseekSparseAttnBackend.__init__` reads a new
`model_runner` attribute in its HIP branch only. The suite is shaped like SGLang's own indexer test
(a hand-written runner that lacks `max_running_requests`). Each run imports SGLang: subprocesses.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.simulation.test_whole_run import HAS_SGLANG, HAS_TORCH, SGLANG_SHAPED

pytestmark = pytest.mark.skipif(not (HAS_SGLANG and HAS_TORCH),
                                reason="[module:sglang] the PR gate runs SGLang's backends")

DSA = Path("srt/layers/attention/dsa_backend.py")
STRICT_SUITE = """
import dsakit
from dsakit.backends.harness import dsa_backend


def test_full_mock():
    with dsa_backend(dsakit.MockModelRunner("target")):
        pass


def test_drifted_mock():
    with dsa_backend(dsakit.MockModelRunner("target", omit=["max_running_requests"])):
        pass
"""
TWIN = "\n    def test_backend_builds_again(self):\n        DeepseekSparseAttnBackend(MockModelRunner())\n"
HIP_BRANCH = "        if _is_hip:\n            max_bs = model_runner.req_to_token_pool.size\n"
NEW_READ = "            self.aiter_num_kv_splits = model_runner.aiter_num_kv_splits\n"
# The hand-written runner with the page size SGLang's HIP path requires on AMD (its legacy DSA
# pools assert page_size == 1): it builds on the base tree on gfx942 too, so only the PR's read
# fails there, and the gfx942 base run has nothing to rerun (one SGLang import, ~14 CPU-s, fewer)
UPSTREAM = (SGLANG_SHAPED.replace("page_size=64", "page_size=1 if torch.version.hip else 64")
            .replace("self.page_size = 64", "self.page_size = 1 if torch.version.hip else 64") + TWIN)


def _installed_package() -> Path:
    from dsakit.stack.sglang_release import installed_release

    return installed_release().package_dir


def _shadow_tree(package: Path, into: Path, changed: Path, text: str) -> Path:
    """`into/sglang`: links to every entry of the real package, real folders only along `changed`."""
    target = into / "sglang"
    parts = changed.parts
    source, here = package, target
    for depth in range(len(parts)):
        here.mkdir(parents=True)
        for entry in source.iterdir():
            if entry.name != parts[depth]:
                (here / entry.name).symlink_to(entry)
        source, here = source / parts[depth], here / parts[depth]
    here.write_text(text, encoding="utf-8")
    return into


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    package = _installed_package()
    original = (package / DSA).read_text(encoding="utf-8")
    if original.count(HIP_BRANCH) != 1:
        pytest.skip("[sglang-source] the HIP branch of DeepseekSparseAttnBackend.__init__ moved in this release")
    pr = _shadow_tree(package, tmp_path / "pr", DSA, original.replace(HIP_BRANCH, HIP_BRANCH + NEW_READ))
    return package.parent, pr


def test_a_pr_read_on_amd_is_a_regression_and_the_b300_gap_pre_existing(
        pytester: pytest.Pytester, trees: tuple[Path, Path], tmp_path: Path) -> None:
    base, pr = trees
    # SGLang's test lives outside the rootdir (a checkout beside the suite): pytest would name it ''
    upstream = tmp_path / "upstream" / "test_indexer_shape.py"
    upstream.parent.mkdir()
    assert UPSTREAM.count("1 if torch.version.hip else 64") == 2, "the suite's page sizes moved"
    upstream.write_text(UPSTREAM, encoding="utf-8")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_strict=STRICT_SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "dsakit", "pr-check", "--base", str(base), "--pr", str(pr), "--devices", "sm103,gfx942",
         "--json", "check.json", "--markdown", "check.md", "--", str(upstream), "test_strict.py"],
        capture_output=True, text=True, timeout=900, cwd=pytester.path)
    assert done.returncode == 1, done.stdout + done.stderr  # the regression fails the gate
    data = json.loads((pytester.path / "check.json").read_text())
    verdicts = {(v["test"].split("::")[-1], v["device"]): v for v in data["verdicts"]}
    # the strict mock builds on base everywhere; the PR's HIP-only read breaks it on gfx942 only
    assert verdicts[("test_full_mock", "gfx942")]["verdict"] == "regression"
    assert "aiter_num_kv_splits" in verdicts[("test_full_mock", "gfx942")]["detail"]
    assert verdicts[("test_full_mock", "sm103")]["verdict"] == "not-run"  # [simulated-kernel-launch] on both
    # SGLang's hand-written runner (AMD's page size) builds on base and breaks on the same read
    assert verdicts[("test_backend_builds", "gfx942")]["verdict"] == "regression"
    assert "aiter_num_kv_splits" in verdicts[("test_backend_builds", "gfx942")]["detail"]
    # the hand-written mock's B300 gap fails on both trees, explained
    built = "test_backend_builds"
    assert verdicts[(built, "sm103")]["verdict"] == "pre-existing"
    assert verdicts[(built, "sm103")]["test"].endswith(
        "upstream/test_indexer_shape.py::TestBackendFromAHandWrittenRunner::test_backend_builds")  # pytest: "::Test..."
    assert "max_running_requests" in verdicts[(built, "sm103")]["detail"]
    assert "fails on sm100, sm103, sm120" in verdicts[(built, "sm103")]["explanation"]
    assert verdicts[("test_drifted_mock", "sm103")]["verdict"] == "pre-existing"
    assert data["counts"]["flaky"] == 0 and data["counts"]["skip-change"] == 0, data["counts"]
    added = [r for r in data["reads"] if r["kind"] == "added"]
    assert [(r["path"], r["fires_on"]) for r in added] == [("aiter_num_kv_splits", ["gfx942"])]
    assert any("MockModelRunner" in b and "gfx942" in b for b in added[0]["breaks"]), added  # the audit's
    # and the regressions that name it: the strict mock the audit cannot see through a harness
    assert any(b.startswith("dsakit.MockModelRunner(role=target) in test_strict.py on gfx942 (")
               for b in added[0]["breaks"]), added
    md = (pytester.path / "check.md").read_text()
    order = [md.index(h) for h in ("### Regressions", "### model_runner reads the PR adds", "### Pre-existing failures",
                                   "### Skips by reason code")]
    assert order == sorted(order), "regressions, the new reads, pre-existing failures, then skips"
    # one row per device and signature: the two tests of the B300 gap share one row
    assert md.count("'MockModelRunner' object has no attribute 'max_running_requests'") == 1
    assert verdicts[("test_backend_builds_again", "sm103")]["verdict"] == "pre-existing"
    # the exit code is the result's (only pre-existing failures -> 0: the next test)
    assert data["exit"] == 1 and "-> exit 1" in done.stderr


def test_only_pre_existing_failures_are_exit_0_and_counted_in_the_comment() -> None:
    """The same tree twice, as the end-to-end run above records it: failures on both sides only."""
    from dsakit.compare.markdown import render
    from dsakit.compare.pr_vs_base import Run
    from dsakit.compare.pr_check import DeviceCheck, PrCheck, comment, verdicts

    gap = {"outcome": "failed", "message": "AttributeError: 'MockModelRunner' object has no attribute "
           "'max_running_requests'", "frame": "sglang/srt/layers/attention/dsa_backend.py:120"}
    tests = {"u.py::T::test_backend_builds": gap, "u.py::T::test_backend_builds_again": gap,
             "u.py::T::test_ok": {"outcome": "passed"}}
    check = DeviceCheck("sm103", "sm103")
    check.base, check.pr = Run("base", "b", 1, 1.0, tests=tests), Run("pr", "b", 1, 1.0, tests=dict(tests))
    check.verdicts = verdicts(check)
    result = PrCheck("b", "b", [check], [])
    assert [v.verdict for v in check.verdicts] == ["pre-existing", "pre-existing", "passed"]
    assert result.exit_code() == 0
    assert "test x device: 2 pre-existing, 1 passed" in render(comment(result))
    # a regression beside them is exit 1
    check.pr.tests["u.py::T::test_ok"] = gap
    check.verdicts = verdicts(check)
    assert result.exit_code() == 1


def test_bad_input_is_exit_2(tmp_path: Path) -> None:
    for args, message in ((["--base", str(tmp_path), "--pr", str(tmp_path)], "is not an SGLang source tree"),
                          (["--base", str(_installed_package()), "--pr", str(_installed_package()),
                            "--devices", "sm999"], "unknown dsakit device 'sm999'"),
                          (["--base", str(_installed_package()), "--pr", str(_installed_package()),
                            "--timeout", "inf"], "got inf; for no limit leave --timeout out")):
        done = subprocess.run([sys.executable, "-m", "dsakit", "pr-check", *args, "--", "x.py"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stdout + done.stderr
        assert message in done.stderr


def test_skips_no_device_ran_are_grouped_by_their_reason_code() -> None:
    from dsakit.compare.pr_vs_base import Run
    from dsakit.compare.pr_check import DeviceCheck, PrCheck, _not_run_groups, verdicts

    skipped = {"outcome": "skipped", "reason": "[fa3] needs FA3 (/k/sm103-pr-overlay/sglang/a.py:3) | [cuda] needs CUDA"}
    plain = {"outcome": "skipped", "reason": "a suite's own skip"}
    check = DeviceCheck("sm103", "sm103")
    check.base = Run("base", "b", 0, 1.0, tests={"t.py::a": skipped, "t.py::b": plain})
    check.pr = Run("pr", "p", 0, 1.0, tests={"t.py::a": skipped, "t.py::b": plain})
    check.verdicts = verdicts(check)
    groups = _not_run_groups(PrCheck("b", "p", [check], []))
    assert [(g.code, g.uncovered, g.skipped_on) for g in groups] == [
        ("fa3", ("t.py::a",), "sm103 (simulated)"), ("uncoded", ("t.py::b",), "sm103 (simulated)")]
    assert groups[0].reason == "needs FA3 (sglang/a.py:3)"  # its own sentence, the path in the tree


def test_a_file_outside_the_rootdir_keeps_its_path_in_the_ids_and_the_rerun_finds_it(
        pytester: pytest.Pytester, tmp_path: Path) -> None:
    outside = tmp_path / "upstream" / "test_outside.py"
    outside.parent.mkdir()
    outside.write_text("def test_a():\n    assert False\n\n\ndef test_b():\n    pass\n", encoding="utf-8")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_inside="def test_a():\n    pass\n")
    record = pytester.path / "rec.jsonl"
    args = ("-p", "no:cacheprovider", "-p", "dsakit.compare.recorder", f"--dsakit-record={record}",
            str(outside), "test_inside.py")
    pytester.runpytest_subprocess(*args).assert_outcomes(failed=1, passed=2)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    ids = sorted({r["nodeid"] for r in lines if r["kind"] in ("start", "test")})
    assert ids == sorted(["test_inside.py::test_a", *(f"{p}::test_{n}" for p in {
        r["nodeid"].split("::")[0] for r in lines if r.get("pytest_nodeid")} for n in "ab")]), ids
    located = next(r["nodeid"] for r in lines if r["kind"] == "test" and r["outcome"] == "failed")
    assert located.endswith("upstream/test_outside.py::test_a"), located  # pytest alone: '::test_a'
    (pytester.path / "only.txt").write_text(located + "\n")
    pytester.runpytest_subprocess(*args, "--dsakit-record-only=only.txt").assert_outcomes(failed=1)


def test_a_skip_naming_the_two_runs_overlays_or_another_line_is_the_same_skip() -> None:
    from dsakit.compare.pr_vs_base import classify

    def skip(label: str) -> dict[str, dict[str, str]]:
        return {"t.py::a": {"outcome": "skipped", "reason": "[simulated-kernel-launch] x (called at "
                            f"/keep/sm90-{label}-overlay/sglang/srt/a.py:1) would launch a kernel"}}

    assert [c.kind for c in classify(skip("base"), skip("pr"))] == ["unchanged"]
    moved = {"t.py::a": {**skip("pr")["t.py::a"], "reason": skip("pr")["t.py::a"]["reason"].replace(":1)", ":3)")}}
    assert [c.kind for c in classify(skip("base"), moved)] == ["unchanged"]  # the PR added two lines above
    other = {"t.py::a": {"outcome": "skipped", "reason": "[cuda] needs CUDA"}}
    assert [c.kind for c in classify(skip("base"), other)] == ["skip-change"]


def test_runs_in_flight_follow_the_cpus_and_the_xdist_workers_of_each_run() -> None:
    from dsakit.compare.pr_check import parallel_runs

    assert parallel_runs(8, [], cpus=16) == 8
    assert parallel_runs(8, ["-n", "4"], cpus=16) == 4
    assert parallel_runs(8, ["--numprocesses=8"], cpus=16) == 2  # a device's two trees side by side
    assert parallel_runs(8, ["-n", "auto"], cpus=16) == 2
    assert parallel_runs(8, [], cpus=2) == 2
    assert parallel_runs(1, [], cpus=16) == 1


def test_a_run_that_compared_nothing_is_exit_2_and_a_pr_only_collection_break_exit_1() -> None:
    from dsakit.compare.pr_vs_base import Run
    from dsakit.compare.pr_check import DeviceCheck, PrCheck, verdicts

    def check(base_exit: int, pr_exit: int) -> PrCheck:
        one = DeviceCheck("sm103", "sm103")
        one.base, one.pr = Run("base", "b", base_exit, 1.0), Run("pr", "p", pr_exit, 1.0)
        one.verdicts = verdicts(one)
        return PrCheck("b", "p", [one], [])

    assert check(2, 2).exit_code() == 2  # the selection does not collect on either tree
    assert check(5, 5).exit_code() == 2  # nothing collected
    assert check(0, 2).exit_code() == 1  # the PR breaks collection
    assert check(0, 0).exit_code() == 0


def test_a_failure_section_counts_test_x_device_beside_its_rows() -> None:
    from dsakit.compare.markdown import render
    from dsakit.compare.pr_vs_base import Run
    from dsakit.compare.pr_check import DeviceCheck, PrCheck, comment, verdicts

    passed, gap = {"outcome": "passed"}, {"outcome": "failed", "longrepr": "E   AttributeError: gap"}
    checks = []
    for device in ("sm100", "sm103"):
        check = DeviceCheck(device, device)
        check.base = Run("base", "b", 0, 1.0, tests={"t.py::a": passed, "t.py::b": passed, "t.py::c": passed})
        check.pr = Run("pr", "p", 1, 1.0, tests={"t.py::a": gap, "t.py::b": gap, "t.py::c": passed})
        check.verdicts = verdicts(check)
        checks.append(check)
    md = render(comment(PrCheck("b", "p", checks, [])))
    section = md[md.index("### Regressions"):md.index("### model_runner reads")]
    assert "4 test x device in 2 row(s) (one per device and signature)" in section, section
    assert section.count("| `t.py::a`, `t.py::b` |") == 2, section  # one row per device


# ---------------------------------------------------------------- interrupted: nothing left behind

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_pr_check_ends_its_runs_and_removes_its_workdir(sleepers: Any, sig: signal.Signals,
                                                                       tmp_path: Path) -> None:
    """The signal goes to the pr-check process alone (a CI cancel, `kill PID`), not to its runs: it
    ends both runs (and what they started), removes its workdir and exits 143 / 130. Before, SIGTERM
    killed it and left the workdir and both runs behind; SIGINT waited for the runs to finish."""
    package = _installed_package()
    base = package.parent
    pr = tmp_path / "pr" / "sglang"  # the same files under another tree (the same tree is refused)
    pr.mkdir(parents=True)
    for entry in package.iterdir():
        (pr / entry.name).symlink_to(entry)

    def workdir_exists() -> None:
        assert list(sleepers.scratch.glob("dsakit-pr-check-*")), "the workdir should exist while the runs go"

    done = sleepers.interrupt([sys.executable, "-m", "dsakit", "pr-check", "--base", str(base), "--pr", str(pr.parent),
                               "--devices", "sm90", "--", str(sleepers.suite)],
                              cwd=sleepers.suite.parent.parent, sig=sig, while_running=workdir_exists, timeout=60)
    assert done.returncode == (143 if sig == signal.SIGTERM else 130), done.output
    assert list(sleepers.scratch.iterdir()) == [], done.output
    assert done.alive == [], done.output
