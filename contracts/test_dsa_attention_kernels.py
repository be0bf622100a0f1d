"""Contract suite: the DSA backend's sparse-attention kernel paths, per role (GPU).

One decode step through `DeepseekSparseAttnBackend.forward_decode` for every `dsa_decode_backend`,
against dsakit's float64 reference over the same KV slots; each path is gated by the hardware and
kernel build it needs. Queries select random logical positions in shuffled 64-token pages, which
the backend must translate to the right KV slots.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dsakit
from dsakit.backends.harness import dsa_backend
from dsakit.backends.batch_builder import BatchShape, build_forward_batch
from dsakit.backends.sparse_mla_reference import sparse_mla_decode_reference

pytestmark = [dsakit.gate("sglang:dsa-backend"), pytest.mark.dsakit_jit("triton-kernels")]

# dsa_decode_backend -> the gates its kernel needs (dsa_backend.py forward_decode dispatch)
DECODE_KERNEL_PATHS = {
    "flashmla_sparse": ("cuda", "flashmla-sparse"),
    "flashmla_kv": ("cuda", "flashmla-sparse"),
    "fa3": ("cuda", "fa3"),
    "tilelang": ("cuda", "module:tilelang"),
    "trtllm": ("cuda", "trtllm-dsa-decode"),
    "aiter": ("aiter", "module:aiter"),
}
CELLS = [
    pytest.param(role, impl, id=f"{role}-{impl}", marks=dsakit.gate(*gates))
    for impl, gates in DECODE_KERNEL_PATHS.items() for role in ("target", "draft")
]
SHAPE = BatchShape("decode", (17, 64, 100, 129))
HEADS, SELECTED = 64, 48


def _logical_selection(shape: BatchShape, topk: int, seed: int):  # -> torch.Tensor [T, topk]
    """Per decode token: up to SELECTED distinct random positions of its request, then -1."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    rows = torch.full((shape.batch_size, topk), -1, dtype=torch.int32)
    for r, n in enumerate(shape.seq_lens):
        chosen = torch.randperm(n, generator=generator)[: min(n, SELECTED)]
        rows[r, : chosen.numel()] = chosen.to(torch.int32)
    return rows


def _placed_slots(placement, logical):  # -> torch.Tensor [T, topk] of KV slots, -1 kept
    import torch

    return torch.stack([
        torch.tensor([placement.slot(r, int(p)) if p >= 0 else -1 for p in logical[r].tolist()], dtype=torch.int64)
        for r in range(logical.shape[0])
    ])


@pytest.mark.parametrize("role", ["target", "draft"])
@dsakit.gate("cuda")
def test_unfused_selection_maps_to_the_placed_slots(role: str) -> None:
    """What every decode kernel path below reads: SGLang's page-table translation of the
    indexer's logical selection (`transform_index_page_table_decode`, the call forward_decode
    makes for unfused top-k) names exactly the slots the requests occupy."""
    import torch
    from sglang.srt.layers.attention import dsa_backend as dsa

    runner = dsakit.MockModelRunner(role, max_running_requests=8, model_config__context_len=1024)
    with dsa_backend(runner, env={"SGLANG_DSA_FUSE_TOPK": False}, speculative=role == "draft") as backend:
        batch, placement = build_forward_batch(runner, SHAPE, seed=3)
        backend.init_forward_metadata(batch)
        logical = _logical_selection(SHAPE, backend.dsa_index_topk, seed=5).to(runner.device)
        slots = dsa.transform_index_page_table_decode(page_table=backend.forward_metadata.page_table_1,
                                                      topk_indices=logical, page_size=1)
    got = slots.to("cpu", torch.int64)
    want = _placed_slots(placement, logical.cpu())
    rows = [r for r in range(want.shape[0]) if not torch.equal(got[r], want[r])]
    assert rows == [], f"rows {rows}: {got[rows[0], :8].tolist()} != placed slots {want[rows[0], :8].tolist()}"


@pytest.mark.parametrize(("role", "impl"), CELLS)
def test_decode_matches_the_sparse_reference(role: str, impl: str) -> None:
    import torch

    runner = dsakit.MockModelRunner(role, max_running_requests=8, model_config__context_len=1024)
    args = {"dsa_decode_backend": impl, "dsa_prefill_backend": impl if impl != "trtllm" else "flashmla_sparse"}
    # unfused top-k: the indexer hands logical positions, the backend maps them through page_table_1
    with dsa_backend(runner, server_args=args, env={"SGLANG_DSA_FUSE_TOPK": False}, kv_pool=True,
                     speculative=role == "draft") as backend:
        batch, placement = build_forward_batch(runner, SHAPE, seed=3)
        backend.init_forward_metadata(batch)
        kv = runner.token_to_kv_pool.get_key_buffer(0)
        generator = torch.Generator(device=kv.device).manual_seed(4)
        kv.copy_((torch.randn(kv.shape, generator=generator, device=kv.device) * 0.5).to(kv.dtype))
        head_dim = kv.shape[-1]
        layer = SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=1, tp_v_head_num=1,
                                head_dim=head_dim, qk_head_dim=head_dim, v_head_dim=runner.model_config.kv_lora_rank,
                                scaling=head_dim ** -0.5, logit_cap=0.0, is_cross_attention=False)
        q = (torch.randn(SHAPE.batch_size, HEADS, head_dim, generator=generator, device=kv.device) * 0.5)
        q = q.to(torch.bfloat16)
        logical = _logical_selection(SHAPE, backend.dsa_index_topk, seed=5).to(kv.device)
        out = backend.forward_decode(q.reshape(SHAPE.batch_size, -1), None, None, layer, batch,
                                     save_kv_cache=False, topk_indices=logical)
        want = sparse_mla_decode_reference(q.cpu(), kv.cpu(), _placed_slots(placement, logical.cpu()),
                                           sm_scale=layer.scaling, v_head_dim=layer.v_head_dim)
    got = out.reshape(SHAPE.batch_size, HEADS, -1).to("cpu", torch.float64)
    assert got.shape == want.shape, f"{impl}: output shape {tuple(got.shape)} != {tuple(want.shape)}"
    error = (got - want).abs().max().item()
    assert torch.allclose(got, want, atol=3e-2, rtol=3e-2), (
        f"{impl} ({role}) decode differs from the sparse reference: max abs error {error:.4f}")
