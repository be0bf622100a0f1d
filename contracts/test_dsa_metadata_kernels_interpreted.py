"""Contract suite (CPU): SGLang's fused DSA metadata Triton kernels run by Triton's interpreter.

The real decode / target-verify / draft-extend wrappers (plain, and the KPool variants where the
release has them), called as SGLang's CUDA-graph replay calls them on a batch padded the way its
runners pad one (seq_len fill 1, req_pool_indices 0), in a child process with TRITON_INTERPRET=1
(dsakit.simulation.triton_interpreter; this process's Triton is untouched). Their outputs must meet
the metadata postconditions and the torch reference. The MTP crash fix (the draft-extend clamp of
padded rows at 0) reverted in a copy of the kernel module is caught: its padded rows go negative.
Small shapes: bench/notes/2026-12-03-triton-interpreter.md has the costs.
"""

from __future__ import annotations

import pytest

import dsakit
from dsakit.backends.dsa_invariants import metadata_kernel_reasons
from dsakit.backends.dsa_metadata_kernels import CLAMP_REVERT, MODES, MetadataCase, call_arguments
from dsakit.backends.dsa_metadata_reference import mismatches
from dsakit.simulation.triton_interpreter import SGLANG_MODULE, ChildRun, InterpretedRun, run_interpreted

pytestmark = [dsakit.gate("sglang:dsa-metadata-kernels"), dsakit.gate("jit:triton-interpreter")]

# Two live requests (one below a page, one across pages) and two padded rows, 4 draft tokens; an
# index_topk below the longer rows, so the DSA lengths are clamped (SGLang's is 2048).
LIVE = (37, 130)
KPOOL = 4
PADDED_DRAFT_ROWS = list(range(len(LIVE) * 4, (len(LIVE) + 2) * 4))
KPOOL_GATE = dsakit.gate("sglang:dsa-kpool-metadata-kernels")
LAYOUTS = [pytest.param(1, id="plain"), pytest.param(KPOOL, id=f"kpool{KPOOL}", marks=KPOOL_GATE)]


def _case(mode: str, index_kpool: int) -> MetadataCase:
    return MetadataCase(mode, LIVE, padded_rows=2, width=256, index_topk=64, index_kpool=index_kpool)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def interpreted() -> ChildRun:
    from dsakit.stack.sglang_release import installed_release

    kpools = (1, KPOOL) if installed_release().has("dsa-kpool-metadata-kernels") else (1,)
    cases = [_case(mode, kpool) for kpool in kpools for mode in MODES]
    return run_interpreted(cases, variants=(SGLANG_MODULE, CLAMP_REVERT.name), repeats=1)


def _run(child: ChildRun, mode: str, index_kpool: int, variant: str) -> InterpretedRun:
    return next(r for r in child.runs
                if r.case.mode == mode and r.case.index_kpool == index_kpool and r.variant == variant)


def _reasons(run: InterpretedRun) -> list[dsakit.Reason]:
    """The kernel-launch contracts' postconditions on what the interpreted call wrote."""
    return metadata_kernel_reasons(run.case.mode, call_arguments(run.case, {**run.inputs, **run.outputs}))


@pytest.mark.parametrize("index_kpool", LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_interpreted_kernel_meets_the_postconditions_and_the_reference(
    interpreted: ChildRun, mode: str, index_kpool: int
) -> None:
    run = _run(interpreted, mode, index_kpool, SGLANG_MODULE)
    reasons = _reasons(run) + mismatches(run.case, run.inputs, run.outputs)
    assert reasons == [], "\n".join(map(str, reasons))


@pytest.mark.parametrize("index_kpool", LAYOUTS)
def test_reverted_draft_extend_clamp_is_caught_on_the_padded_rows(interpreted: ChildRun, index_kpool: int) -> None:
    run = _run(interpreted, "draft_extend", index_kpool, CLAMP_REVERT.name)
    said = [r.message for r in _reasons(run)]
    assert [m.split(":")[0] for m in said[:4]] == [f"seqlens_expanded[{row}] = {value}"
                                                   for row, value in ((8, -2), (9, -1), (12, -2), (13, -1))], said
    assert all("the kernel wrote a negative length" in m for m in said[:4]), said
    expanded = run.outputs["seqlens_expanded"]
    assert (expanded < 0).nonzero().flatten().tolist() == [r for r in PADDED_DRAFT_ROWS if r % 4 < 2]
    assert expanded[PADDED_DRAFT_ROWS].tolist() == [-2, -1, 0, 1] * 2  # fill 1 - 4 draft tokens + offset + 1
