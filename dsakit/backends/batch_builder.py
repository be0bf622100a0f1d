"""Real SGLang `ForwardBatch`es for DSA backends, with realistic paged KV placement.

Owns: placing requests' KV slots in shuffled physical pages (written into `req_to_token`) and
building decode, extend, target-verify and draft-extend batches. Lengths are validated before
anything launches. Imports torch and SGLang lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dsakit.errors import UsageError

FORWARD_MODES = ("decode", "extend", "target_verify", "draft_extend")


@dataclass(frozen=True)
class BatchShape:
    """What a forward pass looks like, in tokens.

    mode          one of FORWARD_MODES
    seq_lens      per request: KV tokens before this step's draft tokens. decode: including the
                  token being decoded; extend / draft_extend: prefix + new tokens; target_verify:
                  committed tokens (the backend adds the draft tokens)
    prefix_lens   extend / draft_extend: cached prefix per request (default: seq_len - 1 for
                  extend, seq_len - draft_tokens for draft_extend)
    draft_tokens  target_verify / draft_extend: speculative tokens per request
    draft_steps   decode only, > 0 for the EAGLE/MTP multi-step draft decode (topk 1): seq_lens are
                  the committed tokens every step attends to (SGLang bakes the same seq_lens into
                  each step's metadata), and the batch carries `draft_steps` KV write slots per
                  request, at positions seq_len .. seq_len + draft_steps - 1, request-major
                  (the (bs, topk, num_steps) layout `per_step_draft_out_cache_loc` slices)
    """

    mode: str
    seq_lens: tuple[int, ...]
    prefix_lens: tuple[int, ...] = field(default=())
    draft_tokens: int = 0
    draft_steps: int = 0

    def __post_init__(self) -> None:
        if self.mode not in FORWARD_MODES:
            raise UsageError(f"unknown forward mode {self.mode!r}; expected one of: {', '.join(FORWARD_MODES)}")
        if not self.seq_lens:
            raise UsageError("BatchShape needs at least one request (seq_lens is empty)")
        bad = [(i, n) for i, n in enumerate(self.seq_lens) if n < 1]
        if bad:
            raise UsageError(
                f"seq_lens must be >= 1 for every request; got {bad} (row, length). Padded rows of a "
                "CUDA-graph batch are the backend's business: build the real rows only"
            )
        if self.mode in ("target_verify", "draft_extend") and self.draft_tokens < 1:
            raise UsageError(f"mode {self.mode!r} needs draft_tokens >= 1 (speculative tokens per request)")
        if self.draft_steps and (self.mode != "decode" or self.draft_steps < 1):
            raise UsageError(f"draft_steps ({self.draft_steps}) is for the multi-step draft decode: mode 'decode', "
                             f">= 1; got mode {self.mode!r}")
        if self.prefix_lens:
            if self.mode not in ("extend", "draft_extend"):
                raise UsageError(f"prefix_lens only apply to extend / draft_extend, not {self.mode!r}")
            if len(self.prefix_lens) != len(self.seq_lens):
                raise UsageError(
                    f"prefix_lens has {len(self.prefix_lens)} entries, seq_lens {len(self.seq_lens)}: one per request"
                )
            bad_prefix = [(i, p, n) for i, (p, n) in enumerate(zip(self.prefix_lens, self.seq_lens)) if not 0 <= p < n]
            if bad_prefix:
                raise UsageError(f"need 0 <= prefix_len < seq_len per request; got {bad_prefix} (row, prefix, seq)")

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    def resolved_prefix_lens(self) -> tuple[int, ...]:
        if self.prefix_lens:
            return self.prefix_lens
        if self.mode == "extend":
            return tuple(n - 1 for n in self.seq_lens)
        if self.mode == "draft_extend":
            return tuple(max(n - self.draft_tokens, 0) for n in self.seq_lens)
        return ()

    def extend_lens(self) -> tuple[int, ...]:
        return tuple(n - p for n, p in zip(self.seq_lens, self.resolved_prefix_lens()))

    def kv_lens(self) -> tuple[int, ...]:
        """KV tokens each request occupies during this step (what req_to_token must cover)."""
        if self.mode == "target_verify":
            return tuple(n + self.draft_tokens for n in self.seq_lens)
        return self.seq_lens

    def slot_lens(self) -> tuple[int, ...]:
        """Positions each request must have KV slots for in req_to_token: its KV plus, in the
        multi-step draft decode, the draft steps' write slots (SGLang allocates them before drafting,
        eagle_utils.eagle_prepare_for_decode, and assign_draft_cache_locs reads them from the row)."""
        return tuple(n + self.draft_steps for n in self.kv_lens())

    def write_positions(self) -> list[list[int]]:
        """Per request, the positions whose KV slots the batch's out_cache_loc carries, in order."""
        if self.draft_steps:
            return [list(range(n, n + self.draft_steps)) for n in self.seq_lens]
        if self.mode == "decode":
            return [[n - 1] for n in self.seq_lens]
        if self.mode == "target_verify":
            return [list(range(n, n + self.draft_tokens)) for n in self.seq_lens]
        return [list(range(p, n)) for p, n in zip(self.resolved_prefix_lens(), self.seq_lens)]


@dataclass
class PagedPlacement:
    """Where requests live: their req_to_token rows and their physical pages."""

    req_pool_indices: list[int]
    pages: list[list[int]]  # per request, physical page ids in order
    page_size: int

    def slot(self, request: int, position: int) -> int:
        return self.pages[request][position // self.page_size] * self.page_size + position % self.page_size

    def page_tables(self, runner: Any, kv_lens: Sequence[int]) -> Any:
        """The placed requests as top-k `PageTables` (one row per request), so kernel output in
        physical slots maps back to positions with `PageTables.slots_to_positions`. Columns past a
        request's KV length hold slot 0, which belongs to SGLang's padding page, never a request."""
        import torch

        from dsakit.topk.cases import PageTables

        width = max(kv_lens)
        table_1 = runner.req_to_token_pool.req_to_token[self.req_pool_indices, :width].to("cpu", torch.int64).clone()
        for row, length in enumerate(kv_lens):
            table_1[row, length:] = 0
        return PageTables(page_size=self.page_size, table=table_1[:, :: self.page_size] // self.page_size,
                          table_1=table_1, unmapped_slot=0)


def slot_capacity(runner: Any) -> int:
    """One past the largest KV slot `place_requests` can hand out for this runner: pages are drawn
    from 1 .. 2 * (pages needed) + 1, and a full runner needs every row's context in pages. A KV
    pool (or slot-indexed map) of this many slots covers any placement."""
    page_size = int(runner.page_size)
    pages_per_row = -(-int(runner.model_config.context_len) // page_size)
    return (2 * int(runner.req_to_token_pool.size) * pages_per_row + 2) * page_size


def place_requests(runner: Any, kv_lens: Sequence[int], *, seed: int = 0) -> PagedPlacement:
    """Give each request shuffled physical pages and write its slots into runner's req_to_token."""
    import torch

    req_to_token = runner.req_to_token_pool.req_to_token
    rows, width = req_to_token.shape
    page_size = int(runner.page_size)
    if len(kv_lens) > rows:
        raise UsageError(f"{len(kv_lens)} requests do not fit req_to_token_pool.size={rows}")
    if max(kv_lens) > width:
        raise UsageError(f"a request of {max(kv_lens)} tokens exceeds context_len={width} (req_to_token width)")
    generator = torch.Generator().manual_seed(seed)
    needed = [-(-n // page_size) for n in kv_lens]
    free_pages = torch.randperm(sum(needed) * 2 + 1, generator=generator)[: sum(needed)].tolist()
    free_pages = [p + 1 for p in free_pages]  # page 0 is SGLang's padding page
    pool_rows = torch.randperm(rows, generator=generator)[: len(kv_lens)].tolist()
    placement = PagedPlacement(pool_rows, [], page_size)
    cursor = 0
    for count in needed:
        placement.pages.append(free_pages[cursor : cursor + count])
        cursor += count
    for request, (row, n) in enumerate(zip(pool_rows, kv_lens)):
        slots = torch.tensor([placement.slot(request, j) for j in range(n)], dtype=torch.int32)
        req_to_token[row].zero_()
        req_to_token[row, :n] = slots.to(req_to_token.device)
    return placement


def _forward_mode(name: str) -> Any:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    if name == "draft_extend":
        return getattr(ForwardMode, "DRAFT_EXTEND_V2", None) or ForwardMode.DRAFT_EXTEND
    return {"decode": ForwardMode.DECODE, "extend": ForwardMode.EXTEND, "target_verify": ForwardMode.TARGET_VERIFY}[name]


def build_forward_batch(runner: Any, shape: BatchShape, *, seed: int = 0) -> tuple[Any, PagedPlacement]:
    """A real ForwardBatch for `shape`, its requests placed in the runner's req_to_token."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    device = runner.device
    placement = place_requests(runner, shape.slot_lens(), seed=seed)
    seq_lens_cpu = torch.tensor(shape.seq_lens, dtype=torch.int64)
    new_positions = shape.write_positions()
    out_cache_loc = torch.tensor(
        [placement.slot(r, pos) for r, positions in enumerate(new_positions) for pos in positions], dtype=torch.int64
    )
    # query tokens: one per request in the draft decode (topk 1, position seq_len: eagle_worker_common.
    # prepare_for_draft sets positions = seq_lens), one per written slot otherwise
    query_positions = [[n] for n in shape.seq_lens] if shape.draft_steps else new_positions
    num_tokens = sum(map(len, query_positions))
    batch = ForwardBatch(
        forward_mode=_forward_mode(shape.mode),
        batch_size=shape.batch_size,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=device),
        req_pool_indices=torch.tensor(placement.req_pool_indices, dtype=torch.int64, device=device),
        seq_lens=seq_lens_cpu.to(device=device, dtype=torch.int32),
        out_cache_loc=out_cache_loc.to(device),
        seq_lens_sum=int(seq_lens_cpu.sum()),
    )
    batch.seq_lens_cpu = seq_lens_cpu.to(torch.int32)
    batch.positions = torch.tensor([p for ps in query_positions for p in ps], dtype=torch.int64, device=device)
    if shape.mode in ("extend", "draft_extend"):
        extend_lens, prefix_lens = list(shape.extend_lens()), list(shape.resolved_prefix_lens())
        batch.extend_seq_lens = torch.tensor(extend_lens, dtype=torch.int32, device=device)
        batch.extend_prefix_lens = torch.tensor(prefix_lens, dtype=torch.int32, device=device)
        batch.extend_seq_lens_cpu = extend_lens
        batch.extend_prefix_lens_cpu = prefix_lens
        batch.extend_num_tokens = sum(extend_lens)
        batch.extend_start_loc = torch.tensor(
            [sum(extend_lens[:i]) for i in range(len(extend_lens))], dtype=torch.int32, device=device
        )
    return batch, placement
