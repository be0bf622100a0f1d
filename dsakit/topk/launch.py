"""The one route from a `TopkCase` to the real SGLang top-k entry points, one named *path* each.

Owns: `TOPK_PATHS` (the real call, gates, unsupported cases as `Reason`s, each kernel's sourced
`KernelContract`), refusing bad lengths before any launch (through `checks.validate_lengths`)
and mapping each output back to row-local positions. Must not decide correctness (`dsakit.topk.checks`,
`dsakit.topk.reference`); imports torch and SGLang lazily, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from dsakit.errors import UsageError
from dsakit.reasons import Reason
from dsakit.topk.checks import BinOverflow, CandidateBuffer, candidate_overflow, validate_lengths

if TYPE_CHECKING:
    import pytest
    import torch

    from dsakit.topk.cases import TopkCase


# ---------------------------------------------------------------- what each kernel guarantees

# No length limit was found in either kernel: sgl-kernel's topk.cu indexes rows with int
# (`for (int idx = tx; idx < length; ...)`), the v2 JIT with uint32 and a cluster path built for
# DeepSeek-V4's 1M-token context. What bounds exactness is the threshold-bin candidate buffer,
# a property of the scores (how many share the coarse fp16 bin at the top-k boundary), not of the
# length; `candidate_overflow` predicts it per row from the scores. Both are open upstream bugs.

SGL_AOT_BUFFER = CandidateBuffer(
    kernel="sgl_kernel fast_topk / fast_topk_transform_fused / fast_topk_transform_ragged_fused",
    bits=8,
    capacity=4096,
    threshold_rank="k+1",
    source="sgl-kernel csrc/elementwise/topk.cu (moved to python/sglang/kernels/aot/csrc/"
           "elementwise/topk.cu): kSmem = 8 * 1024 * sizeof(uint32_t) since sglang PR #17747 "
           "(was 128KB), SMEM_INPUT_SIZE = kSmem / (2 * sizeof(int)) = 4096; stage 1 of "
           "fast_topk_cuda_tl stores a threshold-bin candidate only `if cpos < SMEM_INPUT_SIZE` "
           "and refines only the stored ones; the bin is convert_to_uint8 = __float2half_rn(x) "
           "ordered key >> 8",
)
SGL_AOT_BUG = ("sgl-project/sglang#36807 (open, fix PR #37893 open): fast_topk_v2 silently "
               "returns wrong top-k sets when the threshold bucket exceeds its 4096-entry buffer")

V2_JIT_BUFFER = CandidateBuffer(
    kernel="v2 JIT topk_transform_512_v2 (DeepSeek-V4 top-k v2, SGLANG_OPT_USE_TOPK_V2)",
    bits=12,
    capacity=2048,
    threshold_rank="k",
    source="sglang 0.5.17 kernels/jit/include/sgl_kernel/deepseek_v4/topk_impl.cuh:207 "
           "kMaxNumTie = 2048; :593, :673, :789 the collect pass keeps a threshold-bin tie only "
           "`if (count_eq < kMaxNumTie)`; :616, :688, :836 tie_count = min(equal_count, "
           "kMaxNumTie); :77-84 extract_coarse_bin (fp16 key); TopKRegister/TopKStreaming bin "
           "12 bits (:524 TopKRadixBase<12>), TopKCluster 10 bits (:699 TopKRadixBase<10>)",
)
V2_JIT_BUG = ("sgl-project/sglang#35257 (open): DSA top-k v2 tie-overflow selection is not exact, "
              "the collect pass keeps whichever kMaxNumTie candidates arrive first (v0.5.15-0.5.17)")

V2_NAN_FILLER_SOURCE = (
    "v2 JIT: extract_coarse_bin maps NaN above +inf, so the histogram ranks NaN first, but the "
    "collect pass compares `val >= v_hi` / `val >= v_lo` and never takes NaN; handle_tie then "
    "fills the slots left over with `problem.emit(base + t, base + t)` (position == output slot: "
    "a dereferenceable dummy, added by sglang PR #30512) -- 0.5.17 topk_impl.cuh:246-252, same "
    "at 0.5.23 topk_impl.cuh:229-232")

_V2_IMPL_HEADER = "kernels/jit/include/sgl_kernel/deepseek_v4/topk_impl.cuh"


@dataclass(frozen=True)
class KernelContract:
    """What one path's kernel guarantees beyond the common contract (`dsakit.topk.checks`).

    `buffer`: exact only while the threshold bin fits (`bits_per_row` where the key width depends
    on the dispatch); past it a `known_bug`. `nan_slot_filler`: NaN-cost slots hold position ==
    slot index (`V2_NAN_FILLER_SOURCE`)."""

    buffer: CandidateBuffer | None = None
    known_bug: str = ""
    bits_per_row: Callable[[TopkCase], list[int]] | None = None
    nan_slot_filler: bool = False


EXACT = KernelContract()


@dataclass(frozen=True)
class TopkPath:
    """One real top-k entry point. `run(case, device, monkeypatch)` returns row-local positions
    (rows, k) int tensor, -1 padded; `unsupported(case)` says why a case does not apply;
    `contract(case)` what the kernel it reaches for that case guarantees (release-dependent)."""

    path_id: str
    gates: tuple[str, ...]
    run: Callable[[TopkCase, str, pytest.MonkeyPatch], torch.Tensor]
    unsupported: Callable[[TopkCase], Reason | None]
    reference: bool = False  # the path whose result may write goldens
    device: str = "cuda"
    contract: Callable[[TopkCase], KernelContract] = lambda case: EXACT


# ---------------------------------------------------------------- SGLang, imported once


_SGL: dict[str, Any] = {}


def _sglang() -> SimpleNamespace:
    if not _SGL:
        from sglang.srt.layers.attention.dsa import dsa_topk_backend as mod

        _SGL["mod"] = mod
    mod = _SGL["mod"]
    return SimpleNamespace(Backend=mod.DSATopKBackend, Method=mod.TopkTransformMethod)


def _set_env(monkeypatch: pytest.MonkeyPatch, *, fuse: bool, v2: bool) -> None:
    # sglang.srt.environ's EnvField.get() re-reads os.environ on every call (no cache), so
    # monkeypatch.setenv is seen and undone even when the test raises. The deprecated alias is
    # removed because get() copies it into the new name when that is unset.
    monkeypatch.delenv("SGLANG_NSA_FUSE_TOPK", raising=False)
    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "1" if fuse else "0")
    monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "1" if v2 else "0")


def _inputs(case: TopkCase, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    validate_lengths(case.lengths, what=f"lengths of case {case.case_id}")
    return case.scores(device), case.lengths_tensor(device), case.row_starts_tensor(device)


def _from_slots(case: TopkCase, out: torch.Tensor, tables: Any) -> torch.Tensor:
    positions: torch.Tensor
    positions, problems = tables.slots_to_positions(out)
    if problems:
        # unknown slots stay visible to the validity check as -2 (out of range); say which
        import warnings

        warnings.warn(f"{case.case_id}: " + "; ".join(problems[:4]), stacklevel=2)
    return positions


def _from_ragged(case: TopkCase, out: torch.Tensor) -> torch.Tensor:
    import torch

    out = out.detach().to("cpu", torch.int64)
    offsets = torch.tensor(case.row_starts or (0,) * case.num_rows, dtype=torch.int64)[:, None]
    return torch.where(out == -1, out, out - offsets)


def _metadata(case: TopkCase, device: str, *, page_size_for_fold: int | None = None) -> Any:
    import torch

    tables = case.page_tables(device)
    rows = case.num_rows
    md = SimpleNamespace(
        page_table_1=tables.table_1,
        real_page_table=tables.table,
        page_size=case.page_size,
        token_to_batch_idx=None,
        cu_seqlens_k=None,
        topk_v2_plan=None,
    )
    if page_size_for_fold == 1:  # fold over the page_size-1 table itself
        md.real_page_table = tables.table_1
        md.page_size = 1
    cu_q = torch.arange(rows + 1, dtype=torch.int32, device=device)  # one row per "request" row
    return tables, md, cu_q


# ---------------------------------------------------------------- runners


def _run_topk_func(backend: str) -> Callable[[TopkCase, str, pytest.MonkeyPatch], torch.Tensor]:
    def run(case: TopkCase, device: str, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
        scores, lengths, starts = _inputs(case, device)
        sgl = _sglang()
        out: torch.Tensor = sgl.Backend(backend).topk_func(scores, lengths, case.k, row_starts=starts)
        return out.detach().cpu()

    return run


def _run_transform(backend: str, *, v2: bool) -> Callable[[TopkCase, str, pytest.MonkeyPatch], torch.Tensor]:
    def run(case: TopkCase, device: str, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
        import torch

        scores, lengths, starts = _inputs(case, device)
        sgl = _sglang()
        _set_env(monkeypatch, fuse=True, v2=v2)
        tables, md, cu_q = _metadata(case, device)
        be = sgl.Backend(backend)
        if case.ragged:
            out = be.topk_transform(scores.clone(), lengths, case.k, sgl.Method.RAGGED, md,
                                    cu_seqlens_q_topk=cu_q, topk_indices_offset=starts,
                                    row_starts=starts)
            return _from_ragged(case, out)
        if v2:
            from sglang.kernels.ops.attention.dsv4.topk import plan_topk_v2

            md.topk_v2_plan = plan_topk_v2(lengths.to(torch.int32))
        out = be.topk_transform(scores, lengths, case.k, sgl.Method.PAGED, md, cu_seqlens_q_topk=cu_q)
        return _from_slots(case, out, tables)

    return run


def run_v2_fold(case: TopkCase, device: str, monkeypatch: pytest.MonkeyPatch, *,
                page_size: int) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """The v2 JIT fold through `DSATopKBackend.SGL_KERNEL.topk_transform` (PAGED, v2 on) with the
    case's physical table (`page_size` = case's) or its page_size-1 table (`page_size` = 1).
    Returns (raw slots, positions, tables)."""
    import torch

    scores, lengths, _ = _inputs(case, device)
    sgl = _sglang()
    _set_env(monkeypatch, fuse=True, v2=True)
    tables, md, cu_q = _metadata(case, device, page_size_for_fold=page_size if page_size == 1 else None)
    from sglang.kernels.ops.attention.dsv4.topk import plan_topk_v2

    lengths = lengths.to(torch.int32)
    md.topk_v2_plan = plan_topk_v2(lengths)
    md.page_table_1 = None  # the fold must not need it; the legacy path would assert on None
    out = sgl.Backend.SGL_KERNEL.topk_transform(scores, lengths, case.k, sgl.Method.PAGED, md)
    slots = out.detach().cpu()
    return slots, _from_slots(case, slots, tables), tables


def _run_v2_fold(page_size_1: bool) -> Callable[[TopkCase, str, pytest.MonkeyPatch], torch.Tensor]:
    def run(case: TopkCase, device: str, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
        return run_v2_fold(case, device, monkeypatch, page_size=1 if page_size_1 else case.page_size)[1]

    return run


# ---------------------------------------------------------------- applicability (reasons as data)


def _only_2048(name: str) -> Callable[[TopkCase], Reason | None]:
    def check(case: TopkCase) -> Reason | None:
        if case.k != 2048:
            return Reason("topk-k-unsupported",
                          f"{name} asserts topk == 2048 (DeepSeek V3.2; sgl_kernel/top_k.py, the "
                          f"kernel's TopK is a constexpr 2048); the torch, flashinfer and v2 JIT "
                          f"paths cover k={case.k}")
        return None

    return check


def _paged_only(inner: Callable[[TopkCase], Reason | None] | None = None) -> Callable[[TopkCase], Reason | None]:
    def check(case: TopkCase) -> Reason | None:
        if case.ragged:
            return Reason("topk-layout", "a PAGED transform takes decode-shaped rows; the RAGGED "
                          "path covers the packed extend layout")
        return inner(case) if inner else None

    return check


def _ragged_only(inner: Callable[[TopkCase], Reason | None] | None = None) -> Callable[[TopkCase], Reason | None]:
    def check(case: TopkCase) -> Reason | None:
        if not case.ragged:
            return Reason("topk-layout", "a RAGGED transform takes the packed extend layout; the "
                          "PAGED path covers decode-shaped rows")
        return inner(case) if inner else None

    return check


def _chain(*checks: Callable[[TopkCase], Reason | None]) -> Callable[[TopkCase], Reason | None]:
    def check(case: TopkCase) -> Reason | None:
        for c in checks:
            reason = c(case)
            if reason is not None:
                return reason
        return None

    return check


def _v2_ragged_or_2048(case: TopkCase) -> Reason | None:
    # 0.5.23 routes RAGGED to the v2 JIT (any k <= 2048); 0.5.17 has no v2 ragged entry and falls
    # back to sgl_kernel's fused ragged kernel, which asserts topk == 2048 (feature probe, no import)
    from dsakit.sglang_release import DSA_TOPK_BACKEND_FILE, installed_release

    if case.k == 2048 or installed_release().defines(DSA_TOPK_BACKEND_FILE, "_topk_transform_v2_ragged"):
        return None
    return Reason("topk-k-unsupported", "this SGLang's DSATopKBackend.topk_transform has no v2 "
                  "RAGGED branch (no _topk_transform_v2_ragged in srt/layers/attention/dsa/"
                  "dsa_topk_backend.py; 0.5.17 routes only decode-shaped PAGED rows to v2, lines "
                  "105-115), so RAGGED with SGLANG_OPT_USE_TOPK_V2=1 reaches sgl_kernel."
                  "fast_topk_transform_ragged_fused (0.5.17 line 148), whose wrapper asserts topk == "
                  "2048 (sgl_kernel/top_k.py:141-143, sglang-kernel 0.4.5); SGLang 0.5.23 adds the "
                  f"v2 RAGGED entry (any k <= 2048); flashinfer and torch cover k={case.k} here")


def _any(case: TopkCase) -> Reason | None:
    return None


# ---------------------------------------------------------------- contracts per path


def _v2_refines_overflow() -> bool:
    """SGLang 0.5.23's v2 JIT re-stages an overflowing threshold bin exactly (refine_ties) on its
    register/streaming paths; 0.5.17's does not (probe of the installed JIT header, no import)."""
    from dsakit.sglang_release import installed_release

    try:
        return "refine_ties" in installed_release().file(_V2_IMPL_HEADER).read_text(encoding="utf-8")
    except OSError:
        return False


def _v2_key_bits(case: TopkCase) -> list[int]:
    """Key width per row under 0.5.17's host dispatch (topk_v2.cuh:415-459, :204-236, :163-202,
    plan :239-319): 10 bits for rows the cluster path takes, 12 for register/streaming rows."""
    batch, width = case.num_rows, case.width
    floor = 32768 if batch <= 15 else 65536  # kClusterFloorSmall / kClusterFloor
    if not (width > floor and batch <= 512):  # use_cluster reads max_seq_len = the score width
        return [12] * batch
    if batch <= 30:  # topk_small_batch_kernel: seq_len > cluster_floor -> Cluster
        return [10 if n > floor else 12 for n in case.lengths]
    counts = [0] * 6  # topk_plan: lower the threshold while few enough rows exceed it
    candidates = ((65536, 30), (98304, 48), (131072, 60), (196608, 80), (262144, 112), (393216, 128))
    for n in case.lengths:
        c = sum(n > t for t, _ in candidates)
        if c:
            counts[c - 1] += 1
    chosen, accum = candidates[-1][0], 0
    for j in range(len(candidates) - 1, -1, -1):
        accum += counts[j]
        if accum > candidates[j][1]:
            break
        chosen = candidates[j][0]
    threshold = max(chosen, 65536)
    return [10 if n > threshold else 12 for n in case.lengths]


def _sgl_aot_contract(case: TopkCase) -> KernelContract:
    return KernelContract(buffer=SGL_AOT_BUFFER, known_bug=SGL_AOT_BUG)


def _v2_fold_contract(case: TopkCase) -> KernelContract:
    if _v2_refines_overflow():
        # register/streaming rows refine exactly; 0.5.23's cluster path still truncates
        # (its topk_impl.cuh says so) but its dispatch is not modelled: a mis-selection there
        # fails unmarked rather than being predicted wrongly
        return KernelContract(nan_slot_filler=True)
    return KernelContract(buffer=V2_JIT_BUFFER, known_bug=V2_JIT_BUG, bits_per_row=_v2_key_bits,
                          nan_slot_filler=True)


def _v2_ragged_contract(case: TopkCase) -> KernelContract:
    from dsakit.sglang_release import DSA_TOPK_BACKEND_FILE, installed_release

    if installed_release().defines(DSA_TOPK_BACKEND_FILE, "_topk_transform_v2_ragged"):
        return KernelContract(nan_slot_filler=True) if _v2_refines_overflow() else KernelContract(
            buffer=V2_JIT_BUFFER, known_bug=V2_JIT_BUG, nan_slot_filler=True)
    return _sgl_aot_contract(case)  # no v2 RAGGED entry: the legacy fused ragged kernel runs


def known_kernel_bug(path: TopkPath, case: TopkCase) -> tuple[Reason, list[BinOverflow]] | None:
    """Why `path` may mis-select `case` by a known, sourced kernel bug (and the rows), or None
    when the kernel's exact contract applies to every row."""
    contract = path.contract(case)
    if contract.buffer is None:
        return None
    bits = contract.bits_per_row(case) if contract.bits_per_row else None
    rows = candidate_overflow(contract.buffer, case.scores("cpu"), case.lengths, case.k,
                              row_starts=case.row_starts, bits_per_row=bits)
    if not rows:
        return None
    buf = contract.buffer
    shown = "; ".join(r.describe() for r in rows[:3]) + (f"; +{len(rows) - 3} rows" if len(rows) > 3 else "")
    return Reason(
        "topk-known-kernel-bug",
        f"known kernel bug: {buf.kernel} keeps at most {buf.capacity} candidates of the threshold "
        f"bin and refines only those, so it is exact only while that bin fits ({buf.source}); "
        f"{shown}. Upstream: {contract.known_bug}. The selection is still checked at the "
        f"kernel's bin precision; torch and flashinfer cover the exact contract for this case"), rows


SGL = ("cuda", "module:sgl_kernel")
FI = ("cuda", "module:flashinfer")
V2 = ("cuda", "module:sgl_kernel", "sglang:topk-v2-fold", "jit:tvm-ffi-nvcc")

TOPK_PATHS: dict[str, TopkPath] = {
    p.path_id: p
    for p in (
        TopkPath("torch.topk_func", (), _run_topk_func("torch"), _any, reference=True, device="cpu"),
        TopkPath("sgl-kernel.topk_func", SGL, _run_topk_func("sgl-kernel"),
                 _only_2048("sgl_kernel.fast_topk_v2"), contract=_sgl_aot_contract),
        TopkPath("flashinfer.topk_func", FI, _run_topk_func("flashinfer"), _any),
        TopkPath("sgl-kernel.transform-paged", SGL, _run_transform("sgl-kernel", v2=False),
                 _paged_only(_only_2048("sgl_kernel.fast_topk_transform_fused")),
                 contract=_sgl_aot_contract),
        TopkPath("sgl-kernel.transform-ragged", SGL, _run_transform("sgl-kernel", v2=False),
                 _ragged_only(_only_2048("sgl_kernel.fast_topk_transform_ragged_fused")),
                 contract=_sgl_aot_contract),
        TopkPath("flashinfer.transform-paged", FI, _run_transform("flashinfer", v2=False), _paged_only()),
        TopkPath("flashinfer.transform-ragged", FI, _run_transform("flashinfer", v2=False), _ragged_only()),
        # v2 on: PAGED decode-shaped rows go to the v2 JIT fold; RAGGED goes to the v2 ragged entry
        # where the release has one (0.5.23) and to the legacy fused kernel otherwise (0.5.17)
        TopkPath("sgl-kernel.transform-ragged.v2", V2, _run_transform("sgl-kernel", v2=True),
                 _ragged_only(_v2_ragged_or_2048), contract=_v2_ragged_contract),
        TopkPath("v2-fold.paged", V2, _run_v2_fold(page_size_1=False), _paged_only(),
                 contract=_v2_fold_contract),
        TopkPath("v2-fold.paged-ps1-table", V2, _run_v2_fold(page_size_1=True), _paged_only(),
                 contract=_v2_fold_contract),
    )
}


def path_gates(path: TopkPath, case: TopkCase) -> tuple[str, ...]:
    """Gates of one (path, case): the path's, plus clusters for the v2 fold on long rows."""
    gates = path.gates
    if "sglang:topk-v2-fold" in gates and max(case.lengths) >= 1 << 16:
        gates = gates + ("topk-v2-cluster",)
    return gates
