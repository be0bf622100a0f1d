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


REFERENCES: dict[str, ReferenceKernel] = {
    reference.target: reference for reference in (
        ReferenceKernel("flashinfer.prefill:trtllm_ragged_attention_deepseek",
                        "causal varlen attention in torch (dsakit.simulation.reference_kernels)",
                        _ragged_run, _ragged_unmodeled),
    )
}
