"""Device-branch coverage (issue 42): under a simulated device, which of SGLang's device-gated
branches took the simulated device's arm, and why the others did not.

The scanner and the verdicts run in-process on a source file written here (they read files, never
import SGLang); the runs against SGLang's real backend are subprocesses (they import torch).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsakit.gates.device_model import simulated_model
from dsakit.node.pytest_invocation import plugin_args
from dsakit.simulation.branch_coverage import LineWatch, divergent, scan_branches, verdicts

HAS_SGLANG = importlib.util.find_spec("sglang") is not None and importlib.util.find_spec("torch") is not None
sglang_needed = pytest.mark.skipif(not HAS_SGLANG, reason="[module:sglang] the suite builds SGLang's backend")
PLUGIN = plugin_args()

BACKEND = '''
import os

_is_cuda = os.environ.get("NO_SUCH_VARIABLE") is None


class Backend:
    def __init__(self, device_sm_major, trtllm):
        self.device_sm_major = device_sm_major
        if self.device_sm_major >= 10:
            self.workspace = "sm100"
        else:
            self.workspace = None
        if _is_cuda and (self.device_sm_major >= 10 or trtllm):
            self.trtllm = True

    def prefill(self, wide):
        if wide and self.device_sm_major >= 10:
            return "pad 128"
        return "pad 64"

    def never_called(self):
        if self.device_sm_major == 9:
            return "hopper"
        return "other"
'''


def _tree(tmp_path: Path) -> Path:
    package = tmp_path / "sglang"
    backend = package / "srt/layers/attention/dsa_backend.py"
    backend.parent.mkdir(parents=True)
    backend.write_text(BACKEND)
    return package


def _line(text: str) -> int:
    return next(n for n, line in enumerate(BACKEND.splitlines(), start=1) if text in line)


def test_the_scan_finds_the_device_gated_ifs_and_their_arms(tmp_path: Path) -> None:
    found = {(b.line, b.guard, b.function) for b in scan_branches(_tree(tmp_path))}
    assert found == {
        (_line("if self.device_sm_major >= 10:"), "self.device_sm_major >= 10", "Backend.__init__"),
        (_line("if _is_cuda and"), "_is_cuda and (self.device_sm_major >= 10 or trtllm)", "Backend.__init__"),
        (_line("if wide and"), "wide and self.device_sm_major >= 10", "Backend.prefill"),
        (_line("== 9:"), "self.device_sm_major == 9", "Backend.never_called"),
    }


def test_the_branches_a_b300_decides_otherwise_than_an_h200() -> None:
    """sm103 against sm90: the SM >= 10 arms, the Hopper arm's else, and a guard the device decides
    on one side and leaves to configuration on the other (`wide and ...`: the B300's arm needs `wide`; the
    else arm of `not sm100 or blocks <= 0` needs the blocks)."""
    from dsakit.simulation.branch_coverage import DeviceBranch

    def branch(guard: str) -> DeviceBranch:
        return DeviceBranch("f.py", 1, guard, "f", 1, 2, None)

    guards = ["self.device_sm_major >= 10", "wide and self.device_sm_major >= 10", "self.device_sm_major == 9",
              "_is_cuda", "_is_cuda and (self.device_sm_major >= 10 or trtllm)",
              "not is_sm100_or_newer() or blocks <= 0"]
    found = {b.guard: (takes, needs) for b, takes, needs in
             divergent(map(branch, guards), simulated_model("sm103"), simulated_model("sm90"))}
    assert found == {"self.device_sm_major >= 10": (True, ""), "wide and self.device_sm_major >= 10": (True, "wide"),
                     "self.device_sm_major == 9": (False, ""),
                     "_is_cuda and (self.device_sm_major >= 10 or trtllm)": (True, ""),
                     # SGLang 0.5.21 v41_indexer: the B300's else arm also needs candidate blocks
                     "not is_sm100_or_newer() or blocks <= 0": (False, "not (blocks <= 0)")}


def test_lines_that_ran_give_each_branch_its_verdict(tmp_path: Path) -> None:
    package = _tree(tmp_path)
    branches = divergent(scan_branches(package), simulated_model("sm103"), simulated_model("sm90"))
    wanted: dict[str, set[int]] = {}
    for b, _, _ in branches:
        wanted.setdefault(b.file, set()).update(n for n in (b.line, b.entry, b.body, b.orelse) if n)
    watch = LineWatch(wanted)
    spec = importlib.util.spec_from_file_location("dsakit_test_backend", package / "srt/layers/attention/dsa_backend.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    watch.start()
    try:
        spec.loader.exec_module(module)
        backend = module.Backend(9, trtllm=False)  # what an H200 does: the B300 arms do not run
        backend.prefill(wide=False)
    finally:
        watch.stop()
    assert watch.unavailable == ""
    by_guard = {v.branch.guard: (v.status, v.takes) for v in verdicts(branches, watch.ran, "sm103")}
    assert by_guard == {
        "self.device_sm_major >= 10": ("other-arm", "body"),
        "_is_cuda and (self.device_sm_major >= 10 or trtllm)": ("other-arm", "body"),
        "wide and self.device_sm_major >= 10": ("other-arm", "body where wide"),
        "self.device_sm_major == 9": ("not-reached", "else"),
    }
    watch.ran = {f: set() for f in watch.ran}
    watch.start()
    try:
        module.Backend(10, trtllm=False).prefill(wide=True)  # what a B300 does
    finally:
        watch.stop()
    found = {v.branch.guard: v for v in verdicts(branches, watch.ran, "sm103")}
    assert [g for g, v in found.items() if v.status == "ran"] == [
        "self.device_sm_major >= 10", "_is_cuda and (self.device_sm_major >= 10 or trtllm)",
        "wide and self.device_sm_major >= 10"]
    never = found["self.device_sm_major == 9"].reason
    assert never is not None and never.code == "configuration-never-built"
    assert never.message == "Backend.never_called() never ran: the suite never builds that configuration"


# SGLang 0.5.21's DeepSeek-V4 SM 10.x decisions (deepseek_v4_backend.py:2872, :3412, :207, :2531 of
# dsa_backend.py): two of them are values handed on, not `if`s, which the scan once missed
DSV4 = '''
from types import SimpleNamespace


def get_platform():
    return SimpleNamespace(is_sm100=True, is_blackwell=True)


def is_sm100_or_newer():
    return True


def fast_sched_shape(q):
    return q > 0 and get_platform().is_blackwell


class Backend:
    def __init__(self, is_dsv41):
        self.is_dsv41 = is_dsv41
        self.device_sm_major = 10

    def compress_decode(self, x):
        return self.write(x, fuse_index_store=is_sm100_or_newer())

    def write(self, x, fuse_index_store=False):
        return x

    def forward(self, q):
        padding = 128 if self.device_sm_major >= 10 else 64
        if self.is_dsv41 and get_platform().is_sm100:
            return "swapab"
        return padding
'''


def _dsv4_line(text: str) -> int:
    return next(n for n, line in enumerate(DSV4.splitlines(), start=1) if text in line)


def _watched_run(branches: list[Any], backend_file: Path, call: Callable[[Any], Any]) -> dict[str, set[int]]:
    """The branches' lines that ran while `backend_file` was imported and `call(module)` ran."""
    wanted: dict[str, set[int]] = {}
    for b, _, _ in branches:
        wanted.setdefault(b.file, set()).update(n for n in (b.line, b.entry, b.body, b.orelse) if n)
    watch = LineWatch(wanted)
    spec = importlib.util.spec_from_file_location(f"dsakit_test_{backend_file.stem}", backend_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    watch.start()
    try:
        spec.loader.exec_module(module)
        call(module)
    finally:
        watch.stop()
    return watch.ran


def test_a_device_decision_handed_on_as_a_value_is_a_branch_too(tmp_path: Path) -> None:
    """`fuse_index_store=is_sm100_or_newer()`, a `return` of a probe, a conditional expression: the
    simulated device's value is passed where their line runs. A suite that builds the DeepSeek-V4
    backend but never its ratio-1/2 compressor (SGLang's test_deepseek_v4.py: the model calls
    forward_low_ratio_sources, the kit calls forward) reaches the swap-AB guard, not the fused store."""
    backend_file = tmp_path / "sglang/srt/layers/attention/deepseek_v4_backend.py"
    backend_file.parent.mkdir(parents=True)
    backend_file.write_text(DSV4)
    branches = divergent(scan_branches(tmp_path / "sglang"), simulated_model("sm103"), simulated_model("sm90"))
    assert {(b.line, b.text) for b, _, _ in branches} == {
        (_dsv4_line("return q > 0"), "return q > 0 and get_platform().is_blackwell"),
        (_dsv4_line("fuse_index_store="), "fuse_index_store=is_sm100_or_newer()"),
        (_dsv4_line("padding = 128"), "if-else self.device_sm_major >= 10"),
        (_dsv4_line("if self.is_dsv41"), "if self.is_dsv41 and get_platform().is_sm100"),
    }
    # the kit's DeepSeek-V4 config: no model_type deepseek_v41
    ran = _watched_run(branches, backend_file, lambda module: module.Backend(is_dsv41=False).forward(1))
    found = {v.branch.text: v for v in verdicts(branches, ran, "sm103")}
    assert (found["if-else self.device_sm_major >= 10"].status, found["if-else self.device_sm_major >= 10"].takes) \
        == ("ran", "True")
    store = found["fuse_index_store=is_sm100_or_newer()"]
    assert (store.status, store.takes) == ("not-reached", "True")
    assert store.why == "Backend.compress_decode() never ran: the suite never builds that configuration"
    assert store.reason is not None and store.reason.code == "configuration-never-built"
    swap_ab = found["if self.is_dsv41 and get_platform().is_sm100"]
    assert (swap_ab.status, swap_ab.takes) == ("other-arm", "body where self.is_dsv41")
    assert "also needs self.is_dsv41, which no test set" in swap_ab.why
    assert store.as_dict()["value"] == "fuse_index_store=" and "value" not in swap_ab.as_dict()


# SGLang 0.5.21's dsa_backend.py:3617, the MHA-vs-MLA choice of set_dsa_prefill_impl, kept as a flag
PREFILL = """
def get_device_sm():
    return 90


class Backend:
    supports_mha_one_shot = True

    def set_prefill_impl(self, max_kv_len):
        device_sm = get_device_sm()
        self.use_mha = (
            self.supports_mha_one_shot
            and (device_sm == 90 or (device_sm >= 100 and device_sm < 110))
            and max_kv_len <= 2048
        )
        wide: bool = device_sm >= 100
        return wide
"""


def test_a_device_decision_kept_as_a_flag_is_a_branch_when_the_devices_decide_it_apart(tmp_path: Path) -> None:
    """`self.use_mha = (...)` decides SM 9.0 and SM 10.x alike; narrowed to `device_sm < 103` (a B300
    left out of the MHA one-shot prefill) an H200 and a B300 decide it apart, and it is a branch whose
    line ran: the B300's False was kept. A probe's bare answer kept under a name decides nothing."""
    backend_file = tmp_path / "sglang/srt/layers/attention/dsa_backend.py"
    backend_file.parent.mkdir(parents=True)

    def scanned(text: str) -> dict[str, tuple[int, bool]]:
        backend_file.write_text(text)
        return {b.text: (b.line, holds) for b, holds, _ in
                divergent(scan_branches(tmp_path / "sglang"), simulated_model("sm103"), simulated_model("sm90"))}

    assert scanned(PREFILL) == {"wide = device_sm >= 100": (_prefill_line(PREFILL, "wide: bool"), True)}
    narrowed = PREFILL.replace("device_sm < 110", "device_sm < 103")
    found = scanned(narrowed)
    use_mha = ("self.use_mha = self.supports_mha_one_shot and (device_sm == 90 or (device_sm >= 100 and "
               "device_sm < 103)) and (max_kv_len <= 2048)")
    assert found[use_mha] == (_prefill_line(narrowed, "self.use_mha = (") + 1, False)  # the value's first line
    assert not any(text.startswith("device_sm =") for text in found)
    branches = divergent(scan_branches(tmp_path / "sglang"), simulated_model("sm103"), simulated_model("sm90"))
    ran = _watched_run(branches, backend_file, lambda module: module.Backend().set_prefill_impl(100))
    flag = next(v for v in verdicts(branches, ran, "sm103") if v.branch.text == use_mha)
    assert (flag.status, flag.takes, flag.as_dict()["value"]) == ("ran", "False", "self.use_mha =")


def _prefill_line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


SUITE = '''
import dsakit
from dsakit.backends.harness import dsa_backend


def test_builds_the_backend():
    runner = dsakit.MockModelRunner("target", max_running_requests=16, model_config__context_len=4096)
    with dsa_backend(runner) as backend:
        assert backend.device_sm_major == 10
'''


@sglang_needed
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_simulated_run_says_which_of_sglangs_branches_ran(pytester: pytest.Pytester, workers: list[str]) -> None:
    """SGLang's real DeepseekSparseAttnBackend built as a simulated B300: its `device_sm_major >= 10
    or trtllm` arm (the TRT-LLM workspace) ran, though the workspace's flashinfer query is then refused
    on this machine (the test skips as [simulated-kernel-launch] where flashinfer is absent); the
    summary counts it, -v lists it, the report holds it; an xdist worker's lines reach its controller."""
    pytester.makepyfile(test_branches=SUITE)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-v", *workers,
                                           "--dsakit-device", "sm103", "--dsakit-report", "r.json")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("skipped", 0) == 1 and result.ret == 0, outcomes
    result.stdout.re_match_lines([
        r"dsakit: device branches: [1-9]\d* of \d+ SGLang branches that sm103 decides differently from .* took "
        r"sm103's arm; \d+ never did \((configuration-never-built|guard-not-reached|arm-needs-configuration|"
        r"probe-answered-here)[ a-z0-9,-]*\)$",
        # 0.5.23 guards the platform (`_is_cuda and (...)`); 0.5.21, the H200 pack's, does not
        r"  sglang/srt/layers/attention/dsa_backend.py:\d+: if (_is_cuda and \()?self.device_sm_major >= 10 or "
        r"self.dsa_decode_impl == 'trtllm'\)? -> body: ran$",
    ])
    section = json.loads((pytester.path / "r.json").read_text())["device_branches"]
    assert section["device"] == "sm103" and section["watched"] and section["ran"] >= 1
    assert any(b["status"] == "ran" and "trtllm" in b["guard"] for b in section["branches"])


@sglang_needed
def test_without_a_simulated_device_nothing_is_watched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1)
    assert "device branches" not in result.stdout.str()


def test_the_watch_leaves_no_tracer_behind(tmp_path: Path) -> None:
    import sys

    before = sys.gettrace()
    watch = LineWatch({"srt/layers/attention/dsa_backend.py": {1}})
    watch.start()
    watch.stop()
    assert sys.gettrace() is before
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        assert all(monitoring.get_tool(t) != "dsakit device branches" for t in range(6))


# ---------------------------------------------------------------- why a branch never ran (issue 42, item 3)

MODULE = "sglang.srt.layers.attention.dsa_backend"


def _branch(guard: str, function: str = "Backend.f") -> tuple:
    from dsakit.simulation.branch_coverage import DeviceBranch

    return (DeviceBranch("srt/layers/attention/dsa_backend.py", 10, guard, function, 9 if function else 10, 11, None,
                         end=12), True, "")


def test_a_constant_computed_before_the_simulation_is_named_as_the_cause() -> None:
    """`_is_cuda` holds this machine's answer (False: a CPU) in a module imported before the simulation
    began: the guard that read it took the other arm because of it. Imported under the simulation, the
    same stale value is a constant the probe table does not patch; the device's own answer is no cause."""
    import types

    from dsakit.simulation.branch_coverage import ProbeSnapshot, probe_evidence

    module = types.ModuleType(MODULE)
    module._is_cuda = False  # type: ignore[attr-defined]
    sm103 = simulated_model("sm103")
    branches = [_branch("_is_cuda and self.device_sm_major >= 10")]
    before = ProbeSnapshot.take({MODULE}, {MODULE: module})
    found = probe_evidence(branches, sm103, before, {MODULE: module})
    reason = found["sglang/srt/layers/attention/dsa_backend.py:10"]
    assert reason.code == "probe-cached-before-simulation"
    assert "`_is_cuda` of sglang.srt.layers.attention.dsa_backend was computed at import before" in reason.message
    assert "holds False" in reason.message and "sm103 answers True" in reason.message
    after = probe_evidence(branches, sm103, ProbeSnapshot.take({MODULE}, {}), {MODULE: module})
    assert [r.code for r in after.values()] == ["probe-not-simulated"]
    module._is_cuda = True  # type: ignore[attr-defined]
    assert probe_evidence(branches, sm103, before, {MODULE: module}) == {}


def test_an_lru_cached_probe_filled_before_the_simulation_is_named_unless_the_simulation_clears_it() -> None:
    import functools
    import types

    from dsakit.simulation.branch_coverage import ProbeSnapshot, probe_evidence

    @functools.lru_cache
    def is_sm100_supported() -> bool:
        return False  # this machine's answer, cached at import

    module = types.ModuleType(MODULE)
    module.is_sm100_supported = is_sm100_supported  # type: ignore[attr-defined]
    branches = [_branch("is_sm100_supported() and self.use_trtllm")]
    empty = ProbeSnapshot.take({MODULE}, {MODULE: module})
    assert probe_evidence(branches, simulated_model("sm103"), empty, {MODULE: module}) == {}  # filled later: fine
    is_sm100_supported()
    filled = ProbeSnapshot.take({MODULE}, {MODULE: module})
    assert filled.filled == {(MODULE, "is_sm100_supported"): 1}
    reason = probe_evidence(branches, simulated_model("sm103"), filled, {MODULE: module})[branches[0][0].site]
    assert reason.code == "probe-cached-before-simulation" and "`is_sm100_supported()` is lru-cached" in reason.message
    is_sm100_supported.__module__ = "sglang.srt.utils.common"  # the simulation clears every cache of that module
    assert probe_evidence(branches, simulated_model("sm103"), filled, {MODULE: module}) == {}


def test_each_never_ran_branch_gets_the_reason_of_how_far_the_run_got() -> None:
    from dsakit.reasons import Reason

    stale = Reason("probe-cached-before-simulation", "x")
    imported = Reason("imported-before-simulation", "y")
    guard, module_level = _branch("_is_cuda"), _branch("_is_cuda", function="")
    cases = [  # (lines that ran, evidence, code)
        ({10}, {}, "probe-answered-here"),
        ({10}, {guard[0].site: stale}, "probe-cached-before-simulation"),
        ({9}, {}, "guard-not-reached"),
        (set(), {}, "configuration-never-built"),
        ({11}, {guard[0].site: stale}, None),  # the arm ran: no reason
    ]
    for lines, evidence, code in cases:
        (found,) = verdicts([guard], {guard[0].file: lines}, "sm103", evidence)
        assert (found.reason.code if found.reason else None) == code, (lines, evidence)
    (found,) = verdicts([module_level], {}, "sm103", {module_level[0].site: imported})
    assert found.reason == imported and found.as_dict()["reason"] == imported.as_dict()
    (found,) = verdicts([guard], {}, "sm103", {}, unwatched="another trace function holds sys.settrace")
    assert found.reason is not None and found.reason.code == "not-watched"


@sglang_needed
def test_a_module_imported_before_the_simulation_says_its_import_time_branches_ran_unwatched(
        pytester: pytest.Pytester) -> None:
    """A conftest imports SGLang's DSA indexer on this machine before `--dsakit-device sm103` starts:
    its module-level `if _is_cuda:` branches ran then, for this machine; -v and the report say so
    rather than "the suite never builds that configuration"."""
    from dsakit.gates.device_model import real_device

    if real_device().vendor == "nvidia":
        pytest.skip("on an NVIDIA GPU `_is_cuda` answers as simulated sm103 does: these import-time branches are "
                    "not ones sm103 decides differently (a CPU or AMD machine shows them)")
    pytester.makeconftest("import sglang.srt.layers.attention.dsa.dsa_indexer  # noqa: F401\n")
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-v", "--dsakit-device", "sm103",
                                           "--dsakit-report", "r.json")
    assert result.ret == 0
    result.stdout.re_match_lines([
        r"  sglang/srt/layers/attention/dsa/dsa_indexer.py:\d+: if _is_cuda -> body: \[imported-before-simulation\] "
        r"sglang.srt.layers.attention.dsa.dsa_indexer was imported before the simulation began .*unwatched$"])
    branches = json.loads((pytester.path / "r.json").read_text())["device_branches"]["branches"]
    codes = {b["reason"]["code"] for b in branches if b["file"].endswith("dsa/dsa_indexer.py") and not b["function"]}
    assert codes == {"imported-before-simulation"}
    assert all(b["end"] >= b["line"] for b in branches)


@sglang_needed
def test_a_fleet_merges_each_devices_branches_into_its_table(pytester: pytest.Pytester) -> None:
    """`--dsakit-device sm100,sm103`: one run per device, each builds SGLang's real DSA backend; the merged
    fleet table counts each device's branches (ran / never ran by reason) and lists the never-ran ones."""
    pytester.makepyfile(test_branches=SUITE)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device", "sm100,sm103",
                                           "--dsakit-report", "fleet.json")
    out = result.stdout.str()
    for device in ("sm100", "sm103"):
        result.stdout.re_match_lines([
            rf"device branches under simulated {device} \(\d+ that it decides otherwise than .*; 1 report\(s\): "
            rf".* \({device} simulated\)\): [1-9]\d* ran, \d+ never ran \(.*\)$"])
        section = json.loads((pytester.path / f"fleet-{device}.json").read_text())["device_branches"]
        never = [b for b in section["branches"] if b["status"] != "ran"]
        assert never and all(b["reason"]["code"] for b in never)
        listed = re.compile(rf"^{device} +{re.escape(never[0]['site'])} +if .*: \[{never[0]['reason']['code']}\] ")
        assert any(listed.match(line) for line in out.splitlines()), out[-3000:]
    assert "Device branches that never ran:" in out


def test_the_reference_page_lists_every_reason_code() -> None:
    from dsakit.gates.device_branches import NEVER_RAN, reasons_markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "simulated-probes.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- device-branch-reasons:start -->\n(.*?)\n<!-- device-branch-reasons:end -->", page, re.S)
    assert block and block.group(1) == reasons_markdown(), (
        "docs/reference/simulated-probes.md's reason table drifted: replace it with the output of "
        "`python -c 'from dsakit.gates.device_branches import reasons_markdown as t; print(t())'`")
    assert len({entry.code for entry in NEVER_RAN}) == len(NEVER_RAN)
