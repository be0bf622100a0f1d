"""FlashMLA's split-KV decode schedule, as a simulated arch's FlashMLA would compute it.

SGLang's DeepSeek-V4.1 decode on Blackwell precomputes FlashMLA's schedule itself
(deepseek_v4_backend._maybe_precompute_flashmla_sched_meta: SM100's head64 constants, sized by the
device's SM count) and hands it to FlashMLA, which then checks only its shape. Owns what judges such
a schedule and what lets the real GPU's FlashMLA run beside it:

- `impl_meta(arch, h_q, s_q, d_qk)`: the (num_sm_parts, fixed_overhead_num_blocks, block_size_n) of
  the FlashMLA decode implementation an arch dispatches to (FlashMLA csrc/api/sparse_decode.h
  get_meta);
- `decode_schedule(...)`: the schedule FlashMLA's own scheduling kernel computes (csrc/smxx/decode/
  get_decoding_sched_meta/get_decoding_sched_meta.cu), in plain Python: a precomputed schedule
  must assign the same work, part for part (`assigned`: an idle part's fields past its begin are
  unread);
- `run_with_own_schedule(original, arguments)`: the call, run on this GPU with a schedule object of
  its own (this GPU's FlashMLA schedules for its SM count), SGLang's object left as the simulated
  arch's FlashMLA leaves it.

No torch or kernel library at import; reads tensors only where a rule evaluates them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsakit.devices import DEVICES

# sizeof(DecodingSchedMeta) / sizeof(int) (FlashMLA csrc/params.h: 7 fields and one int of padding,
# which the scheduling kernel never writes)
META_INTS = 8
META_FIELDS = ("begin_req_idx", "end_req_idx", "begin_block_idx", "end_block_idx", "begin_split_idx",
               "is_first_req_splitted", "is_last_req_splitted")
# the attribute of SGLang's schedule object that holds this GPU's own schedule object
_OWN = "_dsakit_real_gpu_schedule"


def impl_meta(arch: str, h_q: int, s_q: int, d_qk: int) -> tuple[int, int, int] | None:
    """(num_sm_parts, fixed_overhead_num_blocks, block_size_n) of the sparse decode implementation
    FlashMLA picks on `arch` (sparse_decode.h: Decode_Sm90_Impl, Decode_Sm100_Head64_Impl,
    Decode_Sm100_Head64x2_Impl, Decode_Sm100_Head128_Impl); None where it has none for the call."""
    if arch not in DEVICES or h_q not in (64, 128) or s_q <= 0:
        return None
    sms = DEVICES[arch].multiprocessors or 0
    if arch in ("sm100", "sm103"):
        if h_q == 128 and d_qk == 512:
            return max(sms // s_q // 2, 1), 3, 64
        return max(sms // s_q, 1), 5, 64
    if arch == "sm90":
        return max(sms // s_q // (h_q // 64), 1), 5, 64
    return None


def decode_schedule(lengths: Sequence[int] | None, extra_lengths: Sequence[int] | None, *, batch: int, topk: int,
                    extra_topk: int, block_size_n: int, fixed_overhead: int,
                    num_sm_parts: int) -> tuple[list[tuple[int, ...]], list[int]]:
    """(one row of META_FIELDS per SM part, num_splits of batch + 1 entries): FlashMLA's sparse
    decode schedule, as get_mla_metadata_kernel computes it on thread 0."""
    seqlens, blocks = [], []
    for i in range(batch):
        s_k = lengths[i] if lengths is not None else topk
        if s_k == 0:
            s_k = 1  # the main loop must never be empty
        if extra_topk:
            s_k = -(-s_k // block_size_n) * block_size_n
            s_k += extra_lengths[i] if extra_lengths is not None else extra_topk
        seqlens.append(s_k)
        blocks.append(max(s_k - 1, 0) // block_size_n + 1)
    total = sum(blocks) + fixed_overhead * batch
    payload = -(-total // num_sm_parts) + fixed_overhead
    rows: list[tuple[int, ...]] = []
    splits = [0] * (batch + 1)
    req, block, split, cumulative = 0, 0, 0, 0
    for _ in range(num_sm_parts):
        begin = (req, block, split, int(block != 0))
        remain = payload
        while req < batch:
            left = blocks[req] - block
            if remain >= left + fixed_overhead:
                cumulative += split + 1
                splits[req + 1] = cumulative
                remain -= left + fixed_overhead
                req, block, split = req + 1, 0, 0
            else:
                if remain - fixed_overhead > 0:
                    block += remain - fixed_overhead
                    split += 1
                break
        end_req = req if block > 0 else req - 1
        end_block = block if block > 0 else (0 if req == 0 or seqlens[req - 1] == 0 else blocks[req - 1])
        last_split = int(0 <= end_req < batch and end_block != blocks[end_req] and seqlens[end_req] != 0)
        first_split = begin[3]
        if begin[0] == end_req:
            first_split = last_split = int(bool(first_split or last_split))
        rows.append((begin[0], end_req, begin[1], end_block, begin[2], first_split, last_split))
    return rows, splits


def assigned(rows: Sequence[tuple[int, ...]], batch: int) -> list[tuple[int, ...]]:
    """The rows as the decode and combine kernels read them: an idle part (begin_req_idx == batch,
    past the walk) is `(batch,)`, its other fields unread (FlashMLA fills them from whatever its
    arrays hold there; SGLang's flashmla_sched_meta mirrors that: block fields differ by build)."""
    return [row[:1] if row[0] >= batch else tuple(row) for row in rows]


def _is_sched_meta(value: Any) -> bool:
    """A FlashMLASchedMeta-like object (sgl-kernel 0.4's Python API), not bare tensors."""
    return hasattr(value, "tile_scheduler_metadata") and hasattr(value, "have_initialized")


def precomputed_schedule(value: Any) -> tuple[Any, Any]:
    """(tile_scheduler_metadata, num_splits) that SGLang set on a FlashMLASchedMeta-like object
    (sgl-kernel 0.4's Python API), or (None, None).

    Bare tensors are what get_mla_metadata returned, and it ran on this GPU: FlashMLA's own
    schedule for this GPU's SM count, which a real B300's get_mla_metadata computes for its own.
    They judge dsakit's substitution, not SGLang, so they are not judged."""
    if _is_sched_meta(value):
        return value.tile_scheduler_metadata, value.num_splits
    return None, None


def _host(value: Any) -> list[int] | None:
    return None if value is None else [int(n) for n in value.reshape(-1).tolist()]


def schedule_mismatch(arguments: Mapping[str, Any], arch: str, capturing: Callable[[], bool]) -> Any:
    """What is wrong with the schedule SGLang precomputed for `arch` (None: none is precomputed, or
    it is the one FlashMLA computes): its shape, dtype, or a row that differs from FlashMLA's own schedule
    for the call's lengths (not read while a CUDA graph is captured)."""
    q, indices = arguments.get("q"), arguments.get("indices")
    meta, splits = precomputed_schedule(arguments.get("tile_scheduler_metadata"))
    if meta is None or not hasattr(q, "shape") or len(q.shape) != 4 or not hasattr(indices, "shape"):
        return None
    b, s_q, h_q, d_qk = (int(n) for n in q.shape)
    found = impl_meta(arch, h_q, s_q, d_qk)
    if found is None:
        return None
    parts, overhead, block_n = found
    if tuple(meta.shape) != (parts, META_INTS) or str(meta.dtype) != "torch.int32":
        return f"tile_scheduler_metadata {tuple(meta.shape)} {meta.dtype}, not ({parts}, {META_INTS}) torch.int32"
    if splits is None or tuple(splits.shape) != (b + 1,) or str(splits.dtype) != "torch.int32":
        shown = None if splits is None else f"{tuple(splits.shape)} {splits.dtype}"
        return f"num_splits {shown}, not ({b + 1},) torch.int32"
    if capturing():
        return None
    extra = arguments.get("extra_indices_in_kvcache")
    rows, want_splits = decode_schedule(
        _host(arguments.get("topk_length")), _host(arguments.get("extra_topk_length")), batch=b,
        topk=int(indices.shape[-1]), extra_topk=int(extra.shape[-1]) if hasattr(extra, "shape") else 0,
        block_size_n=block_n, fixed_overhead=overhead, num_sm_parts=parts)
    given = [tuple(row[:len(META_FIELDS)]) for row in meta.tolist()]
    for part, (have, want) in enumerate(zip(assigned(given, b), assigned(rows, b))):
        if have != want:
            fields = ", ".join(f"{name} {h} (FlashMLA: {w})" for name, h, w in zip(META_FIELDS, have, want) if h != w)
            return f"SM part {part} of {parts}: {fields}"
    have_splits = _host(splits)
    if have_splits != want_splits:
        row = next(i for i, (h, w) in enumerate(zip(have_splits, want_splits)) if h != w)
        return f"num_splits[{row}] {have_splits[row]} (FlashMLA: {want_splits[row]})"
    return None


def run_with_own_schedule(original: Callable[..., Any], arguments: Mapping[str, Any]) -> Any:
    """The FlashMLA decode call on this GPU with a schedule object of its own, kept on SGLang's.

    A simulated arch's schedule (precomputed by SGLang, or none yet) does not fit this GPU's
    FlashMLA, which schedules for its own SM count: it gets its own object (created at the first
    call on SGLang's, reused as SGLang reuses that one), and SGLang's keeps the schedule it set, as
    on the simulated arch, with the config FlashMLA records on first use. A call handed bare tensors
    runs as called."""
    sched = arguments.get("tile_scheduler_metadata")
    if not _is_sched_meta(sched):
        return original(**arguments)
    own = vars(sched).get(_OWN)
    if own is None:
        own = type(sched)()
        setattr(sched, _OWN, own)
    result = original(**{**arguments, "tile_scheduler_metadata": own})
    sched.have_initialized, sched.config = own.have_initialized, own.config
    return result
