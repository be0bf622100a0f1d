"""Kernel-launch contracts: what each top-k and DSA metadata kernel entry point requires of the
arguments a caller hands it, checked before the kernel runs.

Owns `KERNEL_ENTRIES` (one declared record per entry point: where SGLang, sgl-kernel or flashinfer
define it, which top-k backend's record it belongs to, and its `Check`s) and `violations(entry,
arguments)`, which evaluates them. The rules are the kernels' own documented preconditions (a
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
    DSA metadata kernel)."""

    kernel: str
    target: str
    checks: tuple[Check, ...]
    backend: str | None = None
    why: str = ""


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


_EVALUATORS: dict[str, Callable[[Check, Mapping[str, Any]], list[Violation]]] = {
    "dtype": _dtype, "ndim": _ndim, "rows_contiguous": _rows_contiguous, "same_rows": _same_rows, "k": _k,
    "positive": _positive, "lengths": _lengths, "monotone": _monotone, "index": _index, "pages": _pages,
    "plan": _plan, "at_most_rows": _at_most_rows,
}


def violations(entry: KernelEntry, arguments: Mapping[str, Any], *, values: bool = True) -> list[Violation]:
    """What the arguments of one call break (`values=False`: shapes and types only, as under capture).
    A check whose value read raises (a freed buffer) is not a violation of the contract."""
    found: list[Violation] = []
    for check in entry.checks:
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


def _metadata(module: str, function: str, lengths: str, *extra: Check) -> KernelEntry:
    # The Triton kernels load the lengths in any integer dtype and cast them to int32, clamp the DSA
    # lengths to dsa_index_topk (any k: they select nothing) and read req_to_token's columns below
    # max_len only (a length past max_len is clamped, not read): so max_len, not a length, is bounded
    # by req_to_token's width (measured on the H200 against SGLang 0.5.21's test_dsa_metadata.py).
    return KernelEntry(
        f"SGLang's DSA metadata kernel ({function})", f"{module}:{function}",
        (dtype(lengths, "int32", "int64"), at_most_rows("bs", lengths), lengths_within(lengths, count="bs"),
         at_most_rows("max_len", "req_to_token", 1),
         index_within("req_pool_indices", "req_to_token", 0, count="bs"), positive("real_page_size"), *extra),
        why="the Triton kernels gather req_to_token rows by req_pool_indices, columns below max_len")


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
    # SGLang's DSA metadata Triton kernels (0.5.17 / 0.5.21: dsa_metadata; 0.5.23: dsa.metadata)
    *(_metadata(module, function, "seq_lens")
      for module in ("sglang.kernels.ops.attention.dsa_metadata", "sglang.kernels.ops.attention.dsa.metadata")
      for function in ("fused_dsa_decode_metadata", "fused_dsa_target_verify_metadata",
                       "fused_dsa_draft_extend_metadata")),
)


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
