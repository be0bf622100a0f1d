"""The arch-only kernel table's real rows (issue 45 item 2): per device of the device table, which
kernel families of dsakit/simulation/kernel_archs.py run for real, are refused or are absent,
written out here as data and compared with what `kernel_archs` answers. A row that lists the
SM 10.x families for sm90 too, or drops sm103 from one, fails here.

Reviewed against each library's own arch list:
- trtllm-gen: flashinfer ships the TensorRT-LLM-Gen cubins for SM 10.x only and JIT-builds with
  sm100a / sm103a flags (flashinfer/jit/core.py `sm100a_nvcc_flags`, `sm103a_nvcc_flags`); an
  sm_100a cubin is arch-locked, so SM 10.3 needs its own, which the wheels carry.
- sm100-jit: tcgen05 / TMEM instructions exist on SM 10.x only (flashinfer's and SGLang's JIT
  refuse other archs).
- cutlass-mla-sm100: sgl-kernel's sm100 ops (its CUTLASS MLA decode) are built for SM 10.x only.
- sm100-gluon: SGLang's swap-AB decode (decode_attention_sm100.swapab_attention) runs its Gluon
  split-KV kernel over tcgen05 / TMEM, SM 10.x only; gfx950 passes its own kernel (swapab_gluon_hip).
- deep-gemm-fp4: DeepGEMM's FP8xFP4 kernels use SM 10.x FP4 tensor-core instructions; its SM 9.0
  kernels are FP8 only.
- fa3: sgl-kernel builds FA3 for sm80 / sm86 / sm89 / sm90a (SGLang's `_is_fa3_supported`:
  major 8 or 9); of the device table only sm90. Not SM 10.x or 12.x.
- aiter: AMD's AITER targets gfx942 / gfx950 (MI300 / MI350); not gfx90a (MI250).
Not in the table (a finding of this review, for issue 45): FlashMLA builds sm_90a and sm_100f
(FlashMLA's setup.py `get_arch_flags`), so a FlashMLA call under simulated sm120 on an H200 runs.
"""

from __future__ import annotations

import pytest

from dsakit.devices import DEVICES
from dsakit.simulation.kernel_archs import ARCH_ONLY, Verdict

# the kernel families with an image for each device (the reviewed rows)
IMAGES: dict[str, frozenset[str]] = {
    "sm90": frozenset({"fa3"}),
    "sm100": frozenset({"trtllm-gen", "sm100-jit", "cutlass-mla-sm100", "sm100-gluon", "deep-gemm-fp4"}),
    "sm103": frozenset({"trtllm-gen", "sm100-jit", "cutlass-mla-sm100", "sm100-gluon", "deep-gemm-fp4"}),
    "sm120": frozenset(),
    "gfx90a": frozenset(),
    "gfx942": frozenset({"aiter"}),
    "gfx950": frozenset({"aiter"}),
    "cpu": frozenset(),
}

# What each simulated device gets on the two machines this project runs on, cell by cell.
ON_AN_H200 = """
simulated  trtllm-gen  sm100-jit  cutlass-mla-sm100  sm100-gluon  deep-gemm-fp4  fa3     aiter
sm90       absent      absent     absent             absent       absent         run     absent
sm100      refuse      refuse     refuse             refuse       refuse         absent  absent
sm103      refuse      refuse     refuse             refuse       refuse         absent  absent
sm120      absent      absent     absent             absent       absent         absent  absent
gfx90a     absent      absent     absent             absent       absent         absent  absent
gfx942     absent      absent     absent             absent       absent         absent  refuse
gfx950     absent      absent     absent             absent       absent         absent  refuse
cpu        absent      absent     absent             absent       absent         absent  absent
"""
WITHOUT_A_GPU = """
simulated  trtllm-gen  sm100-jit  cutlass-mla-sm100  sm100-gluon  deep-gemm-fp4  fa3     aiter
sm90       absent      absent     absent             absent       absent         refuse  absent
sm100      refuse      refuse     refuse             refuse       refuse         absent  absent
sm103      refuse      refuse     refuse             refuse       refuse         absent  absent
sm120      absent      absent     absent             absent       absent         absent  absent
gfx90a     absent      absent     absent             absent       absent         absent  absent
gfx942     absent      absent     absent             absent       absent         absent  refuse
gfx950     absent      absent     absent             absent       absent         absent  refuse
cpu        absent      absent     absent             absent       absent         absent  absent
"""


def _grid(text: str) -> dict[tuple[str, str], str]:
    header, *rows = [line.split() for line in text.strip().splitlines()]
    return {(row[0], family): cell for row in rows for family, cell in zip(header[1:], row[1:])}


def _answers(real: str | None) -> dict[tuple[str, str], Verdict]:
    return {(device, family.key): family.verdict(device, real) for device in DEVICES for family in ARCH_ONLY}


def test_the_rows_cover_every_device_and_every_family() -> None:
    assert list(IMAGES) == list(DEVICES), "a device of the table has no reviewed row here"
    families = {family.key for family in ARCH_ONLY}
    assert set().union(*IMAGES.values()) <= families
    for text in (ON_AN_H200, WITHOUT_A_GPU):
        assert {family for _, family in _grid(text)} == families, "a family of kernel_archs has no column here"
        assert {device for device, _ in _grid(text)} == set(DEVICES)


def test_each_family_has_an_image_for_the_reviewed_devices_only() -> None:
    declared = {device: frozenset(f.key for f in ARCH_ONLY if device in f.devices) for device in DEVICES}
    assert declared == IMAGES


@pytest.mark.parametrize(("real", "expected"), [("sm90", ON_AN_H200), (None, WITHOUT_A_GPU)],
                         ids=["on-an-h200", "without-a-gpu"])
def test_the_verdicts_on_this_projects_machines_are_the_written_out_grid(real: str | None, expected: str) -> None:
    assert _answers(real) == _grid(expected)


@pytest.mark.parametrize("real", [*[k for k in DEVICES if k != "cpu"], None])
def test_on_any_gpu_a_family_runs_where_both_have_it_is_refused_where_only_the_simulated_has_it(
        real: str | None) -> None:
    for (device, family), verdict in _answers(real).items():
        here = real is not None and family in IMAGES[real]
        expected = "absent" if family not in IMAGES[device] else ("run" if here else "refuse")
        assert verdict == expected, (device, real, family)
