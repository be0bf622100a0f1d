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
# The C4 indexer's top-k under the name each release gives it, on the backend and on its core
# metadata: `c4_topk` / `c4_sparse_topk` up to 0.5.20, `index_topk` from 0.5.21.
C4_TOPK_NAMES = ("c4_topk", "c4_sparse_topk", "index_topk")


def c4_index_topk(holder: Any) -> int:
    """The C4 top-k a DeepSeek-V4 backend or its core metadata keeps, under whichever name this
    release gives it (probed, not versioned)."""
    for name in C4_TOPK_NAMES:
        if name in vars(holder):
            return int(vars(holder)[name])
    raise AssertionError(f"{type(holder).__name__} sets none of {', '.join(C4_TOPK_NAMES)}: this SGLang "
                         "renamed the C4 top-k again; add its name to dsakit.backends.dsv4_invariants.C4_TOPK_NAMES")


def _cpu64(tensor: Any) -> Any:
    import torch

    return tensor.detach().to("cpu", torch.int64)


def query_requests(shape: BatchShape) -> list[int]:
    """Per query token: the index of its request in the batch."""
    return [r for r, q in enumerate(query_counts(shape)) for _ in range(q)]


def page_table_tokens(shape: BatchShape, *, page_size: int = DSV4_PAGE_SIZE) -> int | None:
    """Tokens per row that DeepseekV4AttnBackend's page table covers in `shape.mode` (None: all of
    the row's causal length).

    draft_extend is SWA-only (the MTP layer has compress_ratio 0): SGLang builds it with
    `max_seq_len=self.page_size` ("keep the required 2-D page-table placeholder narrow",
    deepseek_v4_backend.py:1081-1083 in 0.5.17, :2436-2438 in 0.5.23), so the table has
    page_size // page_size = 1 column and nothing reads it. Every other mode sizes it to cover the
    batch (max seq_len, or req_to_token's width under SGLANG_PREP_IN_CUDA_GRAPH)."""
    return page_size if shape.mode == "draft_extend" else None


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
    table_tokens: int | None | str = "mode",
) -> list[Reason]:
    """All invariant violations of `core` (a DSV4AttnMetadata or the same fields).

    table_tokens  how many leading tokens of each row the page table must name: "mode" (the
                  default) asks `page_table_tokens(shape)`; None means the whole row."""
    import torch

    reasons: list[Reason] = []
    covered_tokens = page_table_tokens(shape, page_size=page_size) if table_tokens == "mode" else table_tokens
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
        covered = length if covered_tokens is None else min(length, covered_tokens)
        pages = -(-covered // page_size)
        want_pages = table[pool_row, : pages * page_size : page_size] // page_size
        if page_table.shape[1] < pages or not torch.equal(page_table[row, :pages], want_pages):
            scope = "" if covered == length else f", first {covered} covered by the {shape.mode} table"
            reasons.append(Reason("page-table", f"row {row} (request {request}, {length} tokens{scope}): page_table "
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


def check_dsv4_write_target(core: Any, written_slots: Any, swa_mapping: Any, *, label: str = "") -> list[Reason]:
    """The SWA KV-store target SGLang caches on the metadata (`swa_out_cache_loc`, set by
    `init_forward_metadata_in_graph`: 0.5.17 deepseek_v4_backend.py:1107-1135, 0.5.23 :2516-2543)
    must be this forward's written full slots translated through the full-to-SWA map — for one
    step of the multi-step draft decode, that step's slice of the shared out_cache_loc."""
    import torch

    got = getattr(core, "swa_out_cache_loc", None)
    where = f" ({label})" if label else ""
    if got is None:
        return [Reason("write-target", f"swa_out_cache_loc was not built{where}")]
    got = _cpu64(got)
    want = _cpu64(swa_mapping)[torch.as_tensor(written_slots, dtype=torch.int64)]
    if got.shape != want.shape:
        return [Reason("write-target", f"swa_out_cache_loc{where} has shape {tuple(got.shape)}; expected "
                                       f"{tuple(want.shape)}: one SWA slot per written token")]
    if not torch.equal(got, want):
        return [Reason("write-target", _first_rows(f"swa_out_cache_loc{where}", got, want))]
    return []
