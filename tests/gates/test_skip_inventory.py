"""The skip inventory: grouping by gate code, --dsakit-report JSON, --dsakit-must-run, xdist."""

from __future__ import annotations

import json
from dsakit.node.pytest_invocation import plugin_args
from pathlib import Path

import pytest

# The plugin loads through its pytest11 entry point when dsakit is installed; on a node that only
# has the checkout on PYTHONPATH, inner runs load it explicitly.
PLUGIN = tuple(plugin_args())


pytestmark = pytest.mark.usefixtures("no_kernel_modules")

SUITE = """
import pytest
import dsakit

@dsakit.gate("fa3")
@pytest.mark.parametrize("n", range(3))
def test_fa3(n):
    pass

@dsakit.gate("cuda", "module:aiter")
def test_cuda_and_module():
    pass

@pytest.fixture(scope="session")
def amd():
    dsakit.require("rocm")

@pytest.mark.parametrize("n", range(2))
def test_needs_amd(amd, n):
    pass

def test_plain_skip():
    pytest.skip("not a gate")

def test_runs():
    pass
"""


def test_terminal_section_groups_by_gate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=sm100", "-v")
    result.stdout.fnmatch_lines([
        "*dsakit skip inventory*",
        "device: NVIDIA B200 (SM 10.0*) [[]simulated sm100[]]; SGLang *",
        "   3 skipped  [[]fa3[]] needs exactly SM 9.x on NVIDIA*",
        "           test_terminal_section_groups_by_gate.py::test_fa3[[]0[]]",
        "*",
        "*",
        "   2 skipped  [[]rocm[]] needs an AMD GPU (ROCm)*",
        "*",
        "*",
        "   1 skipped  [[]module:aiter[]]*",
    ])
    result.assert_outcomes(passed=1, skipped=7)
    # A skip without a reason code is listed too (never invisible), under "uncoded".
    inventory = result.stdout.str().split("dsakit skip inventory")[1].split("short test summary")[0]
    assert "   1 skipped  [uncoded] not a gate" in inventory


def test_coded_reasons_that_are_not_gates_are_grouped_by_code(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("k", [512, 1024])
        def test_shape(k):
            pytest.skip("[topk-k-unsupported] the kernel asserts topk == 2048; torch covers k=512")
        """
    )
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=sm90")
    result.stdout.fnmatch_lines(["   2 skipped  [[]topk-k-unsupported[]] the kernel asserts topk == 2048*"])


def test_report_json(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    report = pytester.path / "out" / "skips.json"
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=gfx90a", f"--dsakit-report={report}")
    assert result.ret == 0
    data = json.loads(report.read_text())
    assert data["device"]["key"] == "gfx90a" and data["device"]["simulated"] is True
    assert data["device"]["gfx"] == "gfx90a" and data["device"]["sm"] == "9.0"
    assert data["sglang"]
    groups = {g["code"]: g for g in data["skips"]["groups"]}
    assert {code: g["count"] for code, g in groups.items()} == {"fa3": 3, "cuda": 1, "uncoded": 1}
    # one skip, two closed gates: counted once, under the first; the other named beside it
    assert groups["cuda"]["tests"] == ["test_report_json.py::test_cuda_and_module"]
    assert groups["cuda"]["also"] == {"module:aiter": 1}
    assert data["skips"]["total"] == 5 == sum(g["count"] for g in groups.values())  # pytest's count
    assert "AMD reports capability 9.0" in groups["fa3"]["reason"]
    assert data["must_run"] == {"codes": [], "failed": {}, "no_test_behind": [], "strict": False}


def test_must_run_fails_when_its_tests_skipped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=sm120", "--dsakit-must-run=rocm,fa3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "dsakit: --dsakit-must-run rocm: 2 test(s) behind gate rocm skipped: *test_needs_amd[[]0[]], *test_needs_amd[[]1[]]",
        "dsakit: --dsakit-must-run fa3: 3 test(s) behind gate fa3 skipped: *",
    ])
    assert "2 --dsakit-must-run gate(s) failed in" in result.stdout.lines[-1]  # pytest's final line


def test_must_run_passes_when_gates_open(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=sm90", "--dsakit-must-run=cuda-graphs,gfx in gfx942,gfx950")
    assert result.ret == 0


def test_must_run_in_collect_only_checks_planned_skips(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(*PLUGIN, "--collect-only", "-q", "--dsakit-device=sm120", "--dsakit-must-run=fa3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["dsakit: --dsakit-must-run fa3: 3 test(s) behind gate fa3 skipped: *"])


def test_must_run_unknown_code_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--dsakit-must-run=fa4")
    result.stderr.fnmatch_lines(["ERROR: unknown dsakit gate 'fa4'; valid codes: *"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_header_names_device_and_sglang(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=mi300")
    result.stdout.fnmatch_lines(["dsakit: device AMD Instinct MI300X (gfx942, reports 9.4*) [[]simulated gfx942[]]; SGLang *"])
    assert "dsakit skip inventory" not in result.stdout.str()  # nothing gated: no section


def test_xdist_workers_report_to_the_controller(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(SUITE)
    report = tmp_path / "skips.json"
    result = pytester.runpytest_subprocess(
        *PLUGIN, "-n", "2", "--dsakit-device=sm103", f"--dsakit-report={report}", "--dsakit-must-run=rocm"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*dsakit skip inventory*",
        "device: NVIDIA B300 (SM 10.3*) [[]simulated sm103[]]; SGLang *",
        "   3 skipped  [[]fa3[]]*",
        "   2 skipped  [[]rocm[]]*",
        "   1 skipped  [[]module:aiter[]]*",
    ])
    data = json.loads(report.read_text())
    assert data["device"]["key"] == "sm103"
    assert {g["code"]: g["count"] for g in data["skips"]["groups"]} == {
        "fa3": 3, "rocm": 2, "module:aiter": 1, "uncoded": 1}
    assert data["skips"]["total"] == 7
    assert sorted(data["must_run"]["failed"]["rocm"]) == [
        "test_xdist_workers_report_to_the_controller.py::test_needs_amd[0]",
        "test_xdist_workers_report_to_the_controller.py::test_needs_amd[1]",
    ]


def test_a_skip_with_several_reasons_counts_under_each_code() -> None:
    from dsakit.reasons import Reason
    from dsakit.gates.inventory import format_reasons, reasons_from_message

    message = format_reasons([Reason("no-role-split", "a; b"), Reason("torch-needs-unfused", "c")])
    assert [r.code for r in reasons_from_message(f"Skipped: {message}")] == ["no-role-split", "torch-needs-unfused"]


def test_controller_records_forwarded_worker_reports() -> None:
    """xdist forwards every worker report to the controller as it happens; recording them there
    keeps the skips of a worker that dies (os._exit, a CUDA abort) before its workeroutput."""
    from types import SimpleNamespace

    from dsakit.gates.device_model import resolve_device
    from dsakit.gates.inventory import InventoryReporter, SkipInventory, SkipRecorder

    inventory = SkipInventory()
    reporter = InventoryReporter(SimpleNamespace(), inventory, lambda: resolve_device("cpu"), (), None)  # type: ignore[arg-type]
    report = pytest.TestReport("t.py::test_a", ("t.py", 1, "test_a"), {}, "skipped",
                               ("t.py", 1, "Skipped: [cuda] needs an NVIDIA GPU"), "setup")
    report.node = object()  # type: ignore[attr-defined]  # as xdist's controller sees it
    SkipRecorder(reporter).pytest_runtest_logreport(report)  # the per-test hook the plugin registers
    assert inventory.skipped_behind(["cuda"]) == {"cuda": ["t.py::test_a"]}


# what Hypothesis's pytest plugin does at the end of every run (_hypothesis_pytestplugin.py,
# pytest_terminal_summary): read every entry the terminal reporter keeps through its instance dict
READS_EVERY_STATS_ENTRY = """
def pytest_terminal_summary(terminalreporter):
    seen = [type(entry).__name__ for entries in terminalreporter.stats.values() for entry in entries
            if entry.__dict__.get("hypothesis-statistics") is None]
    terminalreporter.write_line(f"read {len(seen)} stats entries")
"""


def test_a_failed_must_run_gate_is_a_stats_entry_other_plugins_can_read(pytester: pytest.Pytester) -> None:
    """On the H200 (Hypothesis installed) the must-run failure was a string among the terminal
    reporter's entries and Hypothesis's summary crashed the end of the run with an AttributeError."""
    pytester.makeconftest(READS_EVERY_STATS_ENTRY)
    pytester.makepyfile("import dsakit\n\n@dsakit.gate('rocm')\ndef test_rocm():\n    pass\n\n"
                        "def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:xdist", "--dsakit-must-run=rocm")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["read * stats entries", "*1 passed, 1 skipped, 1 --dsakit-must-run gate(s) failed*"])
    assert "AttributeError" not in result.stdout.str() + result.stderr.str()


def test_must_run_names_gates_no_test_sits_behind(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import dsakit\n\n@dsakit.gate('cuda')\ndef test_cuda():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=sm90", "--dsakit-must-run=cuda,cuda-graphs")
    assert result.ret == 0  # cuda's test ran (open on SM 9.0); nothing sits behind cuda-graphs
    result.stdout.fnmatch_lines(["dsakit: --dsakit-must-run cuda-graphs: no collected test sits behind gate "
                                 "cuda-graphs: nothing to check; --dsakit-must-run-strict makes this fail the run"])
    assert "--dsakit-must-run cuda:" not in result.stdout.str()
    strict = pytester.runpytest(*PLUGIN, "--dsakit-device=sm90", "--dsakit-must-run=cuda,cuda-graphs",
                                "--dsakit-must-run-strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines(["*no collected test sits behind gate cuda-graphs: fails the run*"])


def test_expression_gate_skip_counts_once_under_xdist(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The controller files the forwarded skip before the worker's record arrives: an expression
    code (`sm~10`, `gfx in ...`) must be read back from the message, never also as [uncoded]."""
    pytester.makepyfile(
        "import dsakit, pytest\n\n"
        "@dsakit.gate('sm~10')\n@pytest.mark.parametrize('n', range(3))\ndef test_blackwell(n):\n    pass\n\n"
        "@dsakit.gate('gfx in gfx942,gfx950')\ndef test_mi300():\n    pass\n")
    report = tmp_path / "skips.json"
    result = pytester.runpytest_subprocess(*PLUGIN, "-n", "2", "--dsakit-device=sm90", f"--dsakit-report={report}")
    result.assert_outcomes(skipped=4)
    data = json.loads(report.read_text())
    assert {g["code"]: g["count"] for g in data["skips"]["groups"]} == {"sm~10": 3, "gfx in gfx942,gfx950": 1}
    inventory = result.stdout.str().split("dsakit skip inventory")[1]
    assert "uncoded" not in inventory
    assert "   3 skipped  [sm~10]" in inventory


def test_expression_codes_read_back_from_messages() -> None:
    from dsakit.gates.inventory import SkipInventory, reasons_from_message
    from dsakit.reasons import Reason

    assert [r.code for r in reasons_from_message("Skipped: [sm~10] a | [gfx in gfx942,gfx950] b")] == [
        "sm~10", "gfx in gfx942,gfx950"]
    assert reasons_from_message("Skipped: see [cuda] later") == []  # a coded skip starts with its code
    inventory = SkipInventory()  # an xdist controller: the worker's report arrives, then its hand-over
    inventory.record(pytest.TestReport("t::a", ("t", 1, "a"), {}, "skipped", ("t", 1, "Skipped: [sm~10] x"), "setup"))
    inventory.merge({"declared": {"t::a": ["sm~10"]}, "used": True})
    assert [(s.test, s.reasons) for s in inventory.skips] == [("t::a", (Reason("sm~10", "x"),))]
    assert inventory.skipped_behind(["sm~10"]) == {"sm~10": ["t::a"]}
