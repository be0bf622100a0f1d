"""Per-arch argument rules of the kernel entry points whose builds differ per arch.

Owns `ARCH_RULES` (one record per entry point: where it is defined, where SGLang 0.5.21 calls it, and
each arch's rules, each citing the kernel's own check) and `breaches(entry, arguments, simulated,
real)`: what a call breaks of the simulated arch's rules, with the real arch's rule beside it. Must
not import torch, SGLang or a kernel library, nor launch anything; the guards that evaluate the
rules at each launch are `dsakit.simulation.kernels`'.
"""

from __future__ import annotations

import functools
import importlib.util
import mmap
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsakit.devices import DEVICES
from dsakit.simulation import decode_schedules

SM10X = ("sm100", "sm103")
SM90 = ("sm90",)


@dataclass(frozen=True)
class ArchRule:
    """One argument rule of one entry point on the archs `archs` (device-table keys).

    argument  what the rule reads, as a message names it ("q.shape[1] (h_q)")
    kind      a key of `_EVALUATORS`; `args` the call's arguments it reads, `param` its parameter
    says      the rule in words
    source    the kernel's own check it comes from (file: check)
    """

    archs: tuple[str, ...]
    argument: str
    kind: str
    args: tuple[str, ...]
    says: str
    source: str
    param: Any = None


@dataclass(frozen=True)
class ArchEntry:
    """One kernel entry point whose builds differ per arch.

    targets  "module:function" where it is defined (one per library that ships it)
    params   the positional parameter names where the function has no Python signature (C++)
    callers  where SGLang 0.5.21 calls it (what the message names as SGLang's call site)
    runs_here  how a call that kept the simulated arch's rules runs on the real GPU: (the function,
             its bound arguments) -> the result; None: as called
    """

    kernel: str
    targets: tuple[str, ...]
    rules: tuple[ArchRule, ...]
    callers: str
    params: tuple[str, ...] = ()
    runs_here: Callable[[Callable[..., Any], Mapping[str, Any]], Any] | None = None


@dataclass(frozen=True)
class Breach:
    """One simulated-arch rule a call breaks; `here` is the real arch's rule for the same argument
    (None: the real arch has no such rule, e.g. its build lacks the kernel) and `breaks_here` whether
    the call breaks that one too (SGLang then takes this line only where it simulates a device)."""

    rule: ArchRule
    value: Any
    here: ArchRule | None
    breaks_here: bool = False

    def describe(self, simulated: str, real: str | None) -> str:
        kept = "this call breaks it too" if self.breaks_here else "this call keeps it"
        here = (f"{real}'s rule: {self.here.says} ({self.here.source}; {kept})" if self.here is not None
                else f"{real or 'this GPU'} has no such rule")
        return (f"{self.rule.argument} = {self.value}: simulated {simulated}'s rule: {self.rule.says} "
                f"({self.rule.source}); {here}")


# ---------------------------------------------------------------- evaluators: the offending value, or None


def _arg(arguments: Mapping[str, Any], name: str) -> Any:
    return arguments.get(name)


def _tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _size_at(value: Any, dim: int) -> int | None:
    """value.shape[dim], or None where value is no tensor or has no such dimension."""
    if not _tensor(value) or not -len(value.shape) <= dim < len(value.shape):
        return None
    return int(value.shape[dim])


def _dim_in(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0].shape[dim] is one of the allowed sizes (param: (dim, allowed))."""
    value = _arg(a, rule.args[0])
    dim, allowed = rule.param
    size = _size_at(value, dim)
    if size is None:
        return None
    return None if size in allowed else size


def _int_in(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    value = _arg(a, rule.args[0])
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return None if value in rule.param else value


def _present(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """A tensor is passed (None reaches the kernel as a null pointer, or `None.numel()`)."""
    value = _arg(a, rule.args[0])
    return None if _tensor(value) else ("None" if value is None else type(value).__name__)


def _head_dims(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """(q, k, v) last dimensions are one of the allowed triples."""
    values = [_arg(a, name) for name in rule.args]
    if not all(_tensor(v) and len(v.shape) == 3 for v in values):
        return None
    dims = tuple(int(v.shape[2]) for v in values)
    return None if dims in rule.param else dims


def _cumulative(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0] has batch_size + 1 entries (args[1] names the batch size)."""
    value, batch = _arg(a, rule.args[0]), _arg(a, rule.args[1])
    if not _tensor(value) or not isinstance(batch, int) or len(value.shape) != 1:
        return None
    return None if int(value.shape[0]) == batch + 1 else f"{int(value.shape[0])} entries for batch_size {batch}"


def _round16(n: int) -> int:
    return -(-n // 16) * 16


def trtllm_ragged_workspace_bytes(num_qo_heads: int, batch_size: int, max_q_len: int, lse: bool) -> int:
    """What trtllm_ragged_attention_launcher carves from the workspace (flashinfer 0.6.18, the release
    SGLang 0.5.21 pins; csrc/trtllm_fmha_kernel_launcher.cu): multi-CTA KV mode is off, so no
    counters; where the lse is requested, the softmax-stats slab (a float2 per head, request and
    query row rounded up to 256) and its 1 MiB guard; then the scratch, 16-byte aligned."""
    return _round16(8 * num_qo_heads * batch_size * -(-max_q_len // 256) * 256 + (1 << 20)) if lse else 0


def _ragged_workspace(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    workspace, query, batch, max_q_len, lse = (_arg(a, name) for name in rule.args)
    if not (_tensor(workspace) and _tensor(query)) or len(query.shape) != 3:
        return None
    if not (isinstance(batch, int) and isinstance(max_q_len, int)):
        return None
    size = int(workspace.numel()) * int(workspace.element_size())
    need = trtllm_ragged_workspace_bytes(int(query.shape[1]), batch, max_q_len, bool(lse))
    return None if size >= need else f"{size} bytes < {need} needed"


def _dim_not_in(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0].shape[dim] is none of the refused sizes (param: (dim, refused))."""
    value = _arg(a, rule.args[0])
    dim, refused = rule.param
    size = _size_at(value, dim)
    if size is None:
        return None
    return size if size in refused else None


def trtllm_counter_bytes(batch_size: int, num_qo_heads: int, sm_count: int) -> int:
    """flashinfer 0.6.18 utils.get_trtllm_gen_multi_ctas_kv_counter_bytes: an int32 semaphore per
    request and head, at least one per SM, rounded up to 8."""
    return -(-max(batch_size * num_qo_heads, sm_count) // 8) * 8 * 4


def _counter_bytes(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """A caller-owned counter buffer holds the semaphores for this batch on the arch's SM count."""
    counters, query = (_arg(a, name) for name in rule.args)
    if not (_tensor(counters) and _tensor(query)) or len(query.shape) != 4:
        return None
    size = int(counters.numel()) * int(counters.element_size())
    sms = DEVICES[arch].multiprocessors or 0
    need = trtllm_counter_bytes(int(query.shape[0]), int(query.shape[-2]), sms)
    return None if size >= need else f"{size} bytes < {need} needed on {sms} SMs"


def _package_folder(package: str) -> str | None:
    """Where an installed (or already imported) package lives, without importing it."""
    file = getattr(sys.modules.get(package), "__file__", None)
    if isinstance(file, str) and file:
        return os.path.dirname(file)
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return next(iter(spec.submodule_search_locations), None)
    return os.path.dirname(spec.origin) if spec.origin else None


@functools.lru_cache(maxsize=None)
def _file_carries(path: str, size: int, mtime_ns: int, marker: bytes) -> bool:
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return data.find(marker) >= 0


def build_carries(marker: bytes, binaries: tuple[tuple[str, str], ...]) -> tuple[str, bool] | None:
    """(the first installed binary of `binaries` ((package, file glob) pairs), whether it carries
    `marker`: a kernel implementation's class name, which its RTTI keeps), or None: none installed."""
    for package, pattern in binaries:
        folder = _package_folder(package)
        for path in sorted(Path(folder).glob(pattern)) if folder else ():
            if path.is_file() and path.stat().st_size:
                stat = path.stat()
                return str(path), _file_carries(str(path), stat.st_size, stat.st_mtime_ns, marker)
    return None


def _build_dim_in(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0].shape[dim] is one of the sizes the installed build takes (param: (dim, allowed,
    allowed where the build carries marker, marker, binaries)): a kernel library's newer builds add
    shapes, so the rule reads the binary the GPU would load."""
    dim, allowed, allowed_built, marker, binaries = rule.param
    value = _arg(a, rule.args[0])
    size = _size_at(value, dim)
    if size is None:
        return None
    build = build_carries(marker, binaries)
    if size in (allowed_built if build is not None and build[1] else allowed):
        return None
    name = marker.decode()
    return (f"{size} (the installed build {build[0]} has no {name})" if build is not None
            else f"{size} (no installed build to read; taken as one without {name})")


def _dtype_in(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0] is a tensor of one of the allowed dtypes (param: their names, "torch.int32")."""
    value = _arg(a, rule.args[0])
    if not _tensor(value):
        return None
    return None if str(value.dtype) in rule.param else str(value.dtype)


def _same_device(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0] lives where args[1] (the query) does: the kernel dereferences it there."""
    value, query = _arg(a, rule.args[0]), _arg(a, rule.args[1])
    if not (_tensor(value) and _tensor(query)):
        return None
    return None if value.device == query.device else f"a tensor on {value.device} (query on {query.device})"


def _capturing() -> bool:
    torch = sys.modules.get("torch")  # never imported here: a call with tensors has imported it
    try:
        return bool(torch is not None and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - no CUDA runtime: nothing is captured
        return False


def _bounds_lengths(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """The int args[0] is at least every request's length in the cumulative args[1] (read from the
    device, so not while a CUDA graph is captured)."""
    bound, cumulative = _arg(a, rule.args[0]), _arg(a, rule.args[1])
    if not isinstance(bound, int) or isinstance(bound, bool) or not _tensor(cumulative):
        return None
    if len(cumulative.shape) != 1 or int(cumulative.shape[0]) < 2 or _capturing():
        return None
    starts = [int(n) for n in cumulative.tolist()]
    longest = max(b - s for s, b in zip(starts, starts[1:]))
    return None if bound >= longest else f"{bound} < the longest request's {longest}"


def _last_column_longest(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """A [batch, next_n] args[0] holds each request's longest length in its last column (read from the
    device, so not while a CUDA graph is captured); 1-D lengths and a single column pass."""
    lens = _arg(a, rule.args[0])
    if not _tensor(lens) or len(lens.shape) != 2 or int(lens.shape[1]) < 2 or _capturing():
        return None
    for request, row in enumerate(lens.tolist()):
        longest = max(row)
        if row[-1] < longest:
            return (f"request {request}'s row {row}: column {row.index(longest)} holds {longest}, "
                    f"the last column {row[-1]}")
    return None


def _unit_stride(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0].stride(dim) == 1 (param: dim): the kernel walks that dimension element by element."""
    value = _arg(a, rule.args[0])
    if not _tensor(value) or not -len(value.shape) <= rule.param < len(value.shape):
        return None
    stride = int(value.stride(rule.param))
    return None if stride == 1 else f"stride({rule.param}) {stride}"


def _contiguous(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    value = _arg(a, rule.args[0])
    if not _tensor(value):
        return None
    return None if value.is_contiguous() else f"a non-contiguous view, strides {tuple(value.stride())}"


def _covers_heads(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args[0] has at least as many elements as args[1] has heads (its shape[-2])."""
    value, heads = _arg(a, rule.args[0]), _size_at(_arg(a, rule.args[1]), -2)
    if not _tensor(value) or heads is None:
        return None
    return None if value.numel() >= heads else f"{value.numel()} values for {heads} heads"


def _paired(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """args are all tensors or all None: a half-given group is read from unset pointers."""
    given = {name: _tensor(_arg(a, name)) for name in rule.args}
    if all(given.values()) or not any(given.values()):
        return None
    return "only " + ", ".join(name for name, is_given in given.items() if is_given) + " given"


def _decode_schedule(rule: ArchRule, a: Mapping[str, Any], arch: str) -> Any:
    """A schedule precomputed for FlashMLA's sparse decode has the arch's shape and is the one
    FlashMLA's own scheduler computes for the call (dsakit.simulation.decode_schedules)."""
    return decode_schedules.schedule_mismatch(a, arch, _capturing)


_EVALUATORS: dict[str, Callable[[ArchRule, Mapping[str, Any], str], Any]] = {
    "dim_in": _dim_in, "int_in": _int_in, "present": _present, "head_dims": _head_dims,
    "cumulative": _cumulative, "ragged_workspace": _ragged_workspace, "dim_not_in": _dim_not_in,
    "counter_bytes": _counter_bytes, "build_dim_in": _build_dim_in, "dtype_in": _dtype_in,
    "same_device": _same_device, "bounds_lengths": _bounds_lengths, "unit_stride": _unit_stride,
    "contiguous": _contiguous, "covers_heads": _covers_heads, "paired": _paired,
    "decode_schedule": _decode_schedule, "last_column_longest": _last_column_longest,
}


# ---------------------------------------------------------------- the table

_FLASHMLA_SPARSE = "FlashMLA csrc/api/sparse_fwd.h sparse_attn_prefill_interface"
_RAGGED_PY = "flashinfer 0.6.18 flashinfer/prefill.py trtllm_ragged_attention_deepseek"
_RAGGED_CU = "flashinfer 0.6.18 csrc/trtllm_fmha_kernel_launcher.cu trtllm_ragged_attention_launcher"
_RAGGED_ENTRY = "flashinfer 0.6.18 csrc/trtllm_fmha_kernel_launcher.cu trtllm_ragged_attention"
_RAGGED_LENGTHS = ("seq_lens", "cum_seq_lens_q", "cum_seq_lens_kv")


def _sm10x_rule(argument: str, kind: str, args: tuple[str, ...], says: str, source: str,
                 param: Any = None) -> ArchRule:
    return ArchRule(SM10X, argument, kind, args, says, source, param)


_MLA_PY = "flashinfer 0.6.18 flashinfer/mla/_core.py trtllm_batch_decode_with_kv_cache_mla"
_ARCH_RULES_MLA = (
    _sm10x_rule("workspace_buffer", "present", ("workspace_buffer",), "a workspace tensor is required",
                 f"{_MLA_PY}: workspace_buffer.numel() * workspace_buffer.element_size()"),
    _sm10x_rule("kv_cache.shape[-2] (block_size)", "dim_in", ("kv_cache",), "the page size must be 32 or 64",
                 f"{_MLA_PY}: 'trtllm-gen requires block_size in (32, 64)'", (-2, (32, 64))),
    _sm10x_rule("query.shape[-2] (num_heads_q)", "dim_not_in", ("query",), "must not lie in 65..127",
                 f"{_MLA_PY}: 'trtllm-gen MLA decode does not support 64 < num_heads_q < 128'",
                 (-2, tuple(range(65, 128)))),
    _sm10x_rule("multi_ctas_kv_counter_buffer (bytes)", "counter_bytes", ("multi_ctas_kv_counter_buffer", "query"),
                 "at least round_up(max(batch x heads, the device's SM count), 8) int32 semaphores",
                 "flashinfer 0.6.18 utils._resolve_trtllm_gen_multi_ctas_kv_counter_buffer: "
                 "'multi_ctas_kv_counter_buffer is too small'"),
)


_SWAPAB = "SGLang 0.5.21 sglang/kernels/ops/attention/dsv4/decode_attention_sm100.py swapab_attention"
_SWAPAB_CACHE_DTYPES = ("torch.uint8", "torch.float8_e4m3fn")
_ARCH_RULES_SWAPAB = (
    _sm10x_rule("q.shape[0] (batch)", "dim_in", ("q",), "1 to 8 requests (MAX_BATCH)",
                 f"{_SWAPAB}: assert 0 < b <= MAX_BATCH", (0, tuple(range(1, 9)))),
    _sm10x_rule("q.shape[-2] (heads)", "dim_in", ("q",), "exactly 16 heads (NUM_HEADS: the MMA's N)",
                 f"{_SWAPAB}: assert h == NUM_HEADS", (-2, (16,))),
    _sm10x_rule("q.shape[-1] (head_dim)", "dim_in", ("q",), "512 (HEAD_DIM)", f"{_SWAPAB}: assert d == HEAD_DIM",
                 (-1, (512,))),
    _sm10x_rule("q.dtype", "dtype_in", ("q",), "bfloat16", f"{_SWAPAB}: assert q.dtype == torch.bfloat16",
                 ("torch.bfloat16",)),
    _sm10x_rule("q.stride(-1)", "unit_stride", ("q",), "1", f"{_SWAPAB}: assert q.stride(-1) == 1", -1),
    *(rule for cache in ("kv", "extra_kv") for rule in (
        _sm10x_rule(f"{cache}.shape[-1] (bytes per token)", "dim_in", (cache,),
                     "584, the V4 layout's (576 data + 8 scale bytes)",
                     f"{_SWAPAB}: assert {cache}.shape[-1] == LAYOUT.bytes_per_token (KVLayout.V4)", (-1, (584,))),
        _sm10x_rule(f"{cache}.dtype", "dtype_in", (cache,), "uint8 or float8_e4m3fn bytes",
                     f"{_SWAPAB}: assert {cache}.dtype in (torch.uint8, torch.float8_e4m3fn)", _SWAPAB_CACHE_DTYPES))),
    *(_sm10x_rule(f"{name}.stride(-1)", "unit_stride", (name,), "1", f"{_SWAPAB}: assert {name}.stride(-1) == 1", -1)
      for name in ("indices", "extra_indices")),
    *(_sm10x_rule(name, "contiguous", (name,), "contiguous", f"{_SWAPAB}: assert {name}.is_contiguous()")
      for name in ("lengths", "extra_lengths")),
    _sm10x_rule("sink", "present", ("sink",), "a per-head sink tensor is required",
                 f"{_SWAPAB}: assert sink.stride(0) == 1 and sink.numel() >= h"),
    _sm10x_rule("sink (heads)", "covers_heads", ("sink", "q"), "at least one value per head",
                 f"{_SWAPAB}: assert sink.numel() >= h"),
    _sm10x_rule("(extra_kv, extra_indices, extra_lengths)", "paired", ("extra_kv", "extra_indices", "extra_lengths"),
                 "all given or none", f"{_SWAPAB}: if extra_kv is None: assert extra_indices is None and "
                 "extra_lengths is None"),
)
_SPARSE_DECODE = "FlashMLA csrc/api/sparse_decode.h sparse_attn_decode_interface"
_SCHED_META = "FlashMLA csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu get_mla_metadata_kernel"
_OWN_SCHEDULE = ("; judged where SGLang set it on a FlashMLASchedMeta (get_mla_metadata's bare tensors are the "
                 "running GPU's own schedule)")
_DECODE_SCHEDULE_ARGS = ("tile_scheduler_metadata", "num_splits", "q", "indices", "topk_length",
                         "extra_indices_in_kvcache", "extra_topk_length")
_ARCH_RULES_FLASHMLA_DECODE = (
    _sm10x_rule("tile_scheduler_metadata (a precomputed schedule)", "decode_schedule",
                 _DECODE_SCHEDULE_ARGS,
                 "shape (max(the SM count // s_q, 1), 8) int32 (head64; // 2 for 128 heads of dim 512) with num_splits "
                 "(b + 1,), and the rows FlashMLA's scheduler computes for the call's topk lengths (block 64, "
                 "overhead 5): another schedule skips or repeats KV blocks" + _OWN_SCHEDULE,
                 f"{_SPARSE_DECODE}: KU_CHECK_SHAPE(tile_scheduler_metadata, impl_meta.num_sm_parts, "
                 f"sizeof(DecodingSchedMeta)/sizeof(int)), Decode_Sm100_Head64_Impl::get_meta; {_SCHED_META}"),
    ArchRule(SM90, "tile_scheduler_metadata (a precomputed schedule)", "decode_schedule",
             _DECODE_SCHEDULE_ARGS,
             "shape (max(the SM count // s_q // (h_q / 64), 1), 8) int32 with num_splits (b + 1,), and the rows "
             "FlashMLA's scheduler computes" + _OWN_SCHEDULE, f"{_SPARSE_DECODE}: Decode_Sm90_Impl::get_meta; {_SCHED_META}"),
)
_LAST_COLUMN_SAYS = ("each request's last column holds its longest length: the schedule gives each request "
                     "ceil(last column / block) KV blocks, so a longer row's later keys are never scored "
                     "(their logits stay unwritten)")
_LAST_COLUMN_SOURCE = ("DeepGEMM deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh "
                       "PagedMQALogitsScheduler::get_num_kv: lens_idx = kIsContextLens2D ? q_idx * kNextN + "
                       "kNextN - 1 : q_idx (the SM100 kernel schedules with the same class; the metadata "
                       "kernel reads the same column); tests/test_attention.py: context_lens_2d[:, next_n-1] "
                       "= context_lens")
ARCH_RULES: tuple[ArchEntry, ...] = (
    ArchEntry(
        "FlashMLA sparse prefill (flash_mla_sparse_fwd)",
        ("sgl_kernel.flash_mla:flash_mla_sparse_fwd", "flash_mla:flash_mla_sparse_fwd"),
        (
            ArchRule(SM90, "q.shape[1] (h_q)", "dim_in", ("q",), "h_q must be 64 or 128 (Fwd_Sm90_Impl has "
                     "HEAD_64 and HEAD_128)", f"{_FLASHMLA_SPARSE}: TORCH_CHECK(false, \"Unsupported h_q\")",
                     (1, (64, 128))),
            ArchRule(SM10X, "q.shape[1] (h_q)", "build_dim_in", ("q",), "h_q must be 128, or 64 where the SM100 "
                     "build has the head64 kernel", f"{_FLASHMLA_SPARSE}: on SM100 h_q == 64 runs "
                     "Fwd_Sm100_Head64_Impl and h_q == 128 Fwd_Sm100_Head128_Impl; a build without the head64 "
                     "kernel takes 128 only (so SGLang's dsa_backend pads to 128 on Blackwell: 'requires num_heads "
                     "to be a multiple of 64 (Hopper) or 128 (Blackwell)')",
                     (1, (128,), (64, 128), b"Fwd_Sm100_Head64_Impl",
                      (("sgl_kernel", "flashmla_ops*"), ("flash_mla", "*.so")))),
        ),
        callers="sglang/srt/layers/attention/dsa_backend.py DSABackend._forward_flashmla_sparse "
                "(required_padding = 128 if self.device_sm_major >= 10 else 64); deepseek_v4_backend.py "
                "_forward_prefill_sparse (the heads as the layer has them)",
    ),
    ArchEntry(
        "DeepGEMM paged MQA logits schedule (get_paged_mqa_logits_metadata)",
        ("deep_gemm:get_paged_mqa_logits_metadata",),
        (
            ArchRule(SM90, "block_kv", "int_in", ("block_kv",), "block_kv must be 64",
                     "DeepGEMM csrc/apis/attention.hpp get_paged_mqa_logits_metadata: DG_HOST_ASSERT(block_kv "
                     "== 64 or (arch_major == 10 and block_kv == 32))", (64,)),
            ArchRule(SM10X, "block_kv", "int_in", ("block_kv",), "block_kv must be 32 or 64",
                     "DeepGEMM csrc/apis/attention.hpp get_paged_mqa_logits_metadata: DG_HOST_ASSERT(block_kv "
                     "== 64 or (arch_major == 10 and block_kv == 32))", (32, 64)),
            *(ArchRule(archs, "context_lens ([batch, next_n])", "last_column_longest", ("context_lens",),
                       _LAST_COLUMN_SAYS, _LAST_COLUMN_SOURCE) for archs in (SM90, SM10X)),
        ),
        callers="sglang/srt/layers/attention/dsa/dsa_indexer.py (the paged MQA logits schedule); dsa_backend.py "
                "DSABackend's forward metadata (paged_mqa_ctx_lens_2d from _build_paged_mqa_schedule_2d_ctx_lens: "
                "[batch, next_n] for target verify where get_platform().is_sm100)",
        params=("context_lens", "block_kv", "num_sms"),
    ),
    ArchEntry(
        "TensorRT-LLM ragged attention (trtllm_ragged_attention_deepseek)",
        ("flashinfer.prefill:trtllm_ragged_attention_deepseek",),
        (
            _sm10x_rule("workspace_buffer", "present", ("workspace_buffer",), "a workspace tensor is required",
                         f"{_RAGGED_PY}: workspace_size = workspace_buffer.numel() * workspace_buffer.element_size()"),
            _sm10x_rule("workspace_buffer (bytes)", "ragged_workspace",
                         ("workspace_buffer", "query", "batch_size", "max_q_len", "return_lse"),
                         "with return_lse, at least the softmax-stats slab (8 bytes per head, request and query "
                         "row rounded up to 256) + its 1 MiB guard",
                         f"{_RAGGED_CU}: float_allocator.aligned_alloc(trtllm_gen_softmax_workspace) if lse"),
            _sm10x_rule("(query, key, value) head dims", "head_dims", ("query", "key", "value"),
                         "must be (192, 192, 128) (DeepSeek R1), (128, 128, 128) or (256, 256, 256) (GLM-5)",
                         f"{_RAGGED_PY}: assert is_dsr1 or is_smaller_dimensions or is_glm5",
                         ((192, 192, 128), (128, 128, 128), (256, 256, 256))),
            _sm10x_rule("cum_seq_lens_q", "cumulative", ("cum_seq_lens_q", "batch_size"),
                         "must have batch_size + 1 entries", f"{_RAGGED_CU}: cumSeqLensQPtr, read per batch row"),
            _sm10x_rule("cum_seq_lens_kv", "cumulative", ("cum_seq_lens_kv", "batch_size"),
                         "must have batch_size + 1 entries", f"{_RAGGED_CU}: cumSeqLensKvPtr, read per batch row"),
            _sm10x_rule("seq_lens", "present", ("seq_lens",), "a tensor of kv lengths is required",
                         f"{_RAGGED_CU}: static_cast<int*>(seq_lens.data_ptr())"),
            *(_sm10x_rule(f"{name}.dtype", "dtype_in", (name,), "must be int32: the kernel reads it as int*",
                          f"{_RAGGED_ENTRY}: static_cast<int*>({name}.data_ptr())", ("torch.int32",))
              for name in _RAGGED_LENGTHS),
            *(_sm10x_rule(f"{name}.device", "same_device", (name, "query"),
                          "must live on the query's GPU: the kernel dereferences it there",
                          f"{_RAGGED_ENTRY}: static_cast<int*>({name}.data_ptr()) handed to the launch on "
                          "query's stream")
              for name in _RAGGED_LENGTHS),
            _sm10x_rule("max_q_len", "bounds_lengths", ("max_q_len", "cum_seq_lens_q"),
                         "must be at least every request's q length: the grid has ceil(max_q_len / stepQ) "
                         "CTAs per request, rows past it are never computed",
                         "flashinfer 0.6.18 include/flashinfer/trtllm/fmha/fmhaKernels.cuh: numCtasPerSeqQ = "
                         "(params.mMaxSeqLenQ + kernelMeta.mStepQ - 1) / kernelMeta.mStepQ"),
        ),
        callers="sglang/srt/layers/attention/dsa_backend.py DSABackend._forward_standard_mha "
                "(if self.device_sm_major >= 10); trtllm_mla_backend.py (ragged prefill)",
    ),
    ArchEntry(
        "TensorRT-LLM MLA decode (trtllm_batch_decode_with_kv_cache_mla)",
        ("flashinfer.mla._core:trtllm_batch_decode_with_kv_cache_mla",),
        _ARCH_RULES_MLA,
        callers="sglang/srt/layers/attention/dsa_backend.py DSABackend (dsa_decode_impl 'trtllm': "
                "flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla); trtllm_mla_backend.py (decode)",
    ),
    ArchEntry(
        "DeepSeek-V4.1 swap-AB decode (swapab_attention)",
        ("sglang.kernels.ops.attention.dsv4.decode_attention_sm100:swapab_attention",),
        _ARCH_RULES_SWAPAB,
        callers="sglang/srt/layers/attention/deepseek_v4_backend.py DeepseekV4AttnBackend._forward_attention "
                "(is_dsv41 and get_platform().is_sm100 and can_use_swapab_attention(...))",
    ),
    ArchEntry(
        "FlashMLA sparse decode (flash_mla_with_kvcache)",
        ("sgl_kernel.flash_mla:flash_mla_with_kvcache",),
        _ARCH_RULES_FLASHMLA_DECODE,
        callers="sglang/srt/layers/attention/deepseek_v4_backend.py DeepseekV4AttnBackend._forward_attention "
                "(if self.is_dsv41: _maybe_precompute_flashmla_sched_meta(...), whose _fast_flashmla_sched_shape "
                "asks get_platform().is_blackwell)",
        # a simulated arch's schedule (SGLang's precomputed one, or none yet) stays on SGLang's object;
        # this GPU's FlashMLA schedules for its own SM count
        runs_here=decode_schedules.run_with_own_schedule,
    ),
)


def entries_by_module() -> dict[str, list[tuple[ArchEntry, str]]]:
    """module -> (entry, function name) for every target of the table."""
    modules: dict[str, list[tuple[ArchEntry, str]]] = {}
    for entry in ARCH_RULES:
        for target in entry.targets:
            module, _, function = target.partition(":")
            modules.setdefault(module, []).append((entry, function))
    return modules


def entry_of(target: str) -> ArchEntry | None:
    return next((entry for entry in ARCH_RULES if target in entry.targets), None)


def breaches(entry: ArchEntry, arguments: Mapping[str, Any], simulated: str, real: str | None) -> list[Breach]:
    """The simulated arch's rules this call breaks (each with the real arch's rule for the argument)."""
    found: list[Breach] = []
    for rule in entry.rules:
        if simulated not in rule.archs:
            continue
        value = _EVALUATORS[rule.kind](rule, arguments, simulated)
        if value is not None:
            here = next((r for r in entry.rules if real in r.archs and r.argument == rule.argument), None)
            breaks_here = here is not None and _EVALUATORS[here.kind](here, arguments, real) is not None
            found.append(Breach(rule, value, here, breaks_here))
    return found


def _check_table() -> None:
    for entry in ARCH_RULES:
        for rule in entry.rules:
            if rule.kind not in _EVALUATORS:
                raise AssertionError(f"{entry.kernel}: unknown rule kind {rule.kind!r}")
            if not set(rule.archs) <= set(DEVICES):
                raise AssertionError(f"{entry.kernel}: {rule.archs} are not all device-table keys")


_check_table()
