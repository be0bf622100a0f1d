"""The DSA metadata invariants catch what they claim to, on metadata built here by hand (CPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dsakit
from dsakit.backends.dsa_invariants import check_dsa_metadata, expected_seqlens_expanded
from dsakit.backends.batch_builder import BatchShape, place_requests

torch = pytest.importorskip("torch")
TOPK = 64


def _metadata(shape: BatchShape, placement, runner) -> SimpleNamespace:
    """Metadata as a correct backend builds it (SGLang's DSAMetadata field names)."""
    kv = torch.tensor(shape.kv_lens(), dtype=torch.int32)
    expanded = torch.tensor(expected_seqlens_expanded(shape), dtype=torch.int32)
    repeats = [shape.draft_tokens] * shape.batch_size if shape.mode == "target_verify" else [1] * shape.batch_size
    width = int(kv.max())
    rows = runner.req_to_token_pool.req_to_token[placement.req_pool_indices, :width]
    table = torch.repeat_interleave(rows, torch.tensor(repeats), dim=0)
    dsa = expanded.clamp(max=TOPK)
    return SimpleNamespace(
        cache_seqlens_int32=kv,
        cu_seqlens_k=torch.nn.functional.pad(kv.cumsum(0), (1, 0)).to(torch.int32),
        dsa_seqlens_expanded=expanded,
        dsa_cache_seqlens_int32=dsa,
        dsa_cu_seqlens_k=torch.nn.functional.pad(dsa.cumsum(0), (1, 0)).to(torch.int32),
        page_table_1=table,
        real_page_table=table[:, ::runner.page_size] // runner.page_size,
    )


SHAPES = [
    BatchShape("decode", (17, 64, 100)),
    BatchShape("extend", (17, 64, 130), prefix_lens=(0, 32, 64)),
    BatchShape("target_verify", (13, 60, 100), draft_tokens=4),
]


@pytest.fixture
def runner() -> dsakit.MockModelRunner:
    return dsakit.MockModelRunner("target", max_running_requests=8, model_config__context_len=512)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.mode)
def test_correct_metadata_has_no_reasons(runner, shape: BatchShape) -> None:
    placement = place_requests(runner, shape.kv_lens(), seed=3)
    assert check_dsa_metadata(_metadata(shape, placement, runner), shape, placement, runner, index_topk=TOPK) == []


@pytest.mark.parametrize(
    ("corrupt", "code"),
    [
        (lambda m: m.cache_seqlens_int32.__setitem__(1, 63), "cache-seqlens"),
        (lambda m: m.cu_seqlens_k.__setitem__(0, 1), "indptr-start"),
        (lambda m: m.dsa_seqlens_expanded.__setitem__(0, -1), "negative-length"),
        (lambda m: m.dsa_cache_seqlens_int32.__setitem__(2, 65), "dsa-seqlens-topk"),
        (lambda m: m.page_table_1.__setitem__((2, 70), 0), "page-table-1"),
        (lambda m: m.real_page_table.__setitem__((2, 1), 999), "real-page-table"),
    ],
)
def test_each_corruption_is_reported_with_its_code(runner, corrupt, code: str) -> None:
    shape = SHAPES[0]
    placement = place_requests(runner, shape.kv_lens(), seed=3)
    metadata = _metadata(shape, placement, runner)
    corrupt(metadata)
    codes = {r.code for r in check_dsa_metadata(metadata, shape, placement, runner, index_topk=TOPK)}
    assert code in codes


def test_placement_uses_distinct_shuffled_pages(runner) -> None:
    placement = place_requests(runner, (17, 64, 130), seed=5)
    pages = [p for request in placement.pages for p in request]
    assert len(pages) == len(set(pages)) == 1 + 1 + 3 and 0 not in pages
    table = runner.req_to_token_pool.req_to_token
    row = placement.req_pool_indices[2]
    assert table[row, 64].item() == placement.pages[2][1] * 64  # the first slot of the second page


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "prefill", "seq_lens": (1,)}, "unknown forward mode 'prefill'"),
        ({"mode": "decode", "seq_lens": (5, 0)}, r"seq_lens must be >= 1 .* \[\(1, 0\)\]"),
        ({"mode": "decode", "seq_lens": (5, -3)}, "Padded rows"),
        ({"mode": "target_verify", "seq_lens": (5,)}, "needs draft_tokens >= 1"),
        ({"mode": "extend", "seq_lens": (5,), "prefix_lens": (5,)}, "0 <= prefix_len < seq_len"),
        ({"mode": "decode", "seq_lens": (5,), "prefix_lens": (1,)}, "only apply to extend"),
    ],
)
def test_bad_shapes_are_refused_before_anything_runs(kwargs, message: str) -> None:
    with pytest.raises(dsakit.UsageError, match=message):
        BatchShape(**kwargs)


def test_placement_page_tables_map_kernel_slots_back_to_positions(runner) -> None:
    kv_lens = (17, 64, 130)
    placement = place_requests(runner, kv_lens, seed=9)
    chosen = [[0, 16, -1], [63, 1, 0], [129, 64, 2]]
    slots = torch.tensor([[placement.slot(r, p) if p >= 0 else -1 for p in row] for r, row in enumerate(chosen)])
    slots[2, 2] = placement.slot(0, 3)  # another request's slot: not in row 2's table
    positions, problems = placement.page_tables(runner, kv_lens).slots_to_positions(slots)
    assert positions.tolist() == [[0, 16, -1], [63, 1, 0], [129, 64, -2]]
    assert problems == [f"row 2: slots [{placement.slot(0, 3)}] are not in this row's page table"]
