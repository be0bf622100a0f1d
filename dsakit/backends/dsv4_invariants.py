"""Invariants of the DeepSeek-V4 core attention metadata, as a list of Reasons (empty = valid).

Owns what consistent `DSV4AttnMetadata` is: per query token its causal length and position, a
256-token page table naming the request's pages, SWA indices (the last `swa_window` tokens through
the full-to-SWA map, -1 before the request start) and the C4 / C128 lengths. Imports torch lazily.
"""

from __future__ import annotations

from typing import Any

from dsakit.backends.dsa_invariants import expected_seqlens_expanded, query_counts
from dsakit.backends.batch_builder import BatchShape, PagedPlacement
from dsakit.reasons import Reason

DSV4_PAGE_SIZE = 256
SWA_WINDOW = 128
COMPRESSION_RATIOS = (4, 128)


def _cpu64(tensor: Any) -> Any:
    import torch

    return tensor.detach().to("cpu", torch.int64)


def query_requests(shape: BatchShape) -> list[int]:
    """Per query token: the index of its request in the batch."""
    return [r for r, q in enumerate(query_counts(shape)) for _ in range(q)]


def _first_rows(name: str, actual: Any, expected: Any, limit: int = 4) -> str:
    import torch

    bad = torch.nonzero(actual != expected).flatten()[:limit].tolist()
    return f"{name}: rows {bad} hold {actual[bad].tolist()}, expected {expected[bad].tolist()}"


def check_dsv4_core_metadata(
    core: Any,
    shape: BatchShape,
    placement: PagedPlacement,
    req_to_token: Any,
    swa_mapping: Any,
    *,
    page_size: int = DSV4_PAGE_SIZE,
    swa_window: int = SWA_WINDOW,
    compression: bool = True,
) -> list[Reason]:
    """All invariant violations of `core` (a DSV4AttnMetadata or the same fields)."""
    import torch

    reasons: list[Reason] = []
    lengths = torch.tensor(expected_seqlens_expanded(shape), dtype=torch.int64)
    requests = query_requests(shape)
    rows = lengths.numel()

    seq_lens = _cpu64(core.seq_lens_casual)
    if seq_lens.shape != (rows,):
        return [Reason("query-rows", f"seq_lens_casual has shape {tuple(seq_lens.shape)}; expected ({rows},): "
                                     f"one row per query token of {shape.mode} {shape.seq_lens}")]
    if bool((seq_lens < 0).any()):
        reasons.append(Reason("negative-length", f"seq_lens_casual holds {seq_lens.min().item()}"))
    if not torch.equal(seq_lens, lengths):
        reasons.append(Reason("causal-lengths", _first_rows("seq_lens_casual", seq_lens, lengths)))
    positions = _cpu64(core.positions_casual)
    if not torch.equal(positions, lengths - 1):
        reasons.append(Reason("positions", _first_rows("positions_casual", positions, lengths - 1)))
    swa_lengths = _cpu64(core.swa_topk_lengths)
    if not torch.equal(swa_lengths, lengths.clamp(max=swa_window)):
        reasons.append(Reason("swa-lengths", _first_rows("swa_topk_lengths", swa_lengths, lengths.clamp(max=swa_window))))

    table = _cpu64(req_to_token)
    mapping = _cpu64(swa_mapping)
    page_table = _cpu64(core.page_table)
    swa_indices = _cpu64(core.swa_page_indices)
    for row, (request, length) in enumerate(zip(requests, lengths.tolist())):
        pool_row = placement.req_pool_indices[request]
        pages = -(-length // page_size)
        want_pages = table[pool_row, : pages * page_size : page_size] // page_size
        if page_table.shape[1] < pages or not torch.equal(page_table[row, :pages], want_pages):
            reasons.append(Reason("page-table", f"row {row} (request {request}, {length} tokens): page_table "
                                                f"{page_table[row, :pages].tolist()[:8]} != the request's pages "
                                                f"{want_pages.tolist()[:8]} from req_to_token"))
        window = min(length, swa_window)
        slots = table[pool_row, torch.arange(length - 1, length - 1 - window, -1)]
        want = torch.full((swa_indices.shape[1],), -1, dtype=torch.int64)
        want[:window] = mapping[slots]
        if not torch.equal(swa_indices[row], want):
            wrong = torch.nonzero(swa_indices[row] != want).flatten()[:4].tolist()
            reasons.append(Reason("swa-indices", f"row {row} (request {request}, {length} tokens): columns {wrong} "
                                                 f"hold {swa_indices[row, wrong].tolist()}, expected {want[wrong].tolist()} "
                                                 "(newest token first, -1 before the request's start)"))
        if len(reasons) > 12:
            break

    if compression:
        expected = {
            "c4_topk_lengths_raw": lengths // 4,
            "c4_topk_lengths_clamp1": (lengths // 4).clamp(min=1),
            "c128_topk_lengths_clamp1": (lengths // 128).clamp(min=1),
        }
        for name, want_lengths in expected.items():
            got = getattr(core, name, None)
            if got is None:
                reasons.append(Reason("compression-missing", f"{name} was not built"))
                continue
            got = _cpu64(got)
            if bool((got < 0).any()):
                reasons.append(Reason("negative-length", f"{name} holds {got.min().item()}"))
            if not torch.equal(got, want_lengths):
                reasons.append(Reason("compression-lengths", _first_rows(name, got, want_lengths)))
    return reasons
