"""Each kind of kernel-launch check on its own (issue 45 item 4: the mutation run's core): the exact
violation it reports (argument, rule, row, value: what the user reads in the error), and what it
leaves to the kernel's own argument parsing (a value that is no torch tensor, a bool, a 0-D tensor,
a float where an int is counted). Each case evaluates one check in a one-check entry."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from dsakit.topk import kernel_contracts as kc
from dsakit.topk.kernel_contracts import MAX_K, Check, KernelEntry, Violation, violations

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="[module:torch] the checks read tensors")


def _one(check: Check, **arguments: Any) -> list[Violation]:
    return violations(KernelEntry("a kernel", "module:function", (check,)), arguments)


def _i32(values: Any) -> Any:
    import torch

    return torch.tensor(values, dtype=torch.int32)


def _not_torch() -> list[Any]:
    """Values a check leaves to the kernel's own argument parsing: no torch tensor."""
    import numpy

    return [None, 3, "x", numpy.ones((2, 3), dtype=numpy.float16)]  # numpy: a shape and a dtype, no dim()


def test_a_dtype_check_names_every_accepted_dtype_and_the_one_given() -> None:
    import torch

    check = kc.dtype("scores", "float32", "bfloat16")
    assert _one(check, scores=torch.zeros(2, 3, dtype=torch.float16)) == [
        Violation("scores", "dtype must be float32 or bfloat16", value="float16")]
    assert _one(check, scores=torch.zeros(2, 3, dtype=torch.bfloat16)) == []
    assert all(_one(check, scores=v) == [] for v in _not_torch())


def test_a_dimension_check_shows_the_shape() -> None:
    import torch

    check = kc.ndim("scores", 2)
    assert _one(check, scores=torch.zeros(1, 2, 3)) == [Violation("scores", "must be 2-D", value="shape (1, 2, 3)")]
    assert _one(check, scores=torch.zeros(1, 2)) == []
    assert all(_one(check, scores=v) == [] for v in _not_torch())


def test_a_row_layout_check_reads_the_last_dimension_only() -> None:
    import torch

    check = kc.rows_contiguous("scores")
    rule = "its last dimension must be contiguous (stride 1): the kernel reads rows as arrays"
    assert _one(check, scores=torch.zeros(4, 3).t()) == [Violation("scores", rule, value="strides (1, 3)")]
    middle = torch.zeros(2, 3, 4).permute(0, 2, 1)  # stride 1 in the middle, 4 in the last dimension
    assert _one(check, scores=middle) == [Violation("scores", rule, value="strides (12, 1, 4)")]
    assert _one(check, scores=torch.zeros(6)[::2]) == [Violation("scores", rule, value="strides (2,)")]
    assert _one(check, scores=torch.zeros(3, 4)) == [] and _one(check, scores=torch.zeros(4, 3).t().t()) == []
    assert _one(check, scores=torch.tensor(1.0)) == []  # 0-D: no rows to read
    assert all(_one(check, scores=v) == [] for v in _not_torch())


def test_a_row_count_check_says_which_argument_sets_the_count() -> None:
    check, cumulative = kc.same_rows("seq_lens", "scores"), kc.same_rows("cu", "seq_lens", 1)
    assert _one(check, seq_lens=_i32([1, 2, 3]), scores=_i32([[0], [0]])) == [
        Violation("seq_lens", "must have 2 rows (scores has 2)", value="shape (3,)")]
    assert _one(check, seq_lens=_i32([1, 2]), scores=_i32([[0], [0]])) == []
    assert _one(cumulative, cu=_i32([0, 1]), seq_lens=_i32([1, 2])) == [
        Violation("cu", "must have 3 rows (seq_lens has 2 + 1)", value="shape (2,)")]
    assert _one(cumulative, cu=_i32([0, 1, 3]), seq_lens=_i32([1, 2])) == []
    assert _one(check, seq_lens=_i32([1, 2, 3]), scores=_i32([7, 7])) == [  # a 1-D bound counts its entries
        Violation("seq_lens", "must have 2 rows (scores has 2)", value="shape (3,)")]
    for arg, of in ((_i32(5), _i32([1, 2])), (_i32([1, 2, 3]), _i32(5))):  # 0-D: no rows to count
        assert _one(check, seq_lens=arg, scores=of) == []
    for value in _not_torch():
        assert _one(check, seq_lens=value, scores=_i32([[0], [0]])) == []
        assert _one(check, seq_lens=_i32([1, 2, 3]), scores=value) == []


@pytest.mark.parametrize(("k", "refused"), [(MAX_K, False), (MAX_K + 1, True), (1, False), (0, True), (-3, True)])
def test_k_is_checked_as_an_int_or_as_an_output_tensors_width(k: int, refused: bool) -> None:
    import torch

    expected = [Violation("k", f"k must be in 1..{MAX_K}", value=f"k = {k}")] if refused else []
    assert _one(kc.k_in_range("k"), k=k) == expected
    if k > 0:
        assert _one(kc.k_in_range("k"), k=torch.zeros(2, k, dtype=torch.int32)) == expected


def test_k_leaves_what_is_no_int_count_to_the_kernel() -> None:
    import torch

    check = kc.k_in_range("k")
    for value in (True, False, float(MAX_K + 1), 0.0, torch.zeros(MAX_K + 1), torch.zeros(1, 1, MAX_K + 1)):
        assert _one(check, k=value) == [], value  # a bool, a float, a tensor that is no (rows, k) output


def test_a_positive_int_check() -> None:
    check = kc.positive("page_size")
    assert _one(check, page_size=0) == [Violation("page_size", "must be > 0", value=0)]
    assert _one(check, page_size=-2) == [Violation("page_size", "must be > 0", value=-2)]
    assert _one(check, page_size=1) == []
    for value in (False, -1.0, 0.0, None, _i32([0])):
        assert _one(check, page_size=value) == [], value


@pytest.mark.parametrize("extra", [0, 1, 3])
def test_a_row_rule_shows_the_first_rows_and_counts_the_rest(extra: int) -> None:
    check = kc.lengths_within("seq_lens", "scores")
    bad = list(range(-1, -kc.SHOWN - extra - 1, -1))  # every row negative
    found = _one(check, seq_lens=_i32(bad), scores=_i32([[0]] * len(bad)))
    assert [(v.argument, v.row, v.value) for v in found[:kc.SHOWN]] == [("seq_lens", r, bad[r]) for r in range(kc.SHOWN)]
    assert found[kc.SHOWN:] == ([Violation("seq_lens", f"{extra} more rows break the same rule")] if extra else [])


# ---------------------------------------------------------------- the value checks


def test_a_live_row_count_is_an_int_and_nothing_else() -> None:
    check = kc.lengths_within("seq_lens", count="bs")
    lengths = _i32([1, -2, 3, -4])
    assert [v.row for v in _one(check, seq_lens=lengths, bs=2)] == [1]  # rows past bs are padding
    for no_count in (None, 2.0, True, "2"):  # not an int count: every row is live
        assert [v.row for v in _one(check, seq_lens=lengths, bs=no_count)] == [1, 3], no_count
    assert _one(check, seq_lens=None, bs=2) == [] and _one(check, seq_lens=[1, -2], bs=2) == []


def test_a_length_bound_names_what_sets_the_width() -> None:
    by_scores = kc.lengths_within("seq_lens", "scores")
    assert _one(by_scores, seq_lens=_i32([3, 4]), scores=_i32([[0] * 3] * 2)) == [
        Violation("seq_lens", "a length must be at most scores.shape[-1] = 3", 1, 4)]
    by_table = kc.lengths_within("lengths", width_of=("page_table_size_1", 1))
    table = _i32([[0] * 5] * 2)
    assert _one(by_table, lengths=_i32([5, 6]), page_table_size_1=table) == [
        Violation("lengths", "a length must be at most page_table_size_1.shape[1] = 5", 1, 6)]
    assert _one(by_table, lengths=_i32([5, 6]), page_table_size_1=None) == []  # no table: no bound


def test_ragged_row_starts_bound_each_window_and_may_hold_more_entries() -> None:
    check = kc.lengths_within("lengths", "score", "row_starts")
    score = _i32([[0] * 8] * 2)
    rule = "row start + length must lie in [0, score.shape[-1] = 8]"
    assert _one(check, lengths=_i32([2, 3]), score=score, row_starts=_i32([0, 5, 8])) == []  # a trailing end entry
    assert _one(check, lengths=_i32([2, 3]), score=score, row_starts=_i32([-1, 6])) == [
        Violation("lengths", rule, 0, 2), Violation("lengths", rule, 1, 3)]


def test_a_fall_is_found_from_the_second_row_on() -> None:
    check = kc.monotone("row_starts")
    rule = "must not decrease from one row to the next"
    assert _one(check, row_starts=_i32([5, 3, 4])) == [Violation("row_starts", rule, 1, 3)]
    assert _one(check, row_starts=_i32([0, 0, 4])) == []  # equal starts: an empty row
    assert _one(check, row_starts=None) == [] and _one(check, row_starts=[5, 3]) == []


def test_an_index_check_needs_both_tensors() -> None:
    check = kc.index_within("req_pool_indices", "req_to_token")
    pool = _i32([[0, 0]] * 3)
    assert [v.row for v in _one(check, req_pool_indices=_i32([2, 3]), req_to_token=pool)] == [1]
    assert _one(check, req_pool_indices=None, req_to_token=pool) == []
    assert _one(check, req_pool_indices=_i32([2, 3]), req_to_token=None) == []


def test_a_page_check_reads_the_live_pages_of_the_tables_rows() -> None:
    check = kc.pages_within("page_table", "seq_lens", "page_size")
    rule = "each row's live pages (ceil(length / page_size 1)) must be entries >= 0 inside the table"
    table = _i32([[0, -1, -1], [-1, -1, -1]])
    assert _one(check, page_table=table, seq_lens=_i32([1, 0]), page_size=1) == []  # a row of length 0 has none
    assert _one(check, page_table=table, seq_lens=_i32([2, -3]), page_size=1) == [
        Violation("page_table", rule, 0, "a live page entry is negative (not a page of the pool)")]
    assert _one(check, page_table=table, seq_lens=_i32([4, 0]), page_size=1) == [
        Violation("page_table", rule, 0, "4 live pages > table width 3")]
    assert _one(check, page_table=table, seq_lens=_i32([1, 0, 9, 9]), page_size=1) == []  # rows past the table's
    for changed in ({"page_table": None}, {"seq_lens": None}, {"page_size": None}, {"page_size": 0}, {"page_size": 1.0}):
        assert _one(check, **{"page_table": table, "seq_lens": _i32([4, 0]), "page_size": 1, **changed}) == [], changed


def test_a_plan_is_named_by_its_type_where_it_is_no_tensor() -> None:
    check = kc.plan_for("metadata", "seq_lens")
    rule = "must be plan_topk_v2's int32 plan of shape (3, 2) for this batch"
    assert _one(check, metadata=[[0, 0]] * 3, seq_lens=_i32([1, 2])) == [Violation("metadata", rule, value="list")]
    assert _one(check, metadata=_i32([[0, 0]] * 3), seq_lens=_i32([1, 2])) == []
    assert _one(check, metadata=None, seq_lens=None) == []  # no lengths: nothing to plan for


def test_a_row_bound_names_the_rows_or_the_dimension() -> None:
    rows, columns = kc.at_most_rows("bs", "seq_lens"), kc.at_most_rows("max_len", "req_to_token", 1)
    pool = _i32([[0] * 5] * 3)
    assert _one(rows, bs=4, seq_lens=pool) == [Violation("bs", "must be at most seq_lens's 3 rows", value=4)]
    assert _one(rows, bs=3, seq_lens=pool) == []
    assert _one(columns, max_len=6, req_to_token=pool) == [
        Violation("max_len", "must be at most req_to_token.shape[1] = 5", value=6)]
    assert _one(columns, max_len=6, req_to_token=_i32([0] * 5)) == []  # 1-D: no dimension 1 to bound by
    assert _one(rows, bs=4, seq_lens=None) == [] and _one(rows, bs=4.0, seq_lens=pool) == []


def test_a_postcondition_reads_only_the_rows_the_kernel_wrote() -> None:
    check = kc.written_lengths("out", ("bs", "next_n"))
    entry = KernelEntry("a kernel", "module:function", (), writes=(check,))
    out = _i32([0, 1, 2, 3, -1, -1])  # 2 requests x 2 tokens written; the rest is the caller's padding
    assert violations(entry, {"out": out, "bs": 2, "next_n": 2}, written=True) == []
    assert [v.row for v in violations(entry, {"out": out, "bs": 3, "next_n": 2}, written=True)] == [4, 5]
    assert violations(entry, {"out": out, "bs": 2}, written=True) == []  # a row count unknown: nothing read


@pytest.mark.parametrize(("tables", "width"), [
    ({"page_table_1": _i32([[0] * 6] * 2)}, "page_table_1.shape[1] = 6"),
    ({"real_page_table": _i32([[0, 0]] * 2), "real_page_size": 3}, "real_page_table.shape[1] * 3 = 6"),  # 0.5.17-0.5.21
    ({"real_page_table": _i32([[0, 0]] * 2), "physical_page_size": 3}, "real_page_table.shape[1] * 3 = 6"),  # 0.5.23
    ({"page_table_1": _i32([0] * 9), "real_page_table": _i32([[0, 0]] * 2), "real_page_size": 3},
     "real_page_table.shape[1] * 3 = 6"),  # a 1-D page_table_1 is no table
], ids=["page_table_1", "real_page_size", "physical_page_size", "1-D page_table_1"])
def test_a_written_length_is_bounded_by_the_page_tables_width_in_tokens(tables: dict[str, Any], width: str) -> None:
    entry = KernelEntry("a kernel", "module:function", (), writes=(kc.written_lengths("out", ("bs",)),))
    arguments = {"out": _i32([6, 7]), "bs": 2, "seq_lens": _i32([4, 4]), **tables}
    assert violations(entry, arguments, written=True) == [Violation(
        "out", f"the kernel wrote a length past the page table's width ({width} tokens) and past the longest "
        "the inputs allow (max(seq_lens[:bs]) + next_n = 4)", 1, 7)]
    longer = {**arguments, "seq_lens": _i32([4, 7])}  # a length the inputs allow is the kernels' documented clamp
    assert violations(entry, longer, written=True) == []


@pytest.mark.parametrize("tables", [
    {}, {"real_page_table": _i32([[0, 0]] * 2)}, {"real_page_table": _i32([[[0, 0]]] * 2), "real_page_size": 3},
    {"real_page_table": _i32([0, 0]), "real_page_size": 3}, {"page_table_1": [[0] * 6] * 2},
], ids=["no table", "no page size", "3-D table", "1-D table", "a list"])
def test_without_a_page_table_width_no_written_length_is_too_long(tables: dict[str, Any]) -> None:
    entry = KernelEntry("a kernel", "module:function", (), writes=(kc.written_lengths("out", ("bs",)),))
    assert violations(entry, {"out": _i32([6, 70]), "bs": 2, "seq_lens": _i32([4, 4]), **tables}, written=True) == []
    assert violations(entry, {"out": [6, -1], "bs": 2}, written=True) == []  # no tensor written: nothing to read


def test_a_length_is_bounded_by_the_scores_last_dimension() -> None:
    check = kc.lengths_within("seq_lens", "scores")
    scores = _i32([[[0] * 5] * 3] * 2)  # (rows, 3, 5): the rule names shape[-1]
    assert _one(check, seq_lens=_i32([5, 6]), scores=scores) == [
        Violation("seq_lens", "a length must be at most scores.shape[-1] = 5", 1, 6)]


# ---------------------------------------------------------------- postconditions, kind by kind


def _wrote(check: Check, **arguments: Any) -> list[Violation]:
    return violations(KernelEntry("a kernel", "module:function", (), writes=(check,)), arguments, written=True)


def test_a_negative_written_length_says_why_it_crashes() -> None:
    check = kc.written_lengths("out", ("bs",))
    assert _wrote(check, out=_i32([-1, 2]), bs=2) == [Violation(
        "out", "the kernel wrote a negative length (its consumers read lengths as uint32: a ~4e9-token row reads "
        "out of bounds, the MTP CUDA-graph crash class; padded rows must be clamped to 0, as "
        "fused_dsa_draft_extend_metadata does)", 0, -1)]
    assert _wrote(check, out=_i32([9, 2]), bs=2, page_table_1=_i32([[0] * 3] * 2)) == []  # no seq_lens: no bound


def test_a_written_cumulative_array_starts_at_0_and_steps_by_the_lengths() -> None:
    check = kc.cumulative("cu", "lengths", ("bs",))
    assert _wrote(check, cu=_i32([0, 2, 5, 1]), lengths=_i32([2, 3, 7]), bs=2) == []  # rows past bs + 1: padding
    assert _wrote(check, cu=_i32([1, 3, 6]), lengths=_i32([2, 3]), bs=2) == [Violation("cu", "must start at 0", 0, 1)]
    assert _wrote(check, cu=_i32([0, -1, 2]), lengths=_i32([-1, 3]), bs=2) == [
        Violation("cu", "must not decrease from one row to the next", 1, -1)]
    assert _wrote(check, cu=_i32([0, 2, 4]), lengths=_i32([2, 3]), bs=2) == [
        Violation("cu", "must step by lengths (ending at their total, 5)", 2, "4 != 2 + lengths[1] = 5")]
    for changed in ({"cu": None}, {"lengths": [2, 3]}, {"cu": _i32([])}, {"bs": None}):
        assert _wrote(check, **{"cu": _i32([1, 2, 4]), "lengths": _i32([2, 3]), "bs": 2, **changed}) == [], changed


def test_a_written_selection_lies_within_its_length_and_the_top_k() -> None:
    check = kc.selection_within("sel", "lengths", ("bs",))
    rule = "a DSA length must lie in [0, min(lengths[row], dsa_index_topk = 4)]"
    lengths = _i32([0, 3, 9, -2])
    assert _wrote(check, sel=_i32([0, 3, 4, 0]), lengths=lengths, bs=4, dsa_index_topk=4) == []
    assert _wrote(check, sel=_i32([1, 4, 5, -1]), lengths=lengths, bs=4, dsa_index_topk=4) == [
        Violation("sel", rule, 0, 1), Violation("sel", rule, 1, 4), Violation("sel", rule, 2, 5),
        Violation("sel", rule, 3, -1)]
    pooled = "a DSA length must lie in [0, min(lengths[row], dsa_index_topk = 4 + index_kpool 3 - 1)]"
    assert _wrote(check, sel=_i32([0, 3, 6, 0]), lengths=lengths, bs=4, dsa_index_topk=4, index_kpool=3) == []
    assert _wrote(check, sel=_i32([0, 3, 7, 0]), lengths=lengths, bs=4, dsa_index_topk=4, index_kpool=3) == [
        Violation("sel", pooled, 2, 7)]
    assert _wrote(check, sel=_i32([0, 3, 5, 0]), lengths=lengths, bs=4, dsa_index_topk=4, index_kpool=0) == [
        Violation("sel", rule, 2, 5)]  # no pool: the top-k alone
    assert _wrote(check, sel=_i32([9] * 4), lengths=lengths, bs=4) == []  # no top-k given: no bound
    assert _wrote(check, sel=None, lengths=lengths, bs=4, dsa_index_topk=4) == []


def test_written_live_pages_are_pages_of_the_pool() -> None:
    check = kc.live_pages_in_pool("page_table_1", "lengths", ("bs",), "max_len")
    pool = _i32([list(range(8))])  # req_to_token maps tokens 0..7
    rule = "a live entry must be a page of the pool (0 <= entry <= max(req_to_token) // 1 = 7)"
    table = _i32([[0, 7, -1], [8, 1, 2], [-5, 0, 0]])
    assert _wrote(check, page_table_1=table, req_to_token=pool, lengths=_i32([2, 1, 0]), bs=3, max_len=3) == [
        Violation("page_table_1", rule, 1, 8)]
    assert _wrote(check, page_table_1=table, req_to_token=pool, lengths=_i32([2, 0, -4]), bs=3, max_len=3) == []
    assert _wrote(check, page_table_1=table, req_to_token=pool, lengths=_i32([3, 0, 0]), bs=3, max_len=2) == []  # max_len
    assert _wrote(check, page_table_1=table, req_to_token=pool, lengths=_i32([3, 0, 0]), bs=3, max_len=3) == [
        Violation("page_table_1", rule, 0, -1)]
    assert _wrote(check, page_table_1=table, req_to_token=pool, lengths=_i32([2, 1, 1, 9]), bs=4, max_len=3) == [
        Violation("page_table_1", rule, 1, 8), Violation("page_table_1", rule, 2, -5)]  # rows past the table's
    for changed in ({"page_table_1": None}, {"req_to_token": None}, {"max_len": None}, {"page_table_1": _i32([8, 8])},
                    {"req_to_token": _i32([[]])}):
        args = {"page_table_1": table, "req_to_token": pool, "lengths": _i32([2, 1, 0]), "bs": 3, "max_len": 3}
        assert _wrote(check, **{**args, **changed}) == [], changed


def test_live_pages_of_a_paged_table_count_in_pages_of_the_physical_size() -> None:
    check = kc.live_pages_in_pool("real_page_table", "lengths", ("bs",), "max_len")
    pool = _i32([list(range(8))])  # tokens 0..7: pages 0 and 1 of 4 tokens
    args = {"req_to_token": pool, "lengths": _i32([5]), "bs": 1, "max_len": 8}
    assert _wrote(check, real_page_table=_i32([[0, 1, 9]]), physical_page_size=4, **args) == []
    assert _wrote(check, real_page_table=_i32([[0, 2, 9]]), physical_page_size=4, **args) == [Violation(
        "real_page_table", "a live entry must be a page of the pool (0 <= entry <= max(req_to_token) // 4 = 1)", 0, 2)]
    assert _wrote(check, real_page_table=_i32([[0, 2, 9]]), **args) == []  # no page size: nothing to count in
