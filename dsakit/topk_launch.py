"""Driving a `TopkCase` through the real SGLang top-k entry points, one named *path* each.

Owns: the path catalogue (`TOPK_PATHS`: which real call, which gates, which cases it cannot take
and why, as `Reason`s), `validate_lengths` (the refusal of negative lengths before any launch),
the env flags a path needs (restored by the caller's monkeypatch), and mapping each path's output
back to row-local positions so every path is compared in the same terms. Must not decide what a
correct selection is (that is `dsakit.topk_compare`); imports torch and SGLang lazily, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from dsakit.errors import UsageError
from dsakit.reasons import Reason

if TYPE_CHECKING:
    import pytest
    import torch

    from dsakit.topk_cases import TopkCase


def validate_lengths(lengths: Any, *, what: str = "lengths") -> None:
    """Refuse negative row lengths before any kernel sees them.

    The fused top-k kernels read lengths as uint32: a padded row carrying -1 or -4 becomes a
    ~4e9-token row and illegal-addresses (the MTP CUDA-graph crash). Padded rows carry 0.
    """
    import torch

    values = torch.as_tensor(lengths).detach().to("cpu", torch.int64).flatten()
    bad = torch.nonzero(values < 0).flatten().tolist()
    if bad:
        shown = ", ".join(f"row {r} = {int(values[r])}" for r in bad[:8])
        more = f" (and {len(bad) - 8} more)" if len(bad) > 8 else ""
        raise UsageError(
            f"negative top-k {what}: {shown}{more}. Padded rows (CUDA-graph / DP padding, "
            f"idle MTP companions) must carry length 0, which selects nothing and returns all -1; "
            f"the kernels read lengths as uint32, so a negative length becomes a ~4e9-token row "
            f"and illegal-addresses. Clamp the lengths to 0 before the top-k call.")


@dataclass(frozen=True)
class TopkPath:
    """One real top-k entry point. `run(case, device, monkeypatch)` returns row-local positions
    (rows, k) int tensor, -1 padded; `unsupported(case)` says why a case does not apply."""

    path_id: str
    gates: tuple[str, ...]
    run: Callable[[TopkCase, str, pytest.MonkeyPatch], torch.Tensor]
    unsupported: Callable[[TopkCase], Reason | None]
    reference: bool = False  # the path whose result may write goldens
    device: str = "cuda"


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
        out = sgl.Backend(backend).topk_func(scores, lengths, case.k, row_starts=starts)
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
                          f"{name} asserts topk == 2048 (DeepSeek V3.2); the torch, flashinfer "
                          f"and v2 JIT paths cover k={case.k}")
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
    return Reason("topk-k-unsupported", "this SGLang has no v2 RAGGED entry, so RAGGED falls back to "
                  "sgl_kernel.fast_topk_transform_ragged_fused, which asserts topk == 2048; the "
                  f"flashinfer and torch paths cover k={case.k}")


def _any(case: TopkCase) -> Reason | None:
    return None


SGL = ("cuda", "module:sgl_kernel")
FI = ("cuda", "module:flashinfer")
V2 = ("cuda", "module:sgl_kernel", "sglang:topk-v2-fold", "jit:tvm-ffi-nvcc")

TOPK_PATHS: dict[str, TopkPath] = {
    p.path_id: p
    for p in (
        TopkPath("torch.topk_func", (), _run_topk_func("torch"), _any, reference=True, device="cpu"),
        TopkPath("sgl-kernel.topk_func", SGL, _run_topk_func("sgl-kernel"),
                 _only_2048("sgl_kernel.fast_topk_v2")),
        TopkPath("flashinfer.topk_func", FI, _run_topk_func("flashinfer"), _any),
        TopkPath("sgl-kernel.transform-paged", SGL, _run_transform("sgl-kernel", v2=False),
                 _paged_only(_only_2048("sgl_kernel.fast_topk_transform_fused"))),
        TopkPath("sgl-kernel.transform-ragged", SGL, _run_transform("sgl-kernel", v2=False),
                 _ragged_only(_only_2048("sgl_kernel.fast_topk_transform_ragged_fused"))),
        TopkPath("flashinfer.transform-paged", FI, _run_transform("flashinfer", v2=False), _paged_only()),
        TopkPath("flashinfer.transform-ragged", FI, _run_transform("flashinfer", v2=False), _ragged_only()),
        # v2 on: PAGED decode-shaped rows go to the v2 JIT fold; RAGGED goes to the v2 ragged entry
        # where the release has one (0.5.23) and to the legacy fused kernel otherwise (0.5.17)
        TopkPath("sgl-kernel.transform-ragged.v2", V2, _run_transform("sgl-kernel", v2=True),
                 _ragged_only(_v2_ragged_or_2048)),
        TopkPath("v2-fold.paged", V2, _run_v2_fold(page_size_1=False), _paged_only()),
        TopkPath("v2-fold.paged-ps1-table", V2, _run_v2_fold(page_size_1=True), _paged_only()),
    )
}


def path_gates(path: TopkPath, case: TopkCase) -> tuple[str, ...]:
    """Gates of one (path, case): the path's, plus clusters for the v2 fold on long rows."""
    gates = path.gates
    if "sglang:topk-v2-fold" in gates and max(case.lengths) >= 1 << 16:
        gates = gates + ("topk-v2-cluster",)
    return gates
