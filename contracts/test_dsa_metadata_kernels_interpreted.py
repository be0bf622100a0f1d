"""Contract suite (CPU): SGLang's fused DSA metadata Triton kernels run by Triton's interpreter.

The real decode / target-verify / draft-extend wrappers, called as SGLang's CUDA-graph replay calls
them on a batch padded the way its runners pad one (seq_len fill 1, req_pool_indices 0), in a child
process with TRITON_INTERPRET=1 (dsakit.simulation.triton_interpreter; this process's Triton is
untouched). Their outputs must meet the metadata postconditions and the torch reference. The MTP
crash fix (the draft-extend clamp of padded rows at 0) reverted in a copy of the kernel module is
caught: its padded rows go negative. Small shapes: bench/notes/triton-interpreter.md has the costs.
"""

from __future__ import annotations

import pytest

import dsakit
from dsakit.backends.dsa_invariants import metadata_kernel_reasons
from dsakit.backends.dsa_metadata_kernels import CLAMP_REVERT, MetadataCase
from dsakit.backends.dsa_metadata_reference import mismatches
from dsakit.simulation.triton_interpreter import SGLANG_MODULE, ChildRun, InterpretedRun, run_interpreted

pytestmark = dsakit.gate("sglang:dsa-metadata-kernels")

# Two live requests (one below a page, one across pages) and two padded rows, 4 draft tokens; an
# index_topk below the longer rows, so the DSA lengths are clamped (SGLang's is 2048).
LIVE = (37, 130)
CASES = [MetadataCase(mode, LIVE, padded_rows=2, width=256, index_topk=64)
         for mode in ("decode", "target_verify", "draft_extend")]
PADDED_DRAFT_ROWS = list(range(len(LIVE) * 4, (len(LIVE) + 2) * 4))


@pytest.fixture(scope="module")
def interpreted() -> ChildRun:
    return run_interpreted(CASES, variants=(SGLANG_MODULE, CLAMP_REVERT.name), repeats=1)


def _run(child: ChildRun, mode: str, variant: str) -> InterpretedRun:
    return next(r for r in child.runs if r.case.mode == mode and r.variant == variant)


@pytest.mark.parametrize("mode", [c.mode for c in CASES])
def test_interpreted_kernel_meets_the_postconditions_and_the_reference(interpreted: ChildRun, mode: str) -> None:
    run = _run(interpreted, mode, SGLANG_MODULE)
    reasons = metadata_kernel_reasons(run.outputs, width=run.case.width, index_topk=run.case.index_topk)
    reasons += mismatches(run.case, run.inputs, run.outputs)
    assert reasons == [], "\n".join(map(str, reasons))


def test_reverted_draft_extend_clamp_is_caught_on_the_padded_rows(interpreted: ChildRun) -> None:
    run = _run(interpreted, "draft_extend", CLAMP_REVERT.name)
    reasons = metadata_kernel_reasons(run.outputs, width=run.case.width, index_topk=run.case.index_topk)
    negative = [r for r in reasons if r.code == "negative-length"]
    assert [r.message.split(" holds")[0] for r in negative] == ["seqlens_expanded", "dsa_cache_seqlens"], reasons
    expanded = run.outputs["seqlens_expanded"]
    assert (expanded < 0).nonzero().flatten().tolist() == [r for r in PADDED_DRAFT_ROWS if r % 4 < 2]
    assert expanded[PADDED_DRAFT_ROWS].tolist() == [-2, -1, 0, 1] * 2  # fill 1 - 4 draft tokens + offset + 1
