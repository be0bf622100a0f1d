"""A simulated device judges its own kernels' rules (issue 42, items 1 and 2): a portable kernel's
launch is checked against the simulated arch's argument rules, and an arch-only kernel with a
declared reference runs through it, after the same rules.

This box has no GPU: the guards are installed in-process on stand-in modules named as the kernel
libraries' (what the real GPU would run is the stand-in function), with CPU tensors.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
import types
from typing import Any

import pytest

from dsakit.errors import ArchRuleBreach
from dsakit.gates.device_model import simulated_model
from dsakit.stack.import_hooks import Patches
from dsakit.simulation import arch_rules
from dsakit.simulation.kernel_archs import ARCH_ONLY, family_of_entry
from dsakit.simulation.probe_patches import SimulatedKernelLaunch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (CPU is enough)")

SPARSE = "sgl_kernel.flash_mla:flash_mla_sparse_fwd"
RAGGED = "flashinfer.prefill:trtllm_ragged_attention_deepseek"


@pytest.fixture(autouse=True)
def no_installed_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build-dependent rules read only the builds a test installs, not this machine's (a GPU node
    has sgl_kernel's FlashMLA)."""
    def folder(package: str) -> str | None:
        module = sys.modules.get(package)
        return os.path.dirname(module.__file__) if getattr(module, "__file__", None) else None  # type: ignore[union-attr, arg-type]

    monkeypatch.setattr(arch_rules, "_package_folder", folder)


def _library(monkeypatch: pytest.MonkeyPatch, name: str, **functions: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for function, value in functions.items():
        setattr(module, function, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


# ---------------------------------------------------------------- the declared table


def test_every_rule_cites_the_kernels_own_check_and_every_entry_sglangs_call_site() -> None:
    from dsakit.devices import DEVICES

    for entry in arch_rules.ARCH_RULES:
        assert entry.callers.startswith("sglang/") and entry.targets, entry.kernel
        assert all(t.count(":") == 1 for t in entry.targets), entry.kernel
        for rule in entry.rules:
            assert rule.source and rule.says and set(rule.archs) <= set(DEVICES), (entry.kernel, rule.argument)
    sparse = arch_rules.entry_of(SPARSE)
    assert sparse is not None and {a for r in sparse.rules for a in r.archs} >= {"sm90", "sm100", "sm103"}


def test_only_the_simulated_archs_rules_are_evaluated_with_the_real_archs_rule_beside() -> None:
    import torch

    sparse = arch_rules.entry_of(SPARSE)
    assert sparse is not None
    q64 = {"q": torch.zeros(2, 64, 576)}
    (breach,) = arch_rules.breaches(sparse, q64, "sm103", "sm90")  # no build installed here: 128 only
    assert str(breach.value).startswith("64 (no installed build to read")
    assert breach.here is not None and "64 or 128" in breach.here.says
    assert arch_rules.breaches(sparse, q64, "sm90", "sm103") == []  # Hopper's build takes 64 heads
    assert arch_rules.breaches(sparse, {"q": torch.zeros(2, 128, 576)}, "sm103", "sm90") == []


def _build(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, name: str, carries: bytes) -> None:
    """An installed sgl_kernel whose FlashMLA binary carries `carries` among its other bytes."""
    package = tmp_path / name / "sgl_kernel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "flashmla_ops.abi3.so").write_bytes(b"\x7fELF" + b"\0" * 4096 + carries + b"\0" * 64)
    module = types.ModuleType("sgl_kernel")
    module.__file__ = str(package / "__init__.py")
    monkeypatch.setitem(sys.modules, "sgl_kernel", module)


@pytest.mark.parametrize(("carries", "refused"), [
    (b"21Fwd_Sm100_Head64_Impl\0" b"22Fwd_Sm100_Head128_Impl", False),  # sglang-kernel 0.4.5, the H200 pack's
    (b"22Fwd_Sm100_Head128_Impl", True),  # a build before FlashMLA's SM100 head64 sparse prefill
])
def test_the_sm100_head_rule_reads_the_build_the_gpu_would_load(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, carries: bytes, refused: bool) -> None:
    import torch

    _build(monkeypatch, tmp_path, "site", carries)
    sparse = arch_rules.entry_of(SPARSE)
    assert sparse is not None
    found = arch_rules.breaches(sparse, {"q": torch.zeros(2, 64, 576)}, "sm103", "sm90")
    assert bool(found) is refused
    if refused:
        assert found[0].value == f"64 (the installed build {tmp_path}/site/sgl_kernel/flashmla_ops.abi3.so has no " \
                                 "Fwd_Sm100_Head64_Impl)"
    # 128 heads run on either build; 96 on neither
    assert arch_rules.breaches(sparse, {"q": torch.zeros(2, 128, 576)}, "sm100", "sm90") == []
    assert str(arch_rules.breaches(sparse, {"q": torch.zeros(2, 96, 576)}, "sm100", "sm90")[0].value).startswith("96")


def test_an_installed_package_is_found_without_importing_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.undo()  # the real lookup
    package = tmp_path / "a_kernel_library"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('importing it is not allowed')")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert arch_rules._package_folder("a_kernel_library") == str(package)
    assert "a_kernel_library" not in sys.modules
    assert arch_rules._package_folder("no_such_library_here") is None


def test_a_rebuilt_binary_is_read_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import torch

    _build(monkeypatch, tmp_path, "site", b"22Fwd_Sm100_Head128_Impl")
    sparse = arch_rules.entry_of(SPARSE)
    assert sparse is not None
    q64 = {"q": torch.zeros(2, 64, 576)}
    assert arch_rules.breaches(sparse, q64, "sm103", "sm90")
    binary = tmp_path / "site" / "sgl_kernel" / "flashmla_ops.abi3.so"
    binary.write_bytes(binary.read_bytes() + b"21Fwd_Sm100_Head64_Impl")  # a new build in place
    assert arch_rules.breaches(sparse, q64, "sm103", "sm90") == []


# ---------------------------------------------------------------- a portable kernel: the simulated arch's rules


def test_a_portable_kernel_breaking_the_simulated_archs_rule_fails_before_it_launches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from dsakit.simulation.kernels import check_arch_rules

    launched: list[int] = []

    def flash_mla_sparse_fwd(q: Any, kv: Any, indices: Any, sm_scale: float, d_v: int = 512,
                             attn_sink: Any = None, topk_length: Any = None) -> Any:
        launched.append(q.shape[1])
        return q, None, None

    library = _library(monkeypatch, "sgl_kernel.flash_mla", flash_mla_sparse_fwd=flash_mla_sparse_fwd)
    user = _library(monkeypatch, "a_backend", flash_mla_sparse_fwd=flash_mla_sparse_fwd)  # bound by name
    patches = Patches()
    try:
        check_arch_rules(patches, library, arch_rules.entries_by_module()["sgl_kernel.flash_mla"],
                         simulated_model("sm103"), "sm90")
        kv, indices = torch.zeros(8, 1, 576), torch.zeros(2, 1, 4, dtype=torch.int32)
        for bound in (library.flash_mla_sparse_fwd, user.flash_mla_sparse_fwd):
            with pytest.raises(ArchRuleBreach) as caught:
                bound(torch.zeros(2, 64, 576), kv, indices, 0.1)  # padded to Hopper's 64
        library.flash_mla_sparse_fwd(q=torch.zeros(2, 128, 576), kv=kv, indices=indices, sm_scale=0.1)
    finally:
        patches.restore()
    assert launched == [128]  # the breaching calls never launched; the 128-head one ran for real
    assert library.flash_mla_sparse_fwd is flash_mla_sparse_fwd and user.flash_mla_sparse_fwd is flash_mla_sparse_fwd
    message = str(caught.value)
    assert message.startswith("FlashMLA sparse prefill (flash_mla_sparse_fwd) (sgl_kernel.flash_mla."
                              "flash_mla_sparse_fwd), called at ")
    assert "a real NVIDIA B300 refuses or miscomputes this call, which sm90 accepts" in message
    assert "q.shape[1] (h_q) = 64 (no installed build to read; taken as one without Fwd_Sm100_Head64_Impl): " \
           "simulated sm103's rule: h_q must be 128, or 64 where the SM100 build has the head64 kernel" in message
    assert "sm90's rule: h_q must be 64 or 128" in message and "sparse_fwd.h" in message
    assert "this call keeps it" in message
    assert "SGLang's call site: sglang/srt/layers/attention/dsa_backend.py DSABackend._forward_flashmla_sparse" in message
    assert "deepseek_v4_backend.py _forward_prefill_sparse" in message
    assert caught.value.argument == "q.shape[1] (h_q)"


def test_a_kernel_without_a_python_signature_is_bound_by_the_declared_parameter_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from dsakit.simulation.kernels import check_arch_rules

    builtin = _library(monkeypatch, "deep_gemm", get_paged_mqa_logits_metadata=max)  # a C function: no signature
    patches = Patches()
    try:
        check_arch_rules(patches, builtin, arch_rules.entries_by_module()["deep_gemm"], simulated_model("sm90"),
                         "sm103")
        with pytest.raises(ArchRuleBreach, match=r"block_kv = 32: simulated sm90's rule: block_kv must be 64 .*"
                                                 r"sm103's rule: block_kv must be 32 or 64"):
            builtin.get_paged_mqa_logits_metadata(torch.zeros(2, 1), 32, 132)
        assert builtin.get_paged_mqa_logits_metadata(3, 64, 5) == 64  # within the rule: the real one answers
    finally:
        patches.restore()


def test_a_verify_schedule_whose_last_column_is_not_each_requests_longest_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The SM100 DG-native target-verify schedule: per-position [batch, next_n] lengths pass, the same
    lengths reversed (DeepGEMM plans each request from the last column) fail on either arch."""
    import torch

    from dsakit.simulation.kernels import check_arch_rules

    def get_paged_mqa_logits_metadata(context_lens: Any, block_kv: int, num_sms: int) -> Any:
        return context_lens

    library = _library(monkeypatch, "deep_gemm", get_paged_mqa_logits_metadata=get_paged_mqa_logits_metadata)
    patches = Patches()
    try:
        check_arch_rules(patches, library, arch_rules.entries_by_module()["deep_gemm"], simulated_model("sm103"),
                         "sm90")
        per_position = torch.tensor([[129, 130, 131]], dtype=torch.int32)  # SM100 target verify, next_n 3
        assert library.get_paged_mqa_logits_metadata(per_position, 64, 132) is per_position
        with pytest.raises(ArchRuleBreach, match=r"context_lens \(\[batch, next_n\]\) = request 0's row "
                                                 r"\[131, 130, 129\]: column 0 holds 131, the last column 129: "
                                                 r"simulated sm103's rule: each request's last column .*"
                                                 r"sm90's rule: each request's last column .*this call breaks it "
                                                 r"too") as caught:
            library.get_paged_mqa_logits_metadata(per_position.flip(1), 64, 132)
        assert "miscomputes this call, as sm90 would (SGLang takes this call only where it simulates sm103)" \
            in str(caught.value)
    finally:
        patches.restore()


# ---------------------------------------------------------------- an arch-only kernel: its reference stand-in


def trtllm_ragged_attention_deepseek(query: Any, key: Any, value: Any, workspace_buffer: Any, seq_lens: Any,
                                     max_q_len: int, max_kv_len: int, bmm1_scale: Any, bmm2_scale: Any,
                                     o_sf_scale: float, batch_size: int, window_left: int, cum_seq_lens_q: Any,
                                     cum_seq_lens_kv: Any, enable_pdl: bool | None, is_causal: bool,
                                     return_lse: bool, attention_sinks: Any = None,
                                     skip_softmax_threshold_scale_factor: float | None = None, out: Any = None,
                                     lse: Any = None, sage_attn_sfs: Any = (None, None, None, None),
                                     num_elts_per_sage_attn_blk: Any = (0, 0, 0, 0),
                                     backend: str = "trtllm-gen") -> Any:
    raise AssertionError("the TRT-LLM-Gen kernel launched on a GPU without it")


def _ragged_call(**overrides: Any) -> dict[str, Any]:
    """SGLang 0.5.21's call (dsa_backend.py _forward_standard_mha): two requests, prefix + extend."""
    import torch

    generator = torch.Generator().manual_seed(0)
    q_lens, kv_lens, heads = [3, 2], [5, 2], 4
    call: dict[str, Any] = dict(
        query=torch.randn(sum(q_lens), heads, 192, generator=generator),
        key=torch.randn(sum(kv_lens), heads, 192, generator=generator),
        value=torch.randn(sum(kv_lens), heads, 128, generator=generator),
        workspace_buffer=torch.empty(1 << 20, dtype=torch.uint8),
        seq_lens=torch.tensor(kv_lens, dtype=torch.int32), max_q_len=3, max_kv_len=5, bmm1_scale=192 ** -0.5,
        bmm2_scale=1.0, o_sf_scale=1.0, batch_size=2, window_left=-1,
        cum_seq_lens_q=torch.tensor([0, 3, 5], dtype=torch.int32),
        cum_seq_lens_kv=torch.tensor([0, 5, 7], dtype=torch.int32), enable_pdl=False, is_causal=True,
        return_lse=False)
    return {**call, **overrides}


@pytest.fixture
def ragged(monkeypatch: pytest.MonkeyPatch) -> Any:
    from dsakit.simulation import kernels

    family = family_of_entry(RAGGED)
    assert family is not None and family in ARCH_ONLY
    library = _library(monkeypatch, "flashinfer.prefill",
                       trtllm_ragged_attention_deepseek=trtllm_ragged_attention_deepseek)
    patches = Patches()
    kernels.guard_entry_points(patches, library, [(family, "trtllm_ragged_attention_deepseek")],
                               simulated_model("sm103"), "sm90")
    kernels.STOOD_IN.clear()
    yield library.trtllm_ragged_attention_deepseek
    patches.restore()
    kernels.STOOD_IN.clear()
    assert library.trtllm_ragged_attention_deepseek is trtllm_ragged_attention_deepseek


@pytest.mark.parametrize(("workspace", "argument", "value"), [
    (None, "workspace_buffer", "None"),
    # with the lse: 8 bytes x 4 heads x 2 requests x 256 rows + the 1 MiB guard (flashinfer 0.6.18)
    ("1 MiB", "workspace_buffer (bytes)", "1048576 bytes < 1064960 needed"),
])
def test_the_stand_in_refuses_a_missing_or_short_workspace_as_the_b300_would(
        ragged: Any, workspace: str | None, argument: str, value: str) -> None:
    import torch

    from dsakit.simulation import kernels

    buffer = None if workspace is None else torch.empty(1 << 20, dtype=torch.uint8)
    with pytest.raises(ArchRuleBreach) as caught:
        ragged(**_ragged_call(workspace_buffer=buffer, return_lse=workspace is not None))
    assert caught.value.argument == argument
    assert f"{argument} = {value}: simulated sm103's rule: " in str(caught.value)
    assert "sm90 has no such rule" in str(caught.value)  # the H200 has no build of the kernel at all
    assert "_forward_standard_mha" in str(caught.value)
    assert not kernels.STOOD_IN


def test_the_stand_in_checks_the_batchs_cumulative_lengths(ragged: Any) -> None:
    import torch

    with pytest.raises(ArchRuleBreach, match=r"cum_seq_lens_q = 2 entries for batch_size 2: .*batch_size \+ 1"):
        ragged(**_ragged_call(cum_seq_lens_q=torch.tensor([0, 3], dtype=torch.int32)))


@pytest.mark.parametrize(("name", "argument"), [
    ("seq_lens", "seq_lens.dtype"), ("cum_seq_lens_q", "cum_seq_lens_q.dtype"),
    ("cum_seq_lens_kv", "cum_seq_lens_kv.dtype"),
])
def test_the_stand_in_refuses_int64_lengths_the_kernel_reads_as_int32(ragged: Any, name: str, argument: str) -> None:
    from dsakit.simulation import kernels

    call = _ragged_call()
    with pytest.raises(ArchRuleBreach) as caught:
        ragged(**{**call, name: call[name].long()})
    assert caught.value.argument == argument
    assert f"{argument} = torch.int64: simulated sm103's rule: must be int32" in str(caught.value)
    assert "static_cast<int*>" in str(caught.value) and not kernels.STOOD_IN


def test_the_stand_in_refuses_lengths_away_from_the_querys_device(ragged: Any) -> None:
    """A host-side length tensor beside a GPU query is a host pointer the B300 dereferences; here the
    query is a meta tensor standing for the GPU one (the box has no GPU), the lengths stay on the CPU."""
    import torch

    call = _ragged_call()
    with pytest.raises(ArchRuleBreach) as caught:
        ragged(**{**call, "query": call["query"].to("meta")})
    assert caught.value.argument == "seq_lens.device"
    assert "seq_lens.device = a tensor on cpu (query on meta)" in str(caught.value)
    assert "cum_seq_lens_q.device" in str(caught.value) and "cum_seq_lens_kv.device" in str(caught.value)
    assert torch.device("cpu") == call["seq_lens"].device


def test_the_stand_in_refuses_a_max_q_len_below_a_requests_q_length(ragged: Any) -> None:
    with pytest.raises(ArchRuleBreach, match=r"max_q_len = 1 < the longest request's 3: .*numCtasPerSeqQ"):
        ragged(**_ragged_call(max_q_len=1))
    assert ragged(**_ragged_call(max_q_len=8)).shape == (5, 4, 128)  # a larger bound only costs CTAs


def test_the_stand_in_writes_the_reference_output_where_the_kernel_writes_and_is_recorded(ragged: Any) -> None:
    import torch

    from dsakit.simulation import kernels

    call = _ragged_call()
    out = torch.full((5, 4, 128), float("nan"))
    returned = ragged(**call, out=out)
    assert returned is out and not out.isnan().any()
    expected = _naive(call["query"], call["key"], call["value"], [3, 2], [5, 2], 192 ** -0.5)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert list(kernels.STOOD_IN) == ["flashinfer.prefill.trtllm_ragged_attention_deepseek"]
    allocated = ragged(**_ragged_call(query=call["query"].bfloat16(), key=call["key"].bfloat16(),
                                      value=call["value"].bfloat16()))
    assert allocated.dtype == torch.bfloat16 and allocated.shape == (5, 4, 128)


def test_a_call_the_reference_does_not_model_stays_refused(ragged: Any) -> None:
    import torch

    with pytest.raises(SimulatedKernelLaunch, match=r"its stand-in does not model this call \(return_lse=True"):
        ragged(**_ragged_call(return_lse=True, workspace_buffer=torch.empty(2 << 20, dtype=torch.uint8)))


# ---------------------------------------------------------------- the reference's numerics


def _naive(query: Any, key: Any, value: Any, q_lens: list[int], kv_lens: list[int], scale: float,
           window_left: int = -1, sinks: Any = None) -> Any:
    """One query, one head, one key at a time."""
    import torch

    out = torch.zeros(query.shape[0], query.shape[1], value.shape[2])
    group = query.shape[1] // key.shape[1]
    q0 = k0 = 0
    for lq, lkv in zip(q_lens, kv_lens, strict=True):
        for i in range(lq):
            last = lkv - lq + i
            for h in range(query.shape[1]):
                seen = [j for j in range(lkv) if j <= last and (window_left < 0 or j >= last - window_left)]
                logits = [scale * float(query[q0 + i, h] @ key[k0 + j, h // group]) for j in seen]
                top = max(logits + ([float(sinks[h])] if sinks is not None else []))
                weights = [math.exp(x - top) for x in logits]
                total = sum(weights) + (math.exp(float(sinks[h]) - top) if sinks is not None else 0.0)
                for w, j in zip(weights, seen, strict=True):
                    out[q0 + i, h] += (w / total) * value[k0 + j, h // group]
        q0, k0 = q0 + lq, k0 + lkv
    return out


@pytest.mark.parametrize(("kv_heads", "window_left", "with_sinks"), [(4, -1, False), (2, 1, False), (1, -1, True)])
def test_the_references_causal_varlen_attention_is_the_naive_loops(kv_heads: int, window_left: int,
                                                                   with_sinks: bool) -> None:
    import torch

    from dsakit.simulation.reference_kernels import causal_varlen_attention

    generator = torch.Generator().manual_seed(1)
    q_lens, kv_lens = [1, 4, 2], [3, 4, 6]
    query = torch.randn(sum(q_lens), 4, 8, generator=generator)
    key = torch.randn(sum(kv_lens), kv_heads, 8, generator=generator)
    value = torch.randn(sum(kv_lens), kv_heads, 5, generator=generator)
    sinks = torch.randn(4, generator=generator) if with_sinks else None
    cum_q = torch.tensor([0, 1, 5, 7], dtype=torch.int32)
    cum_kv = torch.tensor([0, 3, 7, 13], dtype=torch.int32)
    got = causal_varlen_attention(query, key, value, cum_q, cum_kv, scale=0.3, window_left=window_left, sinks=sinks)
    torch.testing.assert_close(got, _naive(query, key, value, q_lens, kv_lens, 0.3, window_left, sinks),
                               rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- what the run says


def test_the_summary_counts_ran_stood_in_and_refused_with_their_kernels_and_the_report_marks_a_stand_in() -> None:
    from types import SimpleNamespace

    from dsakit.gates.outcomes import RAN_ON_THIS_GPU, REFUSED_HERE, THROUGH_STAND_IN, next_outcome
    from dsakit.simulation.whole_run import WholeRun

    run = WholeRun.__new__(WholeRun)
    run.device = simulated_model("sm103")
    run._ran, run._stood_in, run._refused, run._arch = {}, {}, {}, ""
    stood_in = (THROUGH_STAND_IN, {"kernels": ["flashinfer.prefill.trtllm_ragged_attention_deepseek"]})
    reports = [
        SimpleNamespace(nodeid="t.py::a", when="call", duration=0.1, skipped=False, failed=False, passed=True,
                        longrepr=None, user_properties=[(RAN_ON_THIS_GPU, {"arch": "sm90", "kernels": ["Triton k"]}),
                                                        stood_in]),
        SimpleNamespace(nodeid="t.py::b", when="call", duration=0.1, skipped=True, failed=False, passed=False,
                        longrepr=("t.py", 1, "Skipped: refused"),
                        user_properties=[(REFUSED_HERE, {"kernels": ["deep_gemm.fp8_fp4_mqa_logits"]})]),
    ]
    for report in reports:
        run._note_ran(report)  # type: ignore[arg-type]
    lines: list[str] = []
    terminal = SimpleNamespace(section=lambda title: lines.append(f"== {title}"), write_line=lines.append)
    run.summary(terminal)
    assert lines == [
        "== dsakit simulated device",
        "under simulated sm103 on this GPU (sm90): 1 kernel(s) ran for real, 1 ran with a stand-in, 1 refused "
        "(tests that launched each):",
        "  ran for real, built for this GPU:", "    Triton k (1)",
        "  ran with a stand-in (a reference computed the result):",
        "    flashinfer.prefill.trtllm_ragged_attention_deepseek (1)",
        "  refused (their tests skipped):", "    deep_gemm.fp8_fp4_mqa_logits (1)",
    ]
    record = next_outcome(None, reports[0])  # type: ignore[arg-type]
    assert record is not None and record["through_stand_in"] == stood_in[1]
    assert "through_stand_in" not in (next_outcome(None, reports[1]) or {})  # type: ignore[arg-type]


# ---------------------------------------------------------------- TRT-LLM MLA decode: its rules, its stand-in


def trtllm_batch_decode_with_kv_cache_mla(query: Any, kv_cache: Any, workspace_buffer: Any, qk_nope_head_dim: int,
                                          kv_lora_rank: int, qk_rope_head_dim: int, block_tables: Any,
                                          seq_lens: Any, max_seq_len: int, sparse_mla_top_k: int = 0,
                                          out: Any = None, bmm1_scale: Any = 1.0, bmm2_scale: Any = 1.0,
                                          sinks: Any = None, return_lse: bool = False, backend: str = "auto",
                                          multi_ctas_kv_counter_buffer: Any = None,
                                          sparse_mla_top_k_lens: Any = None, **rest: Any) -> Any:
    raise AssertionError("the TRT-LLM-Gen kernel launched on a GPU without it")


MLA = "flashinfer.mla._core:trtllm_batch_decode_with_kv_cache_mla"


def _mla_call(**overrides: Any) -> dict[str, Any]:
    """SGLang 0.5.21's DSA trtllm decode: q (batch, 1, heads, 576), kv (pages, 1, page_size, 576), the
    selected token slots (batch, 1, top_k) padded with -1."""
    import torch

    generator = torch.Generator().manual_seed(2)
    slots = torch.tensor([[[3, 70, 5, -1]], [[130, 1, 64, 200]]], dtype=torch.int32)
    call: dict[str, Any] = dict(
        query=torch.randn(2, 1, 16, 576, generator=generator), kv_cache=torch.randn(4, 1, 64, 576, generator=generator),
        workspace_buffer=torch.zeros(1 << 10, dtype=torch.uint8), qk_nope_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, block_tables=slots, seq_lens=torch.tensor([71, 201], dtype=torch.int32),
        max_seq_len=201, sparse_mla_top_k=4, bmm1_scale=576 ** -0.5, backend="trtllm-gen",
        multi_ctas_kv_counter_buffer=torch.zeros(4 * 152, dtype=torch.uint8))
    return {**call, **overrides}


@pytest.fixture
def mla_decode(monkeypatch: pytest.MonkeyPatch) -> Any:
    from dsakit.simulation import kernels

    family = family_of_entry(MLA)
    assert family is not None
    library = _library(monkeypatch, "flashinfer.mla._core",
                       trtllm_batch_decode_with_kv_cache_mla=trtllm_batch_decode_with_kv_cache_mla)
    patches = Patches()
    kernels.guard_entry_points(patches, library, [(family, "trtllm_batch_decode_with_kv_cache_mla")],
                               simulated_model("sm103"), "sm90")
    kernels.STOOD_IN.clear()
    yield library.trtllm_batch_decode_with_kv_cache_mla
    patches.restore()
    kernels.STOOD_IN.clear()


_BREACHES = [
    ({"workspace_buffer": None}, "workspace_buffer = None: simulated sm103's rule: a workspace tensor is required"),
    ({"kv_cache": "page 16"}, "kv_cache.shape[-2] (block_size) = 16: simulated sm103's rule: the page size must "
                              "be 32 or 64"),
    ({"query": "96 heads"}, "query.shape[-2] (num_heads_q) = 96: simulated sm103's rule: must not lie in 65..127"),
    # sized for the H200's 132 SMs: 2 x 16 = 32 semaphores < the B300's 148 SMs
    ({"multi_ctas_kv_counter_buffer": "132 SMs"}, "multi_ctas_kv_counter_buffer (bytes) = 528 bytes < 608 needed "
                                                  "on 148 SMs"),
]


def _breaching(overrides: dict[str, Any]) -> dict[str, Any]:
    import torch

    shaped = {"page 16": torch.zeros(16, 1, 16, 576), "96 heads": torch.zeros(2, 1, 96, 576),
              "132 SMs": torch.zeros(4 * 132, dtype=torch.uint8)}
    return _mla_call(**{k: shaped.get(v, v) if isinstance(v, str) else v for k, v in overrides.items()})


@pytest.mark.parametrize(("overrides", "expected"), _BREACHES)
def test_the_mla_decode_stand_in_first_judges_the_call_by_the_simulated_archs_rules(
        mla_decode: Any, overrides: dict[str, Any], expected: str) -> None:
    from dsakit.simulation import kernels

    with pytest.raises(ArchRuleBreach) as caught:
        mla_decode(**_breaching(overrides))
    assert expected in str(caught.value)
    assert "TensorRT-LLM MLA decode (trtllm_batch_decode_with_kv_cache_mla)" in str(caught.value)
    assert not kernels.STOOD_IN


@pytest.mark.parametrize(("overrides", "expected"), _BREACHES[:2])
def test_without_a_stand_in_the_rules_still_judge_the_call_before_it_is_refused(
        monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any], expected: str) -> None:
    from dsakit.simulation import kernels
    from dsakit.simulation.reference_kernels import REFERENCES

    monkeypatch.delitem(REFERENCES, MLA)
    library = _library(monkeypatch, "flashinfer.mla._core",
                       trtllm_batch_decode_with_kv_cache_mla=trtllm_batch_decode_with_kv_cache_mla)
    patches = Patches()
    family = family_of_entry(MLA)
    assert family is not None
    try:
        kernels.guard_entry_points(patches, library, [(family, "trtllm_batch_decode_with_kv_cache_mla")],
                                   simulated_model("sm103"), "sm90")
        with pytest.raises(ArchRuleBreach, match=re.escape(expected)):
            library.trtllm_batch_decode_with_kv_cache_mla(**_breaching(overrides))
        with pytest.raises(SimulatedKernelLaunch, match=r"exists for sm100, sm103 only and this GPU is sm90"):
            library.trtllm_batch_decode_with_kv_cache_mla(**_mla_call())  # within the rules: refused
    finally:
        patches.restore()


def test_the_mla_decode_stand_in_writes_the_reference_output_and_leaves_dense_decode_refused(mla_decode: Any) -> None:
    import torch

    from dsakit.simulation import kernels

    call = _mla_call()
    out = torch.full((2, 1, 16, 512), float("nan"), dtype=torch.bfloat16)
    assert mla_decode(**call, out=out) is out and not out.isnan().any()
    flat = call["kv_cache"].reshape(-1, 576)
    for b, slots in enumerate(([3, 70, 5], [130, 1, 64, 200])):  # the -1 slot is unused
        for h in (0, 15):
            logits = torch.stack([call["query"][b, 0, h] @ flat[s] for s in slots]) * 576 ** -0.5
            expected = torch.softmax(logits, 0) @ flat[slots][:, :512]
            torch.testing.assert_close(out[b, 0, h].float(), expected, rtol=2e-2, atol=2e-2)
    assert list(kernels.STOOD_IN) == ["flashinfer.mla._core.trtllm_batch_decode_with_kv_cache_mla"]
    with pytest.raises(SimulatedKernelLaunch, match=r"does not model this call \(dense MLA decode"):
        mla_decode(**_mla_call(sparse_mla_top_k=0, block_tables=torch.zeros(2, 4, dtype=torch.int32)))


def test_the_sparse_mla_references_top_k_lengths_limit_the_selected_tokens() -> None:
    import torch

    from dsakit.simulation.reference_kernels import sparse_mla_decode

    generator = torch.Generator().manual_seed(3)
    query, cache = torch.randn(1, 2, 2, 8, generator=generator), torch.randn(2, 1, 4, 8, generator=generator)
    slots = torch.tensor([[[6, 2, 7], [1, 0, 5]]], dtype=torch.int32)
    got = sparse_mla_decode(query, cache, slots, kv_lora_rank=5, scale=0.5, top_k_lens=torch.tensor([2, 1]))
    flat = cache.reshape(-1, 8)
    for t, used in enumerate(([6, 2], [1])):
        weights = torch.softmax(0.5 * query[0, t] @ flat[used].T, dim=-1)
        torch.testing.assert_close(got[0, t], weights @ flat[used][:, :5], rtol=1e-5, atol=1e-5)
