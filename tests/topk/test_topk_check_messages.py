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


def test_a_comparison_of_different_row_counts_is_one_shape_problem() -> None:
    report = compare_topk(_i([[0, 1], [0, 1]]), _i([[0, 1]]), _f([[9.0, 8], [9.0, 8]]), _i([2, 2]))
    [problem] = report.problems
    assert (problem.row, problem.code, problem.message) == (-1, "shape", "actual has 2 rows, expected 1")


def test_coarse_bins_are_the_order_preserving_fp16_key() -> None:
    from dsakit.errors import UsageError
    from dsakit.topk.checks import coarse_bins

    # fp16 bits: +0.0 0x0000, -0.0 0x8000, 1.0 0x3C00, -1.0 0xBC00, 2.0 0x4000, +inf 0x7C00
    values = torch.tensor([-1.0, -0.0, 0.0, 1.0, 2.0, float("inf")])
    assert coarse_bins(values, 16).tolist() == [0xFFFF - 0xBC00, 0xFFFF - 0x8000, 0x8000, 0xBC00, 0xC000, 0xFC00]
    assert coarse_bins(values, 8).tolist() == [0x43, 0x7F, 0x80, 0xBC, 0xC0, 0xFC]
    assert coarse_bins(values, 1).tolist() == [0, 0, 1, 1, 1, 1]
    for bits in (0, 17):
        with pytest.raises(UsageError, match=rf"^coarse key bits must be in 1\.\.16, got {bits}$"):
            coarse_bins(values, bits)


def _buffer(rank: str, capacity: int = 2):
    from dsakit.topk.checks import CandidateBuffer

    return CandidateBuffer("test kernel", 8, capacity, rank, "here")


def test_candidate_overflow_finds_threshold_bins_holding_more_distinct_scores_than_kept() -> None:
    from dsakit.topk.checks import candidate_overflow

    # 1.0 .. 1.003 share one 8-bit bin; 5.0 and 6.0 sit in bins of their own, above it
    row = [[1.0, 1.001, 1.002, 1.003, 5.0, 6.0]]
    [overflow] = candidate_overflow(_buffer("k"), _f(row), _i([6]), 3)
    assert (overflow.row, overflow.bin, overflow.population, overflow.capacity, overflow.distinct) == (0, 0xBC, 4, 2, 4)
    assert overflow.describe() == "row 0: threshold bin 0xbc of the 8-bit fp16 key holds 4 scores (4 distinct) > 2 kept"
    assert candidate_overflow(_buffer("k+1"), _f(row), _i([6]), 3)[0].bin == 0xBC
    # k=2: the v2 JIT's threshold is 5.0's bin (one member); sgl-kernel's (k+1) is the 1.00x bin,
    # but the two bins above it hold exactly k, so it selects them outright and buffers nothing
    assert candidate_overflow(_buffer("k"), _f(row), _i([6]), 2) == []
    assert candidate_overflow(_buffer("k+1"), _f(row), _i([6]), 2) == []
    assert candidate_overflow(_buffer("k", capacity=4), _f(row), _i([6]), 3) == []  # all kept
    # two distinct scores in the bin are enough to mis-select; one (all equal) never is
    assert candidate_overflow(_buffer("k"), _f([[1.0, 1.0, 1.001, 5.0, 6.0]]), _i([5]), 3)[0].distinct == 2
    assert candidate_overflow(_buffer("k"), _f([[1.0, 1.0, 1.0, 5.0, 6.0]]), _i([5]), 3) == []
    # a row no longer than k takes the kernels' trivial path
    assert candidate_overflow(_buffer("k", capacity=1), _f([[1.0, 1.001, 1.002]]), _i([3]), 3) == []
    # a wider key per row splits the bin
    assert candidate_overflow(_buffer("k"), _f(row), _i([6]), 3, bits_per_row=[16]) == []


def test_has_nan_is_exact_for_infinities_single_values_and_empty_windows() -> None:
    from dsakit.topk.checks import _has_nan

    assert _has_nan(torch.tensor([float("inf"), float("-inf")])) is False  # sums to NaN, holds none
    assert _has_nan(torch.tensor([NAN])) is True
    assert _has_nan(torch.tensor([1.0, NAN])) is True
    assert _has_nan(torch.tensor([], dtype=torch.float32)) is False
    assert _has_nan(torch.tensor([1, 2])) is False


def test_negative_lengths_name_eight_rows_then_count_the_rest() -> None:
    from dsakit.errors import UsageError
    from dsakit.topk.checks import validate_lengths

    advice = (". Padded rows (CUDA-graph / DP padding, idle MTP companions) must carry length 0, which selects "
              "nothing and returns all -1; the kernels read lengths as uint32, so a negative length becomes a "
              "~4e9-token row and illegal-addresses. Clamp the lengths to 0 before the top-k call.")
    with pytest.raises(UsageError) as raised:
        validate_lengths([-1] * 8 + [3])
    assert str(raised.value) == "negative top-k lengths: " + ", ".join(f"row {r} = -1" for r in range(8)) + advice
    with pytest.raises(UsageError) as raised:
        validate_lengths([-2] * 10, what="lengths of the draft")
    assert str(raised.value) == ("negative top-k lengths of the draft: " + ", ".join(f"row {r} = -2" for r in range(8))
                                 + " (and 2 more)" + advice)


def test_inputs_that_are_no_tensors_of_positions_are_refused_with_what_to_pass() -> None:
    from dsakit.errors import UsageError

    scores, lengths = _f([[1.0, 2.0]]), _i([2])
    cases = [
        ((None, scores, lengths), "top-k indices is None: pass a tensor"),
        ((_i([[0]]), scores, None), "top-k lengths is None: pass one value per row (lengths: how many scores of "
                                    "the row are valid, e.g. [scores.shape[1]] * rows)"),
        ((torch.empty((1, 1), device="meta", dtype=torch.int64), scores, lengths),
         "top-k indices is a meta tensor (a shape without values): pass the tensor the kernel read or wrote, "
         "on CPU or a GPU"),
        ((_f([[0.0]]), scores, lengths),
         "top-k indices must have an integer dtype (positions, -1 for padding), got torch.float32: a fractional "
         "index such as 1.5 is not a position. Pass the kernel's int32/int64 output, not a float copy of it"),
        ((_i([[0]]), scores, _i([3])),
         "top-k row 0: window [start 0, start + length 3) does not fit the score row of width 2; a row's "
         "start + length must be within 0..2 (pass lengths/row_starts that match the scores tensor)"),
        ((_i([0]), scores, lengths),
         "top-k check needs indices (rows, k), scores (rows, width), lengths (rows,): got indices (1,), "
         "scores (1, 2), 1 lengths, 1 row starts"),
    ]
    for (indices, s, n), message in cases:
        with pytest.raises(UsageError) as raised:
            check_topk(indices, s, n, 1)
        assert str(raised.value) == message
    with pytest.raises(UsageError, match=r"^top-k scores is not a tensor of numbers \(.*\): got list$"):
        check_topk(_i([[0]]), [["a"]], lengths, 1)
    with pytest.raises(UsageError) as raised:
        check_topk(_i([[0]]), scores, _i([1]), 1, row_starts=[-1])
    assert str(raised.value).startswith("top-k row 0: window [start -1, start + length 0) does not fit")
    assert check_topk(_i([[0]]), scores, _i([1]), 1, row_starts=[1]).ok  # a window at the row end fits (positions are window-relative)
    with pytest.raises(UsageError, match=r"^top-k check needs indices"):
        check_topk(_i([[0]]), _f([1.0, 2.0]), lengths, 1)  # 1-D scores


def test_the_boundary_score_is_the_kth_largest_valid_one_or_none() -> None:
    from dsakit.topk.checks import _kth_largest

    assert _kth_largest(torch.tensor([3.0, NAN, 1.0, 2.0]), 2) == 2.0
    assert _kth_largest(torch.tensor([3.0, NAN]), 5) == 3.0  # fewer valid scores than k: the smallest
    assert _kth_largest(torch.tensor([NAN]), 1) is None and _kth_largest(torch.tensor([5.0]), 1) == 5.0
    assert _kth_largest(torch.tensor([3.0, 2.0]), 0) is None and _kth_largest(torch.tensor([3.0, 2.0]), 1) == 3.0


def test_a_wrong_column_count_is_one_shape_problem() -> None:
    report = check_topk(_i([[0, 1, 2]]), _f([[3.0, 2, 1]]), _i([3]), 2)
    assert [(p.row, p.code, p.message) for p in report.problems] == [
        (-1, "shape", "indices have 3 columns, expected k=2")]
    assert report.format("T") == "T: 1 of 1 rows fail (k=2)\n  row -1 [shape] (length 0): indices have 3 columns, expected k=2"


def test_thirteen_failing_rows_show_twelve_then_a_count() -> None:
    rows = 13
    report = check_topk(_i([[5]] * rows), _f([[1.0, 2]] * rows), _i([2] * rows), 1)
    lines = report.format("T").split("\n")
    assert len(report.problems) == 13 and len(lines) == 1 + 12 + 1
    assert lines[0] == "T: 13 of 13 rows fail (k=1)" and lines[-1] == "  ... and 1 more problems"
    twelve = check_topk(_i([[5]] * 12), _f([[1.0, 2]] * 12), _i([2] * 12), 1).format("T").split("\n")
    assert len(twelve) == 13 and "more problems" not in twelve[-1]


def test_an_entry_equal_to_the_length_is_out_of_range_and_later_rows_are_still_checked() -> None:
    report = check_topk(_i([[3, 0], [0, -1], [0, 1]]), _f([[1.0, 2, 3, 4], [1.0, 2, 3, 4], [1.0, 2, 3, 4]]),
                        _i([3, 0, 4]), 2)
    assert [(p.row, p.code, p.message) for p in report.problems[:2]] == [
        (0, "out-of-range", "entries [3] are neither -1 nor in [0, 3)"),
        (1, "out-of-range", "entries [0] are neither -1 nor in [0, 0)")]
    assert [p.code for p in report.problems[2:]] == ["order"]  # row 2: 0, 1 instead of 3, 2


def test_float64_scores_are_compared_without_a_float32_cast() -> None:
    scores = torch.tensor([[1.0, 1.0 + 1e-12]], dtype=torch.float64)  # one float32 value, two float64 ones
    assert not check_topk(_i([[0]]), scores, _i([2]), 1).ok
    assert check_topk(_i([[1]]), scores, _i([2]), 1).ok


def test_nine_negative_lengths_show_eight_and_count_one() -> None:
    from dsakit.errors import UsageError
    from dsakit.topk.checks import validate_lengths

    with pytest.raises(UsageError) as raised:
        validate_lengths([-1] * 9)
    shown = ", ".join(f"row {r} = -1" for r in range(8))
    assert str(raised.value).startswith(f"negative top-k lengths: {shown} (and 1 more). Padded rows")
    with pytest.raises(UsageError) as raised:
        validate_lengths([-1] * 8, what="row lengths")
    assert str(raised.value).startswith(f"negative top-k row lengths: {shown}. Padded rows")


def test_missing_positions_are_listed_best_first_and_extra_ones_worst_first_ties_in_position_order() -> None:
    w = [[1.0, 9, 5, 9, 8, 0, 0, 0]]
    report = check_topk(_i([[0, 5, 6, 7]]), _f(w), _i([8]), 4)
    [problem] = report.problems
    assert problem.missing == ((1, 9.0, 1), (3, 9.0, 1), (4, 8.0, 3), (2, 5.0, 4))
    assert problem.extra == ((5, 0.0, 6), (6, 0.0, 6), (7, 0.0, 6), (0, 1.0, 5))


def test_fillers_tied_with_the_best_unselected_are_in_order() -> None:
    scores = _f([[NAN, 5.0, 5.0, 5.0, 9.0]])
    assert check_topk(_i([[4, 1, 2]]), scores, _i([5]), 3, nan_slot_filler=True).ok
    low = _f([[NAN, 4.0, 4.0, 5.0, 9.0]])  # two fillers below the best unselected, one NaN
    assert [p.code for p in check_topk(_i([[4, 1, 2]]), low, _i([5]), 3, nan_slot_filler=True).problems] == ["nan-filler"]


def test_many_tied_missing_and_extra_positions_are_listed_in_position_order() -> None:
    # 19 unselected at 5.0 above the boundary 3.0, 20 selected at 0.0 below it: long tie runs, where an
    # unstable sort would list them out of position order
    scores = _f([[5.0] * 19 + [3.0] * 21 + [0.0] * 20])
    [problem] = check_topk(_i([list(range(40, 60))]), scores, _i([60]), 20).problems
    assert [p for p, _, _ in problem.missing] == list(range(8))
    assert [p for p, _, _ in problem.extra] == list(range(40, 48))


def test_k_must_be_a_non_negative_integer_and_zero_selects_nothing() -> None:
    from dsakit.errors import UsageError

    assert check_topk(torch.zeros((1, 0), dtype=torch.int64), _f([[1.0, 2]]), _i([2]), 0).ok
    for bad in (-1, True, 1.5, "2"):
        with pytest.raises(UsageError) as raised:
            check_topk(_i([[0]]), _f([[1.0]]), _i([1]), bad)  # type: ignore[arg-type]
        assert str(raised.value) == ("top-k k must be a non-negative integer (the number of positions each row "
                                     f"selects), got {bad!r}")


def test_the_count_problem_says_what_was_expected() -> None:
    [short] = check_topk(_i([[0, -1]]), _f([[2.0, 1, 0]]), _i([3]), 2).problems
    assert (short.code, short.message) == ("count", "selected 1 positions, expected 2")
    padded = check_topk(_i([[-1, -1, -1]]), _f([[float("-inf"), 1.0, float("-inf")]]), _i([3]), 3).problems
    assert [(p.code, p.message) for p in padded if p.code == "count"] == [
        ("count", "selected 0 positions, expected 1..3 (-inf/NaN may be padded)")]


def test_a_comparison_of_one_column_rows_of_different_counts_is_one_shape_problem() -> None:
    report = compare_topk(_i([[0], [1]]), _i([[0]]), _f([[1.0, 2], [1.0, 2]]), _i([2, 2]))
    assert [(p.row, p.code, p.message) for p in report.problems] == [(-1, "shape", "actual has 2 rows, expected 1")]


def test_a_comparison_checks_every_row_after_an_equal_one() -> None:
    scores = _f([[3.0, 2, 1], [3.0, 2, 1], [3.0, 2, 1]])
    report = compare_topk(_i([[0], [0], [1]]), _i([[0], [0], [0]]), scores, _i([3, 0, 3]))
    assert [(p.row, p.code) for p in report.problems] == [(2, "mismatch")]
    assert compare_topk(_i([[-1]]), _i([[-1]]), _f([[1.0]]), _i([0])).ok  # a zero-length row


def test_an_unexplained_missing_position_fails_even_when_the_extra_one_is_tied() -> None:
    # expected [0, 1] (3, 2); actual [0, 2]: 2 is tied with the boundary 2.0, 1 is missing
    scores = _f([[3.0, 2, 2, 0]])
    report = compare_topk(_i([[0, 3]]), _i([[0, 1]]), scores, _i([4]))
    assert [p.code for p in report.problems] == ["mismatch"]
    assert report.problems[0].message.endswith("; not explained by ties at the boundary")


def test_failing_asserts_say_which_check_failed_and_hide_their_own_frame() -> None:
    from dsakit.errors import UsageError
    from dsakit.topk.checks import assert_topk_equal, assert_topk_valid

    with pytest.raises(AssertionError) as invalid:
        assert_topk_valid(_i([[1]]), _f([[2.0, 1]]), _i([2]), 1)
    assert str(invalid.value).startswith("invalid top-k selection: 1 of 1 rows fail (k=1)\n")
    with pytest.raises(AssertionError) as differ:
        assert_topk_equal(_i([[0]]), _i([[1]]), _f([[2.0, 1]]), _i([2]))
    assert str(differ.value).startswith("top-k selections differ: 1 of 1 rows fail (k=1)\n")
    for raised in (invalid, differ):
        hidden = [entry.name for entry in raised.traceback if entry.ishidden(raised)]
        assert hidden and hidden[0] in ("assert_topk_valid", "assert_topk_equal")
    with pytest.raises(UsageError, match=r"^top-k actual is not a tensor of numbers \("):
        assert_topk_equal("not a tensor", _i([[1]]), _f([[2.0, 1]]), _i([2]))


def test_candidate_overflow_checks_rows_after_a_short_one() -> None:
    from dsakit.topk.checks import CandidateBuffer, candidate_overflow

    buffer = CandidateBuffer("k", 8, 2, "k", "test")
    row = [1.0 + i * 1e-4 for i in range(8)]  # one coarse bin, eight distinct scores
    found = candidate_overflow(buffer, _f([[0.0] * 8, row]), _i([2, 8]), 4)
    assert [(o.row, o.population, o.distinct) for o in found] == [(1, 8, 8)]


def test_a_comparison_goes_on_after_a_nan_row_and_judges_zero_length_rows() -> None:
    scores = _f([[NAN, 1.0, 2.0], [3.0, 2.0, 1.0], [1.0, 1.0, 1.0]])
    report = compare_topk(_i([[1], [1], [0]]), _i([[2], [0], [-1]]), scores, _i([3, 3, 0]))
    assert report.tie_swaps[0] == ([2], [1])  # a NaN row: no verdict on equality
    assert [(p.row, p.code) for p in report.problems] == [(1, "mismatch"), (2, "mismatch")]


def test_a_missing_position_above_the_boundary_fails_with_nothing_extra() -> None:
    report = compare_topk(_i([[1, -1]]), _i([[0, 1]]), _f([[3.0, 2, 1]]), _i([3]))
    assert [p.code for p in report.problems] == ["mismatch"]
    assert report.problems[0].message == ("1 expected positions not selected, 0 selected positions not expected; "
                                          "not explained by ties at the boundary")
