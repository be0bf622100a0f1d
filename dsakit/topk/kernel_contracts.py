"""Kernel-launch contracts: what each top-k and DSA metadata kernel entry point requires of the
arguments a caller hands it, checked before the kernel runs, and what a metadata kernel must have
written, checked when it returns.

Owns `KERNEL_ENTRIES` (one declared record per entry point: where SGLang, sgl-kernel or flashinfer
define it, which top-k backend's record it belongs to, its `Check`s and its postconditions,
`writes`) and `violations(entry, arguments)`, which evaluates them. The rules are the kernels' own documented preconditions (a
negative length "reinterprets as a ~4e9-token sequence ... illegal memory access": SGLang 0.5.17
dsv4/topk.py), as data: a check names its kind, the arguments it reads and whether it reads values
(a device->host copy, deferred to replay while a CUDA graph captures). Must not launch a kernel nor
import torch at module level; wrapping the entry points for a run is `dsakit.topk.launch_guard`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsakit.topk.backends import TOPK_BACKENDS

MAX_K = 2048  # the widest top-k any DSA / DeepSeek-V4 kernel takes (DeepSeek V3.2's index_topk)
SHOWN = 4  # offending rows a message names


@dataclass(frozen=True)
class Check:
    """One precondition: `kind` (a key of `_EVALUATORS`) over the named arguments.

    values   it reads tensor values (a device->host copy): skipped while a CUDA graph captures
             (the graph's static buffers are checked before each replay instead)
    param    the kind's parameter (dtypes, a dimension count, a limit)
    """

    kind: str
    args: tuple[str, ...]
    values: bool = False
    param: Any = None


@dataclass(frozen=True)
class KernelEntry:
    """One kernel entry point: `target` is "module:function" where it is defined (absent in a
    release: not wrapped); `backend` the `TopkBackend` value whose launches reach it (None: a
    DSA metadata kernel); `writes` the postconditions on what it wrote into its output arguments,
    checked when it returns (before any consumer reads them)."""

    kernel: str
    target: str
    checks: tuple[Check, ...]
    backend: str | None = None
    why: str = ""
    writes: tuple[Check, ...] = ()


@dataclass(frozen=True)
class Violation:
    """One broken precondition: the argument, the offending row and value (None: the whole
    argument), and the rule."""

    argument: str
    rule: str
    row: int | None = None
    value: Any = None

    def describe(self) -> str:
        where = f"{self.argument}[{self.row}] = {self.value!r}" if self.row is not None else self.argument
        if self.row is None and self.value is not None:
            where += f" ({self.value})"
        return f"{where}: {self.rule}"


# ---------------------------------------------------------------- the checks' kinds


def dtype(arg: str, *names: str) -> Check:
    return Check("dtype", (arg,), param=names)


def ndim(arg: str, n: int) -> Check:
    return Check("ndim", (arg,), param=n)


def rows_contiguous(arg: str) -> Check:
    return Check("rows_contiguous", (arg,))


def same_rows(arg: str, of: str, extra: int = 0) -> Check:
    """`arg` has `of`'s row count (+ `extra`: a cumulative array has rows + 1 entries)."""
    return Check("same_rows", (arg, of), param=extra)


def k_in_range(arg: str) -> Check:
    """An int k, or a (rows, k) output tensor: 0 < k <= MAX_K."""
    return Check("k", (arg,))


def positive(arg: str) -> Check:
    return Check("positive", (arg,))


def lengths_within(lengths: str, scores: str | None = None, starts: str | None = None, count: str | None = None,
                   width_of: tuple[str, int] | None = None) -> Check:
    """Every length >= 0 and, with a score matrix, start + length <= its width (`width_of`: another
    tensor's dimension bounds it); `count`: only the first `count` rows are live."""
    return Check("lengths", (lengths, scores or "", starts or "", count or ""), values=True, param=width_of)


def monotone(arg: str) -> Check:
    return Check("monotone", (arg,), values=True)


def index_within(arg: str, of: str, dim: int = 0, count: str | None = None) -> Check:
    """Every entry in [0, of.shape[dim]) (the first `count` entries when given)."""
    return Check("index", (arg, of, count or ""), values=True, param=dim)


def pages_within(table: str, lengths: str, page_size: str | int) -> Check:
    """Each row's live pages (ceil(length / page_size)) fit the table's width and are >= 0."""
    return Check("pages", (table, lengths), values=True, param=page_size)


def plan_for(plan: str, lengths: str) -> Check:
    """The v2 plan is present, int32, and (rows + 1, 2) for this batch (SGLang's plan_topk_v2)."""
    return Check("plan", (plan, lengths))


def at_most_rows(count: str, of: str, dim: int = 0) -> Check:
    """An int at most `of.shape[dim]` (dim 0: its rows)."""
    return Check("at_most_rows", (count, of), param=dim)


# ---------------------------------------------------------------- postconditions' kinds: what a metadata kernel wrote
# `rows` names the int arguments whose product is how many rows the kernel wrote (decode: bs;
# target verify: bs * next_n; draft extend: total_len). The page size is the call's `real_page_size`
# (0.5.17-0.5.21) or `physical_page_size` (0.5.23).
PAGE_SIZE_ARGS = ("real_page_size", "physical_page_size")


def written_lengths(out: str, rows: tuple[str, ...]) -> Check:
    """out[:rows] >= 0 and within the page table's width in tokens (page_table_1's width, else
    real_page_table's times the page size), where the caller's lengths were: a consumer reads a
    row's pages up to its length."""
    return Check("written_lengths", (out,), values=True, param=rows)


def cumulative(cu: str, lengths: str, rows: tuple[str, ...]) -> Check:
    """cu[:rows + 1] starts at 0 and steps by lengths[:rows]: monotone, ending at their total."""
    return Check("cumulative", (cu, lengths), values=True, param=rows)


def selection_within(selected: str, lengths: str, rows: tuple[str, ...]) -> Check:
    """selected[:rows] in [0, lengths[row]] and at most dsa_index_topk (+ index_kpool - 1: the
    pooled indexer keeps the live partial pool)."""
    return Check("selection_within", (selected, lengths), values=True, param=rows)


def live_pages_in_pool(table: str, lengths: str, rows: tuple[str, ...], max_len: str) -> Check:
    """Each written row's live entries (ceil(min(length, max_len) / page size)) are pages of the
    pool req_to_token maps: 0 <= entry <= max(req_to_token) // page size."""
    return Check("live_pages_in_pool", (table, lengths, max_len), values=True, param=rows)


# ---------------------------------------------------------------- evaluators


def _arg(arguments: Mapping[str, Any], name: str) -> Any:
    """One argument of the call (None where it was not passed or has no name)."""
    return arguments.get(name) if name else None


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "dim")


def _dtype_name(value: Any) -> str:
    return str(value.dtype).replace("torch.", "")


def _dtype(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    value = _arg(a, check.args[0])
    if not _is_tensor(value) or _dtype_name(value) in check.param:
        return []
    return [Violation(check.args[0], f"dtype must be {' or '.join(check.param)}", value=_dtype_name(value))]


def _ndim(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    value = _arg(a, check.args[0])
    if not _is_tensor(value) or value.dim() == check.param:
        return []
    return [Violation(check.args[0], f"must be {check.param}-D", value=f"shape {tuple(value.shape)}")]


def _rows_contiguous(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    value = _arg(a, check.args[0])
    if not _is_tensor(value) or value.dim() == 0 or value.stride(-1) == 1:
        return []
    return [Violation(check.args[0], "its last dimension must be contiguous (stride 1): the kernel reads rows as arrays",
                      value=f"strides {tuple(value.stride())}")]


def _same_rows(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    arg, of = (_arg(a, name) for name in check.args)
    if not (_is_tensor(arg) and _is_tensor(of)) or arg.dim() == 0 or of.dim() == 0:
        return []
    want = of.shape[0] + check.param
    if arg.shape[0] == want:
        return []
    return [Violation(check.args[0], f"must have {want} rows ({check.args[1]} has {of.shape[0]}"
                      f"{' + ' + str(check.param) if check.param else ''})", value=f"shape {tuple(arg.shape)}")]


def _k(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    value = _arg(a, check.args[0])
    k = value.shape[-1] if _is_tensor(value) and value.dim() == 2 else value
    if not isinstance(k, int) or isinstance(k, bool) or 0 < k <= MAX_K:
        return []
    return [Violation(check.args[0], f"k must be in 1..{MAX_K}", value=f"k = {k}")]


def _positive(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    value = _arg(a, check.args[0])
    if not isinstance(value, int) or isinstance(value, bool) or value > 0:
        return []
    return [Violation(check.args[0], "must be > 0", value=value)]


def _ints(value: Any, count: int | None = None) -> list[int]:
    flat = value.reshape(-1)
    if count is not None:
        flat = flat[:count]
    return [int(x) for x in flat.tolist()]


def _rows(check: Check, a: Mapping[str, Any], offenders: Sequence[tuple[int, Any]], rule: str) -> list[Violation]:
    shown = [Violation(check.args[0], rule, row, value) for row, value in offenders[:SHOWN]]
    if len(offenders) > SHOWN:
        shown.append(Violation(check.args[0], f"{len(offenders) - SHOWN} more rows break the same rule"))
    return shown


def _count(a: Mapping[str, Any], name: str) -> int | None:
    value = _arg(a, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lengths(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    lengths_name, scores_name, starts_name, count_name = check.args
    lengths = _arg(a, lengths_name)
    if not _is_tensor(lengths):
        return []
    count = _count(a, count_name)
    values = _ints(lengths, count)
    negative = [(row, n) for row, n in enumerate(values) if n < 0]
    if negative:
        return _rows(check, a, negative, "a length must be >= 0 (the kernel reads it as uint32: a negative "
                     "padded length becomes ~4e9 tokens and reads out of bounds, the MTP CUDA-graph crash class; "
                     "clamp padded rows to 0, which selects nothing)")
    scores = _arg(a, scores_name)
    width_of = check.param
    width = (scores.shape[-1] if _is_tensor(scores) else None) if width_of is None else (
        a[width_of[0]].shape[width_of[1]] if _is_tensor(_arg(a, width_of[0])) else None)
    if width is None:
        return []
    starts = _arg(a, starts_name)
    begin = _ints(starts, count) if _is_tensor(starts) else [0] * len(values)
    wide = [(row, n) for row, (s, n) in enumerate(zip(begin, values, strict=False)) if s < 0 or s + n > width]
    bound = f"{scores_name or width_of[0]}.shape[{-1 if width_of is None else width_of[1]}] = {width}"
    rule = (f"row start + length must lie in [0, {bound}]" if _is_tensor(starts)
            else f"a length must be at most {bound}")
    return _rows(check, a, wide, rule)


def _monotone(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    value = _arg(a, check.args[0])
    if not _is_tensor(value):
        return []
    values = _ints(value)
    falls = [(row, values[row]) for row in range(1, len(values)) if values[row] < values[row - 1]]
    return _rows(check, a, falls, "must not decrease from one row to the next")


def _index(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    arg, of, count_name = check.args
    value, bound_tensor = _arg(a, arg), _arg(a, of)
    if not (_is_tensor(value) and _is_tensor(bound_tensor)):
        return []
    bound = bound_tensor.shape[check.param]
    out = [(row, v) for row, v in enumerate(_ints(value, _count(a, count_name))) if not 0 <= v < bound]
    return _rows(check, a, out, f"must index {of} (0 <= value < {of}.shape[{check.param}] = {bound})")


def _pages(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    table, lengths = (_arg(a, name) for name in check.args)
    page_size = check.param if isinstance(check.param, int) else _arg(a, check.param)
    if not (_is_tensor(table) and _is_tensor(lengths)) or not isinstance(page_size, int) or page_size <= 0:
        return []
    width = table.shape[-1]
    bad: list[tuple[int, Any]] = []
    rows = _ints(lengths)
    for row, n in enumerate(rows[: table.shape[0]]):
        pages = -(-max(n, 0) // page_size)
        if pages > width:
            bad.append((row, f"{pages} live pages > table width {width}"))
        elif pages and min(_ints(table[row, :pages])) < 0:
            bad.append((row, "a live page entry is negative (not a page of the pool)"))
    return [Violation(check.args[0], f"each row's live pages (ceil(length / page_size {page_size})) must be "
                      "entries >= 0 inside the table", row, value) for row, value in bad[:SHOWN]]


def _plan(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    plan, lengths = (_arg(a, name) for name in check.args)
    if not _is_tensor(lengths):
        return []
    if plan is None:
        return [Violation(check.args[0], "the v2 transform needs the plan plan_topk_v2 wrote for these lengths; "
                          "none was given")]
    want = (lengths.shape[0] + 1, 2)
    if not _is_tensor(plan) or tuple(plan.shape) != want or _dtype_name(plan) != "int32":
        got = f"shape {tuple(plan.shape)}, {_dtype_name(plan)}" if _is_tensor(plan) else type(plan).__name__
        return [Violation(check.args[0], f"must be plan_topk_v2's int32 plan of shape {want} for this batch",
                          value=got)]
    return []


def _at_most_rows(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    count, of = (_arg(a, name) for name in check.args)
    dim = check.param or 0
    if not isinstance(count, int) or not _is_tensor(of) or of.dim() <= dim or count <= of.shape[dim]:
        return []
    bound = f"{check.args[1]}'s {of.shape[0]} rows" if dim == 0 else f"{check.args[1]}.shape[{dim}] = {of.shape[dim]}"
    return [Violation(check.args[0], f"must be at most {bound}", value=count)]


def _written_rows(check: Check, a: Mapping[str, Any]) -> int | None:
    """How many rows the kernel wrote: the product of the int arguments `check.param` names."""
    rows = 1
    for name in check.param:
        count = _count(a, name)
        if count is None:
            return None
        rows *= count
    return rows


def _written(check: Check, a: Mapping[str, Any], name: str, extra: int = 0) -> list[int] | None:
    """The first written rows (+ `extra`) of the output `name`, as ints (None: not a tensor, or the
    row count is unknown)."""
    value, rows = _arg(a, name), _written_rows(check, a)
    if not _is_tensor(value) or rows is None:
        return None
    return _ints(value, rows + extra)


def _page_size(a: Mapping[str, Any]) -> int | None:
    return next((n for n in (_count(a, name) for name in PAGE_SIZE_ARGS) if n is not None), None)


def _table_width(a: Mapping[str, Any], page_size: int | None) -> tuple[int, str] | None:
    wide, real = _arg(a, "page_table_1"), _arg(a, "real_page_table")
    if _is_tensor(wide) and wide.dim() == 2:
        return wide.shape[1], f"page_table_1.shape[1] = {wide.shape[1]}"
    if _is_tensor(real) and real.dim() == 2 and page_size:
        return real.shape[1] * page_size, f"real_page_table.shape[1] * {page_size} = {real.shape[1] * page_size}"
    return None


def _longest_input(a: Mapping[str, Any]) -> int | None:
    """The longest KV length the call's inputs allow: max(seq_lens[:bs]) (+ next_n: a verify row
    attends to its request's draft tokens too)."""
    seq_lens, bs = _arg(a, "seq_lens"), _count(a, "bs")
    if not _is_tensor(seq_lens) or bs is None:
        return None
    values = _ints(seq_lens, bs)
    return max(values, default=0) + (_count(a, "next_n") or 0)


def _written_lengths(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    values = _written(check, a, check.args[0])
    if values is None:
        return []
    negative = [(row, n) for row, n in enumerate(values) if n < 0]
    if negative:
        return _rows(check, a, negative, "the kernel wrote a negative length (its consumers read lengths as uint32: "
                     "a ~4e9-token row reads out of bounds, the MTP CUDA-graph crash class; padded rows must be "
                     "clamped to 0, as fused_dsa_draft_extend_metadata does)")
    width, longest = _table_width(a, _page_size(a)), _longest_input(a)
    if width is None or longest is None:
        return []
    # a caller's length past max_len is the kernels' documented clamp (the table holds max_len columns,
    # the length stays): only a length past both the width and what the inputs allow is the kernel's
    bound = max(width[0], longest)
    wide = [(row, n) for row, n in enumerate(values) if n > bound]
    return _rows(check, a, wide, f"the kernel wrote a length past the page table's width ({width[1]} tokens) "
                 f"and past the longest the inputs allow (max(seq_lens[:bs]) + next_n = {longest})")


def _cumulative(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    cu_name, lengths_name = check.args
    cu, lengths = _written(check, a, cu_name, extra=1), _written(check, a, lengths_name)
    if cu is None or lengths is None or not cu:
        return []
    if cu[0] != 0:
        return [Violation(cu_name, "must start at 0", 0, cu[0])]
    falls = [(row, cu[row]) for row in range(1, len(cu)) if cu[row] < cu[row - 1]]
    if falls:
        return _rows(check, a, falls, "must not decrease from one row to the next")
    steps = [(row, f"{cu[row]} != {cu[row - 1]} + {lengths_name}[{row - 1}] = {cu[row - 1] + n}")
             for row, n in enumerate(lengths, start=1) if cu[row] != cu[row - 1] + n]
    return _rows(check, a, steps, f"must step by {lengths_name} (ending at their total, {sum(lengths)})")


def _selection_within(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    selected_name, lengths_name = check.args
    selected, lengths = _written(check, a, selected_name), _written(check, a, lengths_name)
    topk = _count(a, "dsa_index_topk")
    if selected is None or lengths is None or topk is None:
        return []
    pool = max(_count(a, "index_kpool") or 1, 1)
    limit = topk + pool - 1
    bad = [(row, n) for row, (n, length) in enumerate(zip(selected, lengths, strict=False))
           if not 0 <= n <= min(max(length, 0), limit)]
    bound = f"dsa_index_topk = {topk}" + (f" + index_kpool {pool} - 1" if pool > 1 else "")
    return _rows(check, a, bad, f"a DSA length must lie in [0, min({lengths_name}[row], {bound})]")


def _live_pages_in_pool(check: Check, a: Mapping[str, Any]) -> list[Violation]:
    import torch

    table_name, lengths_name, max_len_arg = check.args
    table, pool, lengths = _arg(a, table_name), _arg(a, "req_to_token"), _written(check, a, lengths_name)
    page_size = 1 if table_name == "page_table_1" else _page_size(a)
    max_len = _count(a, max_len_arg)
    if not (_is_tensor(table) and _is_tensor(pool)) or lengths is None or not page_size or max_len is None:
        return []
    rows = min(len(lengths), table.shape[0]) if table.dim() == 2 else 0
    if not rows or pool.numel() == 0:
        return []
    last = int(pool.max()) // page_size  # the last page req_to_token maps
    live = torch.tensor([-(-min(max(n, 0), max_len) // page_size) for n in lengths[:rows]], device=table.device)
    entries = table[:rows]
    in_prefix = torch.arange(entries.shape[1], device=table.device)[None, :] < live[:, None]
    outside = in_prefix & ((entries < 0) | (entries > last))
    bad = [(row, int(entries[row][outside[row]][0])) for row in outside.any(dim=1).nonzero().flatten().tolist()]
    return _rows(check, a, bad, f"a live entry must be a page of the pool (0 <= entry <= max(req_to_token) // "
                 f"{page_size} = {last})")


_EVALUATORS: dict[str, Callable[[Check, Mapping[str, Any]], list[Violation]]] = {
    "dtype": _dtype, "ndim": _ndim, "rows_contiguous": _rows_contiguous, "same_rows": _same_rows, "k": _k,
    "positive": _positive, "lengths": _lengths, "monotone": _monotone, "index": _index, "pages": _pages,
    "plan": _plan, "at_most_rows": _at_most_rows, "written_lengths": _written_lengths, "cumulative": _cumulative,
    "selection_within": _selection_within, "live_pages_in_pool": _live_pages_in_pool,
}


def violations(entry: KernelEntry, arguments: Mapping[str, Any], *, values: bool = True,
               written: bool = False) -> list[Violation]:
    """What the arguments of one call break (`values=False`: shapes and types only, as under capture;
    `written=True`: the entry's postconditions on what the call wrote, instead of its preconditions)."""
    found: list[Violation] = []
    for check in entry.writes if written else entry.checks:
        if check.values and not values:
            continue
        found += _EVALUATORS[check.kind](check, arguments)
    return found


# ---------------------------------------------------------------- the table

_SCORES = (dtype("scores", "float32"), ndim("scores", 2), rows_contiguous("scores"))
_V2 = "sglang.kernels.ops.attention.dsv4.topk"
_LENGTHS = (dtype("seq_lens", "int32"), ndim("seq_lens", 1), same_rows("seq_lens", "scores"))


def _paged_v2(function: str) -> KernelEntry:
    return KernelEntry(
        f"SGLang's top-k v2 paged transform ({function})", f"{_V2}:{function}",
        (*_SCORES, *_LENGTHS, lengths_within("seq_lens", "scores"),
         dtype("out_page_indices", "int32"), same_rows("out_page_indices", "scores"), k_in_range("out_page_indices"),
         positive("page_size"), plan_for("metadata", "seq_lens"), pages_within("page_tables", "seq_lens", "page_size")),
        backend="sgl-kernel", why="topk_v2.cuh reads seq_lens as uint32 and routes rows by the plan")


# Per metadata kernel: the rows it writes per query token (the product of these int arguments),
# those rows' lengths, and the argument bounding the page-table columns it writes.
_METADATA_ROWS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "decode": (("bs",), "cache_seqlens", "max_len"),
    "target_verify": (("bs", "next_n"), "seqlens_expanded", "max_seqlen_k"),
    "draft_extend": (("total_len",), "seqlens_expanded", "max_seqlen_k"),
}


def _metadata(module: str, function: str, mode: str) -> KernelEntry:
    # The Triton kernels load the lengths in any integer dtype and cast them to int32, clamp the DSA
    # lengths to dsa_index_topk (any k: they select nothing) and read req_to_token's columns below
    # max_len only (a length past max_len is clamped, not read): so max_len, not a length, is bounded
    # by req_to_token's width (measured on the H200 against SGLang 0.5.21's test_dsa_metadata.py).
    rows, lengths, max_len = _METADATA_ROWS[mode]
    expanded = (written_lengths("seqlens_expanded", rows),) if lengths == "seqlens_expanded" else ()
    return KernelEntry(
        f"SGLang's DSA metadata kernel ({function})", f"{module}:{function}",
        (dtype("seq_lens", "int32", "int64"), at_most_rows("bs", "seq_lens"), lengths_within("seq_lens", count="bs"),
         at_most_rows(max_len, "req_to_token", 1),
         index_within("req_pool_indices", "req_to_token", 0, count="bs"),
         *(positive(name) for name in PAGE_SIZE_ARGS)),
        why="the Triton kernels gather req_to_token rows by req_pool_indices, columns below max_len; what they "
            "write is read by the top-k and attention kernels as uint32 lengths and page numbers",
        writes=(written_lengths("cache_seqlens", ("bs",)), cumulative("cu_seqlens_k", "cache_seqlens", ("bs",)),
                *expanded, selection_within("dsa_cache_seqlens", lengths, rows),
                cumulative("dsa_cu_seqlens_k", "dsa_cache_seqlens", rows),
                live_pages_in_pool("real_page_table", lengths, rows, max_len),
                live_pages_in_pool("page_table_1", lengths, rows, max_len)))


# Where each release lays the metadata kernels out: (module, function suffix). 0.5.17 / 0.5.21:
# dsa_metadata and the pooled-indexer dsa_kpool_metadata/; 0.5.23: dsa.metadata and dsa.kpool_metadata
# (functions suffixed _kpool).
_OPS = "sglang.kernels.ops.attention"
_METADATA_LAYOUTS: tuple[tuple[str, str, str], ...] = tuple(
    (module, f"fused_dsa_{mode}_metadata{suffix}", mode)
    for mode, file in (("decode", "decode"), ("target_verify", "verify"), ("draft_extend", "draft_extend"))
    for module, suffix in ((f"{_OPS}.dsa_metadata", ""), (f"{_OPS}.dsa.metadata", ""),
                           (f"{_OPS}.dsa_kpool_metadata.{file}", ""), (f"{_OPS}.dsa.kpool_metadata.{file}", "_kpool"))
)


KERNEL_ENTRIES: tuple[KernelEntry, ...] = (
    # SGLang's DeepSeek-V4 top-k v2 JIT (0.5.17: topk_transform_512_v2; 0.5.21+: topk_transform_paged_v2)
    KernelEntry("SGLang's top-k v2 plan (plan_topk_v2)", f"{_V2}:plan_topk_v2",
                (dtype("seq_lens", "int32"), ndim("seq_lens", 1), lengths_within("seq_lens")),
                backend="sgl-kernel", why="the plan routes rows by length, read as uint32"),
    _paged_v2("topk_transform_512_v2"),
    _paged_v2("topk_transform_paged_v2"),
    KernelEntry("SGLang's top-k v2 ragged transform (topk_transform_ragged_v2)", f"{_V2}:topk_transform_ragged_v2",
                (*_SCORES, *_LENGTHS, lengths_within("seq_lens", "scores", "row_starts"), monotone("row_starts"),
                 dtype("out_indices", "int32"), same_rows("out_indices", "scores"), k_in_range("out_indices"),
                 same_rows("out_offsets", "scores")),
                backend="sgl-kernel"),
    KernelEntry("SGLang's top-k v1 transform (topk_transform_512)", f"{_V2}:topk_transform_512",
                (*_SCORES, *_LENGTHS, lengths_within("seq_lens", "scores"), k_in_range("out_page_indices"),
                 positive("page_size"), pages_within("page_tables", "seq_lens", "page_size")),
                backend="sgl-kernel"),
    # sgl-kernel's ahead-of-time top-k ops
    KernelEntry("sgl-kernel fast_topk_v2", "sgl_kernel.top_k:fast_topk_v2",
                (dtype("score", "float32"), ndim("score", 2), dtype("lengths", "int32"), same_rows("lengths", "score"),
                 lengths_within("lengths", "score", "row_starts"), k_in_range("topk")),
                backend="sgl-kernel"),
    KernelEntry("sgl-kernel fast_topk_transform_fused", "sgl_kernel.top_k:fast_topk_transform_fused",
                (dtype("score", "float32"), ndim("score", 2), dtype("lengths", "int32"), same_rows("lengths", "score"),
                 lengths_within("lengths", "score", "row_starts"), k_in_range("topk"), monotone("cu_seqlens_q"),
                 lengths_within("lengths", width_of=("page_table_size_1", 1))),
                backend="sgl-kernel"),
    KernelEntry("sgl-kernel fast_topk_transform_ragged_fused", "sgl_kernel.top_k:fast_topk_transform_ragged_fused",
                (dtype("score", "float32"), ndim("score", 2), dtype("lengths", "int32"), same_rows("lengths", "score"),
                 lengths_within("lengths", "score", "row_starts"), monotone("row_starts"), k_in_range("topk"),
                 same_rows("topk_indices_offset", "score")),
                backend="sgl-kernel"),
    KernelEntry("sgl-kernel deepseek_v4_topk_transform_512", "sgl_kernel.top_k:deepseek_v4_topk_transform_512",
                (*_SCORES, *_LENGTHS, lengths_within("seq_lens", "scores"), k_in_range("page_indices"),
                 positive("page_size"), pages_within("page_table", "seq_lens", "page_size")),
                backend="sgl-kernel"),
    # flashinfer's fused page-table / ragged transforms
    KernelEntry("flashinfer top_k_page_table_transform", "flashinfer.topk:top_k_page_table_transform",
                (ndim("input", 2), dtype("lengths", "int32"), same_rows("lengths", "input"),
                 lengths_within("lengths", "input", "row_starts"), k_in_range("k"), positive("page_size")),
                backend="flashinfer"),
    KernelEntry("flashinfer top_k_ragged_transform", "flashinfer.topk:top_k_ragged_transform",
                (ndim("input", 2), dtype("lengths", "int32"), same_rows("lengths", "input"),
                 lengths_within("lengths", "input", "row_starts"), monotone("row_starts"), k_in_range("k"),
                 same_rows("offsets", "input")),
                backend="flashinfer"),
    # SGLang's DSA metadata Triton kernels, in every layout of _METADATA_LAYOUTS
    *(_metadata(module, function, mode) for module, function, mode in _METADATA_LAYOUTS),
)


def metadata_entry(mode: str) -> KernelEntry:
    """The DSA metadata kernel of one mode (decode, target_verify, draft_extend): every layout
    declares the same checks, so the first."""
    if mode not in _METADATA_ROWS:
        raise ValueError(f"no DSA metadata kernel for mode {mode!r}; expected one of {', '.join(_METADATA_ROWS)}")
    return next(e for e in KERNEL_ENTRIES if e.target.endswith(f":fused_dsa_{mode}_metadata"))


def entries_by_module() -> dict[str, list[tuple[KernelEntry, str]]]:
    """module -> (entry, function name) for every entry point of the table."""
    modules: dict[str, list[tuple[KernelEntry, str]]] = {}
    for entry in KERNEL_ENTRIES:
        module, _, function = entry.target.partition(":")
        modules.setdefault(module, []).append((entry, function))
    return modules


def _check_table() -> None:
    """Each entry's backend is a TopkBackend record's value and each check a known kind."""
    for entry in KERNEL_ENTRIES:
        if entry.backend is not None and entry.backend not in TOPK_BACKENDS:
            raise AssertionError(f"{entry.kernel}: backend {entry.backend!r} has no TopkBackend record")
        for check in entry.checks:
            if check.kind not in _EVALUATORS:
                raise AssertionError(f"{entry.kernel}: unknown check kind {check.kind!r}")


_check_table()
