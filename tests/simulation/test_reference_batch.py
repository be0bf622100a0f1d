"""The ragged stand-in over a batch (issue 45 item 4: the mutation run's core): a request with no
query tokens (a finished or padded row) leaves the requests after it computed, each exactly as it
is computed alone."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="[module:torch] the reference computes in torch")


def test_an_empty_request_leaves_the_later_ones_computed_as_alone() -> None:
    import torch

    from dsakit.simulation.reference_kernels import causal_varlen_attention

    generator = torch.Generator().manual_seed(3)
    q_lens, kv_lens = [2, 0, 3], [4, 2, 5]
    query = torch.randn(sum(q_lens), 2, 8, generator=generator)
    key = torch.randn(sum(kv_lens), 2, 8, generator=generator)
    value = torch.randn(sum(kv_lens), 2, 4, generator=generator)
    cum = lambda lens: torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32)  # noqa: E731
    batch = causal_varlen_attention(query, key, value, cum(q_lens), cum(kv_lens), scale=0.5)
    q0 = k0 = 0
    for lq, lkv in zip(q_lens, kv_lens, strict=True):
        alone = causal_varlen_attention(query[q0:q0 + lq], key[k0:k0 + lkv], value[k0:k0 + lkv], cum([lq]), cum([lkv]),
                                        scale=0.5)
        torch.testing.assert_close(batch[q0:q0 + lq], alone)
        q0, k0 = q0 + lq, k0 + lkv
    assert batch[2:].abs().sum() > 0  # the last request was computed, not left at zeros
