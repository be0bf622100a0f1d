"""Contract suite: SGLang's real speculative metadata, padded the way its CUDA-graph runner pads,
through the top-k v2 paged path, eager and captured then replayed (GPU; issue 43).

The seed's MTP crash: a draft-extend CUDA graph captured for `bs` requests replays a smaller batch;
the idle rows carry the graph's fill seq_len (1), which is smaller than the draft width, and without
SGLang's clamp in `fused_dsa_draft_extend_metadata` their expanded lengths go negative, which the top-k
v2 kernel reads as ~4e9 tokens (an illegal address). Each case fails with the rows named when a
padded row's length goes negative: under --dsakit-kernel-contracts at the metadata kernel's return
(a KernelContractViolation), without it at this suite's own check, before the top-k launches.
"""

from __future__ import annotations

from typing import Any

import pytest

import dsakit
from dsakit.backends.batch_builder import BatchShape, build_forward_batch
from dsakit.backends.dsa_invariants import check_dsa_metadata
from dsakit.backends.harness import SPECULATIVE_SERVER_ARGS, dsa_backend

pytestmark = [dsakit.gate("cuda", "sglang:dsa-backend", "sglang:topk-v2-fold"),
              pytest.mark.dsakit_jit("triton-kernels")]

DRAFT = SPECULATIVE_SERVER_ARGS["speculative_num_draft_tokens"]
GRAPH_BS = 4           # the captured batch size
WIDTH = 32768          # the seed's wide score buffer (the streaming level of the v2 kernel)
TOPK = 512
V2 = {"SGLANG_DSA_FUSE_TOPK": True, "SGLANG_OPT_USE_TOPK_V2": True}
# Each role's speculative mode: the target verifies, the draft worker extends.
ROLE_MODES = [pytest.param("target", "target_verify", id="target-verify"),
              pytest.param("draft", "draft_extend", id="draft-extend")]
LIVE = (70, 133)       # the replayed batch's real requests; the rest of GRAPH_BS is padding


def _runner(role: str) -> Any:
    return dsakit.MockModelRunner(role, max_running_requests=16, model_config__context_len=4096)


def _padded(batch: Any, bs: int, fill: int) -> Any:
    """Pad `batch` to `bs` requests as SGLang's CUDA-graph runner does: idle rows get the backend's
    fill seq_len and request-pool index 0."""
    import torch

    pad = bs - batch.batch_size
    batch.batch_size = bs
    batch.seq_lens = torch.cat([batch.seq_lens, batch.seq_lens.new_full((pad,), fill)])
    batch.seq_lens_cpu = torch.cat([batch.seq_lens_cpu, batch.seq_lens_cpu.new_full((pad,), fill)])
    batch.req_pool_indices = torch.cat([batch.req_pool_indices, batch.req_pool_indices.new_zeros(pad)])
    return batch


def _negative_rows(metadata: Any) -> dict[str, list[tuple[int, int]]]:
    """Every length buffer's negative rows (row, value): what the top-k would read as ~4e9 tokens."""
    found = {}
    for name in ("cache_seqlens_int32", "dsa_cache_seqlens_int32", "dsa_seqlens_expanded"):
        value = getattr(metadata, name, None)
        if value is not None:
            rows = [(row, n) for row, n in enumerate(value.tolist()) if n < 0]
            if rows:
                found[name] = rows
    return found


def _topk(metadata: Any, logits: Any) -> Any:
    from sglang.srt.layers.attention.dsa.dsa_indexer_metadata import DSAIndexerMetadata
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend, TopkTransformMethod

    indexer = DSAIndexerMetadata(attn_metadata=metadata, topk_transform_method=TopkTransformMethod.PAGED,
                                 topk_backend=DSATopKBackend.SGL_KERNEL)
    return indexer.topk_transform(logits, TOPK)


def _assert_selections(out: Any, lengths: Any) -> None:
    """A row selects min(length, k) slots and pads with -1; a row of length 0 selects nothing."""
    selected = (out >= 0).sum(dim=1).tolist()
    expected = lengths.clamp(min=0, max=TOPK).tolist()
    assert selected == expected, f"selected per row {selected} != min(length, {TOPK}) {expected}"


@pytest.mark.parametrize(("role", "mode"), ROLE_MODES)
def test_eager_speculative_metadata_feeds_the_v2_top_k(role: str, mode: str) -> None:
    import torch

    runner = _runner(role)
    with dsa_backend(runner, speculative=True, env=V2) as backend:
        shape = BatchShape(mode, LIVE, draft_tokens=DRAFT)
        batch, placement = build_forward_batch(runner, shape, seed=11)
        backend.init_forward_metadata(batch)
        metadata = backend.forward_metadata
        reasons = check_dsa_metadata(metadata, shape, placement, runner, index_topk=backend.dsa_index_topk)
        assert reasons == [], "\n".join(map(str, reasons))
        lengths = metadata.dsa_seqlens_expanded[: len(LIVE) * DRAFT]
        logits = torch.randn(lengths.shape[0], WIDTH, device=lengths.device)
        if metadata.real_page_table.shape[0] != lengths.shape[0]:
            pytest.skip(f"[sglang:topk-v2-fold] this release's eager {mode} metadata has "
                        f"{metadata.real_page_table.shape[0]} page-table rows for {lengths.shape[0]} query rows: "
                        "the v2 paged path takes decode-shaped batches only (the CUDA-graph case covers it)")
        _assert_selections(_topk(metadata, logits), lengths)


@pytest.mark.parametrize(("role", "mode"), ROLE_MODES)
def test_a_padded_cuda_graph_replay_keeps_every_length_selectable(role: str, mode: str) -> None:
    """Capture SGLang's metadata for GRAPH_BS requests and the v2 paged top-k over its static buffers
    in a real CUDA graph; replay a batch of len(LIVE) requests padded to GRAPH_BS."""
    import torch

    runner = _runner(role)
    with dsa_backend(runner, speculative=True, env=V2) as backend:
        backend.init_cuda_graph_state(GRAPH_BS, GRAPH_BS * DRAFT)
        captured_shape = BatchShape(mode, (90, 64, 300, 17), draft_tokens=DRAFT)
        batch, _ = build_forward_batch(runner, captured_shape, seed=12)
        backend.init_forward_metadata_out_graph(batch, in_capture=True)
        metadata = backend.forward_metadata
        rows = GRAPH_BS * DRAFT
        lengths = metadata.dsa_seqlens_expanded[:rows]
        logits = torch.randn(rows, WIDTH, device=lengths.device)
        _topk(metadata, logits)  # built and loaded outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = _topk(metadata, logits)

        live = BatchShape(mode, LIVE, draft_tokens=DRAFT)
        batch, placement = build_forward_batch(runner, live, seed=13)
        _padded(batch, GRAPH_BS, backend.get_cuda_graph_seq_len_fill_value())
        backend.init_forward_metadata_out_graph(batch)  # SGLang's replay metadata (the fused Triton kernels)
        replayed = backend.forward_metadata
        assert replayed.dsa_seqlens_expanded.data_ptr() == lengths.data_ptr(), "replay must refill the captured buffers"
        negative = _negative_rows(replayed)
        assert negative == {}, (f"padded CUDA-graph rows carry negative lengths (row, value): {negative}; the v2 "
                                "top-k reads them as uint32, ~4e9 tokens, an illegal address")
        reasons = check_dsa_metadata(replayed, live, placement, runner, index_topk=backend.dsa_index_topk,
                                     rows=len(LIVE))
        assert reasons == [], "\n".join(map(str, reasons))
        graph.replay()
        torch.cuda.synchronize()
        _assert_selections(out, lengths)
        padded = lengths[len(LIVE) * DRAFT:]
        if mode == "draft_extend":  # fill 1 - DRAFT + offset + 1 <= 0 but for the last token: clamped
            assert padded.tolist() == [0] * (DRAFT - 1) + [1] + [0] * (DRAFT - 1) + [1], padded.tolist()
