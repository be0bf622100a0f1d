"""The one reference of a correct top-k selection, shared by the matrix and the selection suites.

Owns: plain `torch.topk` over each row's valid window (`scores[r, start:start + length]`),
row-local positions, -1 padded. Must not call SGLang: the torch path under test is SGLang's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def reference_topk(scores: Any, lengths: Sequence[int] | Any, k: int, *,
                   row_starts: Sequence[int] | Any = None) -> torch.Tensor:
    """Row-local top-k positions of each window, on CPU, int64 (rows, k), -1 padded."""
    import torch

    scores = torch.as_tensor(scores).detach().to("cpu", torch.float64)  # exact for every input dtype
    lengths = [int(x) for x in torch.as_tensor(lengths).flatten().tolist()]
    starts = [0] * len(lengths) if row_starts is None else [
        int(x) for x in torch.as_tensor(row_starts).flatten().tolist()]
    out = torch.full((scores.shape[0], k), -1, dtype=torch.int64)
    for row, (start, length) in enumerate(zip(starts, lengths)):
        n = min(k, max(length, 0))
        if n:
            out[row, :n] = torch.topk(scores[row, start:start + length], n).indices
    return out
