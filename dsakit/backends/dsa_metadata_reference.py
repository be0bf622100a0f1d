"""What SGLang's fused DSA metadata kernels compute, in plain torch, and where an output differs from it.

Owns the expected lengths, cu_seqlens and page tables of one `MetadataCase` (page tables over each
row's live prefix only: the kernels leave a row's tail as it was, SGLang's consumers read
`[:cache_seqlens]`), and the comparison with a launch's outputs as Reasons. Must not launch
anything. Imports torch lazily.
"""

from __future__ import annotations

from typing import Any

from dsakit.backends.dsa_metadata_kernels import OUTPUTS, POISON, MetadataCase
from dsakit.reasons import Reason

LENGTHS = ("cache_seqlens", "cu_seqlens_k", "seqlens_expanded", "dsa_cache_seqlens", "dsa_cu_seqlens_k")


def _row_requests(case: MetadataCase) -> list[int]:
    per_request = 1 if case.mode == "decode" else case.draft_tokens
    return [request for request in range(case.bs) for _ in range(per_request)]


def expected_lengths(case: MetadataCase) -> dict[str, Any]:
    """Per request: cache_seqlens (the KV length each attends) and its cu_seqlens_k; per output
    row: seqlens_expanded (causal within the step; draft extend clamps padded rows at 0),
    dsa_cache_seqlens = min(expanded, index_topk) (KPool: over whole pools, plus the last pool's
    tail) and its dsa_cu_seqlens_k."""
    import torch

    seq = torch.tensor(case.seq_lens, dtype=torch.int64)
    n = case.draft_tokens
    if case.mode == "decode":
        cache = seq
        expanded = seq
    elif case.mode == "target_verify":
        cache = seq + n
        expanded = (seq[:, None] + torch.arange(1, n + 1)[None, :]).reshape(-1)
    else:
        cache = seq
        expanded = (seq[:, None] - n + torch.arange(1, n + 1)[None, :]).clamp(min=0).reshape(-1)
    if case.kpool:  # whole pools are clamped, the unfinished pool's tail stays (dsa/utils.py compute_dsa_seqlens)
        pooled = torch.div(expanded, case.index_kpool, rounding_mode="floor") * case.index_kpool
        dsa = pooled.clamp(max=case.index_topk) + (expanded - pooled)
    else:
        dsa = expanded.clamp(max=case.index_topk)
    zero = torch.zeros(1, dtype=torch.int64)
    expected = {
        "cache_seqlens": cache,
        "cu_seqlens_k": torch.cat([zero, cache.cumsum(0)]),
        "dsa_cache_seqlens": dsa,
        "dsa_cu_seqlens_k": torch.cat([zero, dsa.cumsum(0)]),
    }
    if case.mode != "decode":
        expected["seqlens_expanded"] = expanded
    return expected


def live_prefix(case: MetadataCase) -> list[int]:
    """Per output row: how many page-table columns it must hold (its request's KV length)."""
    cache = expected_lengths(case)["cache_seqlens"].tolist()
    return [min(int(cache[request]), case.width) for request in _row_requests(case)]


def expected_outputs(case: MetadataCase, inputs: dict[str, Any]) -> dict[str, Any]:
    """The outputs a correct launch on `inputs` leaves: the lengths, and each page-table row over
    its live prefix (the rest holds POISON, which the kernels may or may not overwrite)."""
    import torch

    outputs = dict(expected_lengths(case))
    req_to_token = inputs["req_to_token"].detach().to("cpu").to(torch.int64)
    pool_rows = inputs["req_pool_indices"].detach().to("cpu").tolist()
    requests = _row_requests(case)
    wide = torch.full((case.rows, case.width), POISON, dtype=torch.int64)
    real = torch.full((case.rows, case.width // case.page_size), POISON, dtype=torch.int64)
    for row, live in enumerate(live_prefix(case)):
        wide[row, :live] = req_to_token[pool_rows[requests[row]], :live]
        pages = wide[row, :live:case.page_size] // case.page_size
        real[row, : pages.numel()] = pages
    outputs.update(page_table_1=wide, real_page_table=real)
    return outputs


def mismatches(case: MetadataCase, inputs: dict[str, Any], outputs: dict[str, Any]) -> list[Reason]:
    """Where `outputs` (a launch's, CPU tensors) differ from the reference; empty = the same."""
    import torch

    reasons: list[Reason] = []
    missing = [name for name in OUTPUTS[case.mode] if name not in outputs]
    if missing:
        return [Reason("output-missing", f"{case.id}: no output {', '.join(missing)}")]
    expected = expected_outputs(case, inputs)
    for name in (n for n in LENGTHS if n in expected):
        got, want = outputs[name].to(torch.int64), expected[name]
        if not torch.equal(got, want):
            rows = (got != want).nonzero().flatten()[:8].tolist()
            reasons.append(Reason("reference-lengths", f"{case.id}: {name} differs from the reference at rows {rows}: "
                                  f"got {[int(got[r]) for r in rows]}, want {[int(want[r]) for r in rows]}"))
    wide, real = outputs["page_table_1"].to(torch.int64), outputs["real_page_table"].to(torch.int64)
    for row, live in enumerate(live_prefix(case)):
        slots = expected["page_table_1"][row, :live]
        if not torch.equal(wide[row, :live], slots):
            reasons.append(Reason("reference-page-table-1",
                                  f"{case.id}: page_table_1 row {row} differs from req_to_token over its live prefix [:{live}]"))
        pages = -(-live // case.page_size)
        if not torch.equal(real[row, :pages], expected["real_page_table"][row, :pages]):
            reasons.append(Reason("reference-real-page-table",
                                  f"{case.id}: real_page_table row {row} {real[row, :pages].tolist()[:8]} "
                                  f"!= pages {expected['real_page_table'][row, :pages].tolist()[:8]} over its live prefix"))
    return reasons
