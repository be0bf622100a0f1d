"""The MTP padded-length crash class, through SGLang's real decode top-k path inside a captured CUDA
graph (issue 38's evidence on a GPU node; not collected by dsakit's own suite).

A fused-decode CUDA graph captures `DSATopKBackend.SGL_KERNEL.topk_transform` (PAGED, v2 on: the DeepSeek-V4
top-k v2 JIT) over static buffers; at replay the target-verify / draft-extend padding writes a
negative length into the idle rows. SGLang's kernel reads lengths as uint32 (dsa_topk_backend.py:
"reinterprets as ~4e9 tokens and illegal-addresses"). Without --dsakit-kernel-contracts the replay
launches it; with it, the replay is refused naming the argument, row and value. `test_after` shows
whether the rest of the run stays clean.

    python -m pytest -p dsakit.plugin tests/suites/mtp_padded_lengths.py [--dsakit-kernel-contracts]
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="[cuda] captures a CUDA graph")
ROWS, WIDTH, PAGE, TOPK = 4, 32768, 64, 512  # a wide graph score buffer: the streaming level


def _decode(scores: torch.Tensor, lengths: torch.Tensor, table: torch.Tensor, plan: torch.Tensor) -> torch.Tensor:
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend, TopkTransformMethod

    metadata = SimpleNamespace(page_table_1=None, real_page_table=table, page_size=PAGE, token_to_batch_idx=None,
                               cu_seqlens_k=None, topk_v2_plan=plan)
    out: torch.Tensor = DSATopKBackend.SGL_KERNEL.topk_transform(scores, lengths, TOPK, TopkTransformMethod.PAGED,
                                                                 metadata)
    return out


@cuda
def test_mtp_padded_rows_replayed_in_a_captured_decode_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.kernels.ops.attention.dsv4.topk import plan_topk_v2

    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "1")
    monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "1")
    torch.manual_seed(0)
    scores = torch.randn(ROWS, WIDTH, device="cuda")  # the graph's wide score buffer
    lengths = torch.tensor([3000, 2000, 1000, 500], dtype=torch.int32, device="cuda")
    table = torch.arange(ROWS * (WIDTH // PAGE), dtype=torch.int32, device="cuda").reshape(ROWS, -1)
    plan = plan_topk_v2(lengths)
    _decode(scores, lengths, table, plan)  # built and loaded outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _decode(scores, lengths, table, plan)
    graph.replay()
    torch.cuda.synchronize()
    assert int((out[0] >= 0).sum()) == TOPK  # a live row selects k slots
    # the MTP padding: idle companion rows get a negative padded length in the static buffer
    lengths.copy_(torch.tensor([3000, 2000, -4, -4], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()


@cuda
def test_after() -> None:
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    assert float((x * 2).sum()) == 1024 * 1023
