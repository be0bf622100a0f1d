"""Reference stand-ins for arch-only kernels: what such a kernel computes, in portable torch.

Owns `REFERENCES` (one declared record per arch-only entry point whose result is known: the torch
reference that computes it on the real device, and the call features it does not model, which stay
refused) and the references themselves. A stand-in runs only after the call passed the simulated
arch's rules (`dsakit.simulation.arch_rules`); the guard in `dsakit.simulation.kernels` calls it.
Imports torch only when a reference runs; must not launch an arch-only kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReferenceKernel:
    """A stand-in for one arch-only entry point.

    computes  what the reference computes, in words (the summary and the report name it)
    run       arguments (bound by name) -> what the kernel returns, written where it writes
    unmodeled arguments -> why this call is beyond the reference (None: it models the call)
    """

    target: str
    computes: str
    run: Callable[[Mapping[str, Any]], Any]
    unmodeled: Callable[[Mapping[str, Any]], str | None]


def causal_varlen_attention(query: Any, key: Any, value: Any, cum_seq_lens_q: Any, cum_seq_lens_kv: Any, *,
                            scale: float, v_scale: float = 1.0, causal: bool = True, window_left: int = -1,
                            sinks: Any = None) -> Any:
    """softmax(scale * q k^T) v per request of a ragged batch, in float32: queries are the last
    tokens of their request (a causal mask aligned to the bottom right, as FA3's and TRT-LLM's
    varlen kernels align it), `window_left` keys to the left at most (-1: no window), kv heads
    shared by query-head groups, `sinks` a per-head logit added to each softmax's denominator."""
    import torch

    heads, kv_heads = query.shape[1], key.shape[1]
    out = torch.zeros(query.shape[0], heads, value.shape[2], dtype=torch.float32, device=query.device)
    starts_q, starts_kv = cum_seq_lens_q.tolist(), cum_seq_lens_kv.tolist()
    for row in range(len(starts_q) - 1):
        q0, q1, k0, k1 = starts_q[row], starts_q[row + 1], starts_kv[row], starts_kv[row + 1]
        if q1 <= q0:
            continue
        q = query[q0:q1].float().transpose(0, 1)  # heads, lq, d
        k = key[k0:k1].float().transpose(0, 1).repeat_interleave(heads // kv_heads, dim=0)
        v = value[k0:k1].float().transpose(0, 1).repeat_interleave(heads // kv_heads, dim=0)
        logits = scale * (q @ k.transpose(1, 2))  # heads, lq, lkv
        lq, lkv = q1 - q0, k1 - k0
        last = torch.arange(lq, device=query.device)[:, None] + (lkv - lq)  # the last key each query sees
        keys = torch.arange(lkv, device=query.device)[None, :]
        hidden = keys > last if causal else torch.zeros(lq, lkv, dtype=torch.bool, device=query.device)
        if window_left >= 0:
            hidden |= keys < last - window_left
        logits = logits.masked_fill(hidden, -math.inf)
        if sinks is not None:
            sink = sinks.float().view(heads, 1, 1).expand(heads, lq, 1)
            weights = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :lkv]
        else:
            weights = torch.softmax(logits, dim=-1)
        weights = torch.nan_to_num(weights)  # a query that sees no key (an empty window) outputs zeros
        out[q0:q1] = (weights @ v).transpose(0, 1) * v_scale
    return out


def _scalar(value: Any) -> float:
    return float(value.item()) if hasattr(value, "item") else float(value)


def _ragged_unmodeled(a: Mapping[str, Any]) -> str | None:
    if a.get("return_lse"):
        return "return_lse=True: the stand-in does not produce TRT-LLM's lse"
    if a.get("backend", "trtllm-gen") != "trtllm-gen":
        return f"backend={a.get('backend')!r}: the stand-in models the trtllm-gen backend"
    if a.get("uses_spcompress"):
        return "uses_spcompress=True: the stand-in does not model it"
    if any(n for n in a.get("num_elts_per_sage_attn_blk") or ()):
        return "sage attention scale factors: the stand-in does not model them"
    return None


def _ragged_run(a: Mapping[str, Any]) -> Any:
    import torch

    query = a["query"]
    result = causal_varlen_attention(
        query, a["key"], a["value"], a["cum_seq_lens_q"], a["cum_seq_lens_kv"], scale=_scalar(a["bmm1_scale"]),
        v_scale=_scalar(a["bmm2_scale"]), causal=bool(a["is_causal"]), window_left=int(a["window_left"]),
        sinks=a.get("attention_sinks"))
    out = a.get("out")
    if out is None:  # flashinfer's own allocation: FP8 inputs give bfloat16
        fp8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8)
        out = torch.empty(result.shape, dtype=torch.bfloat16 if query.dtype in fp8 else query.dtype,
                          device=query.device)
    out.copy_(result.to(out.dtype))
    return out


def sparse_mla_decode(query: Any, kv_cache: Any, indices: Any, *, kv_lora_rank: int, scale: float,
                      v_scale: float = 1.0, top_k_lens: Any = None) -> Any:
    """Absorbed MLA over each query token's selected cache tokens, in float32: `indices` (batch,
    q_len, top_k) are token slots of the flattened paged cache (page * page_size + offset, as
    SGLang's page_table_1 and FlashMLA's sparse indices are), -1 or past `top_k_lens` unused;
    keys are the whole cache row, values its first `kv_lora_rank` columns."""
    import torch

    batch, q_len, heads, dim = query.shape
    flat = kv_cache.reshape(-1, kv_cache.shape[-1])
    slots = indices.reshape(batch * q_len, -1).long()
    valid = slots >= 0
    if top_k_lens is not None:
        valid &= torch.arange(slots.shape[1], device=slots.device)[None, :] < top_k_lens.reshape(-1, 1).long()
    out = torch.zeros(batch * q_len, heads, kv_lora_rank, dtype=torch.float32, device=query.device)
    q_rows = query.reshape(batch * q_len, heads, dim)
    for start in range(0, batch * q_len, 16):  # 16 query tokens at a time: the gathered rows stay small
        rows = slice(start, start + 16)
        kv = flat[slots[rows].clamp(min=0)].float()  # tokens, top_k, dim
        logits = scale * torch.einsum("nhd,nkd->nhk", q_rows[rows].float(), kv)
        logits = logits.masked_fill(~valid[rows][:, None, :], -math.inf)
        weights = torch.nan_to_num(torch.softmax(logits, dim=-1))  # a row with no index outputs zeros
        out[rows] = torch.einsum("nhk,nkc->nhc", weights, kv[..., :kv_lora_rank]) * v_scale
    return out.view(batch, q_len, heads, kv_lora_rank)


def _mla_unmodeled(a: Mapping[str, Any]) -> str | None:
    import torch

    if not a.get("sparse_mla_top_k"):
        return "dense MLA decode (sparse_mla_top_k=0): the stand-in models the sparse path"
    if a.get("return_lse") or a.get("lse") is not None:
        return "the lse: the stand-in does not produce TRT-LLM's lse"
    for name in ("sinks", "cum_seq_lens_q", "causal_seqlens_kv_global"):
        if a.get(name) is not None:
            return f"{name}: the stand-in does not model it"
    if a.get("enable_dcp"):
        return "decode context parallelism: the stand-in does not model it"
    if a.get("backend", "auto") not in ("auto", "trtllm-gen"):
        return f"backend={a.get('backend')!r}: the stand-in models trtllm-gen"
    dtypes = {a["query"].dtype, a["kv_cache"].dtype}
    if not dtypes <= {torch.bfloat16, torch.float16, torch.float32}:
        return f"dtypes {sorted(map(str, dtypes))}: the stand-in models unquantized caches"
    if a.get("block_tables") is None or a["block_tables"].dim() != 3:
        return "block_tables must be the (batch, q_len, top_k) sparse indices"
    return None


def _mla_run(a: Mapping[str, Any]) -> Any:
    import torch

    result = sparse_mla_decode(a["query"], a["kv_cache"], a["block_tables"], kv_lora_rank=int(a["kv_lora_rank"]),
                               scale=_scalar(a.get("bmm1_scale", 1.0)), v_scale=_scalar(a.get("bmm2_scale", 1.0)),
                               top_k_lens=a.get("sparse_mla_top_k_lens"))
    out = a.get("out")
    if out is None:  # flashinfer allocates the output in bfloat16
        out = torch.empty(result.shape, dtype=torch.bfloat16, device=result.device)
    out.copy_(result.to(out.dtype))
    return out


# DeepSeek-V4's paged FP8 key layout ("V4": sglang/kernels/ops/attention/dsv4/kv_layout.py, 0.5.21): a
# page holds page_size rows of 448 fp8 nope + 64 bf16 rope values (576 bytes), then page_size rows of 7
# ue8m0 scales (one per 64 nope values) padded to 8 bytes; the page stride pads to a multiple of 576.
V4_NOPE, V4_ROPE, V4_TILE = 448, 64, 64
V4_DATA_BYTES, V4_SCALE_BYTES = V4_NOPE + 2 * V4_ROPE, 8
V4_BYTES_PER_TOKEN = V4_DATA_BYTES + V4_SCALE_BYTES


def dequantize_v4_keys(kv_cache: Any, slots: Any) -> Any:
    """The float32 [len(slots), 512] keys at the flattened slots (page * page_size + offset) of a
    V4-layout cache viewed (num_pages, page_size, [1,] 584), page stride `kv_cache.stride(0)`
    bytes: nope = fp8 * 2 ** (scale byte - 127) per 64-value tile, rope the bf16 tail."""
    import torch

    raw = kv_cache.view(torch.uint8)
    num_pages, page_size, page_bytes = int(raw.shape[0]), int(raw.shape[1]), int(raw.stride(0))
    pages = torch.as_strided(raw, (num_pages, page_bytes), (page_bytes, 1), raw.storage_offset())
    slots = slots.reshape(-1).long()
    page, offset = (slots // page_size)[:, None], (slots % page_size)[:, None]
    data_at = offset * V4_DATA_BYTES + torch.arange(V4_DATA_BYTES, device=slots.device)
    scale_at = page_size * V4_DATA_BYTES + offset * V4_SCALE_BYTES + torch.arange(V4_NOPE // V4_TILE,
                                                                                  device=slots.device)
    data, exponents = pages[page, data_at], pages[page, scale_at]
    nope = data[:, :V4_NOPE].contiguous().view(torch.float8_e4m3fn).float()
    nope = nope.view(-1, V4_NOPE // V4_TILE, V4_TILE) * torch.exp2(exponents.float() - 127)[..., None]
    rope = data[:, V4_NOPE:].contiguous().view(torch.bfloat16).float()
    return torch.cat([nope.reshape(-1, V4_NOPE), rope], dim=1)


def sparse_v4_decode(query: Any, kv_cache: Any, indices: Any, lengths: Any, sink: Any, *, scale: float,
                     extra_kv_cache: Any = None, extra_indices: Any = None, extra_lengths: Any = None) -> Any:
    """One query token per request over its selected V4-layout cache tokens, in float32: `indices`
    (batch, [1,] top_k) are slots of `kv_cache` of which the first `lengths[b]` count (-1: unused),
    then the same from the extra cache; keys are the whole 512-value row, values the same row;
    `sink` a per-head logit with a zero value (out = sum_j e^s_j v_j / (sum_j e^s_j + e^sink)).
    A row with no key outputs zeros. Returns (batch, heads, 512)."""
    import torch

    batch, heads = int(query.shape[0]), int(query.shape[-2])
    q = query.reshape(batch, heads, query.shape[-1]).float()
    parts = [(kv_cache, indices, lengths)]
    if extra_kv_cache is not None:
        parts.append((extra_kv_cache, extra_indices, extra_lengths))
    keys, valid = [], []
    for cache, chosen, counts in parts:
        chosen = chosen.reshape(batch, -1).long()
        used = (chosen >= 0) & (torch.arange(chosen.shape[1], device=chosen.device)[None, :]
                                < counts.reshape(batch, 1).long())
        keys.append(dequantize_v4_keys(cache, chosen.clamp(min=0)).view(batch, chosen.shape[1], -1))
        valid.append(used)
    k, used = torch.cat(keys, dim=1), torch.cat(valid, dim=1)
    logits = scale * torch.einsum("bhd,bkd->bhk", q, k)
    logits = logits.masked_fill(~used[:, None, :], -math.inf)
    sinks = sink.reshape(-1)[:heads].float().view(1, heads, 1).expand(batch, heads, 1)
    weights = torch.softmax(torch.cat([logits, sinks], dim=-1), dim=-1)[..., :-1]
    out = torch.einsum("bhk,bkd->bhd", weights, k)
    return torch.where(used.any(-1)[:, None, None], out, torch.zeros_like(out))


SWAPAB_HEAD_DIM = 512
SWAPAB_SCALE = SWAPAB_HEAD_DIM ** -0.5  # decode_attention_sm100.SOFTMAX_SCALE: the kernel's own, not an argument


def _swapab_unmodeled(a: Mapping[str, Any]) -> str | None:
    if a.get("inv_rope") is not None:
        return "inv_rope: the stand-in does not apply the combine's inverse RoPE"
    if a.get("partial_gluon") is not None:
        return "a caller's partial_gluon kernel (gfx950's): the stand-in models SM100's"
    return None


def _swapab_run(a: Mapping[str, Any]) -> Any:
    import torch

    query = a["q"]
    result = sparse_v4_decode(query, a["kv"], a["indices"], a["lengths"], a["sink"], scale=SWAPAB_SCALE,
                              extra_kv_cache=a.get("extra_kv"), extra_indices=a.get("extra_indices"),
                              extra_lengths=a.get("extra_lengths"))
    return result.to(torch.bfloat16 if query.dtype == torch.bfloat16 else query.dtype)


REFERENCES: dict[str, ReferenceKernel] = {
    reference.target: reference for reference in (
        ReferenceKernel("flashinfer.prefill:trtllm_ragged_attention_deepseek",
                        "causal varlen attention in torch (dsakit.simulation.reference_kernels)",
                        _ragged_run, _ragged_unmodeled),
        ReferenceKernel("flashinfer.mla._core:trtllm_batch_decode_with_kv_cache_mla",
                        "sparse MLA decode in torch (dsakit.simulation.reference_kernels)", _mla_run, _mla_unmodeled),
        ReferenceKernel("sglang.kernels.ops.attention.dsv4.decode_attention_sm100:swapab_attention",
                        "sparse attention over V4-layout FP8 pages with a sink, in torch "
                        "(dsakit.simulation.reference_kernels)", _swapab_run, _swapab_unmodeled),
    )
}
