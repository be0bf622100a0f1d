"""Kernel launches under a simulation: refused with `[simulated-kernel-launch]`, never faked.

Owns the guards on each route to a device kernel: torch custom ops outside torch's own namespaces
(sgl-kernel, FlashMLA, FA3, ...), Triton's `JITFunction.run`, the JIT loaders (SGLang's `load_jit`,
flashinfer's `JitSpec`; not tvm-ffi's `load_module`, which also loads non-kernel bindings), DeepGEMM; and stand-in modules for the kernel
libraries the simulated GPU would have installed but this machine lacks. Must not run a kernel.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from dsakit.call_site import call_site, short_path
from dsakit.gates.device_model import DeviceModel
from dsakit.upstream.device_simulation import Patches, SimulatedKernelLaunch

# Namespaces of torch.ops whose kernels are torch's own (or SGLang's Python custom ops, whose device
# kernels are guarded where they launch); every other namespace is a kernel library.
TORCH_NAMESPACES = frozenset({
    "aten", "prim", "prims", "rngprims", "higher_order", "profiler", "debugprims", "inductor",
    "quantized", "_quantized", "mkldnn", "onednn", "c10d", "_c10d_functional", "c10d_functional",
    "_dtensor", "sglang", "torchvision", "torchaudio",
})

# Kernel libraries a GPU node of each vendor has installed (what a stand-in replaces when absent).
KERNEL_LIBRARIES: dict[str, tuple[str, ...]] = {
    "nvidia": ("sgl_kernel", "flashinfer", "deep_gemm", "flash_mla", "tilelang", "fast_hadamard_transform"),
    "amd": ("sgl_kernel", "aiter", "tilelang"),
}

# Frames a call site skips: the launching machinery, not the caller.
_MACHINERY = ("/dsakit/", "/torch/", "/triton/", "/tvm_ffi/", "/sgl_kernel/", "/flashinfer/", "/deep_gemm/",
              "/contextlib.py", "/functools.py", "<frozen ")


def launch_site() -> str:
    """The first frame outside the launch machinery: who asked for the kernel."""
    frame: Any = sys._getframe(1)
    while frame is not None and any(part in frame.f_code.co_filename for part in _MACHINERY):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    site = call_site(frame).split(" in ")[0]
    here = os.getcwd() + os.sep
    return site[len(here):] if site.startswith(here) else short_path(site)  # a test file: from the run's folder


def refuse(kernel: str, device: DeviceModel) -> SimulatedKernelLaunch:
    return SimulatedKernelLaunch(kernel, launch_site(), device)


def op_namespace(func: Any) -> str | None:
    """The torch.ops namespace of an op overload (packet), else None (a plain torch function)."""
    namespace = getattr(func, "namespace", None)
    if isinstance(namespace, str):
        return namespace
    qualified = getattr(func, "_qualified_op_name", None)
    return qualified.split("::")[0] if isinstance(qualified, str) and "::" in qualified else None


def is_kernel_op(func: Any, args: Any, kwargs: Any, *, on_cpu: bool) -> bool:
    """A custom op call that would launch a device kernel: it takes tensors (a version or config
    query does not), and, placed on the CPU, has no CPU or composite kernel (one that has runs for
    real on the CPU); on a GPU of another arch, it is not torch's own (or SGLang's Python op)."""
    namespace = op_namespace(func)
    if namespace is None or namespace in ("aten", "prim", "prims") or not _takes_tensors(args, kwargs):
        return False
    if on_cpu:
        return not _has_cpu_kernel(func)
    return namespace not in TORCH_NAMESPACES


def _takes_tensors(args: Any, kwargs: Any) -> bool:
    import torch

    values = [*args, *(kwargs or {}).values()]
    return any(isinstance(v, torch.Tensor) or (isinstance(v, (list, tuple)) and any(
        isinstance(x, torch.Tensor) for x in v)) for v in values)


def _has_cpu_kernel(func: Any) -> bool:
    import torch

    overload = getattr(func, "_overloadname", None)
    if overload is None:  # a packet: its default overload is what a plain call runs
        overload = "default" if "default" in getattr(func, "overloads", lambda: [])() else ""
    qualified = str(getattr(func, "_qualified_op_name", "") or getattr(func, "name", lambda: "")())
    name = qualified if "." in qualified.split("::")[-1] or overload in ("", "default") else f"{qualified}.{overload}"
    try:
        return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
                   for key in ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd"))
    except RuntimeError:  # not a registered operator name: let torch answer the call itself
        return True


def op_name(func: Any) -> str:
    qualified = getattr(func, "_qualified_op_name", None) or getattr(func, "_name", None) or str(func)
    return "torch.ops." + str(qualified).replace("::", ".")


# ---------------------------------------------------------------- guards on present libraries


def _guard_triton(patches: Patches, triton: types.ModuleType, device: DeviceModel) -> None:
    from triton.runtime.jit import JITFunction

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(getattr(self, "fn", None), "__qualname__", None) or getattr(self, "__name__", "?")
        raise refuse(f"the Triton kernel {name}", device)

    patches.set(JITFunction, "run", run)
    import triton.runtime.driver as driver_module  # the module (triton.runtime.driver may name the instance)

    config = getattr(sys.modules.get("triton.runtime.driver", driver_module), "driver", None)
    if config is not None and hasattr(config, "_active"):
        # SGLang asks Triton's driver which target it compiles for (rocm_mla_decode_rope.is_hip at
        # import): the simulated device answers; anything beyond that query would launch
        simulated = _SimulatedTritonDriver(device)
        patches.set(config, "_default", simulated)
        patches.set(config, "_active", simulated)


class _SimulatedTritonDriver:
    def __init__(self, device: DeviceModel) -> None:
        self._device = device

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        device = self._device
        if device.vendor == "amd":
            return GPUTarget("hip", device.gfx or "gfx942", 64)
        major, minor = device.sm or (0, 0)
        return GPUTarget("cuda", major * 10 + minor, 32)

    def get_current_device(self) -> int:
        return 0

    def is_active(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise refuse(f"Triton's driver ({name}) for simulated {self._device.key}", self._device)


def _guard_sglang_jit(patches: Patches, loader: types.ModuleType, device: DeviceModel) -> None:
    original = getattr(loader, "load_jit", None)
    if callable(original):
        def load_jit(*args: Any, **kwargs: Any) -> Any:
            raise refuse(f"SGLang's JIT kernel {'/'.join(map(str, args)) or '?'} (load_jit)", device)

        rebind_everywhere(patches, original, load_jit)


def _guard_flashinfer_jit(patches: Patches, core: types.ModuleType, device: DeviceModel) -> None:
    spec = getattr(core, "JitSpec", None)
    for method in ("build_and_load", "load"):
        if spec is not None and callable(getattr(spec, method, None)):
            def refused(self: Any, *args: Any, _method: str = method, **kwargs: Any) -> Any:
                raise refuse(f"flashinfer's JIT module {getattr(self, 'name', '?')} (JitSpec.{_method})", device)

            patches.set(spec, method, refused)


def _guard_deep_gemm(patches: Patches, deep_gemm: types.ModuleType, device: DeviceModel) -> None:
    for name, value in list(vars(deep_gemm).items()):
        # DeepGEMM's own entry points only, not what it imported (typing.Optional is callable too)
        own = str(getattr(value, "__module__", None) or "deep_gemm").startswith("deep_gemm")
        if own and not name.startswith("_") and callable(value) and not isinstance(value, (type, types.ModuleType)):
            rebind_everywhere(patches, value, _refusing(f"deep_gemm.{name}", device))


def _refusing(kernel: str, device: DeviceModel) -> Callable[..., Any]:
    def launch(*args: Any, **kwargs: Any) -> Any:
        raise refuse(kernel, device)

    return launch


GUARDED_LIBRARIES: dict[str, Callable[[Patches, types.ModuleType, DeviceModel], None]] = {
    "triton.runtime.jit": lambda p, m, d: _guard_triton(p, sys.modules["triton"], d),
    "sglang.kernels.jit.utils.compile.loader": lambda p, m, d: _guard_sglang_jit(p, m, d),
    "flashinfer.jit.core": lambda p, m, d: _guard_flashinfer_jit(p, m, d),
    "deep_gemm": lambda p, m, d: _guard_deep_gemm(p, m, d),
}


def rebind_everywhere(patches: Patches, original: Any, replacement: Any) -> None:
    """Replace `original` in every loaded module that bound it (`from x import f` copies the name)."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is original:
                try:
                    patches.set(module, name, replacement)
                except AttributeError:  # a module that refuses new values (torch's config modules)
                    continue


# ---------------------------------------------------------------- stand-ins for absent libraries


class _GuardType(type):
    """A stand-in attribute: a class (so `isinstance` and subclassing still parse) whose call refuses."""

    _dsakit_kernel: str
    _dsakit_device: DeviceModel

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise refuse(cls._dsakit_kernel, cls._dsakit_device)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _guard(f"{cls._dsakit_kernel}.{name}", cls._dsakit_device)


def _guard(kernel: str, device: DeviceModel) -> Any:
    return _GuardType(kernel.rsplit(".", 1)[-1], (), {"_dsakit_kernel": kernel, "_dsakit_device": device})


class StandIn(types.ModuleType):
    """A kernel library this machine lacks: importable (with any submodule); every name refuses to launch."""

    def __init__(self, name: str, device: DeviceModel) -> None:
        super().__init__(name, f"dsakit stand-in: {name} is not installed here; simulated {device.key} has it")
        self._dsakit_device = device
        self.__path__: list[str] = []  # a package: submodules import through the finder

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _guard(f"{self.__name__}.{name}", self._dsakit_device)
        setattr(self, name, value)
        return value


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `lib` and `lib.*` for each absent kernel library; installed first on sys.meta_path."""

    dsakit_stand_in = True  # module gates (dsakit.gates.table) see through it: still absent here

    def __init__(self, libraries: Sequence[str], device: DeviceModel) -> None:
        self.libraries = tuple(libraries)
        self.device = device

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in self.libraries:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StandIn(spec.name, self.device)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def import_present_libraries(device: DeviceModel) -> list[str]:
    """Import the vendor's kernel libraries this machine has, before the simulation: their import picks
    the binary for the real arch (sgl_kernel loads sm100/ ops for a capability of 10.x, which a GPU of
    another arch does not have); their kernels are refused under the simulation anyway."""
    imported: list[str] = []
    for name in KERNEL_LIBRARIES.get(device.vendor, ()):
        if name not in absent_libraries(device):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a library that does not import here cannot launch either
                continue
            imported.append(name)
    return imported


def absent_libraries(device: DeviceModel, *, same_vendor: bool = True) -> list[str]:
    """The vendor's kernel libraries this machine does not have; on a machine of another vendor (or
    none) every one of them: an installed sgl_kernel built for CUDA is not the one an MI300 has."""
    if not same_vendor:
        return list(KERNEL_LIBRARIES.get(device.vendor, ()))
    absent: list[str] = []
    for name in KERNEL_LIBRARIES.get(device.vendor, ()):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            absent.append(name)
    return absent


def install_stand_ins(patches: Patches, device: DeviceModel, *, same_vendor: bool = True) -> list[str]:
    """Stand-ins for the absent libraries, removed (modules included) when `patches` restore."""
    libraries = absent_libraries(device, same_vendor=same_vendor)
    if not libraries:
        return []
    finder = StandInFinder(libraries, device)
    sys.meta_path.insert(0, finder)

    def uninstall() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name in [n for n, m in sys.modules.items() if isinstance(m, StandIn)]:
            del sys.modules[name]

    patches.callback(uninstall)
    return libraries
