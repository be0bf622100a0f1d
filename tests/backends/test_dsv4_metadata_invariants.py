"""The DeepSeek-V4 metadata invariants catch what they claim to, on metadata SGLang's own torch
reference kernels build on CPU (then corrupted one field at a time)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dsakit
from dsakit.backends.harness import DEEPSEEK_V4_RUNNER_OVERRIDES, deepseek_v4_page_metadata, full_to_swa_mapping
from dsakit.backends.dsv4_invariants import check_dsv4_core_metadata, check_dsv4_write_target
from dsakit.backends.batch_builder import BatchShape, place_requests, slot_capacity

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True, scope="module")
def _deepseek_v4_backend() -> None:
    """Imported when these tests run, not when the module is collected: every xdist worker collects
    all of tests/, and this import is ~8 CPU-s of SGLang that only the worker running them needs."""
    pytest.importorskip("sglang.srt.layers.attention.deepseek_v4_backend")

SHAPE = BatchShape("extend", (100, 136, 256, 300), prefix_lens=(0, 128, 240, 256))


@pytest.fixture
def built():
    runner = dsakit.MockModelRunner("target", overrides={**DEEPSEEK_V4_RUNNER_OVERRIDES, "device": "cpu",
                                                         "max_running_requests": 8})
    placement = place_requests(runner, SHAPE.kv_lens(), seed=2)
    mapping = full_to_swa_mapping(runner)
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


def _runner():
    return dsakit.MockModelRunner("target", overrides={**DEEPSEEK_V4_RUNNER_OVERRIDES, "device": "cpu",
                                                        "max_running_requests": 8})


def test_full_to_swa_mapping_is_a_page_permutation() -> None:
    runner = _runner()
    mapping = full_to_swa_mapping(runner, seed=3)
    slots, page = mapping[:-1], runner.page_size
    assert mapping[-1] == -1 and slots.numel() == slot_capacity(runner)
    assert torch.equal(slots.sort().values, torch.arange(slots.numel()))  # one-to-one onto the SWA pool
    assert torch.equal(slots % page, torch.arange(slots.numel()) % page)  # keeps the in-page offset
    assert not torch.equal(slots // page, torch.arange(slots.numel()) // page)  # pages really move


def test_draft_steps_batch_writes_the_steps_slots_request_major() -> None:
    shape = BatchShape("decode", (100, 255), draft_steps=3)
    assert shape.write_positions() == [[100, 101, 102], [255, 256, 257]]
    assert shape.slot_lens() == (103, 258)
    with pytest.raises(dsakit.UsageError, match="draft_steps"):
        BatchShape("extend", (100,), draft_steps=3)


def test_write_target_names_a_step_that_writes_another_steps_slot(built) -> None:
    core, placement, _, mapping = built
    written = [placement.slot(0, 10), placement.slot(1, 20)]
    core.swa_out_cache_loc = mapping[torch.tensor(written)]
    assert check_dsv4_write_target(core, written, mapping) == []
    core.swa_out_cache_loc = mapping[torch.tensor([placement.slot(0, 11), placement.slot(1, 20)])]
    assert [r.code for r in check_dsv4_write_target(core, written, mapping, label="step 1")] == ["write-target"]


def test_draft_extend_page_table_is_checked_on_its_first_page_only() -> None:
    shape = BatchShape("draft_extend", (300,), draft_tokens=2)
    runner = _runner()
    placement = place_requests(runner, shape.kv_lens(), seed=1)
    mapping = full_to_swa_mapping(runner)
    core = deepseek_v4_page_metadata(runner, shape, placement, mapping, compression=False)
    core.page_table = core.page_table[:, :1].clone()  # SGLang's one-column placeholder (max_seq_len=page_size)
    assert check_dsv4_core_metadata(core, shape, placement, runner.req_to_token_pool.req_to_token, mapping,
                                    compression=False) == []
    core.page_table[:, 0] += 1  # a wrong first page is still reported
    codes = {r.code for r in check_dsv4_core_metadata(core, shape, placement, runner.req_to_token_pool.req_to_token,
                                                      mapping, compression=False)}
    assert codes == {"page-table"}


@pytest.mark.parametrize("name", ["c4_topk", "c4_sparse_topk", "index_topk"])
def test_the_c4_topk_is_read_under_each_releases_name(name: str) -> None:
    from dsakit.backends.dsv4_invariants import c4_index_topk

    assert c4_index_topk(SimpleNamespace(**{name: 512, "c4_sparse_topk_lengths": 7})) == 512


def test_a_c4_topk_under_an_unknown_name_is_named_in_the_error() -> None:
    from dsakit.backends.dsv4_invariants import c4_index_topk

    with pytest.raises(AssertionError, match="sets none of c4_topk, c4_sparse_topk, index_topk"):
        c4_index_topk(SimpleNamespace(c4_sparse_topk_lengths=7))
