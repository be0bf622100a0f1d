"""Gaps in the gate table's tests found by mutation testing (bench/mutation_run.py --group gates):
on which simulated devices each device gate opens, what a closed gate says, and each gate's
requirement and covering sentence (the words every skipped test shows). In-process and fast."""

from __future__ import annotations

import pytest

from dsakit.gates.device_model import SIMULATED, simulated_model as simulated_device
from dsakit.gates.table import gate_table

# read against the comments in dsakit/gates/table.py: FA3 is exactly Hopper; trtllm-dsa-decode the
# SM 10.x family (not 12.x); FlashMLA 9.0 or 10.x; AMD is gated by gfx arch, never by its number
OPEN_ON = {
    "cuda": ["sm90", "sm100", "sm103", "sm120"],
    "rocm": ["gfx90a", "gfx942", "gfx950"],
    "fa3": ["sm90"],
    "trtllm-dsa-decode": ["sm100", "sm103"],
    "flashmla-sparse": ["sm90", "sm100", "sm103"],
    "flashinfer-gvr-topk": ["sm100", "sm103", "sm120"],
    "aiter": ["gfx942", "gfx950"],
    "fp8-kv": ["sm90", "sm100", "sm103", "sm120", "gfx942", "gfx950"],
    "topk-v2-cluster": ["sm90", "sm100", "sm103", "sm120"],
    "cuda-graphs": ["sm90", "sm100", "sm103", "sm120", "gfx90a", "gfx942", "gfx950"],
}


@pytest.mark.parametrize("code", sorted(OPEN_ON))
def test_each_device_gate_opens_exactly_on_its_devices(code: str) -> None:
    gate = gate_table()[code]
    assert [key for key in SIMULATED if gate.device_allows(simulated_device(key))] == OPEN_ON[code]


def test_gates_without_device_checks_open_on_every_device() -> None:
    for code, gate in gate_table().items():
        if code not in OPEN_ON:
            assert gate.device_checks == (), code


def _closed(code: str, key: str) -> str | None:
    device = simulated_device(key)
    return next((m for m in (c(device) for c in gate_table()[code].device_checks) if m is not None), None)


def test_a_closed_device_gate_says_what_the_device_is_and_why_it_does_not_qualify() -> None:
    def device(key: str) -> str:
        return f"this device is {simulated_device(key).describe()}"

    amd_number = ": AMD reports capability {} but is gated by gfx arch, never by that number"
    assert _closed("rocm", "sm90") == device("sm90") + ", not an AMD GPU"
    assert _closed("aiter", "sm100") == device("sm100") + ", not an AMD GPU"
    assert _closed("cuda", "cpu") == device("cpu") + ", not an NVIDIA GPU"
    assert _closed("aiter", "gfx90a") == device("gfx90a") + ", not one of gfx942, gfx950"
    assert _closed("fa3", "sm100") == device("sm100")
    assert _closed("cuda-graphs", "cpu") == device("cpu")
    assert _closed("fa3", "gfx942") == device("gfx942") + amd_number.format("9.4")
    assert _closed("cuda", "gfx950") == device("gfx950") + amd_number.format("9.5")
    assert _closed("fp8-kv", "gfx90a") == device("gfx90a") + amd_number.format("9.0")  # any_of: the first clause
    assert _closed("fa3", "sm90") is None


def test_a_gate_reason_is_needs_requirement_but_missing_then_what_covers_it() -> None:
    gate = gate_table()["fa3"]
    reason = gate.reason("this device is X")
    assert reason.code == "fa3"
    assert reason.message == f"needs {gate.requirement}, but this device is X; {gate.covered_by}"


# what every skipped test shows: (requirement, what covers the case instead)
TEXTS = {
    'cuda': ('an NVIDIA GPU (CUDA)', 'it runs on a node with an NVIDIA GPU'),
    'rocm': ('an AMD GPU (ROCm)', 'it runs on a node with an AMD GPU'),
    'fa3': ("exactly SM 9.x on NVIDIA (Hopper) with sgl_kernel's flash_ops extension", 'on SM 10.x trtllm-dsa-decode and flashmla-sparse cover DSA attention, on AMD aiter does'),
    'trtllm-dsa-decode': ('the SM 10.x family on NVIDIA (B200 10.0, B300 10.3)', 'on SM 9.0 flashmla-sparse and fa3 cover DSA decode'),
    'flashmla-sparse': ('SM 9.0 or the SM 10.x family on NVIDIA with a FlashMLA build', 'on SM 12.x and AMD the tilelang and aiter sparse paths cover it'),
    'flashinfer-gvr-topk': ('SM 10.0 or later on NVIDIA', 'on SM 9.0 the sgl_kernel fused top-k (topk-v2-cluster) covers top-k'),
    'aiter': ('an AMD gfx942 (MI300) or gfx950 (MI355) GPU', 'on NVIDIA the CUDA backends cover the same contracts; gfx90a (MI200) has no aiter MLA'),
    'fp8-kv': ('an FP8 KV cache: NVIDIA SM 8.9 or later, or AMD gfx942/gfx950', 'the bf16 KV-cache tests cover older GPUs'),
    'topk-v2-cluster': ('SM 9.0 or later on NVIDIA (thread-block clusters)', 'the v1 top-k kernel (no clusters) covers older NVIDIA GPUs and AMD'),
    'cuda-graphs': ('an NVIDIA or AMD GPU to capture CUDA/HIP graphs', 'the eager-mode tests cover the same logic without graphs'),
    'module:sgl_kernel': ("the Python module 'sgl_kernel'", 'the torch reference implementations cover the kernel contracts'),
    'module:flashinfer': ("the Python module 'flashinfer'", 'the sgl_kernel and torch reference paths cover the same cases'),
    'module:flash_mla': ("the Python module 'flash_mla'", 'the sgl_kernel FlashMLA extension or the torch reference covers it'),
    'module:sgl_kernel.flashmla_ops': ("sgl_kernel's FlashMLA extension (sgl_kernel/flashmla_ops*), which DeepSeek-V4 metadata and attention call through sgl_kernel.flash_mla", 'the DeepSeek-V4 page-table, SWA and compression kernel cases cover its metadata without FlashMLA'),
    'module:deep_gemm': ("the Python module 'deep_gemm'", 'the torch reference GEMMs cover the indexer logits'),
    'module:tilelang': ("the Python module 'tilelang'", 'the CUDA kernels in sgl_kernel cover the same cases'),
    'module:aiter': ("the Python module 'aiter'", 'on NVIDIA the CUDA backends cover the same contracts'),
    'module:sglang.test.test_utils': ("SGLang's test utilities and attention unit-test kit importable (datasets, pyarrow, setproctitle installed)", "it runs where SGLang's test dependencies are installed"),
    'sglang:import-chain': ("SGLang's own import chain (configs, pools, backends) loading in this environment (checked inside tests only: it imports SGLang)", "an environment with that release's own dependency pins runs these tests"),
    'jit:tvm-ffi-nvcc': ('the JIT toolchain (tvm_ffi importable and nvcc on PATH or $CUDA_HOME)', 'the ahead-of-time sgl_kernel ops cover the kernels without JIT'),
}


@pytest.mark.parametrize("code", sorted(TEXTS))
def test_each_gate_says_what_it_needs_and_what_covers_the_case(code: str) -> None:
    gate = gate_table()[code]
    assert (gate.requirement, gate.covered_by) == TEXTS[code]


def test_capability_expressions_build_gates_with_their_own_sentences() -> None:
    from dsakit.gates.table import parse_expression

    other = "other devices run the tests without this gate"
    expected = {
        "sm~10": ("sm~10", "the SM 10.x family on NVIDIA"),
        "sm>=9.0": ("sm>=9.0", "SM 9.0 or later on NVIDIA"),
        "sm==10.3": ("sm==10.3", "exactly SM 10.3 on NVIDIA"),
        "gfx in gfx942, gfx950": ("gfx in gfx942,gfx950", "an AMD GPU with arch gfx942 or gfx950"),
    }
    for text, (code, requirement) in expected.items():
        gate = parse_expression(text)
        assert (gate.code, gate.kind, gate.requirement, gate.covered_by) == (code, "expression", requirement, other)


def test_bad_capability_expressions_say_what_is_wrong_and_the_syntax() -> None:
    from dsakit.errors import UsageError
    from dsakit.gates.table import EXPRESSION_SYNTAX, parse_expression, validate_codes

    for text, message in (("sm~10.0", "bad capability expression 'sm~10.0': 'sm~' takes a major only (sm~10); "),
                          ("sm>=9", "bad capability expression 'sm>=9': '>=' needs MAJOR.MINOR (e.g. sm>=9.0); "),
                          ("sm<9.0", "bad capability expression 'sm<9.0'; ")):
        with pytest.raises(UsageError) as raised:
            parse_expression(text)
        assert str(raised.value) == message + EXPRESSION_SYNTAX
    with pytest.raises(UsageError) as raised:
        validate_codes([7])  # type: ignore[list-item]
    assert str(raised.value) == "dsakit gate codes are strings, got 7"


def test_gates_that_never_open_together_are_explained_with_every_known_device() -> None:
    from dsakit.gates.table import never_open_explanation

    assert never_open_explanation(["fa3", "cuda"]) is None
    assert never_open_explanation(["fa3", "aiter"]) == (
        f"gates fa3, aiter can never open together on any known device ({', '.join(SIMULATED)}): the tests "
        "behind them are skipped everywhere; split the parametrization or fix the capability requirement")
