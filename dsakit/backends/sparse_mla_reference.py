"""A torch reference for DSA sparse MLA decode: what every attention kernel path must compute.

Owns the meaning of one decode step of DeepSeek sparse attention in the absorbed-MLA form SGLang's
DSA backend uses: each query token t attends, with all its heads, to the KV slots its top-k
selection names (`-1` = no slot), over the latent+rope key (`head_dim`, 576) and the latent value
(the first `v_head_dim`, 512, of the same vector). float64 softmax, independent of any kernel.
Imports torch lazily.
"""

from __future__ import annotations

from typing import Any


def sparse_mla_decode_reference(q_all: Any, kv_cache: Any, slots: Any, *, sm_scale: float, v_head_dim: int) -> Any:
    """q_all [T, H, D], kv_cache [N, 1, D] (or [N, D]), slots [T, K] int (-1 = unused) -> [T, H, v_head_dim].

    A row whose slots are all -1 attends to nothing and yields zeros."""
    import torch

    kv = kv_cache.reshape(kv_cache.shape[0], -1).to(torch.float64)
    q = q_all.to(torch.float64)
    slots = slots.to(torch.int64)
    valid = slots >= 0
    keys = kv[slots.clamp(min=0)]  # [T, K, D]
    logits = torch.einsum("thd,tkd->thk", q, keys) * sm_scale
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
    weights = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # an all -1 row: 0/0 -> 0
    return torch.einsum("thk,tkv->thv", weights, keys[..., :v_head_dim])
