"""FlashMLA's split-KV decode schedule under a simulated arch (issue 42, item 1): the scheduler's
rows, worked by hand and checked for coverage; the rule that judges a schedule SGLang precomputes
for SM100 (shape, and the rows FlashMLA would compute); the hand-off that lets this GPU's FlashMLA
schedule its own while SGLang's object keeps the simulated arch's. On a GPU node, the rows are
checked against FlashMLA's own scheduler and SGLang's `flashmla_sched_meta` JIT kernel."""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import sys
import types
from typing import Any

import pytest

import dsakit
from dsakit.errors import ArchRuleBreach
from dsakit.gates.device_model import simulated_model
from dsakit.simulation import arch_rules
from dsakit.simulation import decode_schedules as ds
from dsakit.stack.import_hooks import Patches

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="[module:torch] tensors")
DECODE = "FlashMLA sparse decode (flash_mla_with_kvcache)"


# ---------------------------------------------------------------- the scheduler's rows


def test_two_short_requests_on_two_sm_parts_take_one_part_each() -> None:
    # blocks 2 and 1 (64-token blocks), 13 with the overheads: payload ceil(13 / 2) + 5 = 12
    rows, splits = ds.decode_schedule([100, 10], None, batch=2, topk=128, extra_topk=0, block_size_n=64,
                                      fixed_overhead=5, num_sm_parts=2)
    assert rows == [(0, 0, 0, 2, 0, 0, 0), (1, 1, 0, 1, 0, 0, 0)]
    assert splits == [0, 1, 2]


def test_a_long_request_is_split_over_the_parts_and_the_spare_part_is_empty() -> None:
    # 16 blocks + 5 on 4 parts: payload ceil(21 / 4) + 5 = 11, so 6 blocks a part, the third ends it
    rows, splits = ds.decode_schedule([1000], None, batch=1, topk=1024, extra_topk=0, block_size_n=64,
                                      fixed_overhead=5, num_sm_parts=4)
    assert rows == [(0, 0, 0, 6, 0, 1, 1), (0, 0, 6, 12, 1, 1, 1), (0, 0, 12, 16, 2, 1, 1), (1, 0, 0, 16, 0, 0, 0)]
    assert splits == [0, 3]


def test_the_extra_cache_adds_its_length_after_the_main_one_rounded_to_a_block() -> None:
    # 70 -> 128 (two blocks) + 10 extra = 138 tokens: three blocks; an empty request still gets one
    rows, _ = ds.decode_schedule([70, 0], [10, 0], batch=2, topk=128, extra_topk=16, block_size_n=64,
                                 fixed_overhead=5, num_sm_parts=1)
    assert rows == [(0, 1, 0, 1, 0, 0, 0)]  # 3 + 1 blocks, both requests whole on one part


@pytest.mark.parametrize("seed", range(20))
def test_every_requests_blocks_are_covered_once_and_num_splits_counts_its_pieces(seed: int) -> None:
    rng = random.Random(seed)
    batch, parts = rng.randint(1, 40), rng.choice([1, 7, 33, 132, 148])
    lengths = [rng.choice([0, 1, rng.randint(1, 2048)]) for _ in range(batch)]
    extra = [rng.randint(0, 512) for _ in range(batch)]
    rows, splits = ds.decode_schedule(lengths, extra, batch=batch, topk=2048, extra_topk=512, block_size_n=64,
                                      fixed_overhead=5, num_sm_parts=parts)
    blocks = [(-(-max(n, 1) // 64) * 64 + e - 1) // 64 + 1 for n, e in zip(lengths, extra)]
    covered: dict[int, list[tuple[int, int]]] = {}
    for begin_req, end_req, begin_block, end_block, *_ in rows:
        for req in range(begin_req, end_req + 1):
            start = begin_block if req == begin_req else 0
            stop = end_block if req == end_req else blocks[req]
            if stop > start:
                covered.setdefault(req, []).append((start, stop))
    for req in range(batch):
        pieces = sorted(covered[req])
        assert pieces[0][0] == 0 and pieces[-1][1] == blocks[req], (req, pieces)
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:])), (req, pieces)
        assert splits[req + 1] - splits[req] == len(pieces), (req, pieces, splits)


def test_each_arch_dispatches_to_its_decode_implementations_constants() -> None:
    assert ds.impl_meta("sm100", 64, 4, 512) == (37, 5, 64)  # 148 SMs // s_q
    assert ds.impl_meta("sm103", 128, 1, 512) == (74, 3, 64)  # head128, MODEL1: half the parts
    assert ds.impl_meta("sm103", 128, 1, 576) == (148, 5, 64)  # head64 run twice (V3.2)
    assert ds.impl_meta("sm90", 128, 2, 576) == (33, 5, 64)  # 132 SMs // s_q // (h_q / 64)
    assert ds.impl_meta("sm90", 16, 1, 512) is None  # FlashMLA refuses h_q 16
    assert ds.impl_meta("sm999", 64, 1, 512) is None  # no such device: no implementation, not a KeyError


# ---------------------------------------------------------------- the rule


@dataclasses.dataclass
class SchedMeta:
    """sgl_kernel.flash_mla.FlashMLASchedMeta's fields (sgl-kernel 0.4)."""

    have_initialized: bool = False
    config: Any = None
    tile_scheduler_metadata: Any = None
    num_splits: Any = None


def _decode_call(arch: str, *, swap: bool = False, parts: int | None = None) -> dict[str, Any]:
    """A DSv4.1 verify-sized sparse decode call with the schedule SGLang precomputes for `arch`
    (swap: with the SWA and compressed lengths swapped, as a planted bug would)."""
    import torch

    b, s_q, topk, extra_topk = 6, 1, 128, 512
    lengths = torch.tensor([128, 7, 1, 128, 60, 0], dtype=torch.int32)
    extra = torch.tensor([512, 300, 3, 0, 511, 100], dtype=torch.int32)
    want_parts, overhead, block = ds.impl_meta(arch, 64, s_q, 512)
    parts = want_parts if parts is None else parts
    main, other = (extra, lengths) if swap else (lengths, extra)
    rows, splits = ds.decode_schedule(main.tolist(), other.tolist(), batch=b, topk=topk, extra_topk=extra_topk,
                                      block_size_n=block, fixed_overhead=overhead, num_sm_parts=parts)
    meta = torch.zeros(parts, ds.META_INTS, dtype=torch.int32)
    meta[:, :7] = torch.tensor(rows, dtype=torch.int32)
    return {
        "q": torch.zeros(b, s_q, 64, 512, dtype=torch.bfloat16), "indices": torch.zeros(b, s_q, topk, dtype=torch.int32),
        "topk_length": lengths, "extra_indices_in_kvcache": torch.zeros(b, s_q, extra_topk, dtype=torch.int32),
        "extra_topk_length": extra,
        "tile_scheduler_metadata": SchedMeta(tile_scheduler_metadata=meta, num_splits=torch.tensor(splits, dtype=torch.int32)),
        "num_splits": None,
    }


def _breaches(arguments: dict[str, Any], simulated: str = "sm100") -> list[arch_rules.Breach]:
    entry = next(e for e in arch_rules.ARCH_RULES if e.kernel == DECODE)
    return arch_rules.breaches(entry, arguments, simulated, "sm90")


@needs_torch
def test_the_schedule_flashmla_would_compute_for_the_simulated_arch_passes() -> None:
    assert _breaches(_decode_call("sm100")) == []
    assert _breaches(_decode_call("sm103"), "sm103") == []
    call = _decode_call("sm100")
    call["tile_scheduler_metadata"] = SchedMeta()  # nothing precomputed: FlashMLA schedules itself
    assert _breaches(call) == []


@needs_torch
def test_a_schedule_for_the_wrong_lengths_names_the_first_part_that_differs() -> None:
    (breach,) = _breaches(_decode_call("sm100", swap=True))
    assert breach.rule.argument == "tile_scheduler_metadata (a precomputed schedule)"
    # the short requests' blocks shift: the first rows that differ are past the first request's
    assert str(breach.value).startswith("SM part 20 of 148: begin_req_idx 3 (FlashMLA: 4), "), breach.value
    assert breach.here is not None and "Decode_Sm90_Impl" in breach.here.source


@needs_torch
def test_a_schedule_sized_for_another_sm_count_breaks_the_shape_rule() -> None:
    (breach,) = _breaches(_decode_call("sm100", parts=132))  # the H200's count
    assert breach.value == "tile_scheduler_metadata (132, 8) torch.int32, not (148, 8) torch.int32"
    call = _decode_call("sm100")
    call["tile_scheduler_metadata"].num_splits = call["tile_scheduler_metadata"].num_splits[:-1]
    (breach,) = _breaches(call)
    assert breach.value == "num_splits (6,) torch.int32, not (7,) torch.int32"


@needs_torch
def test_bare_schedule_tensors_from_this_gpus_get_mla_metadata_are_not_judged() -> None:
    # SGLang's DSA decode hands FlashMLA what get_mla_metadata returned: on the H200 that is the
    # H200's schedule (132 parts), which a B300's get_mla_metadata computes for 148; the same rows
    # on SGLang's own object are SGLang's precomputation, and judged
    call = _decode_call("sm100", swap=True)
    sched = call["tile_scheduler_metadata"]
    assert [b.rule.argument for b in _breaches(call)] == ["tile_scheduler_metadata (a precomputed schedule)"]
    call.update(tile_scheduler_metadata=sched.tile_scheduler_metadata, num_splits=sched.num_splits)
    assert _breaches(call) == []


@needs_torch
def test_an_idle_parts_fields_past_its_begin_are_not_judged() -> None:
    call = _decode_call("sm100")
    meta = call["tile_scheduler_metadata"].tile_scheduler_metadata
    idle = int((meta[:, 0] == 6).nonzero()[0])  # the first part past the walk
    meta[idle, 2] = 1  # SGLang's kernel: last_block_idx[0] there, as FlashMLA's read past its array gives
    assert _breaches(call) == []
    meta[idle, 0] = 5  # an idle part handed request 5
    (breach,) = _breaches(call)
    assert str(breach.value).startswith(f"SM part {idle} of 148: begin_req_idx 5 (FlashMLA: 6)"), breach.value


@needs_torch
def test_the_rows_are_not_read_while_a_cuda_graph_is_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arch_rules, "_capturing", lambda: True)
    assert _breaches(_decode_call("sm100", swap=True)) == []  # shape only: the rows live on the device
    assert len(_breaches(_decode_call("sm100", parts=132))) == 1


# ---------------------------------------------------------------- the hand-off to this GPU's FlashMLA


@needs_torch
def test_this_gpus_flashmla_gets_its_own_schedule_and_sglangs_keeps_the_simulated_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dsakit.simulation.kernels import check_arch_rules

    seen: list[Any] = []

    def flash_mla_with_kvcache(q: Any, k_cache: Any, block_table: Any, cache_seqlens: Any, head_dim_v: int,
                               tile_scheduler_metadata: Any, num_splits: Any = None, softmax_scale: Any = None,
                               causal: bool = False, is_fp8_kvcache: bool = False, indices: Any = None,
                               attn_sink: Any = None, extra_k_cache: Any = None, extra_indices_in_kvcache: Any = None,
                               topk_length: Any = None, extra_topk_length: Any = None) -> Any:
        sched = tile_scheduler_metadata
        seen.append(sched)
        if not sched.have_initialized:  # as sgl-kernel's wrapper: record the config, schedule for this GPU
            sched.have_initialized, sched.config = True, ("config", q.shape[0])
            sched.tile_scheduler_metadata = "this GPU's schedule"
        return "out", "lse"

    module = types.ModuleType("sgl_kernel.flash_mla")
    module.flash_mla_with_kvcache = flash_mla_with_kvcache
    monkeypatch.setitem(sys.modules, "sgl_kernel.flash_mla", module)
    patches = Patches()
    try:
        check_arch_rules(patches, module, arch_rules.entries_by_module()["sgl_kernel.flash_mla"],
                         simulated_model("sm100"), "sm90")
        call = _decode_call("sm100")
        sglangs = call["tile_scheduler_metadata"]
        precomputed = sglangs.tile_scheduler_metadata
        kwargs = {k: v for k, v in call.items() if k not in ("tile_scheduler_metadata", "num_splits", "q")}
        for _layer in range(2):  # SGLang reuses one object across a forward's layers
            assert module.flash_mla_with_kvcache(call["q"], None, None, None, 512, sglangs, **kwargs) == ("out", "lse")
        with pytest.raises(ArchRuleBreach, match=r"(?s)FlashMLA sparse decode .* SM part 20 of 148"):
            swapped = _decode_call("sm100", swap=True)
            module.flash_mla_with_kvcache(swapped["q"], None, None, None, 512, swapped["tile_scheduler_metadata"],
                                          **{k: v for k, v in swapped.items()
                                             if k not in ("tile_scheduler_metadata", "num_splits", "q")})
    finally:
        patches.restore()
    assert module.flash_mla_with_kvcache is flash_mla_with_kvcache
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0] is not sglangs and type(seen[0]) is SchedMeta
    assert seen[0].tile_scheduler_metadata == "this GPU's schedule"
    assert sglangs.tile_scheduler_metadata is precomputed  # as on the B300: SGLang's schedule stays
    assert (sglangs.have_initialized, sglangs.config) == (True, ("config", 6))


# ---------------------------------------------------------------- on a GPU node: against the kernels


def _sparse_decode_inputs(b: int, s_q: int, seed: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    topk, extra_topk, pages, page = 128, 512, 8, 64
    cache = torch.zeros(pages, page, 1, 584, dtype=torch.uint8, device="cuda")  # the V4 layout; its values unread here
    return {
        "q": torch.zeros(b, s_q, 64, 512, dtype=torch.bfloat16, device="cuda"),
        "k_cache": cache, "extra_k_cache": cache.clone(),
        "indices": torch.randint(0, pages * page, (b, s_q, topk), dtype=torch.int32, generator=g).cuda(),
        "extra_indices_in_kvcache": torch.randint(0, pages * page, (b, s_q, extra_topk), dtype=torch.int32,
                                                  generator=g).cuda(),
        "topk_length": torch.randint(0, topk + 1, (b,), dtype=torch.int32, generator=g).cuda(),
        "extra_topk_length": torch.randint(0, extra_topk + 1, (b,), dtype=torch.int32, generator=g).cuda(),
    }


def _rows(meta: Any, batch: int) -> list[tuple[int, ...]]:
    return ds.assigned([tuple(row[:len(ds.META_FIELDS)]) for row in meta.tolist()], batch)


@dsakit.gate("cuda", "module:sgl_kernel.flashmla_ops")
@pytest.mark.parametrize("b, s_q", [(1, 1), (37, 1), (16, 4)])
def test_the_rows_are_flashmlas_own_schedule_on_this_gpu(b: int, s_q: int) -> None:
    import torch
    from sgl_kernel.flash_mla import FlashMLASchedMeta, flash_mla_with_kvcache

    inputs = _sparse_decode_inputs(b, s_q, seed=b)
    sched = FlashMLASchedMeta()
    flash_mla_with_kvcache(q=inputs["q"], k_cache=inputs["k_cache"], block_table=None, cache_seqlens=None,
                           head_dim_v=512, tile_scheduler_metadata=sched, softmax_scale=0.04, is_fp8_kvcache=True,
                           indices=inputs["indices"], topk_length=inputs["topk_length"],
                           extra_k_cache=inputs["extra_k_cache"],
                           extra_indices_in_kvcache=inputs["extra_indices_in_kvcache"],
                           extra_topk_length=inputs["extra_topk_length"])
    torch.cuda.synchronize()
    major, minor = torch.cuda.get_device_capability()
    arch = {(9, 0): "sm90", (10, 0): "sm100", (10, 3): "sm103"}.get((major, minor))
    if arch is None:
        pytest.skip(f"[device] FlashMLA's sparse decode has no implementation on SM {major}.{minor} to compare")
    # head64 on every arch: one part per SM and query row, on this device's SM count (an H100 PCIe has 114)
    parts, overhead, block = ds.impl_meta(arch, 64, s_q, 512)
    parts = max(torch.cuda.get_device_properties(0).multi_processor_count // s_q, 1)
    rows, splits = ds.decode_schedule(inputs["topk_length"].tolist(), inputs["extra_topk_length"].tolist(), batch=b,
                                      topk=128, extra_topk=512, block_size_n=block, fixed_overhead=overhead,
                                      num_sm_parts=parts)
    assert tuple(sched.tile_scheduler_metadata.shape) == (parts, ds.META_INTS)
    assert _rows(sched.tile_scheduler_metadata, b) == ds.assigned(rows, b)
    assert sched.num_splits.tolist() == splits


@dsakit.gate("cuda", "sglang:deepseek-v4-backend", "jit:tvm-ffi-nvcc")
@pytest.mark.parametrize("b, s_q", [(9, 1), (16, 4)])
def test_the_rows_are_sglangs_sm100_precomputed_schedule(b: int, s_q: int) -> None:
    """SGLang's flashmla_sched_meta JIT kernel (portable CUDA) with SM100's head64 constants and
    148 SMs, as _maybe_precompute_flashmla_sched_meta calls it on a B300."""
    import torch
    from sglang.kernels.ops.attention.dsv4.flashmla_sched_meta import META_INTS, flashmla_sched_meta

    inputs = _sparse_decode_inputs(b, s_q, seed=100 + b)
    parts, overhead, block = ds.impl_meta("sm100", 64, s_q, 512)
    meta = torch.empty((parts, META_INTS), dtype=torch.int32, device="cuda")
    splits = torch.empty((b + 1,), dtype=torch.int32, device="cuda")
    flashmla_sched_meta(meta, splits, topk_length=inputs["topk_length"], extra_topk_length=inputs["extra_topk_length"],
                        block_size_n=block, fixed_overhead_num_blocks=overhead, topk=128, extra_topk=512)
    rows, want = ds.decode_schedule(inputs["topk_length"].tolist(), inputs["extra_topk_length"].tolist(), batch=b,
                                    topk=128, extra_topk=512, block_size_n=block, fixed_overhead=overhead,
                                    num_sm_parts=parts)
    assert _rows(meta, b) == ds.assigned(rows, b) and splits.tolist() == want
