"""Contract suite: the indexer's top-k through the real DSA backend, per role (GPU).

`backend.get_indexer_metadata(layer, batch).topk_transform(logits, index_topk)` with the role's
resolved top-k backend: fused it returns physical KV slots (page table folded in), unfused
row-local positions; either way exactly torch.topk of each row's valid prefix (tie-free scores).
"""

from __future__ import annotations

from typing import Any

import pytest

import dsakit
from dsakit.backends.harness import dsa_backend
from dsakit.backends.batch_builder import BatchShape, build_forward_batch
from dsakit.topk.backends import TOPK_BACKENDS
from dsakit.topk.cases import get_case

# SGLang Triton kernels launched here are compiled by `dsakit warm` before the workers start
pytestmark = [dsakit.gate("cuda", "sglang:dsa-backend"), pytest.mark.dsakit_jit("triton-kernels")]

# lengths 1 .. 8192 around k = 2048 (< k, == k, > k), scores distinct (no tie at the boundary)
CASE = "decode-ps64-k2048"


def _choices() -> dict[str, tuple[str, dict[str, bool], tuple[str, ...]]]:
    """From the backend table: each backend fused (and through the v2 JIT where it takes v2), or
    unfused where SGLang's fused transform refuses it; with the gates each needs."""
    choices = {}
    for backend in TOPK_BACKENDS.values():
        token = backend.value.replace("-", "_")
        if backend.v2_gates is not None:
            choices[f"{token}-v2"] = (backend.value, {"SGLANG_DSA_FUSE_TOPK": True, "SGLANG_OPT_USE_TOPK_V2": True},
                                      backend.gates + backend.v2_gates)
        choices[token if backend.fused else f"{token}-unfused"] = (
            backend.value, {"SGLANG_DSA_FUSE_TOPK": backend.fused, "SGLANG_OPT_USE_TOPK_V2": False}, backend.gates)
    return choices


TOPK_CHOICES = _choices()
CELLS = [
    pytest.param(role, name, marks=dsakit.gate(*gates) if gates else (), id=f"{role}-{name}")
    for role in ("target", "draft")
    for name, (_, _, gates) in TOPK_CHOICES.items()
]


def _server_args(backend: str) -> dict[str, Any]:
    args = {"dsa_topk_backend": backend}
    if dsakit.installed_release().has("topk-role-split"):
        args["speculative_dsa_topk_backend"] = backend  # the draft role reads its own flag
    return args


@pytest.mark.parametrize(("role", "choice"), CELLS)
def test_indexer_topk_selects_through_the_role_backend(role: str, choice: str) -> None:
    import torch

    backend_name, env, _ = TOPK_CHOICES[choice]
    case = get_case(CASE)
    runner = dsakit.MockModelRunner(role, max_running_requests=16, model_config__context_len=case.width)
    with dsa_backend(runner, speculative=role == "draft", server_args=_server_args(backend_name), env=env) as backend:
        assert backend.dsa_topk_backend.value == backend_name
        shape = BatchShape("decode", case.lengths)
        batch, placement = build_forward_batch(runner, shape, seed=11)
        backend.init_forward_metadata(batch)
        metadata = backend.get_indexer_metadata(0, batch)
        scores = case.scores(runner.device)
        lengths = case.lengths_tensor(runner.device)
        scores = scores.masked_fill(torch.arange(case.width, device=scores.device)[None, :] >= lengths[:, None], float("-inf"))
        result = metadata.topk_transform(scores, backend.dsa_index_topk)
        fused = env["SGLANG_DSA_FUSE_TOPK"] and not metadata.force_unfused_topk
    # fused output is physical slots: map it back through each request's req_to_token row
    # (a slot outside the row becomes -2, which the validity check reports as out of range)
    positions = placement.page_tables(runner, case.lengths).slots_to_positions(result)[0] if fused else result.cpu()
    reference = torch.stack([
        torch.nn.functional.pad(torch.topk(scores[r, :n].cpu(), min(n, case.k)).indices, (0, case.k - min(n, case.k)), value=-1)
        for r, n in enumerate(case.lengths)
    ])
    dsakit.assert_topk_valid(positions, scores.cpu(), lengths.cpu(), case.k)
    dsakit.assert_topk_equal(positions, reference, scores.cpu(), lengths.cpu())
