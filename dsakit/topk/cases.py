"""Named, deterministic top-k cases: scores, lengths, row starts and page tables, rebuilt
bit-for-bit from a seed on any device.

Owns: the catalogue (`CASES`, stable ids used as snapshot keys), the score recipes (ties, near
ties, -inf, NaN, short and empty rows, 1M-token rows) and the shuffled page tables. Generated on
CPU then moved. Must not launch kernels or import SGLang; torch lazily.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

RECIPES = ("distinct", "ties", "near-ties", "constant", "neg-inf", "nan", "peaks")
SHAPES = ("decode", "extend", "target-verify", "draft-extend", "adversarial", "long-context")


@dataclass(frozen=True)
class TopkCase:
    """One top-k input, regenerated from `seed`.

    `lengths[i]` is row i's valid length; `row_starts` (ragged extend layout) gives where the row's
    window begins in the packed score row; `rows_per_request` rows share one request's page table
    (MTP verify / draft-extend expand each request into several query rows).
    """

    case_id: str
    shape: str
    k: int
    lengths: tuple[int, ...]
    width: int
    page_size: int = 64
    recipe: str = "distinct"
    seed: int = 0
    row_starts: tuple[int, ...] | None = None
    rows_per_request: int = 1
    note: str = ""
    refused: bool = False  # the kit must refuse this case before any kernel launch
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.width % 4:
            raise ValueError(f"{self.case_id}: width must be a multiple of 4 (16-byte row stride)")
        starts = self.row_starts or (0,) * len(self.lengths)
        for row, (start, length) in enumerate(zip(starts, self.lengths)):
            if start + max(length, 0) > self.width:
                raise ValueError(f"{self.case_id}: row {row} window exceeds width {self.width}")

    # ------------------------------------------------------------ shape facts

    @property
    def num_rows(self) -> int:
        return len(self.lengths)

    @property
    def ragged(self) -> bool:
        return self.row_starts is not None

    @property
    def num_requests(self) -> int:
        return -(-self.num_rows // self.rows_per_request)

    @property
    def score_bytes(self) -> int:
        return self.num_rows * self.width * 4

    def describe(self) -> str:
        lens = list(self.lengths) if self.num_rows <= 8 else f"{self.num_rows} rows"
        return (f"{self.case_id}: {self.shape}, k={self.k}, page_size={self.page_size}, "
                f"recipe={self.recipe}, lengths={lens}, width={self.width}"
                + (f" ({self.note})" if self.note else ""))

    # ------------------------------------------------------------ tensors

    def _generator(self, salt: int = 0) -> torch.Generator:
        import torch

        gen = torch.Generator(device="cpu")
        gen.manual_seed(self.seed * 1_000_003 + salt)
        return gen

    def scores(self, device: Any = "cpu", *, seed_offset: int = 0) -> torch.Tensor:
        """(rows, width) float32 scores; `seed_offset` gives a same-shaped second input (graphs).
        A fresh tensor each call (callers may write into it), generated once per process."""
        return _generated_scores(self, seed_offset, _recipe_row).to(device, copy=True)

    def _generate(self, seed_offset: int, recipe_row: Callable[..., torch.Tensor]) -> torch.Tensor:
        import torch

        gen = self._generator(17 + seed_offset)
        out = torch.empty((self.num_rows, self.width), dtype=torch.float32)
        for row in range(self.num_rows):
            out[row] = recipe_row(self.recipe, row, self.width, gen)
        return out

    def lengths_tensor(self, device: Any = "cpu") -> torch.Tensor:
        import torch

        return torch.tensor(self.lengths, dtype=torch.int32).to(device)

    def row_starts_tensor(self, device: Any = "cpu") -> torch.Tensor | None:
        import torch

        if self.row_starts is None:
            return None
        return torch.tensor(self.row_starts, dtype=torch.int32).to(device)

    def request_of_row(self, row: int) -> int:
        return row // self.rows_per_request

    def _request_contexts(self) -> list[int]:
        ctx = [0] * self.num_requests
        for row, length in enumerate(self.lengths):
            req = self.request_of_row(row)
            ctx[req] = max(ctx[req], max(length, 0))
        return ctx

    def page_tables(self, device: Any = "cpu") -> PageTables:
        """Per-row page tables: a shuffled physical table at `page_size` and the page_size-1 table
        derived from it (`pt1[r, p] = pt[r, p // P] * P + p % P`). Columns past a request's
        context hold `unmapped_slot` (never a real slot: a selection there is caught)."""
        import torch

        size = self.page_size
        ctx = self._request_contexts()
        pages = [-(-c // size) for c in ctx]
        total_pages = max(sum(pages), 1)
        # pool twice the needed pages, shuffled: physical ids neither contiguous nor in order
        pool = torch.randperm(2 * total_pages, generator=self._generator(99))[:total_pages]
        cols = -(-self.width // size)
        unmapped_page = 2 * total_pages
        req_table = torch.full((self.num_requests, cols), unmapped_page, dtype=torch.int64)
        cursor = 0
        for req, n in enumerate(pages):
            req_table[req, :n] = pool[cursor:cursor + n]
            cursor += n
        positions = torch.arange(self.width, dtype=torch.int64)
        req_table1 = req_table[:, positions // size] * size + positions % size
        for req, c in enumerate(ctx):
            req_table1[req, c:] = unmapped_page * size
        rows = torch.tensor([self.request_of_row(r) for r in range(self.num_rows)], dtype=torch.int64)
        return PageTables(
            page_size=size,
            table=req_table[rows].to(torch.int32).to(device),
            table_1=req_table1[rows].to(torch.int32).to(device),
            unmapped_slot=unmapped_page * size,
        )


@dataclass(frozen=True)
class PageTables:
    """Per-row tables (already expanded to one row per score row)."""

    page_size: int
    table: torch.Tensor  # (rows, ceil(width / page_size)) physical page ids
    table_1: torch.Tensor  # (rows, width) physical slots, page_size 1
    unmapped_slot: int

    def slots_to_positions(self, slots: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
        """Map transform output (physical slots, -1 padded) back to row-local positions.

        Returns (positions with -1 kept, problems): a slot that is not in the row's own table
        maps to -2 and is named in `problems`, so the validity check reports it as out of range.
        """
        import torch

        slots = slots.detach().to("cpu", torch.int64)
        table_1 = self.table_1.detach().to("cpu", torch.int64)
        out = torch.full_like(slots, -1)
        problems: list[str] = []
        for row in range(slots.shape[0]):
            mapped = table_1[row]
            order = torch.argsort(mapped)
            sorted_slots = mapped[order]
            got = slots[row]
            valid = got >= 0
            idx = torch.searchsorted(sorted_slots, got.clamp(min=0))
            idx = idx.clamp(max=sorted_slots.numel() - 1)
            hit = valid & (sorted_slots[idx] == got) & (got != self.unmapped_slot)
            out[row] = torch.where(hit, order[idx], torch.where(valid, -2, -1))
            bad = got[valid & ~hit]
            if bad.numel():
                problems.append(f"row {row}: slots {bad[:8].tolist()} are not in this row's page table")
        return out, problems


# ---------------------------------------------------------------- score recipes


# A test of a 1M-token case asked for its scores up to 5 times (the launch, the overflow prediction,
# the reference, the checks): ~0.1 s each on the H200 node's CPU, 0.85 s on a loaded 2-core box.
# Keyed by the recipe code too, so a test that swaps `_recipe_row` neither sees nor leaves stale
# scores; 64 entries hold every case of the catalogue and offset (~40 MiB).
@functools.lru_cache(maxsize=64)
def _generated_scores(case: TopkCase, seed_offset: int, recipe_row: Callable[..., torch.Tensor]) -> torch.Tensor:
    return case._generate(seed_offset, recipe_row)


def _recipe_row(recipe: str, row: int, width: int, gen: torch.Generator) -> torch.Tensor:
    import torch

    if recipe == "distinct":
        # SGLang test_dsa_indexer.py style: a permuted arange is tie-free and exact in fp32
        return torch.randperm(width, generator=gen).to(torch.float32) - width / 2
    if recipe == "ties":
        # a handful of values: every boundary falls inside a large tied group
        return torch.randint(0, 24, (width,), generator=gen).to(torch.float32) * 0.5
    if recipe == "near-ties":
        # values a few ulps apart (low mantissa bits), plus exact duplicates; sign alternates
        base = 0x3F800000 if row % 2 == 0 else 0xBF800000 - (1 << 32)  # +1.0 / -1.0 as int32
        bits = torch.randint(0, 24, (width,), generator=gen, dtype=torch.int32) + base
        return bits.view(torch.float32).clone()
    if recipe == "constant":
        return torch.full((width,), (0.5, 0.0, -3.0, 1e30)[row % 4], dtype=torch.float32)
    if recipe == "neg-inf":
        vals = torch.randperm(width, generator=gen).to(torch.float32)
        frac = (0.1, 0.85, 1.0, 0.3)[row % 4]
        mask = torch.rand(width, generator=gen, dtype=torch.float32) < frac
        return vals.masked_fill(mask, float("-inf"))
    if recipe == "nan":
        vals = torch.randperm(width, generator=gen).to(torch.float32)
        frac = (0.002, 0.3, 0.03)[row % 3]
        mask = torch.rand(width, generator=gen, dtype=torch.float32) < frac
        return vals.masked_fill(mask, float("nan"))
    if recipe == "peaks":
        # long rows inside the radix kernels' exact envelope: 4096 distinct peaks (1..4096) over a
        # distinct negative bulk, so the top-k threshold bin of any fp16 coarse key (8, 10 or 12
        # bits) holds at most 512 scores -- below every kernel's candidate buffer
        vals = -1.0 - torch.randperm(width, generator=gen).to(torch.float32)
        peaks = torch.randperm(width, generator=gen)[:4096]
        vals[peaks] = 1.0 + torch.randperm(4096, generator=gen).to(torch.float32)
        return vals
    raise ValueError(f"unknown score recipe {recipe!r}; known: {', '.join(RECIPES)}")


# ---------------------------------------------------------------- the catalogue


def _ragged(kv_lens: list[int], q_per_req: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Extend layout: each request's last q tokens attend causally to its kv in one packed row."""
    lengths: list[int] = []
    starts: list[int] = []
    base = 0
    for kv in kv_lens:
        for j in range(q_per_req):
            lengths.append(kv - (q_per_req - 1 - j))
            starts.append(base)
        base += kv
    return tuple(lengths), tuple(starts), -(-base // 4) * 4


def _expanded(seq_lens: list[int], per_req: int) -> tuple[int, ...]:
    """MTP verify / draft-extend rows: request b's j-th draft row sees seq_len - (n-1-j) tokens."""
    return tuple(max(s - (per_req - 1 - j), 0) if s else 0 for s in seq_lens for j in range(per_req))


def _catalogue() -> dict[str, TopkCase]:
    ext_l, ext_s, ext_w = _ragged([3000, 2500], 4)
    ext5_l, ext5_s, ext5_w = _ragged([700, 1200, 40], 3)
    one_m = 1 << 20
    cases = [
        TopkCase("decode-ps64-k2048", "decode", 2048,
                 (1, 100, 2047, 2048, 2049, 4096, 6001, 8192), 8192),
        TopkCase("decode-ps64-k512", "decode", 512, (300, 512, 513, 5000), 5000, seed=1),
        TopkCase("decode-ps1-k2048", "decode", 2048, (2048, 3000, 5555, 7000), 7000,
                 page_size=1, seed=2),
        TopkCase("extend-ragged-k2048", "extend", 2048, ext_l, ext_w, row_starts=ext_s, seed=3,
                 note="2 requests x 4 query tokens, packed kv"),
        TopkCase("extend-ragged-k512", "extend", 512, ext5_l, ext5_w, row_starts=ext5_s, seed=4,
                 note="3 requests x 3 query tokens, one shorter than k"),
        TopkCase("target-verify-ps64-k2048", "target-verify", 2048, _expanded([3000, 9000], 4),
                 9000, rows_per_request=4, seed=5, note="MTP: 2 requests x 4 draft tokens"),
        TopkCase("draft-extend-ps64-k512", "draft-extend", 512,
                 _expanded([601, 1001, 51], 2) + (0, 0), 1004, rows_per_request=2, seed=6,
                 note="3 requests x 2 rows + 2 CUDA-graph padded rows with length 0"),
        TopkCase("long-1m-ps64-k2048", "long-context", 2048, (one_m, 999_983), one_m, seed=7,
                 note="1M-token contexts, two rows"),
        TopkCase("long-1m-peaks-k2048", "long-context", 2048, (one_m, 999_983), one_m,
                 recipe="peaks", seed=16,
                 note="1M-token rows whose threshold bin fits every kernel's candidate buffer"),
        TopkCase("ties-exact-k512", "adversarial", 512, (4096, 3000, 700, 513), 4096,
                 recipe="ties", seed=8, note="24 distinct values: boundary inside a tied group"),
        TopkCase("near-ties-k2048", "adversarial", 2048, (8192, 6000, 2100), 8192,
                 recipe="near-ties", seed=9, note="scores differ only in the low mantissa bits"),
        TopkCase("constant-rows-k512", "adversarial", 512, (1000, 512, 100, 2000), 2000,
                 recipe="constant", seed=10, note="every score in a row equal"),
        TopkCase("neg-inf-k2048", "adversarial", 2048, (5000, 3000, 600, 100), 5000,
                 recipe="neg-inf", seed=11,
                 note="-inf blocks: 10%, 85% (fewer finite than k), 100%, 30% of each row"),
        TopkCase("nan-k512", "adversarial", 512, (2000, 2000, 300), 2000, recipe="nan", seed=12,
                 note="NaN at 0.2%, 30% (more NaN than k), 3%: outside the ordering"),
        TopkCase("short-rows-k2048", "adversarial", 2048, (0, 1, 2047, 2048, 2049), 2052, seed=13,
                 note="length 0, 1, k-1, k, k+1"),
        TopkCase("short-rows-k512", "adversarial", 512, (0, 1, 511, 512, 513), 516, seed=14,
                 note="length 0, 1, k-1, k, k+1"),
        TopkCase("padded-negative-lengths-k512", "draft-extend", 512, (600, -1, 51, -4), 604,
                 seed=15, refused=True,
                 note="the MTP CUDA-graph crash: padded rows carried negative lengths"),
    ]
    return {c.case_id: c for c in cases}


# Semantics the catalogue documents (checked by `dsakit.topk.checks`):
#   * selection is over the row's window `scores[r, start : start + length]`, indices row-local;
#   * -inf is the lowest score; a backend may pad (-1) instead of selecting -inf positions (the
#     torch path masks selected -inf to -1, the kernels fill with them);
#   * NaN is outside the ordering: torch.topk ranks NaN above +inf, the v2 JIT's fp32 collect pass
#     never collects NaN, so a NaN position may be selected or not and may cost its row a slot
#     (the v2 JIT writes position == slot index into such slots: `nan_slot_filler`);
#   * lengths must be >= 0; padded rows carry length 0 (see `dsakit.topk.checks.validate_lengths`).
CASES: dict[str, TopkCase] = _catalogue()


def get_case(case_id: str) -> TopkCase:
    try:
        return CASES[case_id]
    except KeyError:
        from dsakit.errors import UsageError

        raise UsageError(f"unknown top-k case {case_id!r}; known: {', '.join(CASES)}") from None


def select_topk_cases(*, k: int | None = None, shape: str | None = None, ragged: bool | None = None,
               include_refused: bool = False, max_score_bytes: int | None = None) -> list[TopkCase]:
    """Cases filtered by k, shape, layout; refused (negative-length) cases only on request."""
    out = []
    for c in CASES.values():
        if (c.refused and not include_refused) or (k is not None and c.k != k):
            continue
        if (shape is not None and c.shape != shape) or (ragged is not None and c.ragged != ragged):
            continue
        if max_score_bytes is not None and c.score_bytes > max_score_bytes:
            continue
        out.append(c)
    return out
