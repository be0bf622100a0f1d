"""Self-tests of the top-k checks (dsakit.topk.checks), the case catalogue and the length refusal."""

from __future__ import annotations

import re

import pytest
import torch

import dsakit
from dsakit.topk.cases import CASES, get_case


def _topk(scores: torch.Tensor, lengths: list[int], k: int) -> torch.Tensor:
    """Plain reference: torch.topk over each row's valid prefix, -1 padded."""
    out = torch.full((scores.shape[0], k), -1, dtype=torch.int64)
    for r, n in enumerate(lengths):
        m = min(n, k)
        if m:
            out[r, :m] = torch.topk(scores[r, :n], m).indices
    return out


@pytest.fixture
def distinct() -> tuple[torch.Tensor, list[int], int]:
    gen = torch.Generator().manual_seed(0)
    scores = torch.stack([torch.randperm(64, generator=gen).float() for _ in range(3)])
    return scores, [64, 20, 5], 8


def test_reference_selection_is_valid_and_equal_to_itself(distinct: tuple) -> None:
    scores, lengths, k = distinct
    sel = _topk(scores, lengths, k)
    dsakit.assert_topk_valid(sel, scores, lengths, k)
    report = dsakit.assert_topk_equal(sel.flip(1), sel, scores, lengths)  # order does not matter
    assert report.tie_swaps == {}


def test_planted_off_by_one_fails_with_a_readable_row_diff(distinct: tuple) -> None:
    scores, lengths, k = distinct
    sel = _topk(scores, lengths, k)
    good = sel.clone()
    worst = int(torch.argmin(scores[1, :20][sel[1, :k]]))  # the lowest selected entry of row 1
    victim = int(sel[1, worst])
    neighbour = next(p for p in (victim + 1, victim - 1, victim + 2, victim - 2)
                     if 0 <= p < 20 and p not in sel[1].tolist())
    sel[1, worst] = neighbour  # off by one (or two): a plausible indexing bug
    with pytest.raises(AssertionError) as info:
        dsakit.assert_topk_equal(sel, good, scores, lengths)
    text = str(info.value)
    assert "1 of 3 rows fail" in text and "row 1 [mismatch]" in text
    assert f"missing (should be selected): {victim} (score {float(scores[1, victim])!r})" in text
    assert "k-th largest valid score" in text
    with pytest.raises(AssertionError, match=r"row 1 \[order\]"):
        dsakit.assert_topk_valid(sel, scores, lengths, k)


def test_swapped_non_tied_index_fails(distinct: tuple) -> None:
    scores, lengths, k = distinct
    sel = _topk(scores, lengths, k)
    unselected = [p for p in range(64) if p not in sel[0].tolist()]
    sel2 = sel.clone()
    sel2[0, 0] = unselected[0]
    with pytest.raises(AssertionError, match=r"row 0 \[mismatch\].*not explained by ties"):
        dsakit.assert_topk_equal(sel2, sel, scores, lengths)


def test_tie_swap_passes_and_is_reported() -> None:
    scores = torch.tensor([[5.0, 3.0, 3.0, 3.0, 1.0, 0.0, 0.0, 0.0]])
    a = torch.tensor([[0, 1, 2]])
    b = torch.tensor([[2, 0, 3]])
    dsakit.assert_topk_valid(a, scores, [8], 3)
    dsakit.assert_topk_valid(b, scores, [8], 3)
    report = dsakit.assert_topk_equal(b, a, scores, [8])
    assert report.tie_swaps == {0: ([1], [3])}


def test_count_duplicates_range_and_padding() -> None:
    scores = torch.arange(10.0)[None]
    with pytest.raises(AssertionError, match=r"\[count\] .*selected 3 positions, expected 4"):
        dsakit.assert_topk_valid(torch.tensor([[9, 8, 7, -1]]), scores, [10], 4)
    with pytest.raises(AssertionError, match=r"\[duplicate\] .*positions \[9\] selected twice"):
        dsakit.assert_topk_valid(torch.tensor([[9, 9, 8, 7]]), scores, [10], 4)
    with pytest.raises(AssertionError, match=r"\[out-of-range\] .*\[12\] are neither -1 nor in \[0, 10\)"):
        dsakit.assert_topk_valid(torch.tensor([[9, 12, 8, 7]]), scores, [10], 4)
    # length < k: exactly `length` entries, -1 anywhere
    dsakit.assert_topk_valid(torch.tensor([[-1, 1, 0, -1]]), scores, [2], 4)
    dsakit.assert_topk_valid(torch.tensor([[-1, -1, -1, -1]]), scores, [0], 4)


def test_neg_inf_may_be_padded_or_selected_but_never_before_a_finite_score() -> None:
    scores = torch.tensor([[1.0, float("-inf"), 2.0, float("-inf"), 0.5]])
    dsakit.assert_topk_valid(torch.tensor([[2, 0, 4, -1]]), scores, [5], 4)  # torch path: -1
    dsakit.assert_topk_valid(torch.tensor([[2, 0, 4, 3]]), scores, [5], 4)  # kernels: fill -inf
    dsakit.assert_topk_equal(torch.tensor([[2, 0, 4, 3]]), torch.tensor([[2, 0, 4, -1]]), scores, [5])
    with pytest.raises(AssertionError, match=r"\[order\]"):
        dsakit.assert_topk_valid(torch.tensor([[2, 0, 3]]), scores, [5], 3)  # -inf over 0.5
    with pytest.raises(AssertionError, match=r"\[count\]"):
        dsakit.assert_topk_valid(torch.tensor([[2, 0, -1]]), scores, [5], 3)  # 0.5 left out


def test_nan_is_outside_the_ordering() -> None:
    nan = float("nan")
    scores = torch.tensor([[1.0, nan, 3.0, 2.0, nan]])
    # torch.topk ranks NaN above +inf ...
    torch_sel = torch.topk(scores, 3).indices
    assert set(torch_sel[0].tolist()) == {1, 4, 2}
    dsakit.assert_topk_valid(torch_sel, scores, [5], 3)
    # ... a kernel that never collects NaN (v2 fp32 collect pass) comes back short but ordered
    dsakit.assert_topk_valid(torch.tensor([[2, -1, -1]]), scores, [5], 3)
    dsakit.assert_topk_valid(torch.tensor([[2, 3, 0]]), scores, [5], 3)
    report = dsakit.assert_topk_equal(torch.tensor([[2, 3, 0]]), torch_sel, scores, [5])
    assert report.tie_swaps == {0: ([1, 4], [0, 3])}  # NaN rows: differences recorded, not failed
    # ordering among non-NaN scores still holds
    with pytest.raises(AssertionError, match=r"\[order\]"):
        dsakit.assert_topk_valid(torch.tensor([[0, 1, 4]]), scores, [5], 3)


def test_row_starts_window() -> None:
    scores = torch.tensor([[9.0, 9.0, 1.0, 5.0, 3.0, 4.0]])
    dsakit.assert_topk_valid(torch.tensor([[1, 3]]), scores, [4], 2, row_starts=[2])
    with pytest.raises(AssertionError, match=r"\[order\]"):
        dsakit.assert_topk_valid(torch.tensor([[0, 1]]), scores, [4], 2, row_starts=[2])


def test_negative_lengths_refused_naming_rows() -> None:
    with pytest.raises(dsakit.UsageError) as info:
        dsakit.validate_lengths(torch.tensor([3, -1, 0, -4]))
    text = str(info.value)
    assert "row 1 = -1, row 3 = -4" in text and "must carry length 0" in text
    dsakit.validate_lengths([0, 0, 5])


# ---------------------------------------------------------------- the case catalogue


def test_cases_are_deterministic_and_stably_named() -> None:
    for case_id, case in CASES.items():
        assert case.case_id == case_id and re.fullmatch(r"[a-z0-9-]+", case_id)
    case = get_case("near-ties-k2048")
    assert torch.equal(case.scores(), case.scores())
    assert not torch.equal(case.scores(), case.scores(seed_offset=1))
    with pytest.raises(dsakit.UsageError, match="unknown top-k case"):
        get_case("nope")


def test_scores_ignore_a_leaked_default_dtype() -> None:
    # SGLang's test_dsa_indexer.py calls torch.set_default_dtype(torch.bfloat16) and never resets
    # it: a case generated after it in the same process must still match its golden
    expected = {case_id: CASES[case_id].scores() for case_id in ("neg-inf-k2048", "nan-k512")}
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        leaked = {case_id: CASES[case_id].scores() for case_id in expected}
    finally:
        torch.set_default_dtype(before)
    for case_id, scores in expected.items():
        assert torch.equal(scores.isnan(), leaked[case_id].isnan()), case_id
        assert torch.equal(scores.nan_to_num(0.0), leaked[case_id].nan_to_num(0.0)), case_id


def test_page_size_1_table_is_derived_from_the_shuffled_physical_table() -> None:
    case = get_case("target-verify-ps64-k2048")
    t = case.page_tables()
    for row, length in enumerate(case.lengths):
        pos = torch.arange(length)
        expect = t.table[row, pos // 64].long() * 64 + pos % 64
        assert torch.equal(t.table_1[row, :length].long(), expect)
    assert not torch.equal(t.table[0, :4].long(), t.table[0, 0].long() + torch.arange(4))  # shuffled
    # slots map back to positions; a slot outside the row's table is flagged
    slots = t.table_1[:, :3].clone()
    slots[0, 2] = t.unmapped_slot
    positions, problems = t.slots_to_positions(slots)
    assert positions[1].tolist() == [0, 1, 2] and positions[0, 2] == -2 and problems


def test_adversarial_recipes() -> None:
    near = get_case("near-ties-k2048").scores()
    assert near[0].unique().numel() <= 24 and (near[0] - 1.0).abs().max() < 1e-5
    assert torch.isneginf(get_case("neg-inf-k2048").scores()[2]).all()
    assert torch.isnan(get_case("nan-k512").scores()[1]).sum() > 512
    assert (get_case("constant-rows-k512").scores()[1] == 0).all()
    peaks = get_case("long-1m-peaks-k2048").scores()[0]
    assert int((peaks > 0).sum()) == 4096 and peaks.max() == 4096.0 and peaks.unique().numel() == peaks.numel()


# ---------------------------------------------------------------- kernel contracts (coarse bins, NaN filler)


def test_coarse_bins_mirror_the_kernels_fp16_key() -> None:
    from dsakit.topk.checks import coarse_bins

    x = torch.tensor([-float("inf"), -1.0, -0.0, 0.0, 1.0, 1.0000027, 65504.0, 70000.0, 1e30,
                      float("inf")])
    b8 = coarse_bins(x, 8).tolist()
    assert b8 == sorted(b8)  # order-preserving
    assert b8[4] == 0xBC == b8[5]  # fp16(1.0) = 0x3C00 -> key 0xBC00; the near tie rounds onto it
    assert b8[7] == b8[8] == b8[9] == 0xFC  # |x| > 65520 saturates to the +inf bin
    assert b8[6] < b8[7] and b8[0] == 0x03  # 65504 is finite in fp16; -inf key 0x03FF
    assert coarse_bins(x, 12)[4] == 0xBC0 and coarse_bins(x, 10)[4] == 0x2F0
    with pytest.raises(dsakit.UsageError):
        coarse_bins(x, 17)


def _buffer(bits: int, capacity: int, rank: str):  # type: ignore[no-untyped-def]
    from dsakit.topk.checks import CandidateBuffer

    return CandidateBuffer("test kernel", bits, capacity, rank, "test")


def test_overflow_needs_a_crowded_threshold_bin_of_distinct_scores() -> None:
    from dsakit.topk.checks import candidate_overflow

    near = torch.tensor([[1.0 + i * 2.0 ** -23 for i in range(16)] + [5.0] * 4])  # one fp16 bin
    over = candidate_overflow(_buffer(12, 8, "k"), near, [20], 6)
    assert [(o.row, o.population, o.distinct) for o in over] == [(0, 16, 16)]
    assert "16 scores (16 distinct) > 8 kept" in over[0].describe()
    assert candidate_overflow(_buffer(12, 16, "k"), near, [20], 6) == []  # fits the buffer
    assert candidate_overflow(_buffer(12, 8, "k"), near, [6], 6) == []  # length <= k: trivial path
    equal = torch.tensor([[2.0] * 16 + [5.0] * 4])  # crowded but all equal: any subset is valid
    assert candidate_overflow(_buffer(12, 8, "k"), equal, [20], 6) == []
    # exactly k scores above the crowded bin: sgl-kernel (rank k+1) selects them outright
    # (topk == 0 after stage 1, nothing buffered); the v2 JIT (rank k) thresholds at their bin
    four = torch.tensor([[1.0 + i * 2.0 ** -23 for i in range(16)] + [5.0, 6.0, 7.0, 8.0]])
    assert candidate_overflow(_buffer(8, 8, "k+1"), four, [20], 4) == []
    assert candidate_overflow(_buffer(8, 8, "k"), four, [20], 4) == []  # bin of the 4th: 8.0's
    assert len(candidate_overflow(_buffer(8, 8, "k+1"), four, [20], 5)) == 1


def test_bin_precision_accepts_a_near_tie_swap_but_never_a_lower_bin() -> None:
    from dsakit.topk.checks import candidate_overflow, coarse_scores

    scores = torch.tensor([[1.0 + i * 2.0 ** -23 for i in range(16)] + [5.0, 6.0, 0.5, 0.25]])
    k = 6  # exact top-6: 6.0, 5.0 and the four largest near ties (positions 15..12)
    exact = torch.tensor([[17, 16, 15, 14, 13, 12]])
    near_swap = torch.tensor([[17, 16, 15, 14, 13, 0]])  # 1.0 instead of 1.0000014: same fp16 bin
    lower_bin = torch.tensor([[17, 16, 15, 14, 13, 18]])  # 0.5: a lower bin, never a valid pick
    dsakit.assert_topk_valid(exact, scores, [20], k)
    over = candidate_overflow(_buffer(12, 8, "k"), scores, [20], k)
    coarse = coarse_scores(scores, over)
    # the kernel's bin precision: the near-tie swap is a tie, the lower-bin pick is not
    dsakit.assert_topk_valid(near_swap, coarse, [20], k)
    report = dsakit.assert_topk_equal(near_swap, exact, coarse, [20], topk=k)
    assert report.tie_swaps == {0: ([12], [0])}
    with pytest.raises(AssertionError, match=r"row 0 \[order\]"):
        dsakit.assert_topk_valid(lower_bin, coarse, [20], k)
    # exact fp32 (torch, flashinfer, and every row that fits the buffer): both fail
    with pytest.raises(AssertionError, match=r"row 0 \[order\]"):
        dsakit.assert_topk_valid(near_swap, scores, [20], k)
    with pytest.raises(AssertionError, match=r"not explained by ties"):
        dsakit.assert_topk_equal(near_swap, exact, scores, [20], topk=k)
    with pytest.raises(AssertionError, match=r"row 0 \[order\]"):
        dsakit.assert_topk_valid(lower_bin, scores, [20], k)
    # rows that do not overflow keep their exact scores
    assert torch.equal(coarse_scores(scores, []), scores)


def test_v2_nan_filler_is_exempt_only_with_the_flag_and_only_once_per_nan() -> None:
    nan = float("nan")
    scores = torch.tensor([[9.0, nan, 8.0, 1.0, 7.0, 0.5, 6.0, 0.25]])
    # the v2 JIT: NaN ranked first in the histogram, never collected; its slot (3) is written
    # with position 3 (score 1.0) while 7.0 and 6.0 were the real top picks
    v2 = torch.tensor([[0, 2, 4, 3]])
    with pytest.raises(AssertionError, match=r"\[order\]"):
        dsakit.assert_topk_valid(v2, scores, [8], 4)
    dsakit.assert_topk_valid(v2, scores, [8], 4, nan_slot_filler=True)
    # a filler may repeat a real pick (slot 2 holds 2 while 2 was also picked at slot 0)
    dsakit.assert_topk_valid(torch.tensor([[2, 0, 2, 4]]), scores, [8], 4, nan_slot_filler=True)
    # three low fillers for one NaN: more than the NaN can explain (slots 0..3 hold 0..3)
    with pytest.raises(AssertionError, match=r"\[nan-filler\] .*3 filler entries"):
        dsakit.assert_topk_valid(torch.tensor([[0, 1, 2, 3]]), torch.tensor(
            [[9.0, 0.0, 0.1, 0.2, 7.0, nan, 6.0, 5.0]]), [8], 4, nan_slot_filler=True)
    # no NaN in the row: a position == slot entry is an ordinary pick, judged as such
    with pytest.raises(AssertionError, match=r"\[order\]"):
        dsakit.assert_topk_valid(torch.tensor([[0, 2, 4, 3]]), torch.tensor(
            [[9.0, 0.0, 8.0, 1.0, 7.0, 0.5, 6.0, 0.25]]), [8], 4, nan_slot_filler=True)


@pytest.fixture
def sglang_0517(tmp_path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A stand-in for SGLang 0.5.17's tree: no v2 RAGGED entry, no refine_ties in the v2 JIT."""
    import dsakit.stack.sglang_release as rel

    pkg = tmp_path / "sglang"
    backend = pkg / rel.DSA_TOPK_BACKEND_FILE
    backend.parent.mkdir(parents=True)
    backend.write_text("def _topk_transform_v2_paged(logits, lengths, topk, md):\n    pass\n")
    header = pkg / "kernels/jit/include/sgl_kernel/deepseek_v4/topk_impl.cuh"
    header.parent.mkdir(parents=True)
    header.write_text("constexpr uint32_t kMaxNumTie = 2048;  // no exact re-staging\n")
    release = rel.SGLangRelease(pkg, "0.5.17")
    monkeypatch.setattr(rel, "installed_release", lambda: release)
    return release


def _predicted(path_id: str) -> dict[str, list[int]]:
    from dsakit.topk.cases import select_topk_cases
    from dsakit.topk.launch import TOPK_PATHS, known_kernel_bug

    path = TOPK_PATHS[path_id]
    out = {}
    for case in select_topk_cases():
        if path.unsupported(case) is None:
            bug = known_kernel_bug(path, case)
            if bug is not None:
                out[case.case_id] = [r.row for r in bug[1]]
    return out


def test_known_bug_predictions_match_the_h200_run_on_sglang_0517(sglang_0517) -> None:  # type: ignore[no-untyped-def]
    """H200, SGLang 0.5.17 + sglang-kernel 0.4.5: exactly these (path, case, rows) mis-selected
    (rows named in each failure's '{n} of {m} rows fail'); every other case was exact."""
    sgl = {"long-1m-ps64-k2048": [0, 1], "near-ties-k2048": [0, 1]}
    assert _predicted("sgl-kernel.topk_func") == sgl
    assert _predicted("sgl-kernel.transform-paged") == sgl
    assert _predicted("sgl-kernel.transform-ragged") == {}
    assert _predicted("sgl-kernel.transform-ragged.v2") == {}
    v2 = {"long-1m-ps64-k2048": [0, 1], "near-ties-k2048": [0, 1, 2]}
    assert _predicted("v2-fold.paged") == v2 and _predicted("v2-fold.paged-ps1-table") == v2
    for exact in ("torch.topk_func", "flashinfer.topk_func", "flashinfer.transform-paged",
                  "flashinfer.transform-ragged"):
        assert _predicted(exact) == {}


def test_known_bug_reason_names_the_limit_source_and_issue(sglang_0517) -> None:  # type: ignore[no-untyped-def]
    from dsakit.topk.launch import TOPK_PATHS, known_kernel_bug

    reason, rows = known_kernel_bug(TOPK_PATHS["v2-fold.paged"], get_case("near-ties-k2048"))
    assert reason.code == "topk-known-kernel-bug" and str(reason).startswith("[topk-known-kernel-bug] known kernel bug")
    assert "topk_impl.cuh:207 kMaxNumTie = 2048" in reason.message and "sglang#35257" in reason.message
    assert "holds 8192 scores (24 distinct) > 2048 kept" in reason.message
    reason, _ = known_kernel_bug(TOPK_PATHS["sgl-kernel.topk_func"], get_case("long-1m-ps64-k2048"))
    assert "SMEM_INPUT_SIZE" in reason.message and "sglang#36807" in reason.message
    assert "of the 8-bit fp16 key holds 458768 scores" in reason.message


def test_v2_key_width_follows_the_0517_dispatch() -> None:
    from dsakit.topk.cases import TopkCase
    from dsakit.topk.backends import _v2_key_bits

    assert _v2_key_bits(get_case("long-1m-ps64-k2048")) == [10, 10]  # small batch: cluster rows
    assert _v2_key_bits(get_case("decode-ps64-k2048")) == [12] * 8  # width 8192: register path
    mixed = TopkCase("t", "decode", 2048, (40000, 30000, 9000), 40000)
    assert _v2_key_bits(mixed) == [10, 12, 12]  # rows above the 32768 small-batch floor cluster
    small = TopkCase("t", "decode", 2048, (70000,) * 20 + (60000,) * 4, 70000)
    assert _v2_key_bits(small) == [10] * 20 + [12] * 4  # <= 30 rows: floor 65536 above 15 rows
    many = TopkCase("t", "decode", 2048, (70000,) * 28 + (500000,) * 4, 500000)
    # > 30 rows: the persistent pool; topk_plan stops at 98304 (32 rows > 65536 exceed its cap 30)
    assert _v2_key_bits(many) == [12] * 28 + [10] * 4


def test_newer_v2_refines_overflow_so_no_bug_is_predicted(monkeypatch: pytest.MonkeyPatch) -> None:
    import dsakit.topk.backends as backends
    import dsakit.topk.launch as launch

    monkeypatch.setattr(backends, "_v2_refines_overflow", lambda: True)
    assert launch.known_kernel_bug(launch.TOPK_PATHS["v2-fold.paged"], get_case("near-ties-k2048")) is None
    assert launch.TOPK_PATHS["v2-fold.paged"].contract(get_case("nan-k512")).nan_slot_filler


def test_v2_ragged_k512_skips_on_0517_with_the_sourced_reason(sglang_0517) -> None:  # type: ignore[no-untyped-def]
    from dsakit.topk.launch import TOPK_PATHS

    path = TOPK_PATHS["sgl-kernel.transform-ragged.v2"]
    reason = path.unsupported(get_case("extend-ragged-k512"))
    assert reason is not None and reason.code == "topk-k-unsupported"
    assert "no _topk_transform_v2_ragged" in reason.message
    assert "sgl_kernel/top_k.py:141-143" in reason.message
    assert path.unsupported(get_case("extend-ragged-k2048")) is None
    assert path.contract(get_case("extend-ragged-k2048")).buffer.capacity == 4096  # the AOT kernel


def _v2_emulated(case_id: str) -> tuple[torch.Tensor, torch.Tensor, object]:
    """The 0.5.17 v2 JIT's selection as read from its source (12-bit fp16 histogram with NaN
    above +inf, fp32 collect that never takes NaN, exact ties, handle_tie's slot-index filler)."""
    from dsakit.topk.checks import coarse_bins

    case = get_case(case_id)
    scores, k = case.scores(), case.k
    out = torch.full((case.num_rows, k), -1, dtype=torch.int64)
    for r, n in enumerate(case.lengths):
        w = scores[r, :n]
        if n <= k:
            out[r, :n] = torch.arange(n)
            continue
        bins = coarse_bins(w, 12)
        above = torch.flip(torch.cumsum(torch.flip(torch.bincount(bins, minlength=4096), [0]), 0), [0])
        thr = int(torch.nonzero(above >= k).max())
        real = ~torch.isnan(w)
        up = torch.nonzero(real & (bins > thr)).flatten()
        ties = torch.nonzero(real & (bins == thr)).flatten()
        if ties.numel() > k - up.numel():
            ties = ties[torch.topk(w[ties], k - up.numel()).indices]
        picks = torch.cat([up, ties])
        out[r, :picks.numel()] = picks
        out[r, picks.numel():] = torch.arange(picks.numel(), k)  # emit(base + t, base + t)
    return out, scores, case


def test_v2_nan_contract_accepts_the_kernels_nan_behaviour_and_nothing_looser() -> None:
    out, scores, case = _v2_emulated("nan-k512")
    # reproduces the H200 failure without the v2 contract (row 0: 2 fillers, row 1: all filler)
    with pytest.raises(AssertionError, match=r"(?s)2 of 3 rows fail.*extra \(selected, should not "
                       r"be\): 510 \(score 6\.0\) at rank \d+, 511 \(score 478\.0\).*row 1 \[order\].*"
                       r"against a correct top-359"):
        dsakit.assert_topk_valid(out, scores, case.lengths, case.k)
    dsakit.assert_topk_valid(out, scores, case.lengths, case.k, nan_slot_filler=True)
    bad = out.clone()
    bad[0, 100] = int(torch.argmin(torch.nan_to_num(scores[0, :2000], nan=1e9)))  # a real low pick
    with pytest.raises(AssertionError, match=r"row 0 \[order\]"):
        dsakit.assert_topk_valid(bad, scores, case.lengths, case.k, nan_slot_filler=True)


def test_nan_detection_is_exact_with_infinities() -> None:
    import torch

    from dsakit.topk.checks import _has_nan

    assert _has_nan(torch.tensor([1.0, float("nan"), 2.0])) is True
    assert _has_nan(torch.tensor([float("inf"), float("-inf"), 3.0])) is False  # sum is NaN, no NaN inside
    assert _has_nan(torch.tensor([3.0e38, 3.0e38])) is False  # would overflow in float32
    assert _has_nan(torch.tensor([])) is False


# ---------------------------------------------------------------- issue 28 item 3, issue 25 item 7


def test_a_one_slot_bug_shows_one_missing_and_one_extra_with_ranks() -> None:
    gen = torch.Generator().manual_seed(3)
    scores = torch.randperm(64, generator=gen).float()[None]
    k = 8
    order = torch.argsort(scores[0], descending=True)
    sel = order[:k].clone()[None]
    sel[0, 2] = order[19]  # the kernel wrote rank 20 into the slot of rank 3
    with pytest.raises(AssertionError) as info:
        dsakit.assert_topk_valid(sel, scores, [64], k)
    text = str(info.value)
    assert "1 missing and 1 extra positions against a correct top-8" in text, text
    third, twentieth = int(order[2]), int(order[19])
    assert (f"missing (should be selected): {third} (score {float(scores[0, third])!r}) at rank 3\n"
            in text), text
    assert (f"extra (selected, should not be): {twentieth} (score {float(scores[0, twentieth])!r}) "
            "at rank 20\n" in text), text
    assert f"ranking: 8 ranked positions selected, so the boundary is the 8-th largest ranked score " \
           f"{float(scores[0, order[7]])!r}" in text


def test_a_short_tie_group_is_named_among_the_missing() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
    with pytest.raises(AssertionError, match=r"(?s)missing \(should be selected\): 5 \(score 6\.0\) at rank 3\n"
                       r".*extra \(selected, should not be\): 4 \(score 5\.0\) at rank 4\n"):
        dsakit.assert_topk_valid(torch.tensor([[4, 6, 7]]), scores, [8], 3)


def test_equal_judges_a_nan_row_as_valid_does() -> None:
    nan = float("nan")
    scores = torch.tensor([[3.0, nan, 2.0, 1.0, 0.0]])
    with pytest.raises(AssertionError, match=r"row 0 \[order\] in actual"):
        dsakit.assert_topk_equal(torch.tensor([[4, 3]]), torch.tensor([[0, 2]]), scores, [5])
    with pytest.raises(AssertionError, match=r"row 0 \[order\] in expected"):
        dsakit.assert_topk_equal(torch.tensor([[0, 2]]), torch.tensor([[4, 3]]), scores, [5])
    dsakit.assert_topk_equal(torch.tensor([[0, 1]]), torch.tensor([[0, 2]]), scores, [5])  # NaN may displace


def test_equal_sees_duplicates_and_zero_padding() -> None:
    scores = torch.arange(5.0)[None]
    with pytest.raises(AssertionError, match=r"row 0 \[duplicate\] in actual.*positions \[0\] selected twice"):
        dsakit.assert_topk_equal(torch.tensor([[1, 0, 0]]), torch.tensor([[1, 0, -1]]), scores, [2])


def test_equal_refuses_a_float_expected() -> None:
    scores = torch.arange(5.0)[None]
    with pytest.raises(dsakit.UsageError, match="top-k expected must have an integer dtype"):
        dsakit.assert_topk_equal(torch.tensor([[4, 3]]), torch.tensor([[4.9, 3.2]]), scores, [5])
    with pytest.raises(dsakit.UsageError, match="top-k expected must have an integer dtype"):
        dsakit.compare_topk(torch.tensor([[4, 3]]), torch.tensor([[4.9, 3.2]]), scores, [5])


@pytest.mark.parametrize(("call", "message"), [
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1]]), s, None, 1),
     r"top-k lengths is None: pass one value per row"),
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1]]), s, [4], 1, row_starts=[[0, 0]]),
     r"top-k row_starts must be one value per row \(a list or 1-D tensor\), got shape \(1, 2\)"),
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1]]), torch.empty((1, 4), device="meta"), [4], 1),
     r"top-k scores is a meta tensor"),
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1]]), s, [3.5], 1),
     r"top-k lengths must be whole numbers \(one per row\): row 0 = 3\.5"),
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1]]), s, [2], 1, row_starts=[0.5]),
     r"top-k row_starts must be whole numbers \(one per row\): row 0 = 0\.5"),
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1]]), s, [4], -1),
     r"top-k k must be a non-negative integer .* got -1"),
    (lambda s: dsakit.assert_topk_equal(torch.tensor([[1]]), torch.tensor([[1]]), s, [4], topk=-1),
     r"top-k k must be a non-negative integer .* got -1"),
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1]]), s, [4], 1, row_starts=[[0]]),
     r"top-k row_starts must be one value per row \(a list or 1-D tensor\), got shape \(1, 1\)"),
    (lambda s: dsakit.assert_topk_valid(torch.tensor([[1], [1]]), s.expand(2, 4), torch.tensor([[4, 4]]), 1),
     r"top-k lengths must be one value per row \(a list or 1-D tensor\), got shape \(1, 2\)"),
], ids=["lengths-None", "2-D-row-starts", "meta-tensor", "fractional-length", "fractional-row-start",
        "k=-1", "equal-k=-1", "2-D-row-starts-of-the-right-count", "2-D-lengths"])
def test_bad_check_inputs_are_usage_errors(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(dsakit.UsageError, match=message):
        call(torch.arange(4.0)[None])


def test_a_tie_swap_is_only_inside_the_boundary_tie_group() -> None:
    """Mutation survivors (issue 28 item 11): a position above the boundary is never a tie, and a
    tie group that lost a member without a tied replacement is unbalanced."""
    scores = torch.tensor([[5.0, 3.0, 3.0, 3.0, 1.0]])
    expected = torch.tensor([[0, 1, 2]])
    report = dsakit.compare_topk(torch.tensor([[1, 2, 3]]), expected, scores, [5])
    assert [(p.code, p.message) for p in report.problems] == [
        ("mismatch", "1 expected positions not selected, 1 selected positions not expected; "
                     "not explained by ties at the boundary")]
    assert report.problems[0].threshold == 3.0  # the k-th largest, the boundary of the tie group
    below = dsakit.compare_topk(torch.tensor([[0, 1, 4]]), expected, scores, [5])  # 1.0 is below it
    assert [p.code for p in below.problems] == ["mismatch"]
    report = dsakit.compare_topk(torch.tensor([[0, 1, -1]]), expected, scores, [5])
    assert [(p.code, p.message) for p in report.problems] == [
        ("mismatch", "1 expected positions not selected, 0 selected positions not expected; "
                     "tie group unbalanced (1 tied missing vs 0 tied extra)")]
    report = dsakit.compare_topk(torch.tensor([[0, 3, 1]]), expected, scores, [5])
    assert report.ok and report.tie_swaps == {0: ([2], [3])}
    # a boundary at -inf: an -inf pick may be padded with -1 (free, not a tie to balance)
    inf = float("-inf")
    padded = dsakit.compare_topk(torch.tensor([[0, 1, -1]]), expected, torch.tensor([[5.0, inf, inf, inf]]), [4])
    assert padded.ok and padded.tie_swaps == {0: ([2], [])}
    filled = dsakit.compare_topk(expected, torch.tensor([[0, 1, -1]]), torch.tensor([[5.0, inf, inf, inf]]), [4])
    assert filled.ok and filled.tie_swaps == {0: ([], [2])}
    distinct = dsakit.compare_topk(torch.tensor([[0, 3]]), torch.tensor([[0, 1]]),
                                   torch.tensor([[5.0, 4.0, 3.0, 1.0, 0.0]]), [5])
    assert [p.threshold for p in distinct.problems] == [4.0]  # the k-th largest, not the (k+1)-th
