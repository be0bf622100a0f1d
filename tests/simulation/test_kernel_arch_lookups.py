"""The arch-only table's lookups (issue 45 item 4): an entry point or a JIT module name finds its
own family (and only a listed one finds any), and this machine's GPU is found by vendor and arch
the way the device table spells them: AMD by gfx arch string, never by the number it reports."""

from __future__ import annotations

import pytest

from dsakit.devices import DEVICES
from dsakit.simulation.kernel_archs import ARCH_ONLY, KernelFamily, family_of_entry, family_of_jit, real_key


@pytest.mark.parametrize("family", ARCH_ONLY, ids=lambda f: f.key)
def test_every_entry_point_finds_its_own_family(family: KernelFamily) -> None:
    for entry in family.entry_points:
        assert family_of_entry(entry) is family


def test_an_unlisted_entry_point_is_portable() -> None:
    assert family_of_entry("sgl_kernel:fast_topk_v2") is None
    assert family_of_entry("flashinfer.prefill") is None  # a module alone names no entry point


@pytest.mark.parametrize(("name", "family"), [
    ("TRTLLM_GEN_fmha_bf16", "trtllm-gen"),  # JIT names are matched whatever their case
    ("fmha_cutlass_SM100a", "sm100-jit"),
    ("Blackwell_gemm", "sm100-jit"),
])
def test_a_jit_name_is_matched_in_any_case(name: str, family: str) -> None:
    found = family_of_jit(name)
    assert found is not None and found.key == family


@pytest.mark.parametrize("key", [k for k, e in DEVICES.items() if e.vendor != "cpu"])
def test_every_gpu_of_the_device_table_is_found_by_its_own_arch(key: str) -> None:
    entry = DEVICES[key]
    assert real_key(entry.vendor, entry.sm, entry.gfx) == key


def test_amd_is_found_by_gfx_arch_and_nvidia_by_sm() -> None:
    assert real_key("amd", None, "gfx942") == "gfx942"  # the reported number plays no part
    assert real_key("amd", (9, 0), "gfx950") == "gfx950"  # 9.0 is also an H200's SM: the gfx string decides
    assert real_key("amd", (9, 4), None) is None  # no gfx arch read: no AMD entry, and no NVIDIA one
    assert real_key("nvidia", (9, 4), None) is None  # an MI300's number on NVIDIA: no entry
    assert real_key("nvidia", (8, 0), None) is None  # an A100: not in the table
    assert real_key("cpu", None, None) is None  # the CPU entry is no GPU of this machine
