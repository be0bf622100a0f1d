"""Where a simulated run's tensors live, which device each caller sees, and the torch.cuda runtime it answers with.

Owns the plan of a simulation on this machine (exact, portable or CPU-placed) and what each plan
installs into torch: on a GPU of the simulated vendor (portable) the two views of one device --
SGLang's Python sees the simulated GPU, the toolchain (`kernel_archs.TOOLCHAIN`: Triton, the JIT
loaders, kernel libraries) the real one; without one, the `TorchFunctionMode` that places "cuda"
tensors on the CPU (they answer `is_cuda` and `device` as on the simulated GPU), refuses kernel
ops, and the torch.cuda runtime a CPU-placed run answers with (streams, events, synchronize,
memory, generators; CUDA graphs refuse). Must not compute anything differently from torch.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from dsakit.gates.device_model import DeviceModel
from dsakit.simulation.kernel_archs import QUERY_HELPERS, real_key, toolchain_of
from dsakit.simulation.kernels import is_kernel_op, op_name, refuse
from dsakit.stack.import_hooks import Patches
from dsakit.simulation.probe_patches import is_this_machine

Placement = Literal["device", "cpu"]


@dataclass(frozen=True)
class SimulationPlan:
    """How a simulation runs on this machine.

    exact      this machine is the simulated device (same vendor and arch): nothing is refused
    portable   this machine has a GPU of the simulated vendor, of another arch: kernels built for it
               (Triton, the JITs, kernel libraries) run on it; arch-only kernels are refused
    placement  'device': tensors stay on the real GPU; 'cpu': "cuda" tensors live on the CPU
    """

    device: DeviceModel
    real: DeviceModel
    exact: bool
    placement: Placement

    @property
    def portable(self) -> bool:
        return not self.exact and self.device.is_gpu and self.placement == "device"

    @property
    def real_key(self) -> str | None:
        """This machine's GPU as a device-table key (`sm90`), None where it has none or an unlisted one."""
        return real_key(self.real.vendor, self.real.sm, self.real.gfx) if self.real.is_gpu else None

    def describe(self) -> str:
        if self.exact:
            return f"this machine is a {self.device.key}: tensors and kernels run on it"
        if self.portable:
            here = self.real_key or self.real.sm_text
            return (f"SGLang sees {self.device.key}, the compilers and kernel libraries this GPU ({here}): "
                    f"portable kernels run on it; kernels that exist for {self.device.key} only are "
                    "refused [simulated-kernel-launch] (dsakit.simulation.kernel_archs)")
        where = ("tensors live on the real GPU" if self.placement == "device"
                 else 'tensors and pools created on "cuda" live on the CPU and answer as cuda')
        return f"{where}; kernel launches skip with [simulated-kernel-launch]"


def plan(device: DeviceModel, real: DeviceModel) -> SimulationPlan:
    same_vendor = real.is_gpu and real.vendor == device.vendor
    exact = is_this_machine(device, real)
    return SimulationPlan(device, real, exact or (device.vendor == "cpu" and not real.is_gpu),
                          "device" if same_vendor or not device.is_gpu else "cpu")


# ---------------------------------------------------------------- two views of one device (portable)

QUERIES = ("get_device_capability", "get_device_properties", "get_device_name")


def asks_for_real(frame: Any) -> bool:
    """Whether the device query made from `frame` belongs to the toolchain (it compiles, selects or
    launches kernels, so it must see the GPU they run on): torch's own wrappers and query helpers
    are walked past, then the first frame decides."""
    while frame is not None and any(part in frame.f_code.co_filename for part in QUERY_HELPERS):
        frame = frame.f_back
    return frame is not None and toolchain_of(frame.f_code.co_filename) is not None


class _RealAnswer(threading.local):
    depth = 0  # > 0 while a real answer is computed: torch's own queries call each other


_REAL = _RealAnswer()


def _two_views(simulated: Callable[..., Any], real: Callable[..., Any]) -> Callable[..., Any]:
    def query(*args: Any, **kwargs: Any) -> Any:
        if _REAL.depth or asks_for_real(sys._getframe(1)):
            _REAL.depth += 1
            try:
                return real(*args, **kwargs)  # e.g. get_device_capability -> get_device_properties
            finally:
                _REAL.depth -= 1
        return simulated(*args, **kwargs)

    query.__name__ = getattr(real, "__name__", "query")
    query.__doc__ = getattr(real, "__doc__", None)
    return query


def real_queries(torch: Any) -> dict[str, Any]:
    """torch.cuda's own device queries, read before the simulation patches them."""
    return {name: getattr(torch.cuda, name) for name in (*QUERIES, "is_current_stream_capturing")}


def install_two_views(patches: Patches, torch: Any, real: dict[str, Any]) -> None:
    """After the simulation patched torch.cuda's queries: each answers the real GPU to the
    toolchain, the simulated one to everything else; stream capture is the real GPU's."""
    for name in QUERIES:
        patches.set(torch.cuda, name, _two_views(getattr(torch.cuda, name), real[name]))
    patches.set(torch.cuda, "is_current_stream_capturing", real["is_current_stream_capturing"])


# ---------------------------------------------------------------- the torch function mode


ON_CUDA = "_dsakit_on_cuda"  # a CPU tensor's attribute: it stands for a tensor on the simulated GPU


def _is_cuda(value: Any) -> bool:
    import torch

    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.split(":")[0] == "cuda"
    return isinstance(value, int) and not isinstance(value, bool)  # device=0: the first GPU


def _cpu_device(value: Any) -> Any:
    import torch

    if isinstance(value, torch.device):
        return torch.device("cpu") if value.type == "cuda" else value
    if isinstance(value, str) and value.split(":")[0] == "cuda":
        return "cpu"
    if isinstance(value, int) and not isinstance(value, bool):
        return "cpu"
    return value


def _marked(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(getattr(v, ON_CUDA, False) for v in value)
    return bool(getattr(value, ON_CUDA, False))


def _mark(result: Any) -> None:
    import torch

    for value in (result if isinstance(result, (list, tuple)) else (result,)):
        if isinstance(value, torch.Tensor):
            setattr(value, ON_CUDA, True)


def _placement_mode(device: DeviceModel, on_cpu: bool) -> Any:
    """On the CPU (`on_cpu`): a tensor created on, moved to or computed from "cuda" lives on the CPU
    and is marked; a marked tensor answers `is_cuda`, `device` and `get_device()` as a tensor on the
    simulated GPU (SGLang asserts `seq_lens.is_cuda`), `.cpu()` returns an unmarked copy. Every
    plan but an exact one: a kernel library's op refuses to launch."""
    import torch
    from torch.overrides import TorchFunctionMode

    base = torch._C.TensorBase.__dict__
    is_cuda_get, device_get, data = base["is_cuda"], base["device"], base["data"]
    cuda0 = torch.device("cuda", 0)
    to_cuda, to_cpu = torch.Tensor.cuda, torch.Tensor.cpu
    no_op = {torch.Tensor.record_stream}
    moves = {torch.Tensor.to}

    class SimulatedPlacement(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if is_kernel_op(func, args, kwargs, on_cpu=on_cpu):
                raise refuse(f"the kernel {op_name(func)}", device)
            if not on_cpu:
                return func(*args, **kwargs)
            owner = getattr(func, "__self__", None)
            if owner is is_cuda_get:
                return _marked(args[0])
            if owner is device_get:
                return cuda0 if _marked(args[0]) else func(*args, **kwargs)
            if func is torch.Tensor.get_device:
                return 0 if _marked(args[0]) else func(*args, **kwargs)
            if owner is data and getattr(func, "__name__", "") == "__set__":  # param.data = t (Module.cuda)
                func(*args, **kwargs)
                setattr(args[0], ON_CUDA, _marked(args[1]))
                return None
            if func is torch.Tensor.pin_memory:
                return args[0]
            if func in no_op:
                return None
            wants_cuda = func is to_cuda
            if "device" in kwargs:
                wants_cuda = wants_cuda or _is_cuda(kwargs["device"])
                kwargs["device"] = _cpu_device(kwargs["device"])
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
            wants_cpu = func is to_cpu
            if func in moves:
                targets = [a for a in args[1:] if isinstance(a, (str, torch.device))]
                wants_cuda = wants_cuda or any(_is_cuda(a) for a in targets)
                wants_cpu = wants_cpu or any(not _is_cuda(a) for a in targets) or (
                    "device" in kwargs and not wants_cuda)
                args = (args[0], *(_cpu_device(a) for a in args[1:]))
            if func is to_cuda:
                result = args[0] if _marked(args[0]) else args[0].clone()
            else:
                result = func(*args, **kwargs)
            first: Any = args[0] if args else None
            if first is not None and result is first and getattr(func, "__name__", "").endswith("_"):
                return result  # in place (copy_, zero_, ...): the tensor stays where it lives
            if wants_cpu:
                if result is first and _marked(result):
                    result = result.clone()  # a real .cpu() copies; the copy is not on the GPU
                return result
            if wants_cuda or any(_marked(a) for a in args) or any(_marked(v) for v in kwargs.values()):
                if wants_cuda and func is not to_cuda and result is first and not _marked(result):
                    result = result.clone()  # .to("cuda") of a CPU tensor is a copy, not the tensor
                _mark(result)
            return result

    return SimulatedPlacement()


@contextlib.contextmanager
def cuda_view_on_cpu(device: DeviceModel) -> Iterator[None]:
    """The placement mode alone, without a simulation's other patches: "cuda" tensors made inside
    live on the CPU and answer as on `device`. For code that runs a GPU kernel's Python on the CPU
    behind SGLang's `is_cuda` asserts (Triton's interpreter: dsakit/simulation/triton_interpreter.py)."""
    mode = _placement_mode(device, on_cpu=True)
    with mode:
        yield


# ---------------------------------------------------------------- torch.cuda on a CPU-placed run


class _Stream:
    """A stand-in CUDA stream: work is already done when it is asked (the CPU ran it in order)."""

    device = None
    cuda_stream = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event if event is not None else _Event()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _Event:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0


def _patch_cuda_runtime(patches: Patches, device: DeviceModel) -> None:
    import torch

    cuda = torch.cuda
    stream = _Stream()
    memory = device.memory_bytes or 0
    cpu = torch.default_generator

    def graph_refused(*args: Any, **kwargs: Any) -> Any:
        raise refuse("CUDA graph capture (torch.cuda.graph / CUDAGraph)", device)

    # classes stay classes: annotations such as `torch.cuda.CUDAGraph | None` run at import
    refused_graph = type("CUDAGraph", (), {"__init__": lambda self, *a, **k: graph_refused()})
    refused_capture = type("graph", (), {"__init__": lambda self, *a, **k: graph_refused()})

    @contextlib.contextmanager
    def nothing(*args: Any, **kwargs: Any) -> Iterator[Any]:
        yield stream

    answers: dict[str, Any] = {
        "synchronize": lambda *a, **k: None, "empty_cache": lambda: None, "set_device": lambda *a: None,
        "init": lambda: None, "is_initialized": lambda: True, "current_stream": lambda *a, **k: stream,
        "default_stream": lambda *a, **k: stream, "set_stream": lambda *a: None, "Stream": _Stream,
        "ExternalStream": _Stream, "Event": _Event, "stream": nothing, "device": nothing,
        "mem_get_info": lambda *a: (memory, memory), "memory_allocated": lambda *a: 0,
        "max_memory_allocated": lambda *a: 0, "memory_reserved": lambda *a: 0,
        "max_memory_reserved": lambda *a: 0, "reset_peak_memory_stats": lambda *a: None,
        "CUDAGraph": refused_graph, "graph": refused_capture, "graph_pool_handle": graph_refused,
        # "cuda" tensors are drawn from the CPU generator: seeding CUDA seeds that one
        "get_rng_state": lambda *a, **k: cpu.get_state(),
        "set_rng_state": lambda state, *a, **k: cpu.set_state(state),
        "manual_seed": cpu.manual_seed, "manual_seed_all": cpu.manual_seed, "seed": cpu.seed, "seed_all": cpu.seed,
        "initial_seed": cpu.initial_seed,
    }
    for name, value in answers.items():
        if hasattr(cuda, name):
            patches.set(cuda, name, value)
    patches.set(torch, "Generator", _cpu_generator_class(torch))


def _cpu_generator_class(torch: Any) -> type:
    """`torch.Generator(device="cuda")` on a CPU-placed run: a CPU generator (still a torch.Generator),
    as "cuda" tensors are CPU tensors drawn from CPU generators."""

    class AnyGenerator(type(torch.Generator)):  # type: ignore[misc]
        def __instancecheck__(cls, value: Any) -> bool:  # generators made before the patch still are
            return isinstance(value, torch._C.Generator)

    class Generator(torch.Generator, metaclass=AnyGenerator):  # type: ignore[misc]
        def __new__(cls, device: Any = "cpu") -> Any:
            return super().__new__(cls, device=_cpu_device(device))

    Generator.__module__ = "torch"
    Generator.__qualname__ = "Generator"
    return Generator


def install(patches: Patches, simulation: SimulationPlan, real: dict[str, Any]) -> None:
    """What the plan installs into torch until `patches` restore: nothing on the exact device; the
    two views on a portable one (`real`: torch.cuda's own queries, read before the simulation
    patched them); else the placement mode and, placed on the CPU, the runtime answers."""
    if simulation.exact:
        return
    if simulation.portable:
        import torch

        install_two_views(patches, torch, real)
        return
    on_cpu = simulation.placement == "cpu"
    if on_cpu:
        _patch_cuda_runtime(patches, simulation.device)
    mode = _placement_mode(simulation.device, on_cpu)
    mode.__enter__()
    patches.callback(lambda: mode.__exit__(None, None, None))
