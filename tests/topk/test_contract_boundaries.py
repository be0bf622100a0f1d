"""Every kernel contract at its exact edge (issue 45): for each precondition and postcondition of
`KERNEL_ENTRIES`, the last value it accepts and the first it refuses.

The cases are derived from the table: `edges(check)` knows each check kind, not each entry, so a new
entry gets its edge cases without new code (and a new kind fails `test_every_kind_has_edges` until it
gets some). Each case evaluates its one check alone.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest

from dsakit.topk.kernel_contracts import KERNEL_ENTRIES, MAX_K, PAGE_SIZE_ARGS, Check, KernelEntry, violations

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="[module:torch] the checks read tensors")

W, PAGE, TOPK = 8, 4, 4  # a score / page-table width, a page size, an index_topk


class Edge(NamedTuple):
    label: str
    args: dict[str, Any]
    refused: bool


def _i32(values: list[int] | list[list[int]]) -> Any:
    import torch

    return torch.tensor(values, dtype=torch.int32)


def _pair(label: str, valid: dict[str, Any], invalid: dict[str, Any]) -> Iterator[Edge]:
    yield Edge(f"{label}: last accepted", valid, False)
    yield Edge(f"{label}: first refused", invalid, True)


def _rows_args(check: Check, rows: int) -> dict[str, Any]:
    """The int arguments a postcondition multiplies into its row count, giving `rows` (the first
    name carries it, the others are 1); bs too, which bounds the inputs' lengths."""
    args: dict[str, Any] = {name: 1 for name in check.param}
    args[check.param[0]] = rows
    args.setdefault("bs", rows)
    return args


def _dtype(check: Check) -> Iterator[Edge]:
    import torch

    arg, names = check.args[0], check.param
    other = next(d for d in ("float64", "int16", "float32", "int32", "int64") if d not in names)
    for name in names:
        yield Edge(f"dtype {name} accepted", {arg: torch.zeros(2, dtype=getattr(torch, name))}, False)
    yield Edge(f"dtype {other} refused", {arg: torch.zeros(2, dtype=getattr(torch, other))}, True)


def _ndim(check: Check) -> Iterator[Edge]:
    import torch

    arg, n = check.args[0], check.param
    yield from _pair(f"{n}-D", {arg: torch.zeros((2,) * n)}, {arg: torch.zeros((2,) * (n + 1))})


def _rows_contiguous(check: Check) -> Iterator[Edge]:
    import torch

    arg = check.args[0]
    yield from _pair("stride 1", {arg: torch.zeros(2, 3)}, {arg: torch.zeros(3, 2).t()})


def _same_rows(check: Check) -> Iterator[Edge]:
    import torch

    arg, of = check.args
    want = 3 + check.param
    yield from _pair(f"{want} rows", {arg: torch.zeros(want), of: torch.zeros(3, 4)},
                     {arg: torch.zeros(want + 1), of: torch.zeros(3, 4)})
    yield Edge(f"{want - 1} rows refused", {arg: torch.zeros(want - 1), of: torch.zeros(3, 4)}, True)


def _k(check: Check) -> Iterator[Edge]:
    import torch

    arg = check.args[0]
    yield from _pair(f"k = {MAX_K}", {arg: MAX_K}, {arg: MAX_K + 1})
    yield from _pair("k = 1", {arg: 1}, {arg: 0})
    yield from _pair(f"a (rows, {MAX_K}) output", {arg: torch.zeros(2, MAX_K)}, {arg: torch.zeros(2, MAX_K + 1)})


def _positive(check: Check) -> Iterator[Edge]:
    arg = check.args[0]
    yield from _pair("1", {arg: 1}, {arg: 0})


def _lengths(check: Check) -> Iterator[Edge]:
    import torch

    lengths, scores, starts, count = check.args
    bound: dict[str, Any] = {}
    if check.param is not None:
        name, dim = check.param
        bound[name] = torch.zeros((2,) * dim + (W,))
    elif scores:
        bound[scores] = torch.zeros(2, W)

    def args(values: list[int], begins: list[int] | None = None) -> dict[str, Any]:
        a = {lengths: _i32(values), **bound}
        if starts:
            a[starts] = _i32(begins if begins is not None else [0, 0])
        return a

    yield from _pair("length 0", args([0, 0]), args([-1, 0]))
    if count:
        yield Edge(f"a row past {count} is not read", {**args([0, -1]), count: 1}, False)
        yield Edge(f"a row inside {count} is", {**args([0, -1]), count: 2}, True)
    if bound:
        yield from _pair(f"length = width {W}", args([W, 0]), args([W + 1, 0]))
        if starts:
            yield from _pair("start + length = width", args([W - 2, 0], [2, 0]), args([W - 1, 0], [2, 0]))
            yield from _pair("start 0", args([0, 0], [0, 0]), args([0, 0], [-1, 0]))


def _monotone(check: Check) -> Iterator[Edge]:
    arg = check.args[0]
    yield from _pair("two equal starts (an empty ragged row)", {arg: _i32([0, 3, 3])}, {arg: _i32([0, 3, 2])})


def _index(check: Check) -> Iterator[Edge]:
    import torch

    arg, of, count = check.args
    pool = {of: torch.zeros((4,) * (check.param + 1))}
    yield from _pair("the last row of the pool", {arg: _i32([3]), **pool}, {arg: _i32([4]), **pool})
    yield from _pair("row 0", {arg: _i32([0]), **pool}, {arg: _i32([-1]), **pool})
    if count:
        yield Edge(f"an entry past {count} is not read", {arg: _i32([0, 4]), count: 1, **pool}, False)


def _page_arg(check: Check) -> dict[str, Any]:
    return {} if isinstance(check.param, int) else {check.param: PAGE}


def _pages(check: Check) -> Iterator[Edge]:
    table, lengths = check.args
    page = check.param if isinstance(check.param, int) else PAGE
    a = {table: _i32([[0, 1]]), **_page_arg(check)}
    yield from _pair("live pages = table width", {**a, lengths: _i32([2 * page])}, {**a, lengths: _i32([2 * page + 1])})
    stale = {table: _i32([[0, -1]]), **_page_arg(check)}
    yield Edge("a negative entry past the live pages", {**stale, lengths: _i32([page])}, False)
    yield Edge("a negative live entry", {**stale, lengths: _i32([page + 1])}, True)


def _plan(check: Check) -> Iterator[Edge]:
    import torch

    plan, lengths = check.args
    n = {lengths: _i32([0, 0, 0])}
    yield from _pair("(rows + 1, 2)", {plan: torch.zeros(4, 2, dtype=torch.int32), **n},
                     {plan: torch.zeros(3, 2, dtype=torch.int32), **n})
    yield Edge("int64 refused", {plan: torch.zeros(4, 2, dtype=torch.int64), **n}, True)
    yield Edge("none refused", {plan: None, **n}, True)


def _at_most_rows(check: Check) -> Iterator[Edge]:
    import torch

    count, of = check.args
    dim = check.param or 0
    size = (3, 5)[dim]
    yield from _pair(f"{size} = {of}.shape[{dim}]", {count: size, of: torch.zeros(3, 5)}, {count: size + 1, of: torch.zeros(3, 5)})


def _written_lengths(check: Check) -> Iterator[Edge]:
    import torch

    a = {**_rows_args(check, 2), "seq_lens": torch.ones(2, dtype=torch.int64),
         "page_table_1": torch.zeros(2, W, dtype=torch.int32)}
    out = check.args[0]
    yield from _pair("length 0", {**a, out: _i32([0, 0])}, {**a, out: _i32([-1, 0])})
    yield from _pair(f"length = width {W}", {**a, out: _i32([W, 0])}, {**a, out: _i32([W + 1, 0])})
    longer = {**a, "seq_lens": torch.full((2,), W + 3, dtype=torch.int64)}  # a caller's length past max_len
    longest = W + 3 + longer.get("next_n", 0)  # a verify row attends to its request's draft tokens too
    yield from _pair("length = the longest input", {**longer, out: _i32([longest, 0])},
                     {**longer, out: _i32([longest + 1, 0])})


def _cumulative(check: Check) -> Iterator[Edge]:
    cu, lengths = check.args
    a = {**_rows_args(check, 2), lengths: _i32([2, 3])}
    yield from _pair("ends at the total", {**a, cu: _i32([0, 2, 5])}, {**a, cu: _i32([0, 2, 6])})
    yield Edge("starts at 1", {**a, cu: _i32([1, 3, 6])}, True)
    yield Edge("falls", {**a, cu: _i32([0, 2, 1])}, True)


def _selection_within(check: Check) -> Iterator[Edge]:
    selected, lengths = check.args
    a = {**_rows_args(check, 2), "dsa_index_topk": TOPK, lengths: _i32([TOPK + 5, 2])}
    yield from _pair(f"index_topk {TOPK}", {**a, selected: _i32([TOPK, 2])}, {**a, selected: _i32([TOPK + 1, 2])})
    yield from _pair("the row's length", {**a, selected: _i32([0, 2])}, {**a, selected: _i32([0, 3])})
    yield from _pair("0", {**a, selected: _i32([0, 0])}, {**a, selected: _i32([-1, 0])})
    pooled = {**a, "index_kpool": 2}
    yield from _pair("index_topk + index_kpool - 1", {**pooled, selected: _i32([TOPK + 1, 2])},
                     {**pooled, selected: _i32([TOPK + 2, 2])})


def _live_pages_in_pool(check: Check) -> Iterator[Edge]:
    import torch

    table, lengths, max_len = check.args
    page = 1 if table == "page_table_1" else PAGE
    pool = torch.arange(4 * 8, dtype=torch.int32).reshape(4, 8)
    last = int(pool.max()) // page
    a = {**_rows_args(check, 1), "req_to_token": pool, PAGE_SIZE_ARGS[0]: PAGE, max_len: 8,
         lengths: _i32([2 * page])}
    yield from _pair(f"the last page {last}", {**a, table: _i32([[0, last, -5]])}, {**a, table: _i32([[0, last + 1, 0]])})
    yield from _pair("page 0", {**a, table: _i32([[0, 0, 0]])}, {**a, table: _i32([[-1, 0, 0]])})


EDGES: dict[str, Callable[[Check], Iterator[Edge]]] = {
    "dtype": _dtype, "ndim": _ndim, "rows_contiguous": _rows_contiguous, "same_rows": _same_rows, "k": _k,
    "positive": _positive, "lengths": _lengths, "monotone": _monotone, "index": _index, "pages": _pages,
    "plan": _plan, "at_most_rows": _at_most_rows, "written_lengths": _written_lengths, "cumulative": _cumulative,
    "selection_within": _selection_within, "live_pages_in_pool": _live_pages_in_pool,
}


def edge_cases(entry: KernelEntry) -> Iterator[tuple[Check, bool, Edge]]:
    """Every (check, is a postcondition, edge) of one entry."""
    for written, checks in ((False, entry.checks), (True, entry.writes)):
        for check in checks:
            for edge in EDGES[check.kind](check):
                yield check, written, edge


CASES = [pytest.param(entry, check, written, edge, id=f"{entry.target.rpartition('.')[2]}-{check.kind}-"
                      f"{'-'.join(check.args[:1])}-{edge.label}")
         for entry in KERNEL_ENTRIES for check, written, edge in edge_cases(entry)]


def _alone(entry: KernelEntry, check: Check, written: bool) -> KernelEntry:
    return KernelEntry(entry.kernel, entry.target, () if written else (check,), writes=(check,) if written else ())


@pytest.mark.parametrize(("entry", "check", "written", "edge"), CASES)
def test_each_contract_at_its_edge(entry: KernelEntry, check: Check, written: bool, edge: Edge) -> None:
    found = violations(_alone(entry, check, written), edge.args, written=written)
    if edge.refused:
        assert found and found[0].argument == check.args[0], f"{edge.label}: not refused ({found})"
    else:
        assert found == [], f"{edge.label}: refused: {[v.describe() for v in found]}"


def test_every_kind_has_edges() -> None:
    kinds = {check.kind for entry in KERNEL_ENTRIES for check in (*entry.checks, *entry.writes)}
    assert kinds <= set(EDGES), f"check kinds without edge cases: {sorted(kinds - set(EDGES))}"
    for entry in KERNEL_ENTRIES:
        for check in (*entry.checks, *entry.writes):
            edges = list(EDGES[check.kind](check))
            assert any(e.refused for e in edges) and any(not e.refused for e in edges), (entry.target, check)


def test_every_top_k_entry_point_takes_k_2048_and_refuses_2049() -> None:
    """DeepSeek V3.2's index_topk is 2048: a wrong edge either refuses SGLang's own launches or
    lets an out-of-bounds k through."""
    for entry in (e for e in KERNEL_ENTRIES if e.backend is not None and "plan_topk_v2" not in e.target):
        k_checks = [c for c in entry.checks if c.kind == "k"]
        assert k_checks, f"{entry.target} has no k check"
        for check in k_checks:
            alone = _alone(entry, check, False)
            assert violations(alone, {check.args[0]: 2048}) == [], entry.target
            assert [v.value for v in violations(alone, {check.args[0]: 2049})] == ["k = 2049"], entry.target


def counts() -> dict[str, int]:
    """Edge cases per entry (the closing note's table): `python -c 'from tests.topk...'`."""
    return {entry.target: sum(1 for _ in edge_cases(entry)) for entry in KERNEL_ENTRIES}
