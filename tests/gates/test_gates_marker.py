"""`dsakit_requires` / `dsakit.gate` / `dsakit.require` in a pytest run (pytester, in-process:
these runs load neither torch nor SGLang)."""

from __future__ import annotations

from dsakit.node.pytest_invocation import plugin_args

import pytest

# The plugin loads through its pytest11 entry point when dsakit is installed; on a node that only
# has the checkout on PYTHONPATH, inner runs load it explicitly.
PLUGIN = tuple(plugin_args())


pytestmark = pytest.mark.usefixtures("no_kernel_modules")

GATED = """
import pytest
import dsakit

@dsakit.gate("cuda")
def test_cuda():
    pass

@dsakit.gate("fa3")
def test_fa3():
    pass

@dsakit.gate("trtllm-dsa-decode")
def test_trtllm():
    pass

@pytest.mark.dsakit_requires("rocm")
def test_raw_marker():
    pass

@pytest.mark.parametrize("arch", [
    pytest.param("sm10x", marks=dsakit.gate("sm~10")),
    pytest.param("hopper", marks=dsakit.gate("sm==9.0")),
    "any",
])
def test_param(arch):
    pass

@pytest.fixture
def amd():
    dsakit.require("gfx in gfx942,gfx950")

def test_require_in_fixture(amd):
    pass

def test_require_in_test():
    dsakit.require("cuda-graphs")
"""


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for line in result.outlines:
        for word in ("PASSED", "SKIPPED"):
            if f" {word}" in line and "::" in line:
                outcomes[line.split("::", 1)[1].split(" ")[0]] = word
    return outcomes


@pytest.mark.parametrize(
    ("device", "passed"),
    [
        ("sm90", {"test_cuda", "test_param[hopper]", "test_param[any]", "test_require_in_test"}),
        ("sm103", {"test_cuda", "test_trtllm", "test_param[sm10x]", "test_param[any]", "test_require_in_test"}),
        ("sm120", {"test_cuda", "test_param[any]", "test_require_in_test"}),
        ("gfx90a", {"test_raw_marker", "test_param[any]", "test_require_in_test"}),
        ("gfx950", {"test_raw_marker", "test_param[any]", "test_require_in_fixture", "test_require_in_test"}),
        ("cpu", {"test_param[any]"}),
    ],
)
def test_gates_per_simulated_device(pytester: pytest.Pytester, device: str, passed: set[str]) -> None:
    pytester.makepyfile(GATED)
    result = pytester.runpytest(*PLUGIN, "-v", "--strict-markers", f"--dsakit-device={device}")
    outcomes = _outcomes(result)
    assert {name for name, word in outcomes.items() if word == "PASSED"} == passed
    assert len(outcomes) == 9
    assert result.ret == 0


def test_env_var_selects_the_device(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(GATED)
    monkeypatch.setenv("DSAKIT_DEVICE", "b200")
    result = pytester.runpytest(*PLUGIN, "-v")
    assert _outcomes(result)["test_trtllm"] == "PASSED"
    result.stdout.fnmatch_lines(["dsakit: device NVIDIA B200 (SM 10.0*) [[]simulated sm100[]]; SGLang *"])


def test_collect_only_shows_the_skip_reasons(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(GATED)
    result = pytester.runpytest(*PLUGIN, "--collect-only", "-q", "--dsakit-device=sm120")
    result.stdout.fnmatch_lines([
        "*dsakit skip inventory*",
        "device: NVIDIA RTX PRO 6000 Blackwell (SM 12.0*) [[]simulated sm120[]]; SGLang *",
        "collect-only: skips decided at collection",
        "*1 skipped  [[]fa3[]] needs exactly SM 9.x on NVIDIA (Hopper)*, but this device is NVIDIA RTX PRO 6000*",
        "*1 skipped  [[]trtllm-dsa-decode[]] needs the SM 10.x family on NVIDIA*SM 12.0*; on SM 9.0 flashmla-sparse*",
    ])
    assert result.ret == 0


def test_skip_reasons_in_short_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(GATED)
    result = pytester.runpytest(*PLUGIN, "-rs", "--dsakit-device=gfx90a")
    result.stdout.fnmatch_lines([
        "SKIPPED * [[]fa3[]] needs exactly SM 9.x on NVIDIA*AMD reports capability 9.0 but is gated by gfx arch*",
        "SKIPPED * [[]gfx in gfx942,gfx950[]] needs an AMD GPU with arch gfx942 or gfx950, but this device is AMD Instinct MI250X*",
    ])


def test_require_skips_are_reported_at_the_calling_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(GATED)
    result = pytester.runpytest(*PLUGIN, "-rs", "--dsakit-device=cpu")
    lines = (pytester.path / "test_require_skips_are_reported_at_the_calling_line.py").read_text().splitlines()
    fixture_line = lines.index("def test_require_in_fixture(amd):") + 1  # pytest: a fixture's skip is the test's
    test_line = lines.index('    dsakit.require("cuda-graphs")') + 1
    result.stdout.fnmatch_lines([
        f"SKIPPED [[]1[]] test_require_skips_are_reported_at_the_calling_line.py:{fixture_line}: [[]gfx in*",
        f"SKIPPED [[]1[]] test_require_skips_are_reported_at_the_calling_line.py:{test_line}: [[]cuda-graphs[]]*",
    ])
    assert "marks.py" not in result.stdout.str()


def test_unknown_code_in_gate_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import dsakit\n\n@dsakit.gate('fa4')\ndef test_x():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=sm90")
    result.stdout.fnmatch_lines(["*UsageError: unknown dsakit gate 'fa4'; valid codes: cuda, rocm, fa3,*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_unknown_code_in_raw_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.dsakit_requires('sm>=9')\ndef test_x():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=sm90")
    result.stderr.fnmatch_lines(["ERROR: test_*.py::test_x: bad capability expression 'sm>=9': '>=' needs MAJOR.MINOR*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_unknown_device_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--dsakit-device=h300")
    result.stderr.fnmatch_lines(["ERROR: unknown dsakit device 'h300'; valid names: real (this machine's own device), sm90, *"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_never_open_combination_warns_at_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import dsakit\n\n@dsakit.gate('fa3', 'aiter')\ndef test_x():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--collect-only", "--dsakit-device=sm90")
    result.stdout.fnmatch_lines(["*DsakitGateWarning: gates fa3, aiter can never open together on any known device*"])


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*PLUGIN, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.dsakit_requires(*codes): skip unless every dsakit gate is open*"])
