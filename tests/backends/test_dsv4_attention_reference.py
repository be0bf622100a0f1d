"""The DeepSeek-V4 sparse attention reference equals dense attention masked to the SWA window and
the compressed entries, with the sink as an extra zero-value logit (CPU)."""

from __future__ import annotations

import math

import pytest

from dsakit.backends.dsv4_attention_reference import attended_positions, dsv4_sparse_attention_reference, indexer_topk

torch = pytest.importorskip("torch")
SCALE = 24 ** -0.5


def _dense_masked(q, tokens, compressed, lengths, ratio, sink, window=128):
    """Attention over every token and every compressed entry of a request, masked position by
    position: another way of writing the same definition, loop by loop."""
    out = torch.zeros(q.shape[0], q.shape[1], q.shape[2], dtype=torch.float64)
    for t, n in enumerate(lengths):
        keys = torch.cat([tokens, compressed]).double()
        mask = torch.full((keys.shape[0],), float("-inf"), dtype=torch.float64)
        for p in range(tokens.shape[0]):
            if n - window <= p < n:
                mask[p] = 0.0
        for j in range(compressed.shape[0]):
            if ratio and ratio * (j + 1) <= n:
                mask[tokens.shape[0] + j] = 0.0
        if torch.isinf(mask).all():
            continue
        logits = torch.cat([q[t].double() @ keys.T * SCALE + mask, sink.double()[:, None]], dim=1)
        weights = torch.softmax(logits, -1)[:, :-1]  # the sink takes mass but has no value
        out[t] = weights @ keys
    return out


def _gathered(tokens, compressed, lengths, ratio, shift=0):
    rows = []
    for n in lengths:
        swa, entries = attended_positions(n, ratio)
        rows.append(torch.cat([tokens[[p + shift for p in swa]], compressed[entries]]))
    width = max(r.shape[0] for r in rows)
    keys = torch.zeros(len(rows), width, tokens.shape[1], dtype=torch.float64)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for t, r in enumerate(rows):
        keys[t, : r.shape[0]], valid[t, : r.shape[0]] = r.double(), True
    return keys, valid


@pytest.mark.parametrize("ratio", [0, 4, 128])
def test_matches_dense_masked_attention(ratio: int) -> None:
    g = torch.Generator().manual_seed(ratio)
    lengths = [1, 3, 127, 128, 129, 300]
    tokens, compressed = torch.randn(301, 24, generator=g), torch.randn(80, 24, generator=g)
    q, sink = torch.randn(len(lengths), 4, 24, generator=g), torch.randn(4, generator=g)
    keys, valid = _gathered(tokens, compressed, lengths, ratio)
    got = dsv4_sparse_attention_reference(q, keys, valid, sink, softmax_scale=SCALE, v_head_dim=24)
    assert torch.allclose(got, _dense_masked(q, tokens, compressed, lengths, ratio, sink), atol=1e-10)


def test_the_sink_takes_mass_and_an_empty_row_is_zero() -> None:
    q, keys = torch.ones(2, 1, 4), torch.ones(2, 1, 4)
    valid = torch.tensor([[True], [False]])
    got = dsv4_sparse_attention_reference(q, keys, valid, torch.tensor([math.log(2.0)]), softmax_scale=0.0,
                                          v_head_dim=4)
    assert torch.allclose(got[0], torch.full((1, 4), 1 / 3, dtype=torch.float64))  # e^0 / (e^0 + 2)
    assert torch.count_nonzero(got[1]) == 0


def test_a_window_off_by_one_changes_the_output() -> None:
    g = torch.Generator().manual_seed(7)
    lengths = [200, 300]
    tokens, compressed = torch.randn(302, 24, generator=g), torch.randn(80, 24, generator=g)
    q, sink = torch.randn(2, 4, 24, generator=g), torch.randn(4, generator=g)
    right = dsv4_sparse_attention_reference(q, *_gathered(tokens, compressed, lengths, 4), sink, softmax_scale=SCALE,
                                            v_head_dim=24)
    shifted = dsv4_sparse_attention_reference(q, *_gathered(tokens, compressed, lengths, 4, shift=1), sink,
                                              softmax_scale=SCALE, v_head_dim=24)
    assert not torch.allclose(right, shifted, atol=1e-3)


def test_attended_positions_and_the_indexer_selection() -> None:
    assert attended_positions(130, 4) == (list(range(2, 130)), list(range(32)))
    assert attended_positions(255, 128) == (list(range(127, 255)), [0])
    assert attended_positions(5, 0) == ([0, 1, 2, 3, 4], [])
    assert indexer_topk(torch.zeros(40), 40) == list(range(40))  # <= 512 entries: all, in order
    logits = torch.arange(600, dtype=torch.float64).flip(0)
    assert indexer_topk(logits, 600) == list(range(512))
    assert indexer_topk(logits, 600, topk=3) == [0, 1, 2]
