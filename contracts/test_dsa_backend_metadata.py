"""Contract suite: the real DeepseekSparseAttnBackend's forward metadata, per role and mode (GPU).

Batches come from dsakit's builder with page-boundary lengths (< page, == page, > page) placed in
shuffled physical pages; the metadata is checked against the known geometry. The CUDA-graph case
captures metadata for one batch and replays a different one (and a padded one) into the same
buffers: everything is refreshed in place and no padded row carries a negative length.
"""

from __future__ import annotations

from typing import Any

import pytest

import dsakit
from dsakit.backends.harness import dsa_backend
from dsakit.backends.dsa_invariants import check_dsa_metadata
from dsakit.backends.batch_builder import BatchShape, build_forward_batch

# SGLang Triton kernels launched here are compiled by `dsakit warm` before the workers start
pytestmark = [dsakit.gate("cuda", "sglang:dsa-backend"), pytest.mark.dsakit_jit("triton-kernels")]

PAGE = 64
SHAPES: dict[str, BatchShape] = {
    "decode": BatchShape("decode", (17, PAGE, 100)),
    "extend": BatchShape("extend", (17, PAGE, 130), prefix_lens=(0, 32, PAGE)),
    "target_verify": BatchShape("target_verify", (13, PAGE - 4, 100), draft_tokens=4),
    "draft_extend": BatchShape("draft_extend", (21, PAGE, 104), draft_tokens=4),
}
# What each role runs: the draft worker never verifies, the target never draft-extends.
ROLE_MODES = {"target": ("decode", "extend", "target_verify"), "draft": ("decode", "extend", "draft_extend")}
CELLS = [pytest.param(role, mode, id=f"{role}-{mode}") for role, modes in ROLE_MODES.items() for mode in modes]


@pytest.mark.parametrize(("role", "mode"), CELLS)
def test_forward_metadata_is_consistent(role: str, mode: str) -> None:
    shape = SHAPES[mode]
    runner = dsakit.MockModelRunner(role, max_running_requests=16, model_config__context_len=4096)
    speculative = role == "draft" or mode in ("target_verify", "draft_extend")
    with dsa_backend(runner, speculative=speculative) as backend:
        batch, placement = build_forward_batch(runner, shape, seed=7)
        backend.init_forward_metadata(batch)
        reasons = check_dsa_metadata(backend.forward_metadata, shape, placement, runner, index_topk=backend.dsa_index_topk)
    assert reasons == [], "\n".join(map(str, reasons))


def _tensor_pointers(metadata: Any) -> dict[str, int]:
    import torch

    return {
        name: value.data_ptr()
        for name, value in vars(metadata).items()
        if isinstance(value, torch.Tensor) and value.numel() > 0
    }


@pytest.mark.parametrize("topk_v2", [False, True], ids=["legacy-topk", "topk-v2-fold"])
def test_cuda_graph_metadata_replays_in_place(topk_v2: bool) -> None:
    if topk_v2:
        dsakit.require("sglang:topk-v2-fold")
    runner = dsakit.MockModelRunner("target", max_running_requests=16, model_config__context_len=4096)
    env = {"SGLANG_OPT_USE_TOPK_V2": topk_v2, "SGLANG_DSA_FUSE_TOPK": True}
    with dsa_backend(runner, env=env) as backend:
        backend.init_cuda_graph_state(8, 8)
        captured_shape = BatchShape("decode", (17, PAGE, 100, 5))
        batch, _ = build_forward_batch(runner, captured_shape, seed=1)
        backend.init_forward_metadata_out_graph(batch, in_capture=True)
        captured = backend.forward_metadata
        pointers = _tensor_pointers(captured)

        replay_shape = BatchShape("decode", (300, 1, PAGE + 1, 2 * PAGE))
        batch, placement = build_forward_batch(runner, replay_shape, seed=2)
        backend.init_forward_metadata_out_graph(batch)
        replayed = backend.forward_metadata
        assert _tensor_pointers(replayed) == pointers, "replay must refresh the captured buffers in place"
        reasons = check_dsa_metadata(replayed, replay_shape, placement, runner, index_topk=backend.dsa_index_topk)
        assert reasons == [], "\n".join(map(str, reasons))
        if topk_v2:
            assert backend.dsa_drop_wide_page_table, "fused v2 decode graphs drop the page_size=1 table"
            assert replayed.topk_v2_plan is not None


def test_cuda_graph_padded_rows_have_no_negative_lengths() -> None:
    """The MTP crash: rows padded up to the captured batch size must carry lengths >= 0."""
    import torch

    runner = dsakit.MockModelRunner("target", max_running_requests=16, model_config__context_len=4096)
    with dsa_backend(runner, speculative=True) as backend:
        backend.init_cuda_graph_state(8, 8 * 4)
        shape = BatchShape("target_verify", (40, 70, 9, 100), draft_tokens=4)
        batch, _ = build_forward_batch(runner, shape, seed=3)
        backend.init_forward_metadata_out_graph(batch, in_capture=True)

        real = BatchShape("target_verify", (33, 65, 12), draft_tokens=4)
        batch, placement = build_forward_batch(runner, real, seed=4)
        fill = backend.get_cuda_graph_seq_len_fill_value()
        batch.batch_size = 4  # padded to the captured size, as the graph runner does
        batch.seq_lens = torch.cat([batch.seq_lens, batch.seq_lens.new_full((1,), fill)])
        batch.seq_lens_cpu = torch.cat([batch.seq_lens_cpu, batch.seq_lens_cpu.new_full((1,), fill)])
        batch.req_pool_indices = torch.cat([batch.req_pool_indices, batch.req_pool_indices.new_zeros(1)])
        backend.init_forward_metadata_out_graph(batch)
        reasons = check_dsa_metadata(backend.forward_metadata, real, placement, runner,
                                     index_topk=backend.dsa_index_topk, rows=3)
        negative = [
            name for name in ("cache_seqlens_int32", "dsa_cache_seqlens_int32", "dsa_seqlens_expanded")
            if getattr(backend.forward_metadata, name, None) is not None
            and bool((getattr(backend.forward_metadata, name) < 0).any())
        ]
    assert negative == [], f"padded rows carry negative lengths in {negative}"
    assert reasons == [], "\n".join(map(str, reasons))


def test_multi_step_draft_backend_builds_metadata_for_every_step() -> None:
    """The draft worker's multi-step backend: one real backend per draft step, each consistent."""
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnMultiStepBackend

    from dsakit.backends.harness import SPECULATIVE_SERVER_ARGS, dsa_backend

    steps = SPECULATIVE_SERVER_ARGS["speculative_num_steps"]
    runner = dsakit.MockModelRunner("draft", max_running_requests=16, model_config__context_len=4096)
    with dsa_backend(runner, speculative=True):  # opens the scope; the multi-step backend is built inside
        multi = DeepseekSparseAttnMultiStepBackend(runner, topk=1, speculative_num_steps=steps)
        assert [b.speculative_step_id for b in multi.attn_backends] == list(range(steps - 1))
        shape = SHAPES["decode"]
        batch, placement = build_forward_batch(runner, shape, seed=5)
        multi.init_forward_metadata(batch)
        for step in multi.attn_backends:
            reasons = check_dsa_metadata(step.forward_metadata, shape, placement, runner, index_topk=step.dsa_index_topk)
            assert reasons == [], f"step {step.speculative_step_id}: " + "\n".join(map(str, reasons))
