"""The accelerator a run is gated on: a frozen `DeviceModel`, this machine's (read) or simulated.

Owns: the simulated devices as `DeviceModel`s (read live from the table, `dsakit.devices`),
the lazy reading of this machine's device (NVML, `nvidia-smi`, `rocminfo` under a short timeout, first
done when a gate or a GPU option needs the device; torch only when already loaded or asked; "probe"
is SGLang's word, for its own checks, never this) and the choice between them
(`--dsakit-device` / `DSAKIT_DEVICE`). AMD devices carry their gfx arch string. Never imports SGLang.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from collections.abc import Iterator, Mapping
from typing import Any

from dsakit.errors import UsageError
from dsakit.options import environment
from dsakit.devices import DEVICES, DeviceEntry, Vendor, aliases, entry_key, keys_text
from dsakit.reasons import FrozenRecord

REAL = "real"

_GIB = 1 << 30


class DeviceModel(FrozenRecord):
    """One accelerator as gates see it.

    `sm` is the capability as the runtime reports it (AMD reports one too, which is why AMD is
    gated by `gfx`); `toolkit` is the CUDA or HIP toolkit version the stack was built with."""

    __match_args__ = ('key', 'vendor', 'name', 'sm', 'gfx', 'memory_bytes', 'toolkit', 'device_count',
                      'simulated')

    def __init__(self, key: str,
                 vendor: Vendor,
                 name: str,
                 sm: tuple[int, int] | None = None,
                 gfx: str | None = None,
                 memory_bytes: int | None = None,
                 toolkit: str | None = None,
                 device_count: int = 0,
                 simulated: bool = False) -> None:
        self.__dict__.update(key=key, vendor=vendor, name=name, sm=sm, gfx=gfx, memory_bytes=memory_bytes,
                             toolkit=toolkit, device_count=device_count, simulated=simulated)

    key: str
    vendor: Vendor
    name: str
    sm: tuple[int, int] | None
    gfx: str | None
    memory_bytes: int | None
    toolkit: str | None
    device_count: int
    simulated: bool

    @property
    def is_gpu(self) -> bool:
        return self.vendor in ("nvidia", "amd")

    @property
    def sm_text(self) -> str:
        return f"{self.sm[0]}.{self.sm[1]}" if self.sm else "none"

    def describe(self) -> str:
        """One line naming the device, e.g. 'NVIDIA H200 (SM 9.0, CUDA 12.8, 141 GiB) [simulated sm90]'."""
        if self.vendor == "cpu":
            core = f"{self.name} (no CUDA or ROCm GPU)"
        else:
            parts: list[str] = []
            if self.vendor == "nvidia":
                parts.append(f"SM {self.sm_text}")
                if self.toolkit:
                    parts.append(f"CUDA {self.toolkit}")
            else:
                parts.append(f"{self.gfx or 'gfx unknown'}, reports {self.sm_text}")
                if self.toolkit:
                    parts.append(f"HIP {self.toolkit}")
            if self.memory_bytes:
                parts.append(f"{round(self.memory_bytes / _GIB)} GiB")
            if self.device_count > 1:
                parts.append(f"x{self.device_count}")
            core = f"{self.name} ({', '.join(parts)})"
        return f"{core} [simulated {self.key}]" if self.simulated else core

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {name: getattr(self, name) for name in self.__match_args__}
        data["sm"] = self.sm_text if self.sm else None
        data["description"] = self.describe()
        return data


# ---------------------------------------------------------------- simulated devices (dsakit.devices)


@functools.lru_cache(maxsize=None)
def _simulated(entry: DeviceEntry) -> DeviceModel:
    memory = entry.memory_gib * _GIB if entry.memory_gib else None
    count = 1 if entry.vendor != "cpu" else 0
    return DeviceModel(entry.key, entry.vendor, entry.name, entry.sm, entry.gfx, memory, entry.toolkit, count, True)


class _Simulated(Mapping[str, DeviceModel]):
    """The device table's entries as `DeviceModel`s, read live: an entry added to
    `dsakit.devices.DEVICES` is a simulated device everywhere at once."""

    def __getitem__(self, key: str) -> DeviceModel:
        return _simulated(DEVICES[key])

    def __iter__(self) -> Iterator[str]:
        return iter(list(DEVICES))

    def __len__(self) -> int:
        return len(DEVICES)


SIMULATED: Mapping[str, DeviceModel] = _Simulated()


def device_names() -> list[str]:
    """Every name `--dsakit-device` accepts."""
    return [REAL, *DEVICES, *aliases()]


def simulated_model(name: str) -> DeviceModel:
    """The simulated device a name or alias names; UsageError listing the valid names otherwise."""
    key = entry_key(name)
    if key is None:
        alias_text = ", ".join(f"{a}={k}" for a, k in aliases().items())
        raise UsageError(
            f"unknown dsakit device {name!r}; valid names: {REAL} (this machine's own device), "
            f"{keys_text()} (aliases: {alias_text})"
        ) from None
    return SIMULATED[key]


def resolve_device(name: str | None, *, allow_torch: bool = False) -> DeviceModel:
    """The device for a selection: a simulated profile by name, else this machine's device.

    `name` None or empty falls back to `$DSAKIT_DEVICE` (a command's; a pytest run's device is its
    DsakitSession's, dsakit.session), then to the real device.
    """
    chosen = name if name else _device_from_env()
    if not chosen or chosen.strip().lower() == REAL:
        return real_device(allow_torch=allow_torch)
    return simulated_model(chosen)


def _device_from_env() -> str:
    return str(environment("dsakit_device") or "")


def validate_device_name(name: str | None) -> str:
    """The canonical selection name ('real' or a profile key); UsageError for unknown names."""
    chosen = name if name else _device_from_env()
    if not chosen or chosen.strip().lower() == REAL:
        return REAL
    return simulated_model(chosen).key


# ---------------------------------------------------------------- this machine's device, read


def _gfx_capability(gfx: str) -> tuple[int, int] | None:
    """The capability torch reports for a gfx arch: gfx942 -> 9.4, gfx90a -> 9.0, gfx1100 -> 11.0."""
    match = re.fullmatch(r"gfx(\d+)([0-9a-f])([0-9a-f])", gfx)
    if not match:
        return None
    minor = int(match.group(2), 16)
    return (int(match.group(1)), minor if minor < 10 else 0)


def _torch_version_field(field: str) -> str | None:
    """`cuda` / `hip` from torch/version.py, read as text so torch is not imported."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        value = getattr(node, "value", None)
        if any(isinstance(t, ast.Name) and t.id == field for t in targets) and isinstance(value, ast.Constant):
            return str(value.value) if value.value is not None else None
    return None


def _read_nvml() -> DeviceModel | None:
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            if count == 0:
                return None
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - a broken NVML means "ask the next tool"
        return None
    return DeviceModel(REAL, "nvidia", name, (int(major), int(minor)), None, memory,
                       _torch_version_field("cuda"), count)


# A device tool that does not answer within this is treated as absent: a hung nvidia-smi (a wedged
# driver, a stub) must not stretch a run. nvidia-smi answers in ~0.1-0.5 s on a healthy node.
TOOL_TIMEOUT_S = 3.0


def _run(command: list[str]) -> str | None:
    """The tool's stdout, or None when it is missing, fails or outlives TOOL_TIMEOUT_S (then its
    whole process group is killed, so no child of a hung tool is left behind)."""
    if shutil.which(command[0]) is None:
        return None
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    except OSError:
        return None
    try:
        out, _ = process.communicate(timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return None
    return out if process.returncode == 0 else None


def _read_nvidia_smi() -> DeviceModel | None:
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"])
    rows = [line.split(",") for line in (out or "").strip().splitlines() if line.strip()]
    if not rows or len(rows[0]) < 3:
        return None
    name, memory_mib, cap = (field.strip() for field in rows[0][:3])
    match = re.fullmatch(r"(\d+)\.(\d+)", cap)
    if not match:
        return None
    memory = int(memory_mib) << 20 if memory_mib.isdigit() else None
    return DeviceModel(REAL, "nvidia", name, (int(match.group(1)), int(match.group(2))), None, memory,
                       _torch_version_field("cuda"), len(rows))


def _read_rocminfo() -> DeviceModel | None:
    out = _run(["rocminfo"])
    if not out:
        return None
    archs: list[str] = []
    names: list[str] = []
    for block in out.split("*******"):
        if not re.search(r"Device Type:\s+GPU", block):
            continue
        arch = re.search(r"^\s*Name:\s+(gfx[0-9a-f]+)", block, re.MULTILINE)
        market = re.search(r"^\s*Marketing Name:\s+(.+)$", block, re.MULTILINE)
        if arch:
            archs.append(arch.group(1))
            names.append(market.group(1).strip() if market else arch.group(1))
    if not archs:
        return None
    return DeviceModel(REAL, "amd", names[0], _gfx_capability(archs[0]), archs[0], None,
                       _torch_version_field("hip"), len(archs))


def _read_torch() -> DeviceModel | None:
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    count = torch.cuda.device_count()
    if getattr(torch.version, "hip", None):
        gfx = str(getattr(props, "gcnArchName", "")).split(":")[0] or None
        return DeviceModel(REAL, "amd", props.name, (props.major, props.minor), gfx,
                           int(props.total_memory), str(torch.version.hip), count)
    return DeviceModel(REAL, "nvidia", props.name, (props.major, props.minor), None,
                       int(props.total_memory), torch.version.cuda, count)


def _cpu() -> DeviceModel:
    return DeviceModel(REAL, "cpu", "CPU")


@functools.lru_cache(maxsize=None)
def real_device(*, allow_torch: bool = False) -> DeviceModel:
    """This machine's first accelerator, read once per process (CPU when there is none)."""
    for read in (_read_nvml, _read_nvidia_smi, _read_rocminfo):
        found = read()
        if found is not None:
            return found
    if allow_torch or environment("dsakit_device_from_torch") or "torch" in sys.modules:
        try:
            found = _read_torch()
        except Exception:  # noqa: BLE001 - a CPU build or a broken driver both mean "no GPU"
            found = None
        if found is not None:
            return found
    return _cpu()
