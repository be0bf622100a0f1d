"""THE device table: every simulated device is one entry, and what SGLang's probes answer on it.

Owns: the entries (vendor, SM / gfx, toolkit, memory, SMs, name, aliases, in pr-check's default)
and the answers (`ANSWERS`: `is_sm100_supported`, `device_sm`, ...) computed from an entry the way
SGLang computes them. Option help, gates, audit, simulation, pr-check and the CLI read it; a device
is one entry in `DEVICES`. Must not import torch, SGLang or any other dsakit module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from dsakit.reasons import FrozenRecord

Vendor = Literal["nvidia", "amd", "cpu"]

Answer = bool | int | str | tuple[int, int] | tuple[None, None] | None
"""What a probe answers: a flag, an SM number, a capability pair, a dtype name, or None (CPU)."""


class DeviceEntry(FrozenRecord):
    """One simulated device.

    sm              the capability torch reports (AMD reports one too: gate AMD by `gfx`)
    toolkit         the CUDA or HIP version the device's stack is built with
    multiprocessors SMs (NVIDIA) / compute units (AMD): what SGLang's sizing helpers read
    aliases         marketing names people type (`b300`); each names this entry only
    pr_gate         `dsakit pr-check` runs it when no `--devices` is given"""

    __match_args__ = ('key', 'vendor', 'name', 'sm', 'gfx', 'memory_gib', 'toolkit', 'multiprocessors',
                      'aliases', 'pr_gate')

    def __init__(self, key: str,
                 vendor: Vendor,
                 name: str,
                 sm: tuple[int, int] | None,
                 gfx: str | None,
                 memory_gib: int | None,
                 toolkit: str | None,
                 multiprocessors: int,
                 aliases: tuple[str, ...] = (),
                 pr_gate: bool = False) -> None:
        self.__dict__.update(key=key, vendor=vendor, name=name, sm=sm, gfx=gfx, memory_gib=memory_gib,
                             toolkit=toolkit, multiprocessors=multiprocessors, aliases=aliases,
                             pr_gate=pr_gate)

    key: str
    vendor: Vendor
    name: str
    sm: tuple[int, int] | None
    gfx: str | None
    memory_gib: int | None
    toolkit: str | None
    multiprocessors: int
    aliases: tuple[str, ...]
    pr_gate: bool


DEVICES: dict[str, DeviceEntry] = {
    e.key: e
    for e in (
        DeviceEntry("sm90", "nvidia", "NVIDIA H200", (9, 0), None, 141, "12.8", 132, ("h100", "h200"), pr_gate=True),
        DeviceEntry("sm100", "nvidia", "NVIDIA B200", (10, 0), None, 180, "12.8", 148, ("b200",), pr_gate=True),
        DeviceEntry("sm103", "nvidia", "NVIDIA B300", (10, 3), None, 288, "12.9", 148, ("b300",), pr_gate=True),
        DeviceEntry("sm120", "nvidia", "NVIDIA RTX PRO 6000 Blackwell", (12, 0), None, 96, "12.8", 188),
        # MI200 reports capability 9.0, the same number as Hopper.
        DeviceEntry("gfx90a", "amd", "AMD Instinct MI250X", (9, 0), "gfx90a", 64, "6.3", 110, ("mi200", "mi250")),
        DeviceEntry("gfx942", "amd", "AMD Instinct MI300X", (9, 4), "gfx942", 192, "6.3", 304, ("mi300",),
                    pr_gate=True),
        # MI355 reports 9.5: a number that looks like "SM 9.x" but is not Hopper.
        DeviceEntry("gfx950", "amd", "AMD Instinct MI355X", (9, 5), "gfx950", 288, "7.0", 256, ("mi355",)),
        DeviceEntry("cpu", "cpu", "CPU", None, None, None, None, 0),
    )
}


def aliases() -> dict[str, str]:
    """Every alias with the entry it names, read from the table now."""
    return {alias: entry.key for entry in DEVICES.values() for alias in entry.aliases}


def entry_key(name: str) -> str | None:
    """The entry a device name or alias names (case and surrounding blanks ignored), else None."""
    wanted = name.strip().lower()
    if wanted in DEVICES:
        return wanted
    return aliases().get(wanted)


def pr_gate_keys() -> tuple[str, ...]:
    """The devices `dsakit pr-check` runs by default, in table order."""
    return tuple(key for key, entry in DEVICES.items() if entry.pr_gate)


def keys_text() -> str:
    """The keys as a help text lists them: 'sm90, sm100, ..., cpu'."""
    return ", ".join(DEVICES)


# ---------------------------------------------------------------- what SGLang's probes answer


class Device(Protocol):
    """What an answer reads of a device (a `dsakit.DeviceModel`)."""

    @property
    def key(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def device_count(self) -> int: ...
    @property
    def vendor(self) -> Vendor: ...
    @property
    def sm(self) -> tuple[int, int] | None: ...
    @property
    def gfx(self) -> str | None: ...
    @property
    def toolkit(self) -> str | None: ...


class ProbeAnswer(FrozenRecord):
    """One question SGLang's probes ask, answered from a device's facts (`value`)."""

    __match_args__ = ('code', 'meaning', 'value')

    def __init__(self, code: str, meaning: str, value: Callable[[Device], Answer]) -> None:
        self.__dict__.update(code=code, meaning=meaning, value=value)

    code: str
    meaning: str
    value: Callable[[Device], Answer]


def _toolkit(device: Device) -> tuple[int, int]:
    if not device.toolkit:
        return (0, 0)
    major, _, minor = device.toolkit.partition(".")
    return (int(major), int(minor or 0))


def _cuda_majors(majors: tuple[int, ...], toolkit: tuple[int, int]) -> Callable[[Device], Answer]:
    """SGLang's `_check_cuda_device_version`: CUDA, SM major in `majors`, toolkit >= `toolkit`."""

    def value(device: Device) -> bool:
        return (device.vendor == "nvidia" and device.sm is not None and device.sm[0] in majors
                and _toolkit(device) >= toolkit)

    return value


def _gfx(prefix: str) -> Callable[[Device], Answer]:
    return lambda device: device.vendor == "amd" and (device.gfx or "").startswith(prefix)


def _is_cuda(device: Device) -> bool:
    return device.vendor == "nvidia"


def _is_gpu(device: Device) -> bool:
    return device.vendor in ("nvidia", "amd")


def _gpu_or_raises(value: Callable[[Device], Answer]) -> Callable[[Device], Answer]:
    return lambda device: value(device) if _is_gpu(device) else "raises"


def _properties(device: Device) -> str:
    entry = DEVICES.get(device.key)
    return f"{entry.multiprocessors if entry else 0} SMs" + (f", {device.gfx}" if device.gfx else "")


def _version_cuda(device: Device) -> str:
    # the version torch was built with, not a fact of the GPU: a CUDA build keeps its own (torchvision
    # and others compare it with theirs at import); a build without CUDA answers the device's
    if _is_cuda(device):
        return f"host build, else {device.toolkit}"
    return "None" if device.vendor == "amd" else "host"


def _fp8_dtype(device: Device) -> str:
    return "float8_e4m3fnuz" if _gfx("gfx94")(device) else "float8_e4m3fn"


# torch reports a capability on ROCm too (MI300X says 9.4): SGLang's SM numbers are that number.
ANSWERS: dict[str, ProbeAnswer] = {
    a.code: a
    for a in (
        ProbeAnswer("is_cuda", "an NVIDIA GPU (torch.version.cuda)", _is_cuda),
        ProbeAnswer("is_hip", "an AMD GPU (torch.version.hip)", lambda d: d.vendor == "amd"),
        ProbeAnswer("is_cuda_alike", "an NVIDIA or AMD GPU", _is_gpu),
        ProbeAnswer("other_platform",
                    "Ascend NPU, Intel XPU, MUSA, Gaudi or SGLang's CPU engine: none is a simulated device",
                    lambda d: False),
        ProbeAnswer("device_capability", "torch.cuda.get_device_capability() (no capability: CPU)", lambda d: d.sm),
        ProbeAnswer("sglang_device_capability", "SGLang's get_device_capability(): (None, None) without a GPU",
                    lambda d: d.sm or (None, None)),
        ProbeAnswer("sm_major", "torch.cuda.get_device_capability()[0]", lambda d: d.sm[0] if d.sm else None),
        ProbeAnswer("device_sm", "SGLang's get_device_sm(): major * 10 + minor, 0 without a GPU",
                    lambda d: d.sm[0] * 10 + d.sm[1] if d.sm else 0),
        ProbeAnswer("is_sm90_supported", "SM 9.x on CUDA >= 12.3", _cuda_majors((9,), (12, 3))),
        ProbeAnswer("is_sm100_supported", "SM 10.x on CUDA >= 12.8", _cuda_majors((10,), (12, 8))),
        ProbeAnswer("is_sm100_or_sm110_supported", "SM 10.x or 11.x on CUDA >= 12.8",
                    _cuda_majors((10, 11), (12, 8))),
        ProbeAnswer("is_sm120_supported", "SM 12.x on CUDA >= 12.8", _cuda_majors((12,), (12, 8))),
        ProbeAnswer("sm100_or_newer", "SM 10.x or newer on CUDA (DeepSeek-V4.1's is_sm100_or_newer)",
                    lambda d: _is_cuda(d) and d.sm is not None and d.sm[0] >= 10),
        ProbeAnswer("is_blackwell", "SM 10.x, 11.x or 12.x on CUDA >= 12.8", _cuda_majors((10, 11, 12), (12, 8))),
        ProbeAnswer("is_sm120", "exactly SM 12.0 on CUDA", lambda d: _is_cuda(d) and d.sm == (12, 0)),
        ProbeAnswer("is_gfx95", "AMD gfx95x (MI355)", _gfx("gfx95")),
        ProbeAnswer("is_gfx942", "AMD gfx942 (MI300)", _gfx("gfx942")),
        ProbeAnswer("is_gfx1250", "AMD gfx1250", _gfx("gfx1250")),
        ProbeAnswer("is_fp8_fnuz", "the FP8 e4m3 fnuz format (AMD gfx94x)", _gfx("gfx94")),
        ProbeAnswer("fp8_dtype", "the FP8 dtype kernels use", _fp8_dtype),
        ProbeAnswer("dual_stream_threshold", "the DSA indexer's dual-stream token threshold",
                    lambda d: 1024 if _is_cuda(d) else 0),
        ProbeAnswer("not_simulated", "an opt-in dsakit does not simulate (AITER kernels, online C128): off",
                    lambda d: False),
        # torch's facts, which every runtime probe (lru-cached or not) reads; the simulation patches them
        ProbeAnswer("torch.cuda.is_available", "a CUDA or ROCm GPU is visible", _is_gpu),
        ProbeAnswer("torch.cuda.get_device_capability", "the capability pair", _gpu_or_raises(lambda d: d.sm)),
        ProbeAnswer("torch.cuda.get_device_properties", "the multiprocessor count and gfx arch",
                    _gpu_or_raises(_properties)),
        ProbeAnswer("torch.cuda.get_device_name", "the marketing name", _gpu_or_raises(lambda d: d.name)),
        ProbeAnswer("torch.cuda.current_device", "device 0", _gpu_or_raises(lambda d: 0)),
        ProbeAnswer("torch.cuda.device_count", "the GPU count", lambda d: d.device_count),
        ProbeAnswer("torch.version.cuda", "the CUDA build", _version_cuda),
        ProbeAnswer("torch.version.hip", "the HIP build", lambda d: d.toolkit if d.vendor == "amd" else "None"),
    )
}


def answer(code: str, device: Device) -> Answer:
    """What the probe question `code` answers on `device`."""
    return ANSWERS[code].value(device)
