"""A float64 reference for DeepSeek-V4 sparse attention: what DeepseekV4AttnBackend.forward computes.

Owns which positions a query row attends to (SWA window, C4 / C128 compressed entries, the C4
indexer's selection) and the attention itself over dequantized keys, with the per-head sink.
Must not read SGLang's metadata: callers derive slots from the placement. Imports torch lazily.
"""

from __future__ import annotations

from typing import Any

SWA_WINDOW = 128  # DeepSeek-V4's sliding window (deepseek_v4_backend.SWA_WINDOW)
C4_TOPK = 512  # the C4 indexer's selection size (model_config.index_topk)


def attended_positions(length: int, compress_ratio: int, *, swa_window: int = SWA_WINDOW) -> tuple[list[int], list[int]]:
    """For a query row with causal length `length`: the token positions of its SWA window
    (max(0, length - window) .. length - 1) and the compressed entries of a `compress_ratio` layer
    it may attend to (entry j covers tokens ratio*j .. ratio*j + ratio - 1, complete only when
    ratio*(j+1) <= length, so j < length // ratio; none for ratio 0). For C4 these are the
    candidates the indexer selects from (`indexer_topk`)."""
    swa = list(range(max(0, length - swa_window), length))
    return swa, (list(range(length // compress_ratio)) if compress_ratio else [])


def indexer_topk(logits: Any, count: int, *, topk: int = C4_TOPK) -> list[int]:
    """The C4 indexer's selection among the first `count` compressed entries: all of them when
    count <= topk (SGLang selects sequentially), else the `topk` largest of `logits[:count]`
    (logit_j = k_scale_j * sum_h w_h * relu(<q_h, k_j>), dsv4/indexer.py), as sorted entries."""
    import torch

    if count <= topk:
        return list(range(count))
    return sorted(torch.topk(torch.as_tensor(logits[:count], dtype=torch.float64), topk).indices.tolist())


def dsv4_sparse_attention_reference(q: Any, keys: Any, valid: Any, attn_sink: Any, *, softmax_scale: float,
                                    v_head_dim: int = 512) -> Any:
    """q [T, H, D], keys [T, K, D] (dequantized: the values the FP8 kernel reads), valid [T, K] bool,
    attn_sink [H] -> [T, H, v_head_dim] float64.

    s_j = softmax_scale * <q_h, k_j> over valid keys, v_j = k_j[:v_head_dim];
    out = sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(sink_h)): the sink is an unscaled extra logit
    with a zero value (flash_mla_with_kvcache's attn_sink). A row with no valid key yields zeros."""
    import torch

    q64, k64 = q.to(torch.float64), keys.to(torch.float64)
    sink = attn_sink.to(torch.float64)
    valid = valid.to(torch.bool)
    logits = torch.einsum("thd,tkd->thk", q64, k64) * softmax_scale
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
    peak = torch.maximum(logits.amax(-1), sink[None, :])  # [T, H], finite: the sink is
    weights = torch.exp(logits - peak[..., None])
    denominator = weights.sum(-1) + torch.exp(sink[None, :] - peak)
    out = torch.einsum("thk,tkv->thv", weights, k64[..., :v_head_dim]) / denominator[..., None]
    return torch.where(valid.any(-1)[:, None, None], out, torch.zeros_like(out))
