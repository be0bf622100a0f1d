"""The DeepSeek-V4 metadata invariants catch what they claim to, on metadata SGLang's own torch
reference kernels build on CPU (then corrupted one field at a time)."""

from __future__ import annotations

import pytest

import dsakit
from dsakit.backends.harness import DEEPSEEK_V4_RUNNER_OVERRIDES, deepseek_v4_page_metadata, full_to_swa_mapping
from dsakit.backends.dsv4_invariants import check_dsv4_core_metadata
from dsakit.backends.batch_builder import BatchShape, place_requests

torch = pytest.importorskip("torch")
pytest.importorskip("sglang.srt.layers.attention.deepseek_v4_backend")

SHAPE = BatchShape("extend", (100, 136, 256, 300), prefix_lens=(0, 128, 240, 256))


@pytest.fixture
def built():
    runner = dsakit.MockModelRunner("target", overrides={**DEEPSEEK_V4_RUNNER_OVERRIDES, "device": "cpu",
                                                         "max_running_requests": 8})
    placement = place_requests(runner, SHAPE.kv_lens(), seed=2)
    mapping = full_to_swa_mapping(runner, swa_size=2048)
    core = deepseek_v4_page_metadata(runner, SHAPE, placement, mapping, compression=False)
    lengths = core.seq_lens_casual.to(torch.int64)
    core.c4_topk_lengths_raw = lengths // 4
    core.c4_topk_lengths_clamp1 = (lengths // 4).clamp(min=1)
    core.c128_topk_lengths_clamp1 = (lengths // 128).clamp(min=1)
    return core, placement, runner.req_to_token_pool.req_to_token, mapping


def _codes(core, placement, table, mapping):
    return {r.code for r in check_dsv4_core_metadata(core, SHAPE, placement, table, mapping)}


def test_sglang_reference_metadata_is_consistent(built) -> None:
    assert _codes(*built) == set()


@pytest.mark.parametrize(
    ("corrupt", "code"),
    [
        (lambda c: c.seq_lens_casual.__setitem__(5, 7), "causal-lengths"),
        (lambda c: c.positions_casual.__setitem__(0, 1), "positions"),
        (lambda c: c.swa_topk_lengths.__setitem__(-1, 256), "swa-lengths"),  # not clamped to the window
        (lambda c: c.page_table.__setitem__((-1, 1), c.page_table[-1, 1] + 1), "page-table"),
        (lambda c: c.swa_page_indices.__setitem__((3, 0), c.swa_page_indices[3, 1]), "swa-indices"),  # off by one token
        (lambda c: c.swa_page_indices.__setitem__((0, 1), 0), "swa-indices"),  # before the request's start, not -1
        (lambda c: c.c4_topk_lengths_raw.__setitem__(9, -1), "negative-length"),
        (lambda c: c.c128_topk_lengths_clamp1.__setitem__(-1, 3), "compression-lengths"),
    ],
    ids=["length", "position", "swa-length", "page", "swa-shift", "swa-before-start", "negative", "c128"],
)
def test_each_corruption_is_named(built, corrupt, code: str) -> None:
    core, placement, table, mapping = built
    corrupt(core)
    assert code in _codes(core, placement, table, mapping)


def test_wrong_row_count_is_reported_alone(built) -> None:
    core, placement, table, mapping = built
    core.seq_lens_casual = core.seq_lens_casual[:-1]
    reasons = check_dsv4_core_metadata(core, SHAPE, placement, table, mapping)
    assert [r.code for r in reasons] == ["query-rows"] and "one row per query token" in reasons[0].message
