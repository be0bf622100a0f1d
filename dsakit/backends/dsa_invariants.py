"""Invariants of the forward metadata a DSA backend builds, as a list of Reasons (empty = valid).

Owns what consistent `DSAMetadata` is for a batch whose true shape dsakit knows: monotone indptrs
from 0, lengths >= 0 (padded CUDA-graph rows included), expanded lengths matching the query/KV
geometry, page tables naming the slots requests really occupy; and a fused DSA metadata kernel's
call judged by its declared postconditions (`metadata_kernel_reasons`). Imports torch lazily.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsakit.backends.batch_builder import BatchShape, PagedPlacement
from dsakit.reasons import Reason


def _cpu(tensor: Any) -> Any:
    return tensor.detach().to("cpu")


def _indptr_reasons(name: str, indptr: Any, lengths: Any) -> list[Reason]:
    import torch

    values = _cpu(indptr).to(torch.int64)
    reasons = []
    if values.numel() == 0 or int(values[0]) != 0:
        reasons.append(Reason("indptr-start", f"{name} must start at 0; got {values[:4].tolist()}"))
    if values.numel() > 1 and bool((values[1:] < values[:-1]).any()):
        reasons.append(Reason("indptr-monotone", f"{name} decreases: {values.tolist()[:16]}"))
    if lengths is not None and values.numel() == lengths.numel() + 1:
        if not torch.equal(values[1:] - values[:-1], _cpu(lengths).to(torch.int64)):
            reasons.append(Reason("indptr-lengths", f"{name} differences != lengths {_cpu(lengths).tolist()[:16]}"))
    return reasons


def query_counts(shape: BatchShape) -> list[int]:
    """Query tokens per request in this forward."""
    if shape.mode == "decode":
        return [1] * shape.batch_size
    if shape.mode == "target_verify":
        return [shape.draft_tokens] * shape.batch_size
    return list(shape.extend_lens())


def expected_seqlens_expanded(shape: BatchShape) -> list[int]:
    """Per query token: how many KV tokens it attends to (causal within the step)."""
    expanded: list[int] = []
    for q, kv in zip(query_counts(shape), shape.kv_lens()):
        expanded.extend(range(kv - q + 1, kv + 1))
    return expanded


def check_dsa_metadata(
    metadata: Any, shape: BatchShape, placement: PagedPlacement, runner: Any, *, index_topk: int, rows: int | None = None
) -> list[Reason]:
    """All invariant violations of `metadata` for the first `rows` requests (default: all)."""
    import torch

    reasons: list[Reason] = []
    bs = shape.batch_size if rows is None else rows
    kv_lens = torch.tensor(shape.kv_lens()[:bs], dtype=torch.int64)

    cache = _cpu(metadata.cache_seqlens_int32).to(torch.int64)[:bs]
    if not torch.equal(cache, kv_lens):
        reasons.append(Reason("cache-seqlens", f"cache_seqlens_int32 {cache.tolist()} != KV lengths {kv_lens.tolist()}"))
    reasons += _indptr_reasons("cu_seqlens_k", _cpu(metadata.cu_seqlens_k)[: bs + 1], kv_lens)

    for name in ("cache_seqlens_int32", "dsa_cache_seqlens_int32", "dsa_seqlens_expanded"):
        value = getattr(metadata, name, None)
        if value is not None and bool((_cpu(value) < 0).any()):
            reasons.append(Reason("negative-length", f"{name} holds negative lengths: {_cpu(value).tolist()[:32]}"))

    expected = torch.tensor(expected_seqlens_expanded(shape), dtype=torch.int64)
    expanded = _cpu(metadata.dsa_seqlens_expanded).to(torch.int64)[: expected.numel()]
    if rows is None and not torch.equal(expanded, expected):
        reasons.append(Reason("seqlens-expanded", f"dsa_seqlens_expanded {expanded.tolist()[:32]} != {expected.tolist()[:32]}"))
    dsa_lens = _cpu(metadata.dsa_cache_seqlens_int32).to(torch.int64)[: expanded.numel()]
    if not torch.equal(dsa_lens, expanded.clamp(max=index_topk)):
        reasons.append(Reason("dsa-seqlens-topk", f"dsa_cache_seqlens_int32 != min(expanded, index_topk={index_topk})"))
    reasons += _indptr_reasons("dsa_cu_seqlens_k", _cpu(metadata.dsa_cu_seqlens_k)[: dsa_lens.numel() + 1], dsa_lens)

    req_to_token = _cpu(runner.req_to_token_pool.req_to_token)
    repeats = query_counts(shape)[:bs] if shape.mode in ("target_verify", "draft_extend") else [1] * bs
    page_table_1 = getattr(metadata, "page_table_1", None)
    real_page_table = getattr(metadata, "real_page_table", None)
    row = 0
    for request in range(bs):
        kv = int(kv_lens[request])
        slots = req_to_token[placement.req_pool_indices[request], :kv]
        pages = torch.tensor(placement.pages[request], dtype=torch.int64)
        for _ in range(repeats[request]):
            if page_table_1 is not None:
                got = _cpu(page_table_1[row, :kv])
                if not torch.equal(got.to(torch.int64), slots.to(torch.int64)):
                    reasons.append(Reason("page-table-1", f"page_table_1 row {row} (request {request}) != its req_to_token slots"))
            if real_page_table is not None:
                got_pages = _cpu(real_page_table[row, : pages.numel()]).to(torch.int64)
                if not torch.equal(got_pages, pages):
                    reasons.append(Reason(
                        "real-page-table",
                        f"real_page_table row {row} (request {request}) {got_pages.tolist()} != physical pages {pages.tolist()}",
                    ))
            row += 1
    return reasons


def metadata_kernel_reasons(mode: str, arguments: Mapping[str, Any]) -> list[Reason]:
    """What one call of a fused DSA metadata kernel (`mode`: decode, target_verify, draft_extend)
    wrote that breaks its postconditions: the declared `writes` of `dsakit.topk.kernel_contracts`,
    the rules --dsakit-kernel-contracts holds SGLang's calls to on the GPU. `arguments`: the call's
    keyword arguments after it ran (its outputs written)."""
    from dsakit.topk.kernel_contracts import metadata_entry, violations

    return [Reason("kernel-postcondition", v.describe())
            for v in violations(metadata_entry(mode), arguments, written=True)]
