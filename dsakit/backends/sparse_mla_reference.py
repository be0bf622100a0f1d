"""A float64 reference for DSA sparse MLA decode: what every attention kernel path must compute.

Each query token attends, with all heads, to the KV slots its top-k names (`-1` = none), over the
latent+rope key (576) and the latent value (its first 512). Independent of any kernel; torch lazily.
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
