"""The declared gate table: every gate's outcome on every simulated device, expressions, reasons."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dsakit.gates import table as gates

from dsakit.stack import sglang_release
from dsakit.gates.device_model import SIMULATED
from dsakit.errors import UsageError
from dsakit.gates.table import (
    closed_reasons,
    evaluate,
    gate_for,
    gate_table,
    never_open_explanation,
    split_codes,
    validate_codes,
)
from dsakit.stack.sglang_release import FEATURES, release_from_tree

REQUIRED = [
    "cuda", "rocm", "fa3", "trtllm-dsa-decode", "flashmla-sparse", "flashinfer-gvr-topk", "aiter",
    "fp8-kv", "topk-v2-cluster", "cuda-graphs", "module:sgl_kernel", "module:flashinfer",
    "module:flash_mla", "module:deep_gemm", "module:tilelang", "module:aiter", "jit:tvm-ffi-nvcc",
    *(f"sglang:{code}" for code in FEATURES),
]

DEVICE_GATES = [
    "cuda", "rocm", "fa3", "trtllm-dsa-decode", "flashmla-sparse", "flashinfer-gvr-topk", "aiter",
    "fp8-kv", "topk-v2-cluster", "cuda-graphs",
]

# The device part of every device gate, per simulated device (module parts are checked below).
OPEN_ON: dict[str, set[str]] = {
    "sm90": {"cuda", "fa3", "flashmla-sparse", "fp8-kv", "topk-v2-cluster", "cuda-graphs"},
    "sm100": {"cuda", "trtllm-dsa-decode", "flashmla-sparse", "flashinfer-gvr-topk", "fp8-kv",
              "topk-v2-cluster", "cuda-graphs"},
    "sm103": {"cuda", "trtllm-dsa-decode", "flashmla-sparse", "flashinfer-gvr-topk", "fp8-kv",
              "topk-v2-cluster", "cuda-graphs"},
    "sm120": {"cuda", "flashinfer-gvr-topk", "fp8-kv", "topk-v2-cluster", "cuda-graphs"},
    "gfx90a": {"rocm", "cuda-graphs"},
    "gfx942": {"rocm", "aiter", "fp8-kv", "cuda-graphs"},
    "gfx950": {"rocm", "aiter", "fp8-kv", "cuda-graphs"},
    "cpu": set(),
}


def _clear_caches() -> None:
    gates._importable.cache_clear()
    gates._package_dir.cache_clear()
    gates._package_has_file.cache_clear()


@pytest.fixture
def kernel_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Fake sgl_kernel (with flash_ops and flashmla_ops files) and flash_mla packages on sys.path."""
    package = tmp_path / "sgl_kernel"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('gates must not import sgl_kernel')\n")
    (package / "flash_ops.abi3.so").write_bytes(b"")
    (package / "flashmla_ops.abi3.so").write_bytes(b"")
    (tmp_path / "flash_mla").mkdir()
    (tmp_path / "flash_mla" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    _clear_caches()
    yield package
    _clear_caches()


def test_every_required_code_is_declared() -> None:
    assert set(REQUIRED) <= set(gate_table())
    assert {gate.kind for gate in gate_table().values()} == {"device", "module", "jit", "sglang"}


@pytest.mark.parametrize("device", list(SIMULATED))
def test_device_gate_table(device: str) -> None:
    opened = {code for code in DEVICE_GATES if gate_for(code).device_allows(SIMULATED[device])}
    assert opened == OPEN_ON[device]


@pytest.mark.parametrize("device", list(SIMULATED))
def test_full_outcome_with_kernel_modules_installed(device: str, kernel_modules: Path) -> None:
    opened = {code for code in DEVICE_GATES if evaluate(code, SIMULATED[device]).open}
    assert opened == OPEN_ON[device]


@pytest.mark.parametrize("device", list(SIMULATED))
def test_full_outcome_without_kernel_modules(device: str, no_kernel_modules: None) -> None:
    opened = {code for code in DEVICE_GATES if evaluate(code, SIMULATED[device]).open}
    assert opened == OPEN_ON[device] - {"fa3", "flashmla-sparse"}
    assert not any(evaluate(f"module:{m}", SIMULATED[device]).open
                   for m in ("sgl_kernel", "flashinfer", "flash_mla", "deep_gemm", "tilelang", "aiter"))


def test_mi200_reports_9_0_but_is_not_hopper() -> None:
    assert SIMULATED["gfx90a"].sm == SIMULATED["sm90"].sm == (9, 0)
    assert gate_for("fa3").device_allows(SIMULATED["sm90"])
    outcome = evaluate("fa3", SIMULATED["gfx90a"])
    assert not outcome.open and outcome.reason is not None
    assert "AMD reports capability 9.0 but is gated by gfx arch" in outcome.reason.message
    assert not evaluate("sm==9.0", SIMULATED["gfx90a"]).open


def test_mi355_reports_9_5_but_is_not_sm_9x() -> None:
    assert SIMULATED["gfx950"].sm == (9, 5)
    for code in ("fa3", "sm~9", "sm>=9.0", "topk-v2-cluster", "cuda"):
        assert not evaluate(code, SIMULATED["gfx950"]).open, code
    assert evaluate("gfx in gfx942,gfx950", SIMULATED["gfx950"]).open


def test_trtllm_is_the_10x_family_not_at_least_10() -> None:
    assert evaluate("trtllm-dsa-decode", SIMULATED["sm100"]).open
    assert evaluate("trtllm-dsa-decode", SIMULATED["sm103"]).open
    closed = evaluate("trtllm-dsa-decode", SIMULATED["sm120"])
    assert not closed.open and closed.reason is not None and "SM 12.0" in closed.reason.message
    # flashinfer-gvr-topk is ">= 10": 12.x is in
    assert evaluate("flashinfer-gvr-topk", SIMULATED["sm120"]).open


@pytest.mark.parametrize(
    ("expression", "canonical", "opens_on"),
    [
        ("sm>=9.0", "sm>=9.0", {"sm90", "sm100", "sm103", "sm120"}),
        (" sm >= 10.0 ", "sm>=10.0", {"sm100", "sm103", "sm120"}),
        ("sm==9.0", "sm==9.0", {"sm90"}),
        ("sm==10.3", "sm==10.3", {"sm103"}),
        ("sm~10", "sm~10", {"sm100", "sm103"}),
        ("sm~12", "sm~12", {"sm120"}),
        ("gfx in gfx942,gfx950", "gfx in gfx942,gfx950", {"gfx942", "gfx950"}),
        ("gfx in gfx90a", "gfx in gfx90a", {"gfx90a"}),
    ],
)
def test_capability_expressions(expression: str, canonical: str, opens_on: set[str]) -> None:
    assert validate_codes([expression]) == (canonical,)
    assert {key for key, device in SIMULATED.items() if evaluate(expression, device).open} == opens_on


@pytest.mark.parametrize("bad", ["sm>=9", "sm==10", "sm~10.0", "sm>9.0", "sm>=x", "gfx in", "gfx==gfx942", "smx"])
def test_bad_expressions_list_the_syntax(bad: str) -> None:
    with pytest.raises(UsageError, match="capability expression") as info:
        validate_codes([bad])
    assert "'sm>=MAJOR.MINOR'" in str(info.value) and "'sm~MAJOR'" in str(info.value)


def test_unknown_code_lists_valid_codes() -> None:
    with pytest.raises(UsageError) as info:
        validate_codes(["fa4"])
    message = str(info.value)
    assert "unknown dsakit gate 'fa4'" in message
    for code in REQUIRED:
        assert code in message


def test_reasons_say_what_is_missing_and_what_covers_it() -> None:
    for code in DEVICE_GATES:
        for device in SIMULATED.values():
            outcome = evaluate(code, device)
            if outcome.reason is None:
                continue
            assert outcome.reason.code == code
            assert outcome.reason.message.startswith("needs ")
            assert ", but this device is " in outcome.reason.message or ", but " in outcome.reason.message
            assert outcome.reason.message.count(";") >= 1  # "...; what covers it instead"
    fa3 = evaluate("fa3", SIMULATED["sm100"]).reason
    assert fa3 is not None and "trtllm-dsa-decode and flashmla-sparse cover" in fa3.message


def test_module_gate_on_simulated_device_says_it_checked_this_machine(no_kernel_modules: None) -> None:
    simulated = evaluate("module:flashinfer", SIMULATED["sm100"]).reason
    assert simulated is not None
    assert "check this machine even with a simulated device" in simulated.message
    fa3 = evaluate("fa3", SIMULATED["sm90"]).reason
    assert fa3 is not None and "'sgl_kernel' is not installed" in fa3.message


def test_fa3_needs_the_flash_ops_file_not_an_import(kernel_modules: Path) -> None:
    assert evaluate("fa3", SIMULATED["sm90"]).open  # sgl_kernel/__init__ raises: it was never imported
    (kernel_modules / "flash_ops.abi3.so").unlink()
    _clear_caches()
    reason = evaluate("fa3", SIMULATED["sm90"]).reason
    assert reason is not None and "no FA3 flash_ops extension" in reason.message


def test_jit_gate_needs_tvm_ffi_and_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gates, "_importable", lambda name: name == "tvm_ffi")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    reason = evaluate("jit:tvm-ffi-nvcc", SIMULATED["sm90"]).reason
    assert reason is not None and "no nvcc on PATH or under $CUDA_HOME/bin" in reason.message
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert evaluate("jit:tvm-ffi-nvcc", SIMULATED["sm90"]).open


def _old_sglang(tmp_path: Path) -> sglang_release.SGLangRelease:
    package = tmp_path / "sglang"
    for relative in (sglang_release.MODEL_RUNNER_FILE, sglang_release.DSA_BACKEND_FILE,
                     sglang_release.DSA_TOPK_BACKEND_FILE):
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text("class DSATopKBackend:\n    pass\n")
    (package / "version.py").write_text('__version__ = "0.5.17"\n')
    return release_from_tree(tmp_path)


def test_sglang_gates_name_the_installed_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = _old_sglang(tmp_path)
    monkeypatch.setattr(sglang_release, "installed_release", lambda: release)
    assert evaluate("sglang:dsa-backend", SIMULATED["cpu"]).open
    reason = evaluate("sglang:topk-role-split", SIMULATED["cpu"]).reason
    assert reason is not None and reason.code == "sglang:topk-role-split"
    assert "installed SGLang 0.5.17 lacks it" in reason.message
    assert "needs the per-role top-k split" in reason.message
    assert "single-flag tests" in reason.message


def test_closed_reasons_keeps_only_closed_gates_once() -> None:
    reasons = closed_reasons(["cuda", "cuda", "sm~10", "rocm"], SIMULATED["sm103"])
    assert [r.code for r in reasons] == ["rocm"]


def test_never_open_combinations() -> None:
    assert never_open_explanation(("fa3", "aiter")) is not None
    assert never_open_explanation(("sm>=13.0",)) is not None
    assert never_open_explanation(("fa3", "module:flashinfer")) is None
    for code in gate_table():  # every declared gate opens on some known device
        assert never_open_explanation((code,)) is None, code


def test_split_codes_keeps_gfx_lists_whole() -> None:
    assert split_codes("fa3, gfx in gfx942,gfx950,cuda,", "--dsakit-must-run") == ["fa3", "gfx in gfx942,gfx950", "cuda"]


# ---------------------------------------------------------------- gaps found by mutation testing
# (bench/README.md "Mutation testing": each test below kills a mutant that survived the suite)


def test_declared_gates_are_immutable_and_a_gate_without_checks_is_open() -> None:
    import dataclasses

    from dsakit.gates.table import Gate

    gate = gate_table()["cuda"]
    with pytest.raises(dataclasses.FrozenInstanceError):  # the table is cached and shared by every run
        gate.code = "rocm"  # type: ignore[misc]
    bare = Gate("x", "module", "nothing", "everything")
    assert bare.why_closed(SIMULATED["cpu"]) is None and bare.device_allows(SIMULATED["cpu"])
    outcome = evaluate("cuda", SIMULATED["sm90"])
    assert outcome.code == "cuda" and outcome.open and outcome.reason is None


def test_any_of_names_the_first_alternative_when_none_holds() -> None:
    reason = evaluate("fp8-kv", SIMULATED["cpu"]).reason  # NVIDIA SM >= 8.9, or AMD gfx942/gfx950
    assert reason is not None and "[simulated cpu], not an NVIDIA GPU;" in reason.message


def test_module_gate_on_the_real_device_has_no_simulation_note(no_kernel_modules: None) -> None:
    from dsakit.gates.device_model import REAL, DeviceModel

    reason = evaluate("module:flashinfer", DeviceModel(REAL, "cpu", "CPU")).reason
    assert reason is not None
    assert reason.message.startswith("needs the Python module 'flashinfer', but it is not installed in "
                                     "this environment; ")


def test_flashmla_sparse_opens_with_sgl_kernels_bundled_flashmla_alone(kernel_modules: Path) -> None:
    # the 0.5.17 node has FlashMLA only inside sgl_kernel (no standalone flash_mla package)
    import shutil

    shutil.rmtree(kernel_modules.parent / "flash_mla")
    _clear_caches()
    assert evaluate("flashmla-sparse", SIMULATED["sm90"]).open
    (kernel_modules / "flashmla_ops.abi3.so").unlink()
    _clear_caches()
    reason = evaluate("flashmla-sparse", SIMULATED["sm90"]).reason
    assert reason is not None and "neither the flash_mla package nor sgl_kernel's flashmla_ops" in reason.message


def test_jit_gate_names_the_missing_tvm_ffi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gates, "_importable", lambda name: False)
    (tmp_path / "nvcc").write_text("")
    (tmp_path / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = evaluate("jit:tvm-ffi-nvcc", SIMULATED["sm90"]).reason
    assert reason is not None and "but tvm_ffi is not importable (module and tool gates" in reason.message


def test_split_codes_joins_gfx_archs_to_the_list_just_before() -> None:
    assert split_codes("gfx in gfx942,gfx950", "--dsakit-must-run") == ["gfx in gfx942,gfx950"]
    assert split_codes("fa3,cuda,rocm,gfx in gfx90a,gfx942", "--dsakit-must-run") == ["fa3", "cuda", "rocm", "gfx in gfx90a,gfx942"]


@pytest.mark.usefixtures("as_its_own_process")  # SGLang imports here: the import-chain gate is open either way
def test_closed_gate_reasons_are_neutral_for_any_suite() -> None:
    """A downstream suite's skipped test is told what the gate needs and where it runs, not which
    of dsakit's own suites covers the case."""
    from dsakit.gates.device_model import SIMULATED
    from dsakit.gates.table import evaluate, gate_table

    for device in SIMULATED.values():
        for code in gate_table():
            reason = evaluate(code, device).reason
            text = reason.message if reason is not None else ""
            for phrase in ("contract suites", "CPU mocks", "dsakit's own", "the Python side"):
                assert phrase not in text, (code, device.key, text)


# ---------------------------------------------------------------- a simulation's stand-ins (issue 34 item 9)


@pytest.mark.parametrize(("code", "libraries"), [
    ("module:deep_gemm", ["deep_gemm"]),
    ("module:sgl_kernel.flashmla_ops", ["sgl_kernel"]),  # found by file inside the package
    ("flashmla-sparse", ["flash_mla", "sgl_kernel"]),  # a device gate with a module part
])
def test_a_simulations_stand_in_module_is_not_installed_for_a_gate(
        monkeypatch: pytest.MonkeyPatch, code: str, libraries: list[str]) -> None:
    """Under `--dsakit-device`, a kernel library this machine lacks imports as a stand-in (so
    SGLang's modules import); module gates still find it absent, imported or not: a stand-in's
    every call refuses to launch, so a test behind the gate could only skip later, unexplained."""
    import importlib
    import sys

    from dsakit.simulation.kernels import StandIn, StandInFinder

    if any(name in sys.modules for name in libraries):
        pytest.skip(f"[module-imported] {libraries} already imported in this process")
    device = SIMULATED["sm90"]
    finder = StandInFinder(libraries, device)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    _clear_caches()
    try:
        assert all(importlib.util.find_spec(name).loader is finder for name in libraries)  # type: ignore[union-attr]
        closed = evaluate(code, device)
        assert not closed.open and "(module and tool gates check this machine even with a simulated device)" in str(closed.reason)
        assert all(isinstance(importlib.import_module(name), StandIn) for name in libraries)
        _clear_caches()
        assert not evaluate(code, device).open  # once imported, the stand-in still counts as absent
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] in libraries]:
            del sys.modules[name]
        _clear_caches()
