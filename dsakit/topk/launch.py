"""The one route from a `TopkCase` to the real SGLang top-k entry points, one named *path* each.

Owns: `TOPK_PATHS` (one per entry point of the backend table, `dsakit.topk.backends`, with the real
call), refusing bad lengths before any launch (through `checks.validate_lengths`), mapping each
output back to row-local positions, and naming a known kernel bug a case meets. Must not decide
correctness (`dsakit.topk.checks`, `dsakit.topk.reference`) nor hold a backend's facts (its record
does); imports torch and SGLang lazily, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from dsakit.reasons import Reason
from dsakit.topk.backends import (V2_CLUSTER_LENGTH, EntryPoint, KernelContract, TopkBackend, entry_points,
                                  topk_backend)
from dsakit.topk.checks import BinOverflow, candidate_overflow, validate_lengths

if TYPE_CHECKING:
    import pytest
    import torch

    from dsakit.topk.cases import TopkCase


@dataclass(frozen=True)
class TopkPath:
    """One real top-k entry point, launchable: its backend's record, the entry point's record
    (`dsakit.topk.backends`) and `run(case, device, monkeypatch)`, which returns row-local positions
    (rows, k) int tensor, -1 padded."""

    backend: TopkBackend
    entry: EntryPoint
    run: Callable[[TopkCase, str, pytest.MonkeyPatch], torch.Tensor]

    @property
    def path_id(self) -> str:
        return self.entry.path_id

    @property
    def gates(self) -> tuple[str, ...]:
        return self.backend.gates_of(self.entry)

    @property
    def reference(self) -> bool:  # the path whose result may write goldens
        return self.entry.reference

    @property
    def device(self) -> str:
        return "cpu" if self.backend.runs_on_cpu else "cuda"

    def unsupported(self, case: TopkCase) -> Reason | None:
        """Why the case does not apply to this entry point (None: it does)."""
        return self.entry.unsupported(case)

    def contract(self, case: TopkCase) -> KernelContract:
        """What the kernel this entry point reaches for `case` guarantees (release-dependent)."""
        return self.entry.contract(case)


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


Runner = Callable[["TopkCase", str, "pytest.MonkeyPatch"], "torch.Tensor"]


def _runner(backend: TopkBackend, entry: EntryPoint) -> Runner:
    if entry.call == "topk_func":
        return _run_topk_func(backend.value)
    if entry.call == "transform":
        return _run_transform(backend.value, v2=entry.v2)
    return _run_v2_fold(page_size_1=entry.page_size_1_table)


# one launch path per entry point of the backend table, in its order
TOPK_PATHS: dict[str, TopkPath] = {
    entry.path_id: TopkPath(backend, entry, _runner(backend, entry)) for backend, entry in entry_points()
}


def topk_func_path(backend: str) -> TopkPath | None:
    """The `topk_func` launch path of SGLang's top-k backend `backend` (UsageError: no record)."""
    entry = topk_backend(backend).entry("topk_func")
    return TOPK_PATHS[entry.path_id] if entry is not None else None


def path_gates(path: TopkPath, case: TopkCase) -> tuple[str, ...]:
    """Gates of one (path, case): the path's, plus clusters for the v2 JIT on long rows."""
    gates = path.gates
    if path.entry.v2 and max(case.lengths) >= V2_CLUSTER_LENGTH:
        gates = gates + ("topk-v2-cluster",)
    return gates
