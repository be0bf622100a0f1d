"""Kernel launches under a simulation: what runs, what is refused, what a reference stands in for.

Owns the guards on each route to a device kernel. Where this machine's GPU cannot run kernels for
the simulated device (no GPU, another vendor) every route refuses with `[simulated-kernel-launch]`:
torch custom ops outside torch's own namespaces (sgl-kernel, FlashMLA, FA3, ...), Triton's
`JITFunction.run`, the JIT loaders (SGLang's `load_jit`, flashinfer's `JitSpec`; not tvm-ffi's
`load_module`, which also loads non-kernel bindings), DeepGEMM. On a GPU of the simulated vendor
(a portable plan) only the families of `kernel_archs.ARCH_ONLY` are guarded: refused where this GPU
lacks them (or, where `reference_kernels` declares one, run by a torch reference after the call
passed the simulated arch's rules), failed (`SimulatedKernelAbsent`) where the simulated device
lacks them; the entry points whose builds differ per arch (`arch_rules`) check each launch against
the simulated arch's rules first (`ArchRuleBreach`). Also the stand-in modules for kernel libraries
the simulated GPU would have installed but this machine lacks. Must not run a kernel it refuses.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from dsakit.errors import ArchRuleBreach
from dsakit.gates.device_model import DeviceModel
from dsakit.mocks.call_site import shown_path, site_outside
from dsakit.stack.import_hooks import Patches, rebind_everywhere
from dsakit.stack.kernel_libraries import installed_on, library_paths
from dsakit.simulation.arch_rules import ArchEntry, breaches, entry_of
from dsakit.simulation.kernel_archs import ARCH_ONLY, KernelFamily, family_of_jit
from dsakit.simulation.probe_patches import SimulatedKernelAbsent, SimulatedKernelLaunch

# Namespaces of torch.ops whose kernels are torch's own (or SGLang's Python custom ops, whose device
# kernels are guarded where they launch); every other namespace is a kernel library.
TORCH_NAMESPACES = frozenset({
    "aten", "prim", "prims", "rngprims", "higher_order", "profiler", "debugprims", "inductor",
    "quantized", "_quantized", "mkldnn", "onednn", "c10d", "_c10d_functional", "c10d_functional",
    "_dtensor", "sglang", "torchvision", "torchaudio",
})

# Frames a call site skips: the launching machinery (dsakit, torch, every kernel library), not the caller.
_MACHINERY = ("/dsakit/", "/torch/", *library_paths(), "/contextlib.py", "/functools.py", "<frozen ")


def launch_site() -> str:
    """The first frame outside the launch machinery: who asked for the kernel."""
    return site_outside(_MACHINERY, depth=1)


def site_of(tb: Any) -> str:
    """The innermost frame of a traceback outside the launch machinery: who called the kernel that failed."""
    site = None
    while tb is not None:
        if not any(part in tb.tb_frame.f_code.co_filename for part in _MACHINERY):
            site = f"{shown_path(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site or "<unknown>"


def refuse(kernel: str, device: DeviceModel, why: str | None = None) -> SimulatedKernelLaunch:
    REFUSED.setdefault(kernel)
    return SimulatedKernelLaunch(kernel, launch_site(), device, why)


def family_error(family: KernelFamily, kernel: str, device: DeviceModel, real: str | None) -> Exception | None:
    """What a launch of `family` raises under this simulation (None: it runs for real)."""
    verdict = family.verdict(device.key, real)
    if verdict == "run":
        return None
    if verdict == "absent":
        return SimulatedKernelAbsent(kernel, launch_site(), device, family.runs_on(), family.why)
    here = f"this GPU is {real}" if real else "this machine has no GPU of its vendor"
    return refuse(kernel, device, f"{family.name} exists for {family.runs_on()} only and {here} ({family.why})")


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
    torch = sys.modules.get("torch")
    if torch is None:  # no tensor exists yet
        return False
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


def _jit_error(kernel: str, name: str, device: DeviceModel, real: str | None, portable: bool) -> Exception | None:
    """A JIT module `name`: portable plans build it for this GPU unless an arch-only family names it."""
    family = family_of_jit(name)
    if family is not None:
        error = family_error(family, kernel, device, real if portable else None)
    else:
        error = None if portable else refuse(kernel, device)
    if error is None:
        RAN.setdefault(f"JIT {name}")
    return error


# What this process's current test launched: the kernels that ran for real under a portable plan
# ("Triton x", "JIT y"), those a reference stood in for, those refused. The whole-run simulation
# hands them on with the test's report and clears them per test.
RAN: dict[str, None] = {}
STOOD_IN: dict[str, None] = {}
REFUSED: dict[str, None] = {}


def record_triton(patches: Patches, jit: types.ModuleType, device: DeviceModel) -> None:
    """A portable plan's Triton: kernels launch for real (built for this GPU); each is recorded."""
    run = getattr(getattr(jit, "JITFunction", None), "run", None)
    if run is None:
        return

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        RAN.setdefault(f"Triton {getattr(getattr(self, 'fn', None), '__name__', '?')}")
        return run(self, *args, **kwargs)

    patches.set(jit.JITFunction, "run", recorded)


def _guard_sglang_jit(patches: Patches, loader: types.ModuleType, device: DeviceModel, *,
                      real: str | None = None, portable: bool = False) -> None:
    original = getattr(loader, "load_jit", None)
    if callable(original):
        def load_jit(*args: Any, **kwargs: Any) -> Any:
            name = "/".join(map(str, args)) or "?"
            error = _jit_error(f"SGLang's JIT kernel {name} (load_jit)", name, device, real, portable)
            if error is not None:
                raise error
            return original(*args, **kwargs)

        rebind_everywhere(patches, original, load_jit)


def _guard_flashinfer_jit(patches: Patches, core: types.ModuleType, device: DeviceModel, *,
                          real: str | None = None, portable: bool = False) -> None:
    spec = getattr(core, "JitSpec", None)
    for method in ("build_and_load", "load"):
        original = getattr(spec, method, None) if spec is not None else None
        if callable(original):
            def guarded(self: Any, *args: Any, _method: str = method, _original: Any = original, **kwargs: Any) -> Any:
                name = str(getattr(self, "name", "?"))
                error = _jit_error(f"flashinfer's JIT module {name} (JitSpec.{_method})", name, device, real, portable)
                if error is not None:
                    raise error
                return _original(self, *args, **kwargs)

            patches.set(spec, method, guarded)


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


# ---------------------------------------------------------------- a portable plan: arch-only families


def arch_only_modules() -> dict[str, list[tuple[KernelFamily, str]]]:
    """module -> (family, function) for every entry point of the arch-only table."""
    modules: dict[str, list[tuple[KernelFamily, str]]] = {}
    for family in ARCH_ONLY:
        for entry in family.entry_points:
            module, _, function = entry.partition(":")
            modules.setdefault(module, []).append((family, function))
    return modules


def guard_entry_points(patches: Patches, module: types.ModuleType, entries: Sequence[tuple[KernelFamily, str]],
                       device: DeviceModel, real: str | None) -> None:
    """Each arch-only entry point of `module` that cannot run here, replaced (everywhere it was bound)
    by a guard that raises before anything launches."""
    from dsakit.simulation.reference_kernels import REFERENCES

    for family, function in entries:
        original = vars(module).get(function)
        if not callable(original):
            continue
        kernel = f"{module.__name__}.{function}"
        verdict = family.verdict(device.key, real)
        if verdict == "run":
            continue
        target = f"{module.__name__}:{function}"
        reference = REFERENCES.get(target) if verdict == "refuse" else None
        if reference is not None:
            launch = _through_reference(kernel, original, reference, family, device, real)
        else:
            def launch(*args: Any, _family: KernelFamily = family, _kernel: str = kernel, _original: Any = original,
                       _entry: ArchEntry | None = entry_of(target) if verdict == "refuse" else None,
                       **kwargs: Any) -> Any:
                # no stand-in: the simulated arch's rules still judge the call (a breach fails, as on
                # the simulated device), then the launch is refused
                if _entry is not None:
                    breach = arch_rule_breach(_kernel, _entry, _bind(_original, _entry, args, kwargs), device, real)
                    if breach is not None:
                        raise breach
                error = family_error(_family, _kernel, device, real)
                raise error if error is not None else AssertionError(f"{_kernel}: guarded, yet runnable")

        launch.__name__ = function
        launch.__wrapped__ = original  # type: ignore[attr-defined]  # its signature, for what wraps it
        rebind_everywhere(patches, original, launch)


def _signature(original: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(original)
    except (TypeError, ValueError):  # a C++ function: no Python signature
        return None


_SIGNATURES: dict[int, tuple[Any, inspect.Signature | None]] = {}  # id -> (the function, kept alive; its signature)


def _bind(original: Any, entry: ArchEntry | None, args: Any, kwargs: Any) -> dict[str, Any]:
    """The call's arguments by name (a C++ function without a signature: the entry's `params`)."""
    known = _SIGNATURES.get(id(original))
    if known is None or known[0] is not original:
        known = _SIGNATURES[id(original)] = (original, _signature(original))
    signature = known[1]
    if signature is None:
        return {**dict(zip(entry.params if entry is not None else (), args, strict=False)), **kwargs}
    bound = signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def arch_rule_breach(kernel: str, entry: ArchEntry, arguments: dict[str, Any], device: DeviceModel,
                     real: str | None) -> ArchRuleBreach | None:
    """What this call breaks of the simulated arch's rules, as the failure it raises (None: nothing)."""
    found = breaches(entry, arguments, device.key, real)
    if not found:
        return None
    site = launch_site()
    lines = "\n".join(f"  {b.describe(device.key, real)}" for b in found)
    here = (f"which {real or 'this GPU'} accepts" if not any(b.breaks_here for b in found)
            else f"as {real} would (SGLang takes this call only where it simulates {device.key})")
    return ArchRuleBreach(
        f"{entry.kernel} ({kernel}), called at {site}, breaks simulated {device.key}'s rules for it: a real "
        f"{device.name} refuses or miscomputes this call, {here}:\n{lines}\nSGLang's call site: "
        f"{entry.callers} (nothing was launched; dsakit/simulation/arch_rules.py)",
        kernel=kernel, argument=found[0].rule.argument, site=site)


def _through_reference(kernel: str, original: Any, reference: Any, family: KernelFamily, device: DeviceModel,
                       real: str | None) -> Callable[..., Any]:
    """An arch-only entry point run by its reference: the simulated arch's rules first (a breach
    fails), then the reference on this GPU; a call the reference does not model is refused."""
    entry = entry_of(reference.target)

    def launch(*args: Any, **kwargs: Any) -> Any:
        arguments = _bind(original, entry, args, kwargs)
        breach = arch_rule_breach(kernel, entry, arguments, device, real) if entry is not None else None
        if breach is not None:
            raise breach
        beyond = reference.unmodeled(arguments)
        if beyond is not None:
            here = f"this GPU is {real}" if real else "this machine has no GPU of its vendor"
            raise refuse(kernel, device, f"{family.name} exists for {family.runs_on()} only and {here}; "
                         f"its stand-in does not model this call ({beyond})")
        STOOD_IN.setdefault(kernel)
        return reference.run(arguments)

    return launch


def check_arch_rules(patches: Patches, module: types.ModuleType, entries: Sequence[tuple[ArchEntry, str]],
                     device: DeviceModel, real: str | None) -> None:
    """Each entry point of `module` whose builds differ per arch, where it runs for real here (not
    an arch-only one, which `guard_entry_points` owns): checked against the simulated arch's rules
    before each launch, everywhere it was bound."""
    for entry, function in entries:
        original = vars(module).get(function)
        kernel = f"{module.__name__}.{function}"
        if not callable(original) or getattr(original, "_dsakit_arch_checked", False):
            continue

        def launch(*args: Any, _entry: ArchEntry = entry, _original: Any = original, _kernel: str = kernel,
                   **kwargs: Any) -> Any:
            arguments = _bind(_original, _entry, args, kwargs)
            breach = arch_rule_breach(_kernel, _entry, arguments, device, real)
            if breach is not None:
                raise breach
            if _entry.runs_here is not None:
                return _entry.runs_here(_original, arguments)
            return _original(*args, **kwargs)

        launch.__name__ = function
        launch.__wrapped__ = original  # type: ignore[attr-defined]
        launch._dsakit_arch_checked = True  # type: ignore[attr-defined]
        rebind_everywhere(patches, original, launch)


def runnable_arch_rules(device: DeviceModel, real: str | None) -> dict[str, list[tuple[ArchEntry, str]]]:
    """module -> (entry, function) for the per-arch-rule entry points that run for real here (the
    arch-only ones this GPU lacks are `guard_entry_points`' and their references')."""
    from dsakit.simulation.arch_rules import entries_by_module
    from dsakit.simulation.kernel_archs import family_of_entry

    runnable: dict[str, list[tuple[ArchEntry, str]]] = {}
    for module, entries in entries_by_module().items():
        for entry, function in entries:
            family = family_of_entry(f"{module}:{function}")
            if family is None or family.verdict(device.key, real) == "run":
                runnable.setdefault(module, []).append((entry, function))
    return runnable


def jit_guards(real: str | None, portable: bool) -> dict[str, Callable[[Patches, types.ModuleType, DeviceModel], None]]:
    """The JIT loaders' guards of a plan: name-checked against the arch-only table."""
    return {
        "sglang.kernels.jit.utils.compile.loader":
            lambda p, m, d: _guard_sglang_jit(p, m, d, real=real, portable=portable),
        "flashinfer.jit.core": lambda p, m, d: _guard_flashinfer_jit(p, m, d, real=real, portable=portable),
        **({"triton.runtime.jit": record_triton} if portable else {}),
    }


# ---------------------------------------------------------------- stand-ins for absent libraries


class AbsentLibraryValue(type):
    """A stand-in attribute or answer: a class (so `isinstance` and subclassing still parse) that
    configuration calls and decorators pass through, and whose launch (a call with tensors) or use as
    a number (arithmetic, comparison, int / index) refuses: an absent library computed it.
    The name shows in a TypeError where a library takes it as an argument (whole_run's `_explain`
    reads it). A stand-in stays truthy and iterable-free as a class is: import-time `or` / `if` work."""

    _dsakit_kernel: str
    _dsakit_device: DeviceModel

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not _takes_tensors(args, kwargs):
            # a configuration or query call (tilelang.set_log_level, a decorator factory): it runs,
            # answering another stand-in; a call with tensors would launch, and refuses
            return _guard(f"{cls._dsakit_kernel}()", cls._dsakit_device)
        raise refuse(cls._dsakit_kernel, cls._dsakit_device)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _guard(f"{cls._dsakit_kernel}.{name}", cls._dsakit_device)

    def _used(cls, *args: Any) -> Any:
        raise refuse(f"{cls._dsakit_kernel} (the answer of a kernel library absent here, used as a value)",
                     cls._dsakit_device)

    __int__ = __float__ = __index__ = _used
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = _used
    __lt__ = __le__ = __gt__ = __ge__ = _used


def _guard(kernel: str, device: DeviceModel) -> Any:
    answer = STAND_IN_QUERIES.get(kernel)
    if answer is not None:
        return lambda *args, **kwargs: answer(device)
    return AbsentLibraryValue(kernel.rsplit(".", 1)[-1], (), {"_dsakit_kernel": kernel, "_dsakit_device": device})


# Device queries of kernel libraries, answered from the device table where the library stands in
# (on a machine that has it, its own code asks torch, whose answer is the simulated device's).
STAND_IN_QUERIES: dict[str, Callable[[DeviceModel], Any]] = {
    "flashinfer.utils.get_device_sm_count": lambda device: _entry(device).multiprocessors,
    "flashinfer.utils.get_compute_capability": lambda device: device.sm,
    "flashinfer.utils.is_sm90a_supported": lambda device: device.vendor == "nvidia" and (device.sm or (0,))[0] == 9,
    "flashinfer.utils.is_sm100a_supported": lambda device: device.vendor == "nvidia" and (device.sm or (0,))[0] == 10,
}


def _entry(device: DeviceModel) -> Any:
    from dsakit.devices import DEVICES

    return DEVICES[device.key]


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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """A submodule that shadows a callable of the same name (`tilelang.jit` after `import
        tilelang.jit.adapter`): called as that callable would be."""
        return _guard(self.__name__, self._dsakit_device)(*args, **kwargs)


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
    for name in installed_on(device.vendor):
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
        return list(installed_on(device.vendor))
    absent: list[str] = []
    for name in installed_on(device.vendor):
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
