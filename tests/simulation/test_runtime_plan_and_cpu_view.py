"""What `dsakit.simulation.runtime` installs, checked in-process (issue 45 item 4: the mutation run's
core): the plan's verdict and sentence per machine, the two views' routing, the CPU view's device
rules (every way a tensor reaches or leaves "cuda"), the torch.cuda runtime a CPU-placed run
answers with, and that `Patches.restore` takes all of it back. This box's own GPU is never used:
"the real GPU" is a device-table model or a stand-in function.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from dsakit.gates.device_model import DeviceModel, simulated_model
from dsakit.stack.import_hooks import Patches
from dsakit.simulation import runtime
from dsakit.simulation.probe_patches import SimulatedKernelLaunch
from dsakit.simulation.runtime import ON_CUDA, plan

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    importlib.import_module("torch")  # while collected: an in-process pytester run elsewhere keeps it
torch_needed = pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] the CPU view wraps torch")

A100 = DeviceModel("real", "nvidia", "NVIDIA A100", (8, 0))  # a GPU the device table does not list
CPU_BOX = DeviceModel("real", "cpu", "CPU")


# ---------------------------------------------------------------- the plan and its sentence


def test_the_simulated_device_on_itself_is_exact_and_runs_everything() -> None:
    h200 = simulated_model("sm90")
    exact = plan(simulated_model("sm90"), h200)
    assert (exact.exact, exact.portable, exact.placement) == (True, False, "device")
    assert exact.describe() == "this machine is a sm90: tensors and kernels run on it"
    mi300 = plan(simulated_model("gfx942"), simulated_model("gfx942"))
    assert (mi300.exact, mi300.portable) == (True, False)
    other_gfx = plan(simulated_model("gfx950"), simulated_model("gfx942"))  # same vendor, another arch
    assert (other_gfx.exact, other_gfx.portable, other_gfx.placement) == (False, True, "device")


def test_a_portable_plan_names_this_gpu_by_its_table_key_or_else_its_sm() -> None:
    on_h200 = plan(simulated_model("sm103"), simulated_model("sm90"))
    assert on_h200.real_key == "sm90"
    assert on_h200.describe() == (
        "SGLang sees sm103, the compilers and kernel libraries this GPU (sm90): portable kernels run on it; "
        "kernels that exist for sm103 only are refused [simulated-kernel-launch] (dsakit.simulation.kernel_archs)")
    on_a100 = plan(simulated_model("sm103"), A100)
    assert on_a100.portable and on_a100.real_key is None
    assert f"this GPU ({A100.sm_text}): " in on_a100.describe()
    assert plan(simulated_model("sm103"), CPU_BOX).real_key is None  # no GPU here at all


def test_a_cpu_placed_plan_says_where_its_tensors_live() -> None:
    b300_on_cpu = plan(simulated_model("sm103"), CPU_BOX)
    assert b300_on_cpu.describe() == ('tensors and pools created on "cuda" live on the CPU and answer as cuda; '
                                      "kernel launches skip with [simulated-kernel-launch]")


# ---------------------------------------------------------------- the two views (portable)


def _frame(filename: str, back: Any = None) -> Any:
    return SimpleNamespace(f_code=SimpleNamespace(co_filename=filename), f_back=back)


def test_a_query_belongs_to_the_toolchain_by_its_first_frame_past_torch_and_the_helpers() -> None:
    assert runtime.asks_for_real(None) is False
    assert runtime.asks_for_real(_frame("/site/triton/runtime/driver.py")) is True
    assert runtime.asks_for_real(_frame("/site/sglang/srt/layers/attention/dsa_backend.py")) is False
    helper = _frame("/site/torch/cuda/__init__.py", _frame("/site/flashinfer/utils.py", _frame("/site/flashinfer/jit/core.py")))
    assert runtime.asks_for_real(helper) is True
    assert runtime.asks_for_real(_frame("/site/torch/cuda/__init__.py", _frame("/site/sglang/srt/utils.py"))) is False
    assert runtime.asks_for_real(_frame("/site/torch/cuda/__init__.py")) is False  # only helpers on the stack


def test_each_query_answers_the_toolchain_the_real_gpu_and_everything_else_the_simulated_one() -> None:
    def get_device_capability(*args: Any) -> tuple[int, int]:
        """the real answer"""
        return real_answer(*args)

    def real_answer(*args: Any) -> tuple[int, int]:
        asked.append(args)
        return (9, 0)

    asked: list[Any] = []
    query = runtime._two_views(lambda *args: (10, 3), get_device_capability)
    assert (query.__name__, query.__doc__) == ("get_device_capability", "the real answer")
    assert query(0) == (10, 3) and asked == []
    namespace = {"query": query}
    exec(compile("answer = query(0)", "/site/triton/backends/nvidia/driver.py", "exec"), namespace)
    assert namespace["answer"] == (9, 0) and asked == [(0,)]


def test_a_portable_install_patches_the_queries_with_two_views_and_restore_takes_them_back() -> None:
    torch = pytest.importorskip("torch")
    patches = Patches()
    originals = {name: getattr(torch.cuda, name) for name in (*runtime.QUERIES, "is_current_stream_capturing")}
    for name in runtime.QUERIES:  # what the simulation answers SGLang (dsakit's probe patches, stand-ins here)
        patches.set(torch.cuda, name, lambda *a, name=name: f"simulated {name}")
    real = {name: (lambda *a, name=name: f"real {name}") for name in runtime.QUERIES}
    real["is_current_stream_capturing"] = capturing = lambda: False
    try:
        runtime.install(patches, plan(simulated_model("sm103"), simulated_model("sm90")), real)
        assert torch.cuda.get_device_capability() == "simulated get_device_capability"
        namespace = {"torch": torch}
        exec(compile("answer = torch.cuda.get_device_name()", "/site/flashinfer/jit/core.py", "exec"), namespace)
        assert namespace["answer"] == "real get_device_name"
        assert torch.cuda.is_current_stream_capturing is capturing
        assert not torch._C._is_torch_function_mode_enabled()  # tensors stay on the real GPU: no placement
    finally:
        patches.restore()
    assert all(getattr(torch.cuda, name) is value for name, value in originals.items())


# ---------------------------------------------------------------- the CPU view's device rules


def test_what_names_the_cuda_device() -> None:
    torch = pytest.importorskip("torch")
    cuda = [torch.device("cuda"), torch.device("cuda", 1), "cuda", "cuda:1", 0, 1]
    other = [torch.device("cpu"), torch.device("meta"), "cpu", "meta", True, False, None, 1.0]
    assert [runtime._is_cuda(v) for v in cuda] == [True] * len(cuda)
    assert [runtime._is_cuda(v) for v in other] == [False] * len(other)


def test_a_cuda_device_becomes_the_cpu_and_every_other_value_stays() -> None:
    torch = pytest.importorskip("torch")
    assert runtime._cpu_device(torch.device("cuda", 1)) == torch.device("cpu")
    assert runtime._cpu_device("cuda:1") == "cpu" and runtime._cpu_device("cuda") == "cpu"
    assert runtime._cpu_device(0) == "cpu"
    meta = torch.device("meta")
    for value in (meta, "meta", "cpu", True, None):
        assert runtime._cpu_device(value) is value


@torch_needed
def test_a_list_is_on_cuda_when_one_of_its_tensors_is() -> None:
    import torch

    marked, plain = torch.ones(1), torch.ones(1)
    setattr(marked, ON_CUDA, True)
    assert runtime._marked([plain, marked]) and runtime._marked((marked,)) and runtime._marked(marked)
    assert not runtime._marked([plain, plain]) and not runtime._marked(plain) and not runtime._marked([])


@pytest.fixture
def placed() -> Iterator[Any]:
    """torch with "cuda" placed on the CPU, as a simulated sm103 on a machine without its GPU."""
    torch = pytest.importorskip("torch")
    with runtime.cuda_view_on_cpu(simulated_model("sm103")):
        yield torch


def _lives_on(tensor: Any) -> str:
    import torch

    with torch._C.DisableTorchFunction():  # where it really lives, past the mode's answers
        return str(tensor.device.type)


def test_the_cpu_view_lives_on_the_cpu_and_answers_as_cuda(placed: Any) -> None:
    torch = placed
    on_gpu = torch.ones(2, device="cuda")
    assert _lives_on(on_gpu) == "cpu"
    assert (on_gpu.is_cuda, on_gpu.device, on_gpu.get_device()) == (True, torch.device("cuda", 0), 0)
    here = torch.ones(2)
    assert (here.is_cuda, here.device, here.get_device()) == (False, torch.device("cpu"), -1)
    assert torch.empty(2, device="meta").device.type == "meta"  # only "cuda" moves
    assert torch.empty(2, device="cuda", pin_memory=True).is_cuda  # pinned host memory needs no GPU here


def test_moves_to_cuda_copy_a_cpu_tensor_and_keep_a_cuda_one(placed: Any) -> None:
    torch = placed
    on_gpu, here = torch.ones(2, device="cuda"), torch.ones(2)
    for moved in (here.cuda(), here.to("cuda"), here.to(device="cuda"), here.cuda(device=None), here.to("cuda", torch.float16)):
        assert moved.is_cuda and moved is not here and _lives_on(moved) == "cpu"
    assert not here.is_cuda  # the CPU original stays on the CPU
    assert on_gpu.cuda() is on_gpu and on_gpu.cuda(0) is on_gpu and on_gpu.to("cuda") is on_gpu  # already there
    assert here.cuda(0).is_cuda and here.cuda(0) is not here
    assert here.cpu() is here and here.to("cpu") is here  # already on the CPU: the same
    assert (here + on_gpu).is_cuda and (on_gpu * 2).is_cuda and not (here * 2).is_cuda


def test_an_in_place_write_leaves_the_tensor_where_it_lives(placed: Any) -> None:
    torch = placed
    on_gpu, here = torch.ones(2, device="cuda"), torch.zeros(2)
    here.copy_(on_gpu)
    assert not here.is_cuda and here.tolist() == [1.0, 1.0]
    on_gpu.copy_(torch.zeros(2))
    assert on_gpu.is_cuda and on_gpu.tolist() == [0.0, 0.0]


def test_a_parameter_given_cuda_data_is_on_cuda(placed: Any) -> None:
    torch = placed
    param = torch.nn.Parameter(torch.ones(2))
    param.data = torch.ones(2, device="cuda")
    assert param.is_cuda
    param.data = torch.ones(2)
    assert not param.is_cuda
    module = torch.nn.Linear(2, 2).cuda()
    assert module.weight.is_cuda and module.bias.is_cuda and _lives_on(module.weight) == "cpu"
    assert torch.ones(2, device="cuda").data.is_cuda
    on_gpu = torch.ones(2, device="cuda")
    on_gpu.requires_grad = True  # another property's setter leaves the placement alone
    assert on_gpu.is_cuda and on_gpu.requires_grad


def test_pin_memory_keeps_the_tensor(placed: Any) -> None:
    torch = placed
    on_gpu = torch.ones(2, device="cuda")
    assert on_gpu.pin_memory() is on_gpu


def test_a_custom_op_without_a_cpu_kernel_is_refused_and_one_with_runs(placed: Any) -> None:
    torch = placed
    library = torch.library.Library("dsakit_runtime_test", "FRAGMENT")
    library.define("gpu_only(Tensor x) -> Tensor")
    library.impl("gpu_only", lambda x: x, "CUDA")
    library.define("anywhere(Tensor x) -> Tensor")
    library.impl("anywhere", lambda x: x + 1, "CompositeExplicitAutograd")
    with pytest.raises(SimulatedKernelLaunch, match=r"the kernel torch\.ops\.dsakit_runtime_test\.gpu_only \(called at "):
        torch.ops.dsakit_runtime_test.gpu_only(torch.ones(2, device="cuda"))
    assert torch.ops.dsakit_runtime_test.anywhere(torch.ones(2, device="cuda")).tolist() == [2.0, 2.0]


def test_on_a_gpu_node_the_view_leaves_placement_to_torch() -> None:
    """--dsakit-device cpu on a GPU node (tensors stay on the real GPU): a CPU tensor is not made
    to answer as cuda, whatever it is marked."""
    torch = pytest.importorskip("torch")
    tensor = torch.ones(2)
    setattr(tensor, ON_CUDA, True)
    with runtime._placement_mode(simulated_model("cpu"), on_cpu=False):
        assert not tensor.is_cuda and tensor.device == torch.device("cpu") and tensor.get_device() == -1
        assert (tensor + 1).tolist() == [2.0, 2.0]


# ---------------------------------------------------------------- install and restore


@pytest.fixture
def installed() -> Iterator[Any]:
    """A simulated sm103 placed on the CPU, installed into torch as a whole run installs it."""
    torch = pytest.importorskip("torch")
    patches = Patches()
    before = (torch.cuda.synchronize, torch.Generator, torch.cuda.CUDAGraph)
    runtime.install(patches, plan(simulated_model("sm103"), CPU_BOX), runtime.real_queries(torch))
    try:
        yield torch
    finally:
        patches.restore()
    assert (torch.cuda.synchronize, torch.Generator, torch.cuda.CUDAGraph) == before
    assert not torch._C._is_torch_function_mode_enabled()


def test_a_cpu_placed_run_answers_the_cuda_runtime(installed: Any) -> None:
    torch = installed
    assert torch._C._is_torch_function_mode_enabled() and torch.ones(1, device="cuda").is_cuda
    assert [torch.cuda.synchronize(), torch.cuda.empty_cache(), torch.cuda.set_device(0), torch.cuda.init(),
            torch.cuda.reset_peak_memory_stats()] == [None] * 5
    assert torch.cuda.is_initialized() is True
    stream = torch.cuda.current_stream()
    assert torch.cuda.default_stream() is stream and torch.cuda.set_stream(stream) is None
    with torch.cuda.stream(torch.cuda.Stream()) as current, torch.cuda.device(0) as device:
        assert current is stream and device is stream
    side = torch.cuda.Stream(priority=-1)
    assert side.query() is True and side.wait_stream(stream) is None and side.synchronize() is None
    assert isinstance(torch.cuda.ExternalStream(0), torch.cuda.Stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    assert stream.record_event(start) is start and isinstance(stream.record_event(), torch.cuda.Event)
    assert start.record() is None and end.query() is True and start.elapsed_time(end) == 0.0  # the CPU ran it already
    assert stream.wait_event(end) is None and end.wait() is None and end.synchronize() is None


def test_a_cpu_placed_run_has_the_simulated_gpus_memory_and_allocates_none_of_it(installed: Any) -> None:
    torch = installed
    memory = simulated_model("sm103").memory_bytes
    assert memory and torch.cuda.mem_get_info() == (memory, memory) and torch.cuda.mem_get_info(0) == (memory, memory)
    assert [torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved(),
            torch.cuda.max_memory_reserved()] == [0, 0, 0, 0]


def test_a_cpu_placed_run_refuses_cuda_graphs_as_a_kernel_launch(installed: Any) -> None:
    torch = installed
    assert isinstance(torch.cuda.CUDAGraph, type) and isinstance(torch.cuda.graph, type)  # annotations still work
    assert torch.cuda.CUDAGraph.__name__ == "CUDAGraph" and torch.cuda.graph.__name__ == "graph"
    for capture in (torch.cuda.CUDAGraph, lambda: torch.cuda.graph(None), torch.cuda.graph_pool_handle):
        with pytest.raises(SimulatedKernelLaunch, match=r"\] CUDA graph capture \(torch\.cuda\.graph / CUDAGraph\) \(called at "):
            capture()


def test_seeding_cuda_seeds_the_generator_cuda_tensors_are_drawn_from(installed: Any) -> None:
    torch = installed
    torch.cuda.manual_seed(5)
    drawn = torch.rand(3, device="cuda")
    torch.manual_seed(5)
    assert torch.equal(drawn, torch.rand(3))
    torch.cuda.manual_seed_all(7)
    drawn = torch.rand(3, device="cuda")
    torch.manual_seed(7)
    assert torch.equal(drawn, torch.rand(3))
    state = torch.cuda.get_rng_state()
    assert torch.equal(state, torch.get_rng_state())
    first = torch.rand(3, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(first, torch.rand(3, device="cuda"))
    for reseed in (torch.cuda.seed, torch.cuda.seed_all):  # a fresh random seed, on the CPU generator
        torch.manual_seed(3)
        reseed()
        assert torch.cuda.initial_seed() == torch.initial_seed() != 3


def test_a_cuda_generator_is_a_cpu_torch_generator(installed: Any) -> None:
    torch = installed
    before = torch.default_generator
    for generator in (torch.Generator(device="cuda"), torch.Generator("cuda:0"), torch.Generator()):
        assert isinstance(generator, torch.Generator) and generator.device == torch.device("cpu")
    assert isinstance(before, torch.Generator)  # made before the patch: still a generator
    assert f"{torch.Generator.__module__}.{torch.Generator.__qualname__}" == "torch.Generator"
    assert torch.rand(2, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)).is_cuda


def test_an_exact_plan_installs_nothing_and_a_gpu_node_cpu_run_only_the_view() -> None:
    torch = pytest.importorskip("torch")
    synchronize, generator = torch.cuda.synchronize, torch.Generator
    patches = Patches()
    runtime.install(patches, plan(simulated_model("sm90"), simulated_model("sm90")), {})
    assert not torch._C._is_torch_function_mode_enabled() and torch.cuda.synchronize is synchronize
    patches.restore()
    runtime.install(patches, plan(simulated_model("cpu"), simulated_model("sm90")), {})  # --dsakit-device cpu on an H200
    try:
        assert torch._C._is_torch_function_mode_enabled()
        assert torch.cuda.synchronize is synchronize and torch.Generator is generator  # the real GPU's runtime
    finally:
        patches.restore()
    assert not torch._C._is_torch_function_mode_enabled()


def test_a_device_of_unknown_memory_answers_none_free() -> None:
    torch = pytest.importorskip("torch")
    unknown = DeviceModel("sm103", "nvidia", "NVIDIA B300", (10, 3))  # no memory size in its entry
    patches = Patches()
    runtime.install(patches, plan(unknown, CPU_BOX), runtime.real_queries(torch))
    try:
        assert torch.cuda.mem_get_info() == (0, 0)
    finally:
        patches.restore()
