"""`simulate_device("sm103")`: SGLang's own device probes answer as a simulated device.

Owns: patching the probes of `dsakit.simulation.probes` (torch facts, module constants,
cached probe functions), the stand-ins for names bound by import-time branches, the kernel guards
(`SimulatedKernelLaunch`, a skip reason, never a fake result), and restoring all of it on exit.
Process-global and not thread-safe (simulations nest, innermost first; xdist workers are
processes). Imports torch and SGLang only when entered.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, cast

from dsakit import active
from dsakit.mocks.call_site import call_site
from dsakit.errors import UsageError
from dsakit.gates.device_model import DeviceModel, real_device, simulated_model
from dsakit.devices import DEVICES
from dsakit.reasons import Reason
from dsakit.stack.import_hooks import Patches
from dsakit.simulation.probes import ATT, COMMON, KOPS, PROBES

KERNEL_LAUNCH = "simulated-kernel-launch"

# Kernel entry points reachable from construction and init_forward_metadata: module -> {name: kernel}.
KERNEL_GUARDS: dict[str, dict[str, str]] = {
    f"{ATT}.dsa_backend": {
        "resolve_paged_mqa_logits_metadata_fn": "the DeepGEMM/JIT paged-MQA-logits schedule",
        "resolve_num_sms": "the DeepGEMM SM-count query",
        "seqlens_expand_triton": "the Triton seqlens_expand kernel",
    },
    f"{KOPS}.dsv4.topk": {"plan_topk_v2": "the JIT top-k v2 plan"},
    f"{KOPS}.dsv4": {"plan_topk_v2": "the JIT top-k v2 plan"},
    f"{ATT}.deepseek_v4_backend": {
        "_init_compression_metadata_triton": "the Triton C4/C128 compression-metadata kernel",
    },
}
_CACHE_ONCE = ("is_hip_runtime", "is_musa_runtime", "is_sail_runtime")  # sglang.kernels.jit.utils.common
_JIT_COMMON = "sglang.kernels.jit.utils.common"
_TRTLLM = f"{ATT}.trtllm_mla_backend"
_FLASH_MLA = f"{KOPS}.flash_mla_interface"


class SimulatedKernelLaunch(RuntimeError):
    """The simulated branch would launch a kernel here that cannot run on this machine; `reason` is
    the skip reason (data). `why`: why it cannot run here (default: no kernel runs under this
    simulation)."""

    def __init__(self, kernel: str, site: str, device: DeviceModel, why: str | None = None) -> None:
        self.kernel, self.site = kernel, site
        self.reason = Reason(
            KERNEL_LAUNCH,
            f"{kernel} (called at {site}) would launch a kernel for simulated {device.key}; "
            f"{why or 'not launched under simulation'}: it runs on real {device.name} hardware",
        )
        super().__init__(str(self.reason))


class SimulatedKernelAbsent(RuntimeError):
    """The simulated branch launches a kernel that does not exist for the simulated device (FA3 on a
    B300): a real one fails here, so the test fails (never a skip)."""

    def __init__(self, kernel: str, site: str, device: DeviceModel, exists_for: str, why: str) -> None:
        self.kernel, self.site = kernel, site
        super().__init__(
            f"{kernel} (called at {site}) does not exist for simulated {device.key} ({device.name}): it "
            f"exists for {exists_for} ({why}); a real {device.name} fails here. The code that chose "
            "it takes a path this device cannot run")


def active_simulation() -> DeviceModel | None:
    """The device being simulated right now, or None (the innermost of `dsakit.active`'s stack)."""
    return cast("DeviceModel | None", active.simulated_device())  # only DeviceModels are pushed


def _caller_site() -> str:
    frame: Any = sys._getframe(2)
    while frame is not None and "/sglang/" not in frame.f_code.co_filename:
        frame = frame.f_back
    return call_site(frame if frame is not None else sys._getframe(2)).split(" in ")[0]


def is_this_machine(device: DeviceModel, real: DeviceModel) -> bool:
    """The simulated `device` is this machine's own accelerator (same vendor and SM / gfx arch): its
    kernels run for real, nothing is refused."""
    same_vendor = real.is_gpu and real.vendor == device.vendor
    return same_vendor and (real.gfx == device.gfx if device.vendor == "amd" else real.sm == device.sm)


def _launch_guard(kernel: str, device: DeviceModel) -> Callable[..., Any]:
    def launch(*args: Any, **kwargs: Any) -> Any:
        raise SimulatedKernelLaunch(kernel, _caller_site(), device)

    return launch


def _module(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - kernel libraries absent here; the module is then not patched
        return None


def _touched() -> list[str]:
    """Every module the simulation patches or clears."""
    names = {m for p in PROBES for m in p.modules} | set(KERNEL_GUARDS) | {_TRTLLM, COMMON, _JIT_COMMON}
    return sorted(names | {f"{ATT}.deepseek_v4_backend_hip_radix"})


def _modules() -> dict[str, types.ModuleType]:
    """Every module the simulation touches, imported BEFORE patching: its constants then come from
    the real host, and a first import inside the scope would keep simulated ones after it."""
    return {name: mod for name in _touched() if (mod := _module(name)) is not None}


def _imported_modules() -> dict[str, types.ModuleType]:
    """The modules of `_modules` that are imported already (nothing is imported)."""
    return {name: sys.modules[name] for name in _touched() if name in sys.modules}


def _clear_caches(modules: dict[str, types.ModuleType]) -> None:
    common = modules.get(COMMON)
    if common is not None:
        for value in vars(common).values():
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()
    for probe in PROBES:
        if probe.kind != "cached":
            continue
        for name in probe.modules:
            clear = getattr(getattr(modules.get(name), probe.name, None), "cache_clear", None)
            if callable(clear):
                clear()
    jit = modules.get(_JIT_COMMON)
    for name in _CACHE_ONCE:  # cache_once keeps a dict in its closure, without cache_clear
        for cell in getattr(getattr(jit, name, None), "__closure__", None) or ():
            if isinstance(cell.cell_contents, dict):
                cell.cell_contents.clear()


class _Props:
    """What torch.cuda.get_device_properties answers for a simulated GPU."""

    def __init__(self, device: DeviceModel) -> None:
        self.name = device.name
        self.major, self.minor = device.sm or (0, 0)
        self.multi_processor_count = DEVICES[device.key].multiprocessors
        self.total_memory = device.memory_bytes or 0
        self.gcnArchName = f"{device.gfx}:sramecc+:xnack-" if device.gfx else ""
        self.warp_size = 64 if device.vendor == "amd" else 32
        self.is_integrated = False
        self.L2_cache_size = 0


def _no_gpu(what: str) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"simulated cpu: no CUDA or ROCm device ({what})")

    return fail


def _patch_torch(patches: Patches, device: DeviceModel, modules: dict[str, types.ModuleType]) -> None:
    import torch

    cuda = torch.cuda
    patches.set(cuda, "is_available", lambda: device.is_gpu)
    patches.set(cuda, "device_count", lambda: device.device_count)
    if device.is_gpu:
        patches.set(cuda, "get_device_capability", lambda *a, **k: device.sm)
        patches.set(cuda, "get_device_properties", lambda *a, **k: _Props(device))
        patches.set(cuda, "get_device_name", lambda *a, **k: device.name)
        patches.set(cuda, "current_device", lambda: 0)
        patches.set(cuda, "is_current_stream_capturing", lambda: False)
    else:
        for name in ("get_device_capability", "get_device_properties", "get_device_name", "current_device"):
            patches.set(cuda, name, _no_gpu(f"torch.cuda.{name}"))
    host_cuda = torch.version.cuda
    nvidia, amd = device.vendor == "nvidia", device.vendor == "amd"
    if amd and torch.version.hip is None:
        # tvm-ffi (SGLang's JIT kernels import it) builds a ROCm DLPack addon at import when torch
        # says HIP: without ROCm the build fails, costs ~15 s and leaves a tvm-ffi-torch-c-dlpack-*
        # folder in $TMPDIR, in every process. This torch has the DLPack exchange API of its own.
        patches.setdefault_env(_TVM_FFI_ADDON_OFF, "1")
    patches.set(torch.version, "cuda", (host_cuda or device.toolkit) if nvidia else (None if amd else host_cuda))
    patches.set(torch.version, "hip", device.toolkit if amd else None)


_TVM_FFI_ADDON_OFF = "TVM_FFI_DISABLE_TORCH_C_DLPACK"


class _TorchSeenByProbes(types.ModuleType):
    """torch as SGLang's probe module (`sglang.srt.utils.common`) sees it under a simulation: torch
    itself, except `version.cuda`, which is the device's toolkit. The version-gated probes
    (`_check_cuda_device_version`: is_sm100_supported, is_sm120_supported, is_blackwell, ...) then
    compare the device's CUDA version, as the device table does, while `torch.version.cuda` keeps
    the build's for everything else (torchvision and others compare it with theirs at import)."""

    def __init__(self, torch: types.ModuleType, cuda: str) -> None:
        super().__init__("torch")
        self._torch = torch
        self.version = types.SimpleNamespace(**{**vars(torch.version), "cuda": cuda})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)


def _patch_sm_query(patches: Patches, device: DeviceModel, modules: dict[str, types.ModuleType]) -> None:
    common = modules.get(COMMON)
    if common is None:
        return
    if hasattr(common, "_get_device_sm_via_nvml"):
        # 0.5.23 asks NVML before torch: on a real GPU host it would answer the real SM
        patches.set(common, "_get_device_sm_via_nvml", lambda: None)
    torch = vars(common).get("torch")
    if (device.vendor == "nvidia" and device.toolkit and isinstance(torch, types.ModuleType)
            and getattr(torch.version, "cuda", None) != device.toolkit):
        patches.set(common, "torch", _TorchSeenByProbes(torch, device.toolkit))


def _patch_constants(patches: Patches, device: DeviceModel, modules: dict[str, types.ModuleType]) -> None:
    for probe in PROBES:
        if probe.kind != "constant" or not probe.patched or probe.answer is None:
            continue
        for name in probe.modules:
            module = modules.get(name)
            if module is not None and probe.name in vars(module):
                patches.set(module, probe.name, probe.value(device))


def _flash_mla_stand_in(device: DeviceModel) -> types.ModuleType:
    """flash_mla_interface imports the flash_mla wheel; under simulation no FlashMLA kernel may run.
    `get_mla_metadata()` without arguments only builds an empty scheduler object (no launch)."""
    stub = types.ModuleType(_FLASH_MLA)
    sched = type("FlashMLASchedMeta", (), {})
    schedule = _launch_guard("flash_mla.get_mla_metadata", device)

    def get_mla_metadata(*args: Any, **kwargs: Any) -> Any:
        return (sched(), None) if not args and not kwargs else schedule(*args, **kwargs)

    stub.__dict__.update(
        SPLIT_KV_MIN_TOPK=641, FlashMLASchedMeta=sched, get_mla_metadata=get_mla_metadata,
        flash_mla_with_kvcache=_launch_guard("flash_mla.flash_mla_with_kvcache", device),
    )
    return stub


def _patch_import_time_names(patches: Patches, device: DeviceModel, modules: dict[str, types.ModuleType]) -> None:
    """Names an import-time branch bound (or skipped) on the real host: replaced for the device."""
    trt = modules.get(_TRTLLM)
    if trt is not None and device.is_gpu and hasattr(trt, "_multi_ctas_kv_counter_bytes"):
        sms = DEVICES[device.key].multiprocessors

        # flashinfer sizes the multi-CTA KV counter from the device's SM count; the size is a
        # stand-in (only the buffer's existence and its max_batch_size read are meaningful)
        def counter_bytes(device_: Any, num_q_heads: int, batch_size: int) -> int:
            return 4 * max(1, min(batch_size, 64)) * max(1, num_q_heads) * max(1, sms)

        patches.set(trt, "_multi_ctas_kv_counter_bytes", counter_bytes)
    dsa = modules.get(f"{ATT}.dsa_backend")
    if dsa is not None and ("deep_gemm" in vars(dsa) or _imports_deep_gemm(dsa)):
        # 0.5.17: `if is_cuda(): import deep_gemm` at import; metadata calls deep_gemm.* directly
        fake = types.ModuleType("deep_gemm")
        for name in ("get_paged_mqa_logits_metadata", "get_num_sms"):
            setattr(fake, name, _launch_guard(f"deep_gemm.{name}", device))
        patches.set(dsa, "deep_gemm", fake)
    package = _module(KOPS) if device.is_gpu else None
    if package is not None:
        stub = _flash_mla_stand_in(device)
        patches.set(package, "flash_mla_interface", stub)
        old = sys.modules.get(_FLASH_MLA)
        sys.modules[_FLASH_MLA] = stub

        def restore_module() -> None:
            if old is None:
                sys.modules.pop(_FLASH_MLA, None)
            else:
                sys.modules[_FLASH_MLA] = old

        patches.callback(restore_module)


def _imports_deep_gemm(module: types.ModuleType | None) -> bool:
    try:
        with open(str(getattr(module, "__file__", "")), encoding="utf-8") as handle:
            return "\n    import deep_gemm" in handle.read()
    except OSError:
        return False


def _patch_kernels(patches: Patches, device: DeviceModel, modules: dict[str, types.ModuleType]) -> None:
    for name, kernels in KERNEL_GUARDS.items():
        module = modules.get(name)
        for attribute, kernel in kernels.items():
            if module is not None and attribute in vars(module):
                guard = _launch_guard(kernel, device)
                guard.__wrapped__ = vars(module)[attribute]  # type: ignore[attr-defined]  # its signature
                patches.set(module, attribute, guard)


def _isolate_buffers(patches: Patches) -> None:
    """SGLang's get_buffer() caches by name, process-wide: the scope gets its own registry, so it
    neither reuses a real-device buffer nor leaves its own behind."""
    try:
        from sglang.srt.runtime_context import get_context
    except ImportError:  # no SGLang (a downstream backend), or a release without the registry
        return
    resources = getattr(get_context(), "resources", None)
    if resources is not None and hasattr(resources, "buffers"):
        patches.set(resources, "buffers", {})


def _torch_present() -> bool:
    return importlib.util.find_spec("torch") is not None


@contextlib.contextmanager
def simulate_device(name: str, *, import_first: bool = True) -> Iterator[DeviceModel]:
    """`with dsakit.simulate_device("sm103") as device:` — SGLang's backends take that device's
    branch. Names: the keys of the device table, `dsakit.devices.DEVICES` (sm90, sm103, gfx942,
    cpu, ...), or an alias (b300, ...).
    Everything is restored on exit, also when the body raised. Nests (the innermost device answers
    until it exits: a test's simulation inside a whole-run one); not thread-safe.

    import_first=True imports the probed SGLang modules on the real host before patching their
    constants (a scope inside a run); False patches only modules already imported and lets the rest
    import under the simulation, their import-time branches taking the device's (a whole run)."""
    device = simulated_model(name)
    own_arch = is_this_machine(device, real_device())  # read before torch answers as the device
    modules = _modules() if import_first else _imported_modules()
    patches = Patches()
    active.enter_device(device)
    patches.callback(active.leave_device)
    try:
        if _torch_present():
            _patch_torch(patches, device, modules)
        _isolate_buffers(patches)  # imports SGLang's runtime context (under the simulation when lazy)
        if not import_first:
            modules.update(_imported_modules())
        _patch_sm_query(patches, device, modules)
        patches.callback(lambda: _clear_caches(modules))  # simulated answers must not outlive the scope
        _clear_caches(modules)  # real answers cached earlier must not win inside it
        _patch_constants(patches, device, modules)
        if not own_arch:  # on its own arch the real host bound them right, and its kernels run
            _patch_import_time_names(patches, device, modules)
            _patch_kernels(patches, device, modules)
        yield device
    finally:
        patches.restore()


# ---------------------------------------------------------------- a whole run: patches as modules arrive


def watched_modules() -> list[str]:
    """The modules whose arrival a whole-run simulation patches (torch first)."""
    return ["torch", "sglang.srt.runtime_context", *_touched()]


def patch_arrived(patches: Patches, device: DeviceModel, name: str, module: types.ModuleType, *,
                  guard_kernels: bool = True) -> None:
    """What the simulation patches once `name` has imported: torch's facts, SGLang's buffer registry,
    a probe module's constants, cached probes and (unless the device is this machine's own,
    guard_kernels=False) kernel entry points."""
    if name == "torch":
        _patch_torch(patches, device, {})
        return
    if name == "sglang.srt.runtime_context":
        _isolate_buffers(patches)
        return
    modules = {name: module}
    _patch_sm_query(patches, device, modules)
    _clear_caches(modules)
    patches.callback(lambda: _clear_caches(modules))
    _patch_constants(patches, device, modules)
    if guard_kernels:
        _patch_kernels(patches, device, modules)


@contextlib.contextmanager
def announced(device: DeviceModel) -> Iterator[DeviceModel]:
    """`active_simulation()` answers `device` inside (a whole run, whose patches come as modules arrive)."""
    active.enter_device(device)
    try:
        yield device
    finally:
        active.leave_device()


# ---------------------------------------------------------------- pytest wiring (the run's DsakitSession hands off)

MARKER = "dsakit_simulate"
FIXTURE = "simulated_device"


def parametrize(metafunc: Any, run_device: str | None) -> None:
    """`@pytest.mark.dsakit_simulate(*names)` on a test using `simulated_device`: one test per
    device (no names: every simulated profile). The run's simulated device (`run_device`, a key;
    None: the real one) narrows the marker to that one where the marker names it; a marker naming
    other devices keeps them, each simulated inside the run's (simulations nest)."""
    from dsakit.gates.device_model import SIMULATED

    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or FIXTURE not in metafunc.fixturenames:
        return
    try:
        names = [simulated_model(n).key for n in marker.args] or list(SIMULATED)
    except UsageError as error:
        raise UsageError(f"{metafunc.definition.nodeid}: {error}") from None
    if run_device in names:
        names = [run_device]
    metafunc.parametrize(FIXTURE, names, indirect=True, ids=[f"device={n}" for n in names])


def fixture(request: Any, run_device: str | None) -> Iterator[DeviceModel]:
    """The `simulated_device` fixture: the marker's device, else the run's simulated device
    (`run_device`: --dsakit-device, $DSAKIT_DEVICE or the ini key, as the run resolved it); the
    simulation is active for the whole test, fixtures that depend on it included."""
    import pytest

    name = getattr(request, "param", None) or run_device
    if name is None:
        pytest.skip(str(Reason("simulation-not-selected",
                               "needs a simulated device: --dsakit-device NAME or "
                               "@pytest.mark.dsakit_simulate(NAME, ...); the real device runs the "
                               "unsimulated suites")))
    with simulate_device(name) as device:
        yield device
