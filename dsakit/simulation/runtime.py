"""Where a simulated run's tensors live, and the torch.cuda runtime it answers with.

Owns the `TorchFunctionMode` of a simulation: on a machine without a GPU of the simulated vendor,
a tensor, module or pool created on "cuda" lives on the CPU (factory functions, `.to`, `.cuda`,
`pin_memory`); on every non-exact simulation, a torch custom op of a kernel library refuses to
launch. Also the torch.cuda runtime a CPU-placed run answers with (streams, events, synchronize,
memory queries; CUDA graphs refuse). Must not compute anything differently from torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from dsakit.gates.device_model import DeviceModel
from dsakit.simulation.kernels import is_kernel_op, op_name, refuse
from dsakit.upstream.device_simulation import Patches, is_this_machine

Placement = Literal["device", "cpu"]


@dataclass(frozen=True)
class SimulationPlan:
    """How a simulation runs on this machine.

    exact      this machine is the simulated device (same vendor and arch): nothing is refused
    placement  'device': tensors stay on the real GPU; 'cpu': "cuda" tensors live on the CPU
    """

    device: DeviceModel
    real: DeviceModel
    exact: bool
    placement: Placement

    def describe(self) -> str:
        if self.exact:
            return f"this machine is a {self.device.key}: tensors and kernels run on it"
        where = ("tensors live on the real GPU" if self.placement == "device"
                 else 'tensors and pools created on "cuda" live on the CPU')
        return f"{where}; kernel launches skip with [simulated-kernel-launch]"


def plan(device: DeviceModel, real: DeviceModel) -> SimulationPlan:
    same_vendor = real.is_gpu and real.vendor == device.vendor
    exact = is_this_machine(device, real)
    return SimulationPlan(device, real, exact or (device.vendor == "cpu" and not real.is_gpu),
                          "device" if same_vendor or not device.is_gpu else "cpu")


# ---------------------------------------------------------------- the torch function mode


def _cpu_device(value: Any) -> Any:
    import torch

    if isinstance(value, torch.device):
        return torch.device("cpu") if value.type == "cuda" else value
    if isinstance(value, str) and value.split(":")[0] == "cuda":
        return "cpu"
    return value


def _placement_mode(device: DeviceModel, on_cpu: bool) -> Any:
    import torch
    from torch.overrides import TorchFunctionMode

    returns_self = {torch.Tensor.cuda, torch.Tensor.pin_memory}
    no_op = {torch.Tensor.record_stream}
    moves = {torch.Tensor.to}

    class SimulatedPlacement(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if is_kernel_op(func, args, kwargs, on_cpu=on_cpu):
                raise refuse(f"the kernel {op_name(func)}", device)
            if on_cpu:
                if func in returns_self:
                    return args[0]
                if func in no_op:
                    return None
                if "device" in kwargs:
                    kwargs["device"] = _cpu_device(kwargs["device"])
                if kwargs.get("pin_memory"):
                    kwargs["pin_memory"] = False
                if func in moves:
                    args = (args[0], *(_cpu_device(a) for a in args[1:]))
            return func(*args, **kwargs)

    return SimulatedPlacement()


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


def install(patches: Patches, simulation: SimulationPlan) -> None:
    """The placement mode (and, placed on the CPU, the runtime answers) until `patches` restore."""
    if simulation.exact:
        return
    on_cpu = simulation.placement == "cpu"
    if on_cpu:
        _patch_cuda_runtime(patches, simulation.device)
    mode = _placement_mode(simulation.device, on_cpu)
    mode.__enter__()
    patches.callback(lambda: mode.__exit__(None, None, None))
