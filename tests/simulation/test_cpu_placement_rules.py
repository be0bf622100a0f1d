"""The CPU view's placement rules (issue 45 item 3): without a GPU of the simulated vendor, a
tensor on "cuda" lives on the CPU and answers as cuda; what is computed from one is on "cuda" too,
however it is passed; a dtype conversion does not move it; and `--dsakit-device cpu` on a GPU node
is no portable run. The mode runs in-process on CPU tensors."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from dsakit.gates.device_model import simulated_model
from dsakit.simulation.runtime import plan

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    importlib.import_module("torch")  # while collected: an in-process pytester run elsewhere keeps it
torch_needed = pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] the placement mode wraps torch")


@pytest.fixture
def placed() -> Iterator[Any]:
    """torch with "cuda" placed on the CPU, as a simulated sm103 on a machine without its GPU."""
    import torch

    from dsakit.simulation.runtime import _placement_mode

    mode = _placement_mode(simulated_model("sm103"), on_cpu=True)
    mode.__enter__()
    try:
        yield torch
    finally:
        mode.__exit__(None, None, None)


@torch_needed
@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_a_result_computed_from_a_cuda_tensor_is_on_cuda_however_the_tensor_is_passed(
        placed: Any, how: str) -> None:
    torch = placed
    on_gpu, here = torch.ones(3, device="cuda"), torch.ones(3)
    result = torch.add(here, on_gpu) if how == "positional" else torch.add(here, other=on_gpu)
    assert result.is_cuda and result.device == torch.device("cuda", 0)
    assert not torch.add(here, other=here).is_cuda  # two CPU tensors stay on the CPU


@torch_needed
@pytest.mark.parametrize("convert", ["to(dtype)", "to(dtype=)", "half()"])
def test_a_dtype_conversion_keeps_a_tensor_where_it_lives(placed: Any, convert: str) -> None:
    torch = placed
    calls = {"to(dtype)": lambda t: t.to(torch.float16), "to(dtype=)": lambda t: t.to(dtype=torch.float16),
             "half()": lambda t: t.half()}[convert]
    converted = calls(torch.ones(3, device="cuda"))
    assert converted.dtype == torch.float16
    assert converted.is_cuda and converted.get_device() == 0
    assert not calls(torch.ones(3)).is_cuda  # a CPU tensor converted stays a CPU tensor


@torch_needed
def test_a_move_to_the_cpu_leaves_cuda(placed: Any) -> None:
    torch = placed
    on_gpu = torch.ones(3, device="cuda")
    for moved in (on_gpu.cpu(), on_gpu.to("cpu"), on_gpu.to(device="cpu"), on_gpu.to("cpu", torch.float16)):
        assert not moved.is_cuda and moved.device == torch.device("cpu")
    assert on_gpu.is_cuda  # the original stays where it was


@pytest.mark.parametrize("real", ["sm90", "sm103", "gfx942"])
def test_the_cpu_device_on_a_gpu_node_is_no_portable_run(real: str) -> None:
    """--dsakit-device cpu on a GPU node: tensors stay on the real GPU and kernel launches skip; SGLang
    does not see the GPU's arch through a portable plan (that is for a GPU of the simulated vendor)."""
    node = simulated_model(real)  # stands for this machine's real GPU
    cpu_run = plan(simulated_model("cpu"), node)
    assert (cpu_run.exact, cpu_run.portable, cpu_run.placement) == (False, False, "device")
    assert cpu_run.describe() == "tensors live on the real GPU; kernel launches skip with [simulated-kernel-launch]"


def test_the_cpu_device_on_a_cpu_box_is_exact_and_a_gpu_of_the_vendor_plans_portable() -> None:
    box = simulated_model("cpu")  # a machine without a GPU
    assert plan(simulated_model("cpu"), box).exact
    b300_on_h200 = plan(simulated_model("sm103"), simulated_model("sm90"))
    assert (b300_on_h200.exact, b300_on_h200.portable, b300_on_h200.placement) == (False, True, "device")
    b300_on_cpu = plan(simulated_model("sm103"), box)
    assert (b300_on_cpu.exact, b300_on_cpu.portable, b300_on_cpu.placement) == (False, False, "cpu")
    mi300_on_h200 = plan(simulated_model("gfx942"), simulated_model("sm90"))  # another vendor: CPU-placed
    assert (mi300_on_h200.portable, mi300_on_h200.placement) == (False, "cpu")
