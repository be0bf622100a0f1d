"""Every skip explained (issue 36): the inventory counts what pytest counts (subtests too), SGLang's own
skip messages are classified into dsakit's capability codes, unmatched messages are listed verbatim,
and a "why these skipped" paragraph appears in the terminal summary and the `--dsakit-report`.

The suites below are unittest classes with `self.subTest(...)` and `self.skipTest(...)`, shaped like
SGLang's `test_dsa.py`, with the messages of SGLang's attention kit copied as test data."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())
pytestmark = pytest.mark.usefixtures("no_kernel_modules")

# SGLang's kit (sglang/test/kits/attention_unittest/attention_methods/dsa_attention.py) as it words
# them on a B300, every release 0.5.17-0.5.23
FA3 = "DSA decode impl `fa3` not supported: fa3 requires SM9.x (Hopper), got SM10.x"
TRTLLM = "DSA decode impl `trtllm` not supported: trtllm requires SM10.0 (Blackwell B200), got SM10.3"
AITER = "DSA decode impl `aiter` not supported: aiter is HIP/AMD only"
FP8_DECODE = ("DSA decode impl `{}` does not support FP8 KV cache (only `flashmla_kv` / `flashmla_auto` read FP8 K "
              "directly).")
DENSE = "DSA MHA_ONE_SHOT dense fallback is not selected here."
UNAVAILABLE = "dsa backend is not available: No module named 'sgl_kernel.flash_mla'"

SUITE = f"""
import unittest

import pytest

SKIPS = {{"fa3": {FA3!r}, "trtllm": {TRTLLM!r}, "aiter": {AITER!r}}}


class TestDSAImpls(unittest.TestCase):
    def test_decode_impl_variants(self):
        for impl in ("flashmla_kv", "fa3", "trtllm", "aiter"):
            with self.subTest(impl=impl):
                if impl in SKIPS:
                    self.skipTest(SKIPS[impl])

    def test_fp8_decode(self):
        for impl in ("flashmla_sparse", "flashmla_kv", "fa3"):
            with self.subTest(impl=impl):
                if impl != "flashmla_kv":
                    self.skipTest({FP8_DECODE!r}.format(impl))

    def test_dense_fallback(self):
        with self.subTest(case="one_shot"):
            self.skipTest({DENSE!r})
        with self.subTest(case="layout"):
            self.skipTest({UNAVAILABLE!r})

    def test_whole_test_skips(self):
        self.skipTest({AITER!r})


def test_plain():
    pytest.skip("a suite's own reason")
"""


def _inventory(text: str) -> str:
    return text.split("dsakit skip inventory")[1].split("short test summary")[0]


def test_the_inventory_counts_subtest_skips_as_pytest_does_and_explains_each(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dsa_like=SUITE)
    report = pytester.path / "sm103.json"
    result = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=sm103", "-v",
                                f"--dsakit-report={report}")
    skipped = result.parseoutcomes()["skipped"]
    assert skipped == 9  # 7 subtests, a whole test, a plain pytest.skip
    inventory = _inventory(result.stdout.str())
    assert f"{skipped} skips, each in one group below (pytest counts {skipped} skipped)" in inventory
    counts = {code: int(n) for n, code in re.findall(r"^ *(\d+) skipped  \[([^\]]+)\]", inventory, re.M)}
    assert counts == {"uncoded": 3, "aiter": 2, "fp8-kv": 2, "fa3": 1, "trtllm-dsa-decode": 1}
    assert sum(counts.values()) == skipped
    # SGLang's messages under dsakit's codes, with where each runs (the device table's entries)
    result.stdout.fnmatch_lines([
        f"   2 skipped  [[]aiter[]] {AITER}", "           runs on: gfx942, gfx950",
        f"   2 skipped  [[]fp8-kv[]] {FP8_DECODE.format('flashmla_sparse')}",
        "           runs on: no device: SGLang's suite never runs this combination",
        f"   1 skipped  [[]fa3[]] {FA3}", "           runs on: sm90",
        f"   1 skipped  [[]trtllm-dsa-decode[]] {TRTLLM}", "           runs on: sm100",
    ])
    # what no pattern matches: one group, every message verbatim; -v names every test (subtests too)
    result.stdout.fnmatch_lines([
        "   3 skipped  [[]uncoded[]] *", "           runs on: unknown",
        f"             1x {DENSE}", "               test_dsa_like.py::TestDSAImpls::test_dense_fallback (case='one_shot')",
        f"             1x {UNAVAILABLE}", "               test_dsa_like.py::TestDSAImpls::test_dense_fallback (case='layout')",
        "             1x a suite's own reason", "               test_dsa_like.py::test_plain",
    ])
    assert "           test_dsa_like.py::TestDSAImpls::test_decode_impl_variants (impl='fa3')" in inventory
    why = ("why these skipped on sm103 (simulated): not explained (3: "
           f"'{DENSE}', '{UNAVAILABLE}', 'a suite's own reason'); AITER is AMD-only (2); "
           "FP8 KV decode needs flashmla_kv (2); FA3 is SM 9.x only (1); "
           "TensorRT-LLM DSA decode covers SM 10.0, not 10.3 (1)")
    assert why in inventory.splitlines()
    # the report: the same total, groups and paragraph; each subtest with its own record and cause
    data = json.loads(report.read_text())
    assert data["format_version"] == 3 and data["device"]["table_key"] == "sm103"
    assert data["skips"]["total"] == skipped and data["skips"]["why"] == why
    assert {g["code"]: g["count"] for g in data["skips"]["groups"]} == counts
    uncoded = next(g for g in data["skips"]["groups"] if g["code"] == "uncoded")
    assert [m["message"] for m in uncoded["messages"]] == [DENSE, UNAVAILABLE, "a suite's own reason"]
    trtllm = data["subtests"]["test_dsa_like.py::TestDSAImpls::test_decode_impl_variants (impl='trtllm')"]
    assert trtllm["test"] == "test_dsa_like.py::TestDSAImpls::test_decode_impl_variants"
    assert trtllm["outcome"] == "skipped"
    assert trtllm["reasons"] == [{"code": "trtllm-dsa-decode", "message": TRTLLM, "words":
                                  "TensorRT-LLM DSA decode covers SM 10.0, not 10.3", "runs_on": ["sm100"],
                                  "note": "", "also": []}]
    assert data["subtests"]["test_dsa_like.py::TestDSAImpls::test_decode_impl_variants (impl='flashmla_kv')"][
        "outcome"] == "passed"
    assert data["tests"]["test_dsa_like.py::TestDSAImpls::test_whole_test_skips"]["reasons"][0]["code"] == "aiter"


def test_at_pytests_default_verbosity_the_count_says_what_pytest_leaves_out(pytester: pytest.Pytester) -> None:
    """pytest reports a skipped subtest as nothing at verbosity 0 (its final line then says 2
    skipped); the inventory still counts all 9 and says why the two numbers differ."""
    pytester.makepyfile(test_dsa_like=SUITE)
    result = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=sm103")
    assert result.parseoutcomes()["skipped"] == 2
    assert ("9 skips, each in one group below (pytest counts 2 skipped: at this verbosity it leaves out the 7 "
            "skipped subtests; -q, -v or -o verbosity_subtests=1 count them)") in _inventory(result.stdout.str())


def test_xdist_counts_the_workers_subtest_skips_once(pytester: pytest.Pytester) -> None:
    """The controller counts the workers' forwarded reports (SubtestReports too); the workers' hand-over
    at their end adds no second count."""
    pytester.makepyfile(test_dsa_like=SUITE)
    report = pytester.path / "x.json"
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-n", "2", "-q",
                                           "--dsakit-device=sm103", f"--dsakit-report={report}")
    skipped = result.parseoutcomes()["skipped"]
    assert skipped == 9
    assert f"9 skips, each in one group below (pytest counts 9 skipped)" in _inventory(result.stdout.str())
    data = json.loads(report.read_text())
    assert data["skips"]["total"] == 9 == sum(g["count"] for g in data["skips"]["groups"])
    assert len([s for s in data["subtests"].values() if s["outcome"] == "skipped"]) == 7


def test_a_subtest_failure_fails_its_test_in_the_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sub="""
import unittest

class TestT(unittest.TestCase):
    def test_x(self):
        for n in (1, 2, 2):
            with self.subTest(n=n):
                self.assertNotEqual(n, 1)
""")
    report = pytester.path / "r.json"
    pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", f"--dsakit-report={report}", "--dsakit-device=cpu")
    data = json.loads(report.read_text())
    assert data["tests"]["test_sub.py::TestT::test_x"]["outcome"] == "failed"
    assert {k: v["outcome"] for k, v in data["subtests"].items()} == {
        "test_sub.py::TestT::test_x (n=1)": "failed", "test_sub.py::TestT::test_x (n=2)": "passed",
        "test_sub.py::TestT::test_x (n=2) #2": "passed"}  # the same description twice: two records


# ---------------------------------------------------------------- the classification tables

# one real message per row, as SGLang's kit or suite writes it (0.5.21 and 0.5.23)
MESSAGES = {
    FA3: ("fa3", "FA3 is SM 9.x only"),
    "DSA prefill impl `fa3` not supported: sglang.kernels.ops.attention.flash_attention unavailable: No module "
    "named 'sgl_kernel.flash_attn'": ("fa3", "FA3's flash_attention does not import here"),
    TRTLLM: ("trtllm-dsa-decode", "TensorRT-LLM DSA decode covers SM 10.0, not 10.3"),
    "DSA decode impl `trtllm` not supported: trtllm requires SM10.0 (Blackwell B200), got SM9.0":
        ("trtllm-dsa-decode", "TensorRT-LLM DSA decode covers SM 10.0, not 9.0"),
    "DSA decode impl `trtllm` not supported: flashinfer unavailable: No module named 'flashinfer'":
        ("module:flashinfer", "flashinfer does not import here"),
    AITER: ("aiter", "AITER is AMD-only"),
    "DSA decode impl `aiter` not supported: aiter unavailable: No module named 'aiter'":
        ("module:aiter", "aiter does not import here"),
    "DSA tilelang impl not supported: tilelang JIT on SM10.3 needs `wait_wgmma` template that the container "
    "doesn't ship (KNOWN_FAILURES.md §2). Re-image or set SGLANG_TEST_DSA_TILELANG_FORCE=1 to override.":
        ("module:tilelang", "the image's TileLang has no SM 10.3 template (wait_wgmma)"),
    "DSA tilelang impl not supported: tilelang_kernel unavailable: No module named 'tilelang'":
        ("module:tilelang", "TileLang's DSA kernel does not import here"),
    "DSA tilelang decode requires topk=2048; the shared sparse fixture uses topk=128. A topk=2048 fixture "
    "variant is needed to exercise this path.": ("module:tilelang", "TileLang needs topk=2048, the shared fixture has 128"),
    FP8_DECODE.format("fa3"): ("fp8-kv", "FP8 KV decode needs flashmla_kv"),
    "DSA prefill impl `flashmla_sparse` not supported: flashmla_sparse requires SM>=9.0, got SM8.x":
        ("sm>=9.0", "flashmla_sparse needs SM 9.0 or later"),
    "CUDA is required": ("cuda", "the suite needs a GPU (torch.cuda)"),
    "flash_mla is required for DSV4 SWA": ("module:sgl_kernel.flashmla_ops",
                                           "sgl_kernel's FlashMLA (DeepSeek-V4 SWA) is not installed here"),
}
FP8_PREFILL_21 = ("DSA prefill impl `fa3` does not support FP8 KV cache (only `flashmla_sparse`, `flashmla_kv`, and "
                  "`flashmla_auto` read FP8 K directly; others require BF16 K).")
FP8_PREFILL_23 = ("DSA prefill impl `fa3` does not support FP8 KV cache (only `aiter`, `flashmla_sparse`, "
                  "`flashmla_kv`, and `flashmla_auto` read FP8 K directly; others require BF16 K).")


@pytest.mark.parametrize("release", ["0.5.17", "0.5.21", "0.5.23", "0.5.24.dev1"])
def test_sglang_messages_are_classified_per_release(release: str) -> None:
    from dsakit.gates.sglang_skips import classify

    for message, (code, words) in MESSAGES.items():
        found = classify(message, release)
        assert found is not None and (found.pattern.code, found.words) == (code, words), message
    # the FP8 prefill message changed in 0.5.23 (aiter reads FP8 K there): each release's words
    before = classify(FP8_PREFILL_21, release)
    after = classify(FP8_PREFILL_23, release)
    assert before is not None and after is not None and before.pattern.code == after.pattern.code == "fp8-kv"
    assert after.words == ("FP8 KV prefill needs aiter, flashmla_sparse, flashmla_kv or flashmla_auto"
                           if release >= "0.5.23" else "FP8 KV prefill needs flashmla_sparse, flashmla_kv or flashmla_auto")
    assert (classify("flashmla_sparse_q8 prefill is SM90-only", release) is not None) is (release >= "0.5.23")
    assert classify(DENSE, release) is None and classify(UNAVAILABLE, release) is None


def test_a_release_before_the_kit_classifies_nothing() -> None:
    from dsakit.gates.sglang_skips import classify

    assert classify(FA3, "0.5.14") is None and classify(FA3, None) is None and classify(FA3, "main") is None


def test_every_row_names_a_gate_code_and_devices_of_the_table() -> None:
    from dsakit.gates.sglang_skips import NOWHERE, TABLES
    from dsakit.gates.skip_causes import devices_opening
    from dsakit.gates.table import gate_for

    for table in TABLES:
        for row in table.patterns:
            assert gate_for(row.code).code == row.code, row  # a declared gate or a canonical expression
            for code in row.where:
                gate_for(code)
            assert row.where or row.note, row  # where it runs is said, one way or the other
            assert not (row.note == NOWHERE and row.where), row
            if row.where:
                assert devices_opening(row.where), row


@pytest.mark.parametrize("version", ["0.5.17", "0.5.21", "0.5.22", "installed"])
def test_every_row_is_written_so_in_the_kit_of_each_release_of_its_range(
        version: str, sglang_release_tree: Callable[[str], Path]) -> None:
    """Each row's source text is in the kit of every release its table covers, and a row of a range
    that ends (or starts) at a release is not in the kit beyond it: the ranges are read, not guessed."""
    from dsakit.gates.sglang_skips import TABLES
    from dsakit.stack.sglang_release import KIT_DSA_FILE, installed_release, release_from_tree, release_numbers

    release = installed_release() if version == "installed" else release_from_tree(str(sglang_release_tree(version)))
    kit = (release.package_dir / KIT_DSA_FILE).read_text(encoding="utf-8")
    numbers = release_numbers(release.version)
    held = {row.source for table in TABLES if table.holds(numbers) for row in table.patterns}
    for table in TABLES:
        for row in table.patterns:
            if row.source.startswith("suite:"):
                continue  # SGLang's own test files, not the wheel's kit
            if table.holds(numbers):
                assert row.source in kit, (release.version, row)
            elif row.source not in held:
                assert row.source not in kit, (release.version, table.first, table.last, row)


def test_dsakit_codes_words_are_the_codes_their_modules_raise() -> None:
    from dsakit.gates.skip_causes import KERNEL_LAUNCH, POISONED, explain
    from dsakit.gates.device_model import simulated_model
    from dsakit.node.fault_isolation import CODE
    from dsakit.simulation.probe_patches import KERNEL_LAUNCH as SIMULATION_CODE, SimulatedKernelLaunch

    assert (KERNEL_LAUNCH, POISONED) == (SIMULATION_CODE, CODE)
    reason = SimulatedKernelLaunch("the Triton kernel _k", "sglang/x.py:3", simulated_model("sm103")).reason
    cause = explain(str(reason), [reason], "0.5.23", "sm103")
    assert (cause.code, cause.runs_on, cause.note) == (KERNEL_LAUNCH, ("sm103",), "real hardware only")
    from dsakit.gates.skip_causes import group_causes

    assert group_causes([("t", cause), ("u", cause)])[0].clause() == (
        "kernels not run under simulation (2: the Triton kernel _k x2)")


def test_a_test_whose_every_subtest_was_refused_counts_under_its_kernel() -> None:
    """The paragraph names the kernel of a whole-test skip (every subtest refused), not the sentence
    around it (seen on the H200: 'kernels not run under simulation (12: flashinfer...deepseek x10,
    every subtest (2) was refused under simulated sm103, so nothing ran; the first: ...')."""
    from dsakit.gates.skip_causes import explain, group_causes

    from dsakit.reasons import Reason

    kernel = "flashinfer.prefill.trtllm_ragged_attention_deepseek"
    one = Reason("simulated-kernel-launch",
                 f"{kernel} (called at sglang/srt/layers/attention/dsa_backend.py:3022) would launch")
    whole = Reason("simulated-kernel-launch", f"every subtest (8) was refused under simulated sm103, so nothing "
                   f"ran; the first: {one}")
    causes = [(f"t{i}", explain(str(r), [r], "0.5.23", "sm103")) for i, r in enumerate([one, one, whole])]
    assert group_causes(causes)[0].clause() == f"kernels not run under simulation (3: {kernel} x3)"


# ---------------------------------------------------------------- the fleet and pr-check

FLEET_SUITE = """
import unittest

from dsakit.gates.marks import active_session


def capability(impl):
    # SGLang's kit (dsa_impl_capability), on the simulated device
    device = active_session().device
    major, minor = device.sm or (0, 0)
    if impl == "fa3" and not 9 <= major < 10:
        return f"fa3 requires SM9.x (Hopper), got SM{major}.x"
    if impl == "trtllm" and (major, minor) != (10, 0):
        return f"trtllm requires SM10.0 (Blackwell B200), got SM{major}.{minor}"
    if impl == "aiter" and device.vendor != "amd":
        return "aiter is HIP/AMD only"
    return None


class TestDSAImpls(unittest.TestCase):
    def test_decode_impl_variants(self):
        for impl in ("fa3", "trtllm", "aiter"):
            with self.subTest(impl=impl):
                reason = capability(impl)
                if reason:
                    self.skipTest(f"DSA decode impl `{impl}` not supported: {reason}")
"""


def test_the_merge_of_three_devices_says_where_each_group_runs_and_why_each_node_skipped(
        pytester: pytest.Pytester) -> None:
    from tests.conftest import _dsakit_in_process

    pytester.makepyfile(test_dsa_like=FLEET_SUITE)
    reports = []
    for device in ("sm90", "sm103", "gfx942"):
        report = pytester.path / f"{device}.json"
        pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", f"--dsakit-device={device}", "--dsakit-host-label=ci",
                           f"--dsakit-report={report}")
        reports.append(str(report))
    done = _dsakit_in_process(pytester.path, "report", "merge", *reports, "--markdown", "m.md")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert ("why these skipped on ci (sm90 simulated): AITER is AMD-only (1); "
            "TensorRT-LLM DSA decode covers SM 10.0, not 9.0 (1)") in out
    assert ("why these skipped on ci (sm103 simulated): AITER is AMD-only (1); FA3 is SM 9.x only (1); "
            "TensorRT-LLM DSA decode covers SM 10.0, not 10.3 (1)") in out
    assert "why these skipped on ci (gfx942 simulated): TensorRT-LLM DSA decode covers SM 10.0, not 9.4 (1)" in out
    assert ("  [trtllm-dsa-decode] 3 skipped on ci (sm90 simulated), ci (sm103 simulated), ci (gfx942 simulated); "
            "runs on: sm100 (no node here); covered on: not covered on any node") in out
    assert ("  [aiter] 2 skipped on ci (sm90 simulated), ci (sm103 simulated); runs on: gfx942 (only simulated here), "
            "gfx950 (no node here); covered on: ci (gfx942 simulated)") in out
    assert ("  [fa3] 1 skipped on ci (sm103 simulated); runs on: sm90 (only simulated here); "
            "covered on: ci (sm90 simulated), ci (gfx942 simulated)") in out
    assert re.search(r"\nci \(sm103 simulated\) .* 1 passed; subtests: 3 skipped\n", out), out
    md = (pytester.path / "m.md").read_text()
    assert "- why these skipped on ci (sm103 simulated): AITER is AMD-only (1); FA3 is SM 9.x only (1)" in md
    assert "| `fa3` | 1 | ci (sm103 simulated) | sm90 (only simulated here) |" in md


def test_pr_check_names_each_skip_change_with_both_reasons_and_explains_each_device() -> None:
    from dsakit.compare.markdown import render
    from dsakit.compare.pr_vs_base import Run
    from dsakit.compare.pr_check import DeviceCheck, PrCheck, as_json, comment, verdicts

    variants = "t.py::T::test_decode_impl_variants"
    base = {variants: {"outcome": "passed"},
            f"{variants} (impl='fa3')": {"outcome": "skipped", "reason": FA3, "subtest_of": variants},
            f"{variants} (impl='trtllm')": {"outcome": "passed", "subtest_of": variants},
            f"{variants} (impl='aiter')": {"outcome": "skipped", "reason": AITER, "subtest_of": variants}}
    pr = {**base, f"{variants} (impl='fa3')": {"outcome": "passed", "subtest_of": variants},
          f"{variants} (impl='trtllm')": {"outcome": "skipped", "reason": TRTLLM, "subtest_of": variants}}
    check = DeviceCheck("sm103", "sm103")
    check.base = Run("base", "b", 0, 1.0, sglang={"version": "0.5.21"}, tests=base)
    check.pr = Run("pr", "p", 0, 1.0, sglang={"version": "0.5.21"}, tests=pr)
    check.verdicts = verdicts(check)
    result = PrCheck("b", "p", [check], [])
    md = render(comment(result))
    assert "### Skip changes (1): skipped on one tree only, or for another reason" in md
    assert f"| `{variants} (impl='fa3')` | sm103 (simulated) | skipped: {FA3} | passed |" in md
    # the trtllm subtest passed on base and skips on the PR: the PR stops running it on sm103, which fails the gate
    assert "### Newly skipped (pass on base, skip on the PR: the PR stops running them there)" in md
    assert f"| `{variants} (impl='trtllm')` | sm103 (simulated) | {TRTLLM} |" in md
    assert result.exit_code() == 1
    why = ("why these skipped on sm103 (simulated), PR run: AITER is AMD-only (1); "
           "TensorRT-LLM DSA decode covers SM 10.0, not 10.3 (1)")
    assert f"- {why}" in md and as_json(result)["why"] == [why]
    # what no device ran, with where it would: the aiter subtest skipped on both trees
    assert (f"| `aiter` | 1 | sm103 (simulated) | gfx942, gfx950 (no node here) | no device | {AITER} |") in md
    skip_change = next(v for v in check.verdicts if v.test.endswith("(impl='trtllm')"))
    assert (skip_change.verdict, skip_change.base_reason, skip_change.pr_reason) == (
        "newly-skipped", "passed", f"skipped: {TRTLLM}")


def test_pr_check_reruns_a_failed_subtest_through_its_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A subtest id is not a pytest node id: the rerun list names its test once."""
    from dsakit.compare import pr_check
    from dsakit.compare.pr_vs_base import Run

    failed = {"outcome": "failed", "message": "AssertionError", "frame": "t.py"}
    tests = {"t.py::T::test_x": failed, "t.py::T::test_x (n=1)": {**failed, "subtest_of": "t.py::T::test_x"},
             "t.py::T::test_x (n=2)": {**failed, "subtest_of": "t.py::T::test_x"}}
    calls: list[list[str]] = []

    def run_selection(label: str, src: str, args: list[str], workdir: Path, **kwargs: object) -> Run:
        calls.append(list(args))
        return Run(label, src, 1, 0.1, tests=dict(tests))

    monkeypatch.setattr(pr_check, "run_selection", run_selection)
    pr_check._run_tree(pr_check.DeviceCheck("sm103", "sm103"), "pr", "src", pr_check._Plan((), tmp_path, None, {}))
    assert (tmp_path / "sm103-pr-rerun.txt").read_text() == "t.py::T::test_x\n"
    assert len(calls) == 2 and any(a.startswith("--dsakit-record-only=") for a in calls[1])
