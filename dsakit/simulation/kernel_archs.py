"""Which kernels exist for which devices, and which code sees the real GPU under a simulation.

Owns three declared tables, read by the whole-run simulation and printed by its header:
`ARCH_ONLY` (each kernel family that exists for some devices only, how a launch of it is
recognised, and why), `TOOLCHAIN` (the code that compiles and launches kernels: its device queries
answer the real GPU; each kernel library's from its record) and `NO_IMAGE` (launch errors that mean "no image of this kernel for this
GPU"). Must not import torch, SGLang or a kernel library; must not decide anything but from these
tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from dsakit.devices import DEVICES
from dsakit.stack.kernel_libraries import KERNEL_LIBRARIES

Verdict = Literal["run", "refuse", "absent"]
"""run: the kernel exists for the simulated device and this GPU: it launches for real.
refuse: it exists for the simulated device, not this GPU: refused before launch (a skip).
absent: it does not exist for the simulated device: a real one fails here (a failure)."""


@dataclass(frozen=True)
class KernelFamily:
    """One kernel family that exists for some devices only.

    devices       the device-table keys (dsakit/devices.py) it has an image for
    entry_points  "module:function" Python entry points that launch it (patched where defined and
                  wherever a module bound the name)
    jit_names     regular expressions over JIT module names (SGLang's `load_jit`, flashinfer's
                  `JitSpec`) that build it
    """

    key: str
    name: str
    devices: tuple[str, ...]
    why: str
    entry_points: tuple[str, ...] = ()
    jit_names: tuple[str, ...] = ()

    def verdict(self, simulated: str, real: str | None) -> Verdict:
        if simulated not in self.devices:
            return "absent"
        return "run" if real in self.devices else "refuse"

    def runs_on(self) -> str:
        return ", ".join(self.devices)


_SM10X = ("sm100", "sm103")

ARCH_ONLY: tuple[KernelFamily, ...] = (
    KernelFamily(
        "trtllm-gen", "TensorRT-LLM-Gen attention (flashinfer's trtllm_* kernels)", _SM10X,
        "its kernels ship as cubins for SM 10.x only (SGLang takes them on SM >= 10: the dense "
        "fallback's ragged prefill, the trtllm DSA decode)",
        entry_points=(
            "flashinfer.prefill:trtllm_ragged_attention_deepseek",
            "flashinfer.prefill:trtllm_batch_context_with_kv_cache",
            "flashinfer.decode:trtllm_batch_decode_with_kv_cache",
            "flashinfer.mla._core:trtllm_batch_decode_with_kv_cache_mla",
            "flashinfer.mla._core:trtllm_batch_decode_sparse_mla_dsv4",
        ),
        jit_names=(r"trtllm_gen", r"fmha_gen"),
    ),
    KernelFamily(
        "sm100-jit", "SM 10.x kernels built by flashinfer's or SGLang's JIT (tcgen05, SM100 CUTLASS)",
        _SM10X, "their sources use SM 10.x-only instructions (tcgen05, TMEM): nvcc cannot build them "
        "for another arch",
        jit_names=(r"sm_?10[03]", r"tcgen05", r"blackwell"),
    ),
    KernelFamily(
        "cutlass-mla-sm100", "sgl-kernel's CUTLASS MLA decode (SM 10.x)", _SM10X,
        "built for SM 10.x only (sgl_kernel's sm100 ops)",
        entry_points=("sgl_kernel.attention:cutlass_mla_decode", "sgl_kernel.attention:cutlass_mla_get_workspace_size"),
    ),
    KernelFamily(
        "sm100-gluon", "SGLang's SM100 Gluon kernels (DeepSeek-V4.1's swap-AB decode)", _SM10X,
        "its split-KV kernel (decode_attention_sm100_gluon.partial_gluon) is Gluon over SM 10.x's "
        "tcgen05 MMA and tensor memory: Triton builds it for SM 10.x only (gfx950 hands its own kernel)",
        entry_points=("sglang.kernels.ops.attention.dsv4.decode_attention_sm100:swapab_attention",),
    ),
    KernelFamily(
        "deep-gemm-fp4", "DeepGEMM's FP8xFP4 GEMM and MQA-logits kernels", _SM10X,
        "FP4 tensor-core instructions exist on SM 10.x only",
        entry_points=(
            "deep_gemm:fp8_fp4_paged_mqa_logits", "deep_gemm:fp8_fp4_mqa_logits",
            "deep_gemm:fp8_fp4_gemm_nt", "deep_gemm:fp8_fp4_gemm_nn", "deep_gemm:fp8_fp4_gemm_tn",
            "deep_gemm:fp8_fp4_gemm_tt", "deep_gemm:m_grouped_fp8_fp4_gemm_nt_contiguous",
            "deep_gemm:m_grouped_fp8_fp4_gemm_nn_contiguous", "deep_gemm:m_grouped_fp8_fp4_gemm_nt_masked",
        ),
    ),
    KernelFamily(
        "fa3", "FlashAttention 3 (sgl-kernel's flash_ops)", ("sm90",),
        "built for SM 9.x (Hopper) only; sgl-kernel raises on other archs",
        entry_points=("sgl_kernel.flash_attn:flash_attn_with_kvcache", "sgl_kernel.flash_attn:flash_attn_varlen_func"),
    ),
    KernelFamily(
        "aiter", "AITER (AMD's kernel library)", ("gfx942", "gfx950"),
        "ROCm kernels for CDNA 3 / 4",
        entry_points=("aiter:mla_decode_fwd", "aiter.mla:mla_decode_fwd", "aiter.mla:mla_prefill_fwd"),
    ),
)


@dataclass(frozen=True)
class Toolchain:
    """Code whose device queries answer the real GPU: it compiles, selects or launches kernels."""

    key: str
    path: str  # a fragment of the file path of its frames
    what: str


# SGLang's and torch's own; each kernel library's comes from its record (dsakit.stack.kernel_libraries)
TOOLCHAIN: tuple[Toolchain, ...] = (
    Toolchain("sglang-jit", "/sglang/kernels/jit/", "SGLang's JIT kernels: their -gencode arch and launches"),
    Toolchain("sglang-jit-0.5.17", "/sglang/jit_kernel/", "SGLang's JIT kernels (0.5.17 layout)"),
    *(Toolchain(library.name, library.path, library.toolchain)
      for library in KERNEL_LIBRARIES.values() if library.toolchain),
    Toolchain("torch-extensions", "/torch/utils/cpp_extension.py", "torch's C++/CUDA extension builds"),
    Toolchain("inductor", "/torch/_inductor/", "torch.compile's code generation"),
)

# Frames a query walks past before it asks whose it is: torch's own wrappers, and helpers that only
# answer a device question for their caller (flashinfer.utils.get_device_sm_count, ...).
QUERY_HELPERS = ("/torch/cuda/__init__.py", "/torch/cuda/_utils.py", "/flashinfer/utils.py", "/functools.py")

NO_IMAGE = (
    re.compile(r"no kernel image is available for execution on the device"),
    re.compile(r"Missing TRTLLM-GEN kernel"),
    re.compile(r"[Uu]nsupported (GPU )?arch(itecture)?"),
)


def family_of_entry(entry_point: str) -> KernelFamily | None:
    """The arch-only family whose entry points hold "module:function" (None: a portable one)."""
    for family in ARCH_ONLY:
        if entry_point in family.entry_points:
            return family
    return None


def family_of_jit(name: str) -> KernelFamily | None:
    """The family a JIT module of this name builds, or None (a portable kernel)."""
    for family in ARCH_ONLY:
        if any(re.search(pattern, name, re.IGNORECASE) for pattern in family.jit_names):
            return family
    return None


def is_no_image(message: str) -> bool:
    return any(pattern.search(message) for pattern in NO_IMAGE)


def toolchain_of(filename: str) -> Toolchain | None:
    for tool in TOOLCHAIN:
        if tool.path in filename:
            return tool
    return None


def real_key(vendor: str, sm: tuple[int, int] | None, gfx: str | None) -> str | None:
    """The device-table key of this machine's GPU (same vendor and SM / gfx arch), or None."""
    for key, entry in DEVICES.items():
        if entry.vendor == vendor and vendor != "cpu" and (entry.gfx == gfx if vendor == "amd" else entry.sm == sm):
            return key
    return None
