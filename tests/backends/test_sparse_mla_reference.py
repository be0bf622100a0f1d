"""The sparse MLA reference equals dense attention masked to the selected tokens (CPU)."""

from __future__ import annotations

import pytest

from dsakit.backends.sparse_mla_reference import sparse_mla_decode_reference

torch = pytest.importorskip("torch")


def _dense_masked(q, kv, slots, scale, dv):
    """Attention over every slot of the pool with a -inf mask outside the selection: another way
    of writing the same definition, loop by loop."""
    out = torch.zeros(q.shape[0], q.shape[1], dv, dtype=torch.float64)
    for t in range(q.shape[0]):
        chosen = sorted({int(s) for s in slots[t] if s >= 0})
        if not chosen:
            continue
        mask = torch.full((kv.shape[0],), float("-inf"), dtype=torch.float64)
        mask[chosen] = 0.0
        logits = q[t].double() @ kv[:, 0].double().T * scale + mask
        out[t] = torch.softmax(logits, -1) @ kv[:, 0, :dv].double()
    return out


def test_matches_dense_masked_attention_and_handles_empty_rows() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(5, 4, 24, generator=g)
    kv = torch.randn(40, 1, 24, generator=g)
    slots = torch.stack([torch.randperm(40, generator=g)[:7] for _ in range(5)])  # top-k: distinct slots
    slots[1, 3:] = -1
    slots[4] = -1  # nothing selected
    got = sparse_mla_decode_reference(q, kv, slots, sm_scale=0.2, v_head_dim=16)
    assert torch.allclose(got, _dense_masked(q, kv, slots, 0.2, 16), atol=1e-10)
    assert torch.count_nonzero(got[4]) == 0


def test_a_wrong_slot_changes_the_output() -> None:
    g = torch.Generator().manual_seed(1)
    q, kv = torch.randn(2, 3, 24, generator=g), torch.randn(30, 1, 24, generator=g)
    slots = torch.tensor([[1, 2, 3, -1], [4, 5, -1, -1]])
    shifted = torch.where(slots >= 0, slots + 1, slots)  # an off-by-one page-table translation
    a = sparse_mla_decode_reference(q, kv, slots, sm_scale=0.2, v_head_dim=16)
    b = sparse_mla_decode_reference(q, kv, shifted, sm_scale=0.2, v_head_dim=16)
    assert not torch.allclose(a, b, atol=1e-3)
