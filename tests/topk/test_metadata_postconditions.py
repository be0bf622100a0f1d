"""The DSA metadata kernels' postconditions (issue 43): what `fused_dsa_{decode,target_verify,
draft_extend}_metadata` wrote is checked when the kernel returns, under --dsakit-kernel-contracts.

On CPU the kernels are modelled by `_write_*` below, line for line after SGLang 0.5.21's Triton
kernels (dsa_metadata.py); the GPU suite `contracts/test_dsa_speculative_graphs.py` drives the real
ones. The model of draft extend takes `clamp=False` to stand for the reverted MTP fix (SGLang's
"clamp padded-row seq_lens to >= 0"): the padded rows of a CUDA graph then go negative.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from dsakit.topk.kernel_contracts import KERNEL_ENTRIES, KernelEntry, violations

torch_needed = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                  reason="[module:torch] the postconditions read tensors")
MODES = ("decode", "target_verify", "draft_extend")


def _entries(mode: str) -> list[KernelEntry]:
    return [e for e in KERNEL_ENTRIES if f"fused_dsa_{mode}_metadata" in e.target]


def _pool(rows: int, width: int) -> Any:
    import torch

    cols = torch.arange(width, dtype=torch.int32)
    return torch.arange(rows, dtype=torch.int32).view(-1, 1) * (width + 17) + cols  # SGLang's test pool


def _tables(rows: int, max_len: int, page: int) -> dict[str, Any]:
    import torch

    wide = torch.full((rows, max_len), -7, dtype=torch.int32)  # stale tail: only live prefixes are written
    real = torch.full((rows, -(-max_len // page)), -7, dtype=torch.int32) if page > 1 else wide
    return {"page_table_1": wide, "real_page_table": real}


def _fill_rows(a: dict[str, Any], rows: list[tuple[int, int]], max_len: int, page: int) -> None:
    """Write out-row r from request row `req` over its live prefix (columns < min(kv, max_len))."""
    for out, (req, kv) in enumerate(rows):
        live = min(max(kv, 0), max_len)
        values = a["req_to_token"][int(a["req_pool_indices"][req]), :live]
        a["page_table_1"][out, :live] = values
        if page > 1:
            a["real_page_table"][out, : -(-live // page)] = values[::page] // page


def _cu(lengths: Any) -> Any:
    import torch

    return torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(lengths, 0, dtype=torch.int32)])


def _write(mode: str, seq: list[int], *, max_len: int, page: int = 64, topk: int = 64, next_n: int = 4,
           clamp: bool = True) -> dict[str, Any]:
    """The arguments of one call after the kernel ran (its outputs written as SGLang's kernel writes them)."""
    import torch

    bs = len(seq)
    seq_lens = torch.tensor(seq, dtype=torch.int64)
    a: dict[str, Any] = {"seq_lens": seq_lens, "req_pool_indices": torch.arange(bs) + 1,
                         "req_to_token": _pool(bs + 4, max_len), "bs": bs, "dsa_index_topk": topk,
                         "real_page_size": page}
    cache = seq_lens.to(torch.int32)
    if mode == "decode":
        expanded, rows = cache, [(r, int(n)) for r, n in enumerate(cache)]
        a["max_len"] = max_len
    elif mode == "target_verify":
        cache = cache + next_n
        offsets = torch.arange(next_n, dtype=torch.int32)
        expanded = (seq_lens.to(torch.int32).view(-1, 1) + offsets + 1).reshape(-1)
        rows = [(r // next_n, int(cache[r // next_n])) for r in range(bs * next_n)]
        a.update(max_seqlen_k=max_len, next_n=next_n)
    else:  # draft extend, static width next_n, as the CUDA-graph replay calls it
        offsets = torch.arange(next_n, dtype=torch.int32)
        expanded = (seq_lens.to(torch.int32).view(-1, 1) - next_n + offsets + 1).reshape(-1)
        if clamp:
            expanded = expanded.clamp(min=0)
        rows = [(r // next_n, int(cache[r // next_n])) for r in range(bs * next_n)]
        a.update(max_seqlen_k=max_len, total_len=bs * next_n, extend_seq_lens=torch.full((bs,), next_n),
                 max_extend_len=next_n, max_total_len=bs * next_n, static_extend_len=True)
    dsa = expanded.clamp(max=topk)
    a.update(cache_seqlens=cache, cu_seqlens_k=_cu(cache), dsa_cache_seqlens=dsa, dsa_cu_seqlens_k=_cu(dsa))
    if mode != "decode":
        a["seqlens_expanded"] = expanded
    a.update(_tables(len(rows), max_len, page))
    _fill_rows(a, rows, max_len, page)
    return a


def _described(entry: KernelEntry, a: dict[str, Any]) -> list[str]:
    return [v.describe() for v in violations(entry, a, written=True)]


@torch_needed
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("seq", "max_len", "page"), [
    ([1, 7, 65, 513], 769, 64),         # test_dsa_metadata.py: decode_matches_eager_reference
    ([5, 63, 128], 257, 1),             # target_verify_matches_eager_reference (page 1: one table)
    ([16, 31, 80], 193, 64),            # draft_extend_static_width_matches_eager_reference
    ([12, 257, 3], 1, 1),               # large_batch_coverage: lengths past max_len are the kernels' clamp
    ([], 8, 64),                        # empty_batch
], ids=["decode-ref", "verify-ref", "draft-ref", "past-max-len", "empty"])
def test_what_sglangs_kernels_write_for_its_own_cases_breaks_nothing(mode: str, seq: list[int], max_len: int,
                                                                      page: int) -> None:
    for entry in _entries(mode):
        assert _described(entry, _write(mode, seq, max_len=max_len, page=page)) == [], entry.target


@torch_needed
def test_every_metadata_layout_has_the_postconditions() -> None:
    """Four layouts (0.5.17/0.5.21 dsa_metadata + dsa_kpool_metadata/, 0.5.23 dsa.metadata +
    dsa.kpool_metadata/) x three kernels, each with the same written-output rules."""
    kinds = {e.target: sorted(c.kind for c in e.writes) for mode in MODES for e in _entries(mode)}
    assert len(kinds) == 12
    assert all(k[:2] == ["cumulative", "cumulative"] and "written_lengths" in k and "selection_within" in k
               and k.count("live_pages_in_pool") == 2 for k in kinds.values()), kinds


@torch_needed
def test_the_reverted_mtp_clamp_is_named_at_the_padded_row() -> None:
    """The seed's crash: a draft-extend CUDA graph padded to bs 4 with the fill seq_len 1 for the idle
    rows; without the clamp, row 8 (the first of the padded request 2) gets 1 - 4 + 0 + 1 = -2."""
    fill = 1
    entry = _entries("draft_extend")[0]
    good = _write("draft_extend", [40, 70, fill, fill], max_len=256)
    assert _described(entry, good) == []
    bad = violations(entry, _write("draft_extend", [40, 70, fill, fill], max_len=256, clamp=False), written=True)
    first = bad[0]
    assert (first.argument, first.row, first.value) == ("seqlens_expanded", 8, -2)
    assert "the kernel wrote a negative length" in first.rule and "MTP CUDA-graph crash class" in first.rule
    assert [(v.row, v.value) for v in bad[:3]] == [(8, -2), (9, -1), (12, -2)]


@torch_needed
@pytest.mark.parametrize(("output", "change", "expected"), [
    ("cache_seqlens", lambda a: a["cache_seqlens"].__setitem__(1, 10_000),
     "cache_seqlens[1] = 10000: the kernel wrote a length past the page table's width (page_table_1.shape[1] = "
     "256 tokens) and past the longest the inputs allow (max(seq_lens[:bs]) + next_n = 70)"),
    ("cu_seqlens_k", lambda a: a["cu_seqlens_k"].__setitem__(2, 5),
     "cu_seqlens_k[2] = 5: must not decrease from one row to the next"),
    ("cu_seqlens_k", lambda a: a["cu_seqlens_k"].__setitem__(-1, int(a["cu_seqlens_k"][-1]) + 1),
     "cu_seqlens_k[3] = '112 != 110 + cache_seqlens[2] = 111': must step by cache_seqlens (ending at their "
     "total, 111)"),
    ("dsa_cu_seqlens_k", lambda a: a["dsa_cu_seqlens_k"].__setitem__(0, 1), "dsa_cu_seqlens_k[0] = 1: must start at 0"),
    ("dsa_cache_seqlens", lambda a: a["dsa_cache_seqlens"].__setitem__(0, 65),
     "dsa_cache_seqlens[0] = 65: a DSA length must lie in [0, min(seqlens_expanded[row], dsa_index_topk = 64)]"),
    ("real_page_table", lambda a: a["real_page_table"].__setitem__((3, 0), -1),
     "real_page_table[3] = -1: a live entry must be a page of the pool (0 <= entry <= max(req_to_token) // 64 = 29)"),
    ("page_table_1", lambda a: a["page_table_1"].__setitem__((0, 36), 1_000_000),
     "page_table_1[0] = 1000000: a live entry must be a page of the pool (0 <= entry <= max(req_to_token) // 1 = "
     "1893)"),
], ids=["length-past-width", "cu-falls", "cu-total", "cu-start", "dsa-past-topk", "page-negative", "page-past-pool"])
def test_each_postcondition_names_the_output_row_and_value(output: str, change: Any, expected: str) -> None:
    a = _write("draft_extend", [40, 70, 1], max_len=256)
    change(a)
    assert _described(_entries("draft_extend")[0], a)[:1] == [expected]


@torch_needed
def test_a_stale_tail_past_the_live_prefix_is_no_violation() -> None:
    """SGLang's contract: a row is written over its live prefix only; the tail keeps stale values
    across replays, and consumers bound their reads by the lengths."""
    a = _write("decode", [3, 130], max_len=256)
    assert int(a["page_table_1"][0, 3]) == -7 and int(a["real_page_table"][0, 1]) == -7
    assert _described(_entries("decode")[0], a) == []


def _kernel(mode: str, seq: list[int], **kw: Any) -> Any:
    """A stand-in for the metadata entry point with SGLang's signature: it writes the model's outputs."""
    written = _write(mode, seq, **kw)

    def fused_dsa_draft_extend_metadata(seq_lens: Any, extend_seq_lens: Any, req_pool_indices: Any,
                                        req_to_token: Any, cache_seqlens: Any, cu_seqlens_k: Any,
                                        page_table_1: Any, seqlens_expanded: Any, dsa_cache_seqlens: Any,
                                        dsa_cu_seqlens_k: Any, real_page_table: Any, bs: int, total_len: int,
                                        max_seqlen_k: int, dsa_index_topk: int, real_page_size: int,
                                        max_extend_len: int, max_total_len: int,
                                        static_extend_len: bool = False) -> None:
        for name in ("cache_seqlens", "cu_seqlens_k", "seqlens_expanded", "dsa_cache_seqlens", "dsa_cu_seqlens_k",
                     "page_table_1", "real_page_table"):
            locals()[name].copy_(written[name])

    inputs = {k: (v.clone() if hasattr(v, "clone") else v) for k, v in written.items()}
    for name in ("cache_seqlens", "cu_seqlens_k", "seqlens_expanded", "dsa_cache_seqlens", "dsa_cu_seqlens_k"):
        inputs[name].fill_(0)
    return fused_dsa_draft_extend_metadata, inputs


@torch_needed
def test_under_the_option_the_wrapped_kernel_raises_when_it_returns() -> None:
    from dsakit.errors import KernelContractViolation
    from dsakit.topk import launch_guard

    entry = _entries("draft_extend")[0]
    kernel, inputs = _kernel("draft_extend", [40, 70, 1, 1], max_len=256, clamp=False)
    with pytest.raises(KernelContractViolation) as caught:
        launch_guard.guarded(entry, kernel)(**inputs)
    error = caught.value
    assert (error.argument, error.row, error.value) == ("seqlens_expanded", 8, -2)
    message = str(error)
    assert message.startswith(f"{entry.kernel} ({entry.target}) wrote outputs its consumers cannot read; called at ")
    assert "raised when it returned, before any consumer read them" in message
    assert launch_guard._TALLY["wrote"][entry.kernel] >= 1
    kernel, inputs = _kernel("draft_extend", [40, 70, 1, 1], max_len=256)
    assert launch_guard.guarded(entry, kernel)(**inputs) is None  # the clamped kernel passes


@torch_needed
def test_a_metadata_kernel_captured_in_a_graph_is_checked_after_each_replay(guarded_graphs: Any) -> None:
    from dsakit.errors import KernelContractViolation
    from dsakit.topk import launch_guard

    def replayed_kernel_writes() -> None:
        inputs["seqlens_expanded"][8] = -2  # the replayed kernel writes the padded row

    graph_class = guarded_graphs(on_replay=replayed_kernel_writes)
    kernel, inputs = _kernel("draft_extend", [40, 70, 1, 1], max_len=256)
    graph = graph_class()
    graph.capture_begin()
    launch_guard.guarded(_entries("draft_extend")[0], kernel)(**inputs)  # no value read while capturing
    graph.capture_end()
    with pytest.raises(KernelContractViolation, match=r"when this CUDA graph replayed .*\n  seqlens_expanded\[8\] = -2"):
        graph.replay()
