"""Gaps in the top-k checks' tests found by mutation testing (bench/mutation_run.py --group checks):
what a failing row says (the missing and extra positions with score and rank, the boundary and its
tie group), where the report stops listing, the comparison's scores for positions outside the
window, and the v2 JIT's NaN-slot fillers. In-process and fast."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch:not-installed: the top-k checks compare tensors")

from dsakit.topk.checks import check_topk, compare_topk  # noqa: E402

NAN = float("nan")


def _i(rows):
    return torch.tensor(rows, dtype=torch.int64)


def _f(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_a_one_slot_bug_names_the_missing_and_the_extra_position_with_score_and_rank() -> None:
    report = check_topk(_i([[0, 2]]), _f([[9.0, 8, 7, 6]]), _i([4]), 2)
    assert report.format("T") == (
        "T: 1 of 1 rows fail (k=2)\n"
        "  row 0 [order] (length 4, k-th largest valid score 8.0): 1 missing and 1 extra positions "
        "against a correct top-2 of the ranked scores\n"
        "      missing (should be selected): 1 (score 8.0) at rank 2\n"
        "      extra (selected, should not be): 2 (score 7.0) at rank 3\n"
        "      ranking: 2 ranked positions selected, so the boundary is the 2-th largest ranked score 8.0; "
        "lowest selected: 2 (score 7.0) at rank 3; best unselected: 1 (score 8.0) at rank 2")


def test_a_bug_at_a_tied_boundary_names_one_tied_member_and_says_any_would_do() -> None:
    report = check_topk(_i([[0, 1, 5]]), _f([[5.0, 4, 3, 3, 3, 1]]), _i([6]), 3)
    [problem] = report.problems
    assert problem.missing == ((2, 3.0, 3),) and problem.extra == ((5, 1.0, 6),)
    assert problem.context == (
        "3 ranked positions selected, so the boundary is the 3-th largest ranked score 3.0; lowest selected: "
        "5 (score 1.0) at rank 6; best unselected: 2 (score 3.0) at rank 3; the missing include 1 of the 3 "
        "unselected positions tied at the boundary (any of them would do)")


def test_a_bug_at_a_boundary_tied_by_the_selection_itself_names_no_tie_group() -> None:
    # one of the two tied 5.0s is selected: the missing position is the 9.0, not a tie member
    report = check_topk(_i([[1, 3]]), _f([[9.0, 5, 5, 1]]), _i([4]), 2)
    [problem] = report.problems
    assert problem.missing == ((0, 9.0, 1),) and problem.extra == ((3, 1.0, 4),)
    assert problem.context.endswith("best unselected: 0 (score 9.0) at rank 1")


def test_the_report_lists_twelve_problems_then_counts_the_rest() -> None:
    def report(rows: int):
        return check_topk(_i([[0, 1]] * rows), _f([[1.0, 2, 3]] * rows), _i([3] * rows), 2)

    twelve = report(12).format("T").splitlines()
    assert twelve[0] == "T: 12 of 12 rows fail (k=2)"
    assert sum(line.startswith("  row ") for line in twelve) == 12 and not twelve[-1].startswith("  ...")
    thirteen = report(14).format("T").splitlines()
    assert thirteen[0] == "T: 14 of 14 rows fail (k=2)"
    assert sum(line.startswith("  row ") for line in thirteen) == 12
    assert thirteen[-1] == "  ... and 2 more problems"
    assert twelve[1:5] == thirteen[1:5]  # each problem: its head line and three indented lines


def test_a_comparison_scores_positions_outside_the_window_as_nan_and_ranks_none() -> None:
    report = compare_topk(_i([[0, 4]]), _i([[0, 1]]), _f([[9.0, 8, 7, 6, 5]]), _i([4]))
    assert report.format("T") == (
        "T: 1 of 1 rows fail (k=2)\n"
        "  row 0 [mismatch] (length 4, k-th largest valid score 8.0): 1 expected positions not selected, "
        "1 selected positions not expected; not explained by ties at the boundary\n"
        "      missing (should be selected): 1 (score 8.0)\n"
        "      extra (selected, should not be): 4 (score nan)")
    [problem] = compare_topk(_i([[1, 2]]), _i([[0, 2]]), _f([[9.0, 8, 7, 6]]), _i([4])).problems
    assert (problem.missing, problem.extra) == (((0, 9.0, None),), ((1, 8.0, None),))  # position 0 is scored


def test_a_comparison_accepts_swaps_inside_the_boundary_tie_group_only() -> None:
    assert compare_topk(_i([[0, 2]]), _i([[0, 1]]), _f([[9.0, 5, 5, 1]]), _i([4])).tie_swaps == {0: ([1], [2])}
    swapped = compare_topk(_i([[2, 3]]), _i([[0, 1]]), _f([[5.0, 5, 5, 5]]), _i([4]))
    assert swapped.ok and swapped.tie_swaps == {0: ([0, 1], [2, 3])}
    [problem] = compare_topk(_i([[0, 3]]), _i([[0, 1]]), _f([[9.0, 5, 5, 1]]), _i([4])).problems
    assert (problem.missing, problem.extra) == (((1, 5.0, None),), ((3, 1.0, None),))


def test_nan_slot_fillers_below_the_best_unselected_score_are_allowed_once_per_nan() -> None:
    scores = _f([[NAN, 1, 2, 9, 8]])
    two_fillers = check_topk(_i([[3, 1, 2]]), scores, _i([5]), 3, nan_slot_filler=True)
    assert two_fillers.format("T") == (
        "T: 1 of 1 rows fail (k=3)\n"
        "  row 0 [nan-filler] (length 5, k-th largest valid score 2.0): 2 filler entries (position == "
        "output slot) sit below the best unselected score, more than the 1 NaN in the row can explain")
    assert check_topk(_i([[3, 1, 4]]), scores, _i([5]), 3, nan_slot_filler=True).ok  # one filler, one NaN
    # nothing left unselected: no filler can be out of order
    assert check_topk(_i([[3, 1, 2]]), _f([[NAN, 1, 2, 9]]), _i([4]), 3, nan_slot_filler=True).ok
    assert not check_topk(_i([[3, 1, 2]]), scores, _i([5]), 3).ok  # without the flag: an order bug
