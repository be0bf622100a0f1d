"""THE top-k backend table: one `TopkBackend` record per SGLang DSA top-k backend (`--dsa-topk-backend`).

Owns everything dsakit knows of a backend: its SGLang value, kernel library and gates, whether
SGLang's fused transform and the v2 JIT take it, and its real entry points (`EntryPoint`: the kernel
each reaches, the cases it takes, what it guarantees, its known upstream bugs, the JIT build
`dsakit warm` makes for it). The launch paths (`dsakit.topk.launch`), the matrix's gates, the
resolution oracle (`dsakit.topk.rules`), the warm targets, the CLI help and the contract suites
derive from it; a backend SGLang offers without a record is an error naming the known ones
(`topk_backend`), never a default. Must not import torch or SGLang (release facts through
`dsakit.stack.sglang_release`, read without an import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dsakit.errors import UsageError
from dsakit.reasons import Reason
from dsakit.stack.kernel_libraries import KernelLibrary, kernel_library
from dsakit.topk.checks import CandidateBuffer

if TYPE_CHECKING:
    from dsakit.topk.cases import TopkCase


# ---------------------------------------------------------------- what each kernel guarantees

# No length limit was found in either kernel: sgl-kernel's topk.cu indexes rows with int
# (`for (int idx = tx; idx < length; ...)`), the v2 JIT with uint32 and a cluster path built for
# DeepSeek-V4's 1M-token context. What bounds exactness is the threshold-bin candidate buffer,
# a property of the scores (how many share the coarse fp16 bin at the top-k boundary), not of the
# length; `checks.candidate_overflow` predicts it per row from the scores. Both are open upstream bugs.

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

# rows this long take the v2 JIT's cluster path, which has its own gate (`topk-v2-cluster`)
V2_CLUSTER_LENGTH = 1 << 16


@dataclass(frozen=True)
class KernelContract:
    """What one entry point's kernel guarantees beyond the common contract (`dsakit.topk.checks`).

    `buffer`: exact only while the threshold bin fits (`bits_per_row` where the key width depends
    on the dispatch); past it a `known_bug`. `nan_slot_filler`: NaN-cost slots hold position ==
    slot index (`V2_NAN_FILLER_SOURCE`)."""

    buffer: CandidateBuffer | None = None
    known_bug: str = ""
    bits_per_row: Callable[[TopkCase], list[int]] | None = None
    nan_slot_filler: bool = False


EXACT = KernelContract()


def _exact(case: TopkCase) -> KernelContract:
    return EXACT


def _v2_refines_overflow() -> bool:
    """SGLang 0.5.23's v2 JIT re-stages an overflowing threshold bin exactly (refine_ties) on its
    register/streaming paths; 0.5.17's does not (probe of the installed JIT header, no import)."""
    from dsakit.stack.sglang_release import installed_release

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


def _has_v2_ragged_entry() -> bool:
    """0.5.23 routes RAGGED to the v2 JIT (any k <= 2048); 0.5.17 has no v2 ragged entry (a
    source probe of the installed SGLang, no import)."""
    from dsakit.stack.sglang_release import DSA_TOPK_BACKEND_FILE, installed_release

    return installed_release().defines(DSA_TOPK_BACKEND_FILE, "_topk_transform_v2_ragged")


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
    if _has_v2_ragged_entry():
        return KernelContract(nan_slot_filler=True) if _v2_refines_overflow() else KernelContract(
            buffer=V2_JIT_BUFFER, known_bug=V2_JIT_BUG, nan_slot_filler=True)
    return _sgl_aot_contract(case)  # no v2 RAGGED entry: the legacy fused ragged kernel runs


# ---------------------------------------------------------------- which cases an entry point takes


def _v2_ragged_or_2048(case: TopkCase) -> Reason | None:
    # without a v2 ragged entry (0.5.17), RAGGED with v2 on falls back to sgl_kernel's fused
    # ragged kernel, which asserts topk == 2048
    if case.k == 2048 or _has_v2_ragged_entry():
        return None
    return Reason("topk-k-unsupported", "this SGLang's DSATopKBackend.topk_transform has no v2 "
                  "RAGGED branch (no _topk_transform_v2_ragged in srt/layers/attention/dsa/"
                  "dsa_topk_backend.py; 0.5.17 routes only decode-shaped PAGED rows to v2, lines "
                  "105-115), so RAGGED with SGLANG_OPT_USE_TOPK_V2=1 reaches sgl_kernel."
                  "fast_topk_transform_ragged_fused (0.5.17 line 148), whose wrapper asserts topk == "
                  "2048 (sgl_kernel/top_k.py:141-143, sglang-kernel 0.4.5); SGLang 0.5.23 adds the "
                  f"v2 RAGGED entry (any k <= 2048); flashinfer and torch cover k={case.k} here")


Layout = Literal["any", "paged", "ragged"]
Call = Literal["topk_func", "transform", "v2-fold"]


@dataclass(frozen=True)
class TopkJit:
    """A JIT build that some entry points need before their first launch: one `dsakit warm` target."""

    name: str
    description: str
    caches: tuple[str, ...]  # names of `dsakit.warm.jit_caches.cache_roots()` the build writes
    implied_by: str  # the gate code whose tests need it when they carry no dsakit_jit marker


@dataclass(frozen=True)
class EntryPoint:
    """One real SGLang top-k entry point of a backend (one launch path of `dsakit.topk.launch`).

    call      topk_func: `DSATopKBackend(value).topk_func`; transform: `.topk_transform` (fused);
              v2-fold: the v2 JIT's page-table fold through `SGL_KERNEL.topk_transform`
    kernel    what it reaches, as SGLang's source names it (reasons name it)
    layout    the score layout it takes (a PAGED transform: decode-shaped rows; RAGGED: packed)
    v2        with SGLANG_OPT_USE_TOPK_V2 on (the backend's `v2_gates` apply too)
    asserts_k the only k its kernel accepts (the wrapper asserts it)
    precondition  a release-dependent reason it does not take a case (None: it takes it)
    contract  what its kernel guarantees for a case (release-dependent); `known_bugs` are the
              upstream bugs that contract can name
    jit       the JIT build it needs first (`dsakit warm`)
    reference the path whose own selection may write goldens
    cuda_graph_replay  checked for a poisoned-output CUDA-graph replay by the selection suite
    """

    path_id: str
    call: Call
    kernel: str
    layout: Layout = "any"
    v2: bool = False
    page_size_1_table: bool = False  # v2-fold: fold over the case's page_size-1 table
    asserts_k: int | None = None
    precondition: Callable[[TopkCase], Reason | None] | None = None
    contract: Callable[[TopkCase], KernelContract] = _exact
    known_bugs: tuple[str, ...] = ()
    jit: TopkJit | None = None
    reference: bool = False
    cuda_graph_replay: bool = False

    def unsupported(self, case: TopkCase) -> Reason | None:
        """Why this entry point does not take `case` (a Reason with a stable code), or None."""
        if self.layout == "paged" and case.ragged:
            return Reason("topk-layout", "a PAGED transform takes decode-shaped rows; the RAGGED "
                          "path covers the packed extend layout")
        if self.layout == "ragged" and not case.ragged:
            return Reason("topk-layout", "a RAGGED transform takes the packed extend layout; the "
                          "PAGED path covers decode-shaped rows")
        if self.asserts_k is not None and case.k != self.asserts_k:
            return Reason("topk-k-unsupported",
                          f"{self.kernel} asserts topk == {self.asserts_k} (DeepSeek V3.2; sgl_kernel/top_k.py, "
                          f"the kernel's TopK is a constexpr {self.asserts_k}); the torch, flashinfer and v2 JIT "
                          f"paths cover k={case.k}")
        return self.precondition(case) if self.precondition is not None else None


@dataclass(frozen=True)
class TopkBackend:
    """One SGLang DSA top-k backend.

    value        its `DSATopKBackend` value, a `--dsa-topk-backend` choice
    library      the import name of its kernel library, a `KernelLibrary` record's (dsakit.stack.kernel_libraries;
                 None: torch itself)
    gates        what any launch of it needs (gate codes of `dsakit.gates.table`)
    entry_points its real entry points, each one launch path
    fused        False where SGLang's fused transform refuses it (SGLANG_DSA_FUSE_TOPK must be false)
    v2_gates     None where SGLANG_OPT_USE_TOPK_V2 does not apply to it (`should_use_topk_v2`);
                 else what its v2 JIT entry points need beyond `gates`
    runs_on_cpu  its launches run without a GPU (selections then run where CUDA is, else on CPU)
    """

    value: str
    library: str | None
    gates: tuple[str, ...]
    entry_points: tuple[EntryPoint, ...]
    fused: bool = True
    v2_gates: tuple[str, ...] | None = None
    runs_on_cpu: bool = False

    @property
    def kernel_library(self) -> KernelLibrary | None:
        """The record `library` names (UsageError where it names none)."""
        return None if self.library is None else kernel_library(self.library)

    @property
    def takes_v2(self) -> bool:
        return self.v2_gates is not None

    def gates_of(self, entry: EntryPoint) -> tuple[str, ...]:
        """The gates one of its entry points needs."""
        return self.gates + ((self.v2_gates or ()) if entry.v2 else ())

    def entry(self, call: Call, *, v2: bool = False) -> EntryPoint | None:
        """Its first entry point of `call` (v2 or not), if it has one."""
        return next((e for e in self.entry_points if e.call == call and e.v2 == v2), None)

    @property
    def quirks(self) -> tuple[str, ...]:
        """What SGLang does with it that a test must know: its known upstream bugs, the flags it refuses."""
        notes = [] if self.fused else ["SGLang's fused transform refuses it: SGLANG_DSA_FUSE_TOPK must be false"]
        for entry in self.entry_points:
            notes += [bug for bug in entry.known_bugs if bug not in notes]
        return tuple(notes)


FLASHINFER_JIT = TopkJit(
    "flashinfer-topk",
    "flashinfer.top_k and its fused page-table transforms (first call JIT-compiles, ~2-3 min cold on an H200)",
    ("flashinfer", "tvm-ffi"),
    "module:flashinfer",
)
TOPK_V2_JIT = TopkJit(
    "sglang-topk-v2",
    "SGLang's fused top-k v2 JIT (sglang.kernels.ops.attention.dsv4.topk: topk_transform_512_v2 + "
    "plan_topk_v2 in 0.5.17, topk_transform_paged_v2 in 0.5.23)",
    ("sglang-jit", "tvm-ffi"),
    "sglang:topk-v2-fold",
)

# torch first: its topk_func is the reference path, whose selection writes the goldens
TOPK_BACKENDS: dict[str, TopkBackend] = {
    b.value: b
    for b in (
        TopkBackend(
            "torch", None, (),
            (EntryPoint("torch.topk_func", "topk_func", "torch.topk", reference=True, cuda_graph_replay=True),),
            fused=False, runs_on_cpu=True,
        ),
        TopkBackend(
            "sgl-kernel", "sgl_kernel", ("cuda", "module:sgl_kernel"),
            (
                EntryPoint("sgl-kernel.topk_func", "topk_func", "sgl_kernel.fast_topk_v2", asserts_k=2048,
                           contract=_sgl_aot_contract, known_bugs=(SGL_AOT_BUG,), cuda_graph_replay=True),
                EntryPoint("sgl-kernel.transform-paged", "transform", "sgl_kernel.fast_topk_transform_fused",
                           layout="paged", asserts_k=2048, contract=_sgl_aot_contract, known_bugs=(SGL_AOT_BUG,)),
                EntryPoint("sgl-kernel.transform-ragged", "transform", "sgl_kernel.fast_topk_transform_ragged_fused",
                           layout="ragged", asserts_k=2048, contract=_sgl_aot_contract, known_bugs=(SGL_AOT_BUG,)),
                # v2 on: PAGED decode-shaped rows go to the v2 JIT's page-table fold
                EntryPoint("v2-fold.paged", "v2-fold", "the v2 JIT's page-table fold (_topk_transform_v2_paged)",
                           layout="paged", v2=True, contract=_v2_fold_contract, known_bugs=(V2_JIT_BUG,),
                           jit=TOPK_V2_JIT, cuda_graph_replay=True),
                EntryPoint("v2-fold.paged-ps1-table", "v2-fold",
                           "the v2 JIT's page-table fold over the page_size-1 table", layout="paged", v2=True,
                           page_size_1_table=True, contract=_v2_fold_contract, known_bugs=(V2_JIT_BUG,),
                           jit=TOPK_V2_JIT),
                # v2 on, RAGGED: the v2 ragged entry where the release has one (0.5.23), the legacy
                # fused kernel otherwise (0.5.17)
                EntryPoint("sgl-kernel.transform-ragged.v2", "transform",
                           "the v2 JIT's ragged entry (_topk_transform_v2_ragged)", layout="ragged", v2=True,
                           precondition=_v2_ragged_or_2048, contract=_v2_ragged_contract,
                           known_bugs=(V2_JIT_BUG, SGL_AOT_BUG), jit=TOPK_V2_JIT),
            ),
            v2_gates=("sglang:topk-v2-fold", "jit:tvm-ffi-nvcc"),
        ),
        TopkBackend(
            "flashinfer", "flashinfer", ("cuda", "module:flashinfer"),
            (
                EntryPoint("flashinfer.topk_func", "topk_func", "flashinfer.top_k", jit=FLASHINFER_JIT,
                           cuda_graph_replay=True),
                EntryPoint("flashinfer.transform-paged", "transform", "flashinfer.top_k_page_table_transform",
                           layout="paged", jit=FLASHINFER_JIT),
                EntryPoint("flashinfer.transform-ragged", "transform", "flashinfer.top_k_ragged_transform",
                           layout="ragged", jit=FLASHINFER_JIT),
            ),
        ),
    )
}


def topk_backend(value: str) -> TopkBackend:
    """The record of SGLang's top-k backend `value`; UsageError naming it and the known ones when
    dsakit has none (a backend a newer SGLang added: CONTRIBUTING.md, "Adding a top-k backend")."""
    record = TOPK_BACKENDS.get(value)
    if record is None:
        raise UsageError(
            f"SGLang top-k backend {value!r} has no dsakit TopkBackend record (dsakit/topk/backends.py), so "
            f"its gates, launch paths and rules are unknown; known: {', '.join(TOPK_BACKENDS)}")
    return record


def entry_points() -> Iterator[tuple[TopkBackend, EntryPoint]]:
    """Every (backend, entry point), in table order."""
    for backend in TOPK_BACKENDS.values():
        for entry in backend.entry_points:
            yield backend, entry


def jit_builds() -> dict[TopkJit, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each JIT build the entry points need: (the gates its entry points need, their path ids)."""
    builds: dict[TopkJit, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for backend, entry in entry_points():
        if entry.jit is not None:
            gates, paths = builds.get(entry.jit, ((), ()))
            builds[entry.jit] = (tuple(dict.fromkeys(gates + backend.gates_of(entry))), paths + (entry.path_id,))
    return builds
