"""Contract suite: selections of the REAL fused top-k entry points against one golden per case.

Every path in `dsakit.topk.launch.TOPK_PATHS` runs every case that applies to it; positions are
checked for validity and matched against the golden (written on CPU by the torch path, reproduced
by every GPU path up to ties). Where a kernel's candidate buffer overflows (a sourced upstream
bug), exactness is a strict xfail raising only `KnownKernelBug`: a fix shows as XPASS(strict).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

import dsakit
from dsakit.topk.cases import CASES, TopkCase, get_case, select_topk_cases
from dsakit.topk.checks import coarse_scores
from dsakit.topk.reference import reference_topk
from dsakit.topk.launch import TOPK_PATHS, TopkPath, _set_env, known_kernel_bug, path_gates, run_v2_fold

POISON = 0x7FFFFFF0


def _params() -> list[Any]:
    out = []
    for path in TOPK_PATHS.values():
        for case in select_topk_cases():
            marks = [dsakit.gate(*path_gates(path, case))] if path_gates(path, case) else []
            out.append(pytest.param(path, case, marks=marks, id=f"{path.path_id}-{case.case_id}"))
    return out


def _skip_unsupported(path: TopkPath, case: TopkCase) -> None:
    reason = path.unsupported(case)
    if reason is not None:
        pytest.skip(str(reason))


def _reference(case: TopkCase, scores: Any = None) -> Any:
    return reference_topk(case.scores("cpu") if scores is None else scores, case.lengths, case.k,
                          row_starts=case.row_starts)


class KnownKernelBug(AssertionError):
    """An exact-selection failure that a sourced, open upstream bug predicts for this input."""


def _expect_known_bug(request: pytest.FixtureRequest, path: TopkPath, case: TopkCase,
                      positions: Any, bug: Any) -> None:
    """Bin-precision validity is binding; exactness is a strict xfail raising KnownKernelBug."""
    reason, rows = bug
    filler = path.contract(case).nan_slot_filler
    scores = case.scores("cpu")
    dsakit.assert_topk_valid(positions, coarse_scores(scores, rows), case.lengths, case.k,
                             row_starts=case.row_starts, nan_slot_filler=filler)
    request.applymarker(pytest.mark.xfail(strict=True, raises=KnownKernelBug, reason=str(reason)))
    try:
        dsakit.assert_topk_valid(positions, scores, case.lengths, case.k,
                                 row_starts=case.row_starts, nan_slot_filler=filler)
        dsakit.assert_topk_equal(positions, _reference(case), scores, case.lengths, topk=case.k,
                                 row_starts=case.row_starts, nan_slot_filler=filler)
    except AssertionError as exc:
        raise KnownKernelBug(f"{reason}\n{exc}") from None


@pytest.mark.parametrize(("path", "case"), _params())
def test_selection(path: TopkPath, case: TopkCase, selection_snapshot: Any,
                   monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    _skip_unsupported(path, case)
    bug = known_kernel_bug(path, case)  # predicted from the scores, before the launch
    positions = path.run(case, path.device, monkeypatch)
    if bug is not None:
        _expect_known_bug(request, path, case, positions, bug)
        return
    selection_snapshot.assert_case(case, positions, reference=path.reference,
                                   nan_slot_filler=path.contract(case).nan_slot_filler)
    if not path.reference:  # the readable per-row diff against the live reference, ties allowed
        dsakit.assert_topk_equal(positions, _reference(case), case.scores("cpu"), case.lengths,
                                 topk=case.k, row_starts=case.row_starts,
                                 nan_slot_filler=path.contract(case).nan_slot_filler)


@pytest.mark.parametrize("path", list(TOPK_PATHS.values()), ids=list(TOPK_PATHS))
def test_negative_lengths_refused_before_launch(path: TopkPath, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs for every path on any machine: the refusal happens before SGLang or a kernel is touched."""
    case = get_case("padded-negative-lengths-k512")
    with pytest.raises(dsakit.UsageError, match=r"row 1 = -1, row 3 = -4.*must carry length 0"):
        path.run(case, "cpu", monkeypatch)


_FOLD = TOPK_PATHS["v2-fold.paged"]


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.case_id, marks=[dsakit.gate(*path_gates(_FOLD, c))])
     for c in select_topk_cases(ragged=False) if c.page_size == 64],
)
def test_v2_fold_page_size_64_table_gives_page_size_1_slots(case: TopkCase,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold over the page_size-64 table equals the page_size-1 table. Which members of an
    overflowing threshold bin the kernel keeps is its known bug (strict xfail in
    test_selection[v2-fold.*]) and arrival-order dependent, so such rows are compared at the
    kernel's bin precision here; every slot must still come from the row's own page table."""
    path = _FOLD
    filler = path.contract(case).nan_slot_filler
    bug = known_kernel_bug(path, case)
    slots64, pos64, tables = run_v2_fold(case, "cuda", monkeypatch, page_size=64)
    slots1, pos1, _ = run_v2_fold(case, "cuda", monkeypatch, page_size=1)
    scores = case.scores("cpu") if bug is None else coarse_scores(case.scores("cpu"), bug[1])
    dsakit.assert_topk_valid(pos64, scores, case.lengths, case.k, nan_slot_filler=filler)
    dsakit.assert_topk_valid(pos1, scores, case.lengths, case.k, nan_slot_filler=filler)
    # same positions up to ties; both mapped through the one page_size-1 table, so same slots
    report = dsakit.assert_topk_equal(pos64, pos1, scores, case.lengths, topk=case.k, nan_slot_filler=filler)
    for row in range(case.num_rows):
        if row not in report.tie_swaps:
            a = sorted(x for x in slots64[row].tolist() if x != -1)
            b = sorted(x for x in slots1[row].tolist() if x != -1)
            assert a == b, f"row {row}: page_size 64 fold and page_size 1 table give different slots"


_GRAPH_PATHS = [path.path_id for path in TOPK_PATHS.values() if path.entry.cuda_graph_replay]


@pytest.mark.parametrize(
    "path_id",
    [pytest.param(p, marks=dsakit.gate("cuda", "cuda-graphs", *TOPK_PATHS[p].gates)) for p in _GRAPH_PATHS],
)
def test_cuda_graph_replay_with_poisoned_output(path_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Capture once, poison the output, feed new scores, replay: every slot must be rewritten."""
    import torch

    from dsakit.topk.launch import _metadata, _sglang

    case = get_case("decode-ps64-k2048")
    sgl = _sglang()
    scores = case.scores("cuda")
    lengths = case.lengths_tensor("cuda")
    path = TOPK_PATHS[path_id]
    tables = None
    if path.entry.call == "v2-fold":
        from sglang.kernels.ops.attention.dsv4.topk import plan_topk_v2

        _set_env(monkeypatch, fuse=True, v2=True)
        tables, md, _ = _metadata(case, "cuda")
        md.topk_v2_plan = plan_topk_v2(lengths)
        md.page_table_1 = None

        def call() -> Any:
            return sgl.Backend.SGL_KERNEL.topk_transform(scores, lengths, case.k, sgl.Method.PAGED, md)
    else:
        backend = sgl.Backend(path.backend.value)

        def call() -> Any:
            return backend.topk_func(scores, lengths, case.k)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm-up (JIT, workspace) outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    new_scores = case.scores("cpu", seed_offset=1)
    scores.copy_(new_scores.to("cuda"))
    out.fill_(POISON)
    graph.replay()
    torch.cuda.synchronize()
    raw = out.detach().cpu()
    poisoned = int((raw == POISON).sum())
    assert poisoned == 0, f"{path_id}: replay left {poisoned} output entries unwritten (poison visible)"
    positions = raw if tables is None else tables.slots_to_positions(raw)[0]
    dsakit.assert_topk_valid(positions, new_scores, case.lengths, case.k)
    dsakit.assert_topk_equal(positions, _reference(case, new_scores), new_scores, case.lengths, topk=case.k)


def test_env_flags_are_restored_even_when_the_test_raises() -> None:
    from sglang.srt.environ import envs

    names = ("SGLANG_DSA_FUSE_TOPK", "SGLANG_OPT_USE_TOPK_V2", "SGLANG_NSA_FUSE_TOPK")
    before = {n: os.environ.get(n) for n in names}
    with pytest.raises(RuntimeError, match="boom"):
        with pytest.MonkeyPatch.context() as mp:
            _set_env(mp, fuse=False, v2=True)
            # EnvField.get() reads os.environ on every call: the override is seen at once
            assert envs.SGLANG_DSA_FUSE_TOPK.get() is False
            assert envs.SGLANG_OPT_USE_TOPK_V2.get() is True
            raise RuntimeError("boom")
    assert {n: os.environ.get(n) for n in names} == before


def test_catalogue_has_every_shape() -> None:
    shapes = {c.shape for c in CASES.values()}
    assert {"decode", "extend", "target-verify", "draft-extend", "adversarial", "long-context"} <= shapes
    assert {c.k for c in CASES.values()} == {512, 2048}
    assert {c.page_size for c in CASES.values()} == {1, 64}
    assert max(max(c.lengths) for c in CASES.values()) >= 1 << 20
