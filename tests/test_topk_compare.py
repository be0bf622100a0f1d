"""Self-tests of the top-k checks (dsakit.topk_compare), the case catalogue and the length refusal."""

from __future__ import annotations

import re

import pytest
import torch

import dsakit
from dsakit.topk_cases import CASES, get_case


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
