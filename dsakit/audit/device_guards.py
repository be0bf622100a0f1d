"""THE probe table: how SGLang asks which device it runs on, answered per simulated device.

Owns the mapping from an SGLang probe spelling (`_is_cuda`, `self.device_sm_major`,
`is_sm100_supported()`, `get_platform().is_sm100`, ...) to the value it has on a `DeviceModel`.
Static: nothing here imports torch or SGLang, and nothing is probed. Must not decide what a guard
means (that is `dsakit.audit.guard_eval`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from dsakit.gates.device_model import DeviceModel

DeviceValue = bool | int | tuple[int, int] | None
"""What a probe answers: a flag, an SM number, a capability pair, or None (no capability: CPU)."""


@dataclass(frozen=True)
class Probe:
    """One SGLang device probe: the spellings that reach it and its value on a device."""

    spellings: tuple[str, ...]
    meaning: str
    value: Callable[[DeviceModel], DeviceValue]


def _toolkit(device: DeviceModel) -> tuple[int, int]:
    if not device.toolkit:
        return (0, 0)
    major, _, minor = device.toolkit.partition(".")
    return (int(major), int(minor or 0))


def _cuda_majors(majors: tuple[int, ...], toolkit: tuple[int, int]) -> Callable[[DeviceModel], bool]:
    """SGLang's `_check_cuda_device_version`: CUDA, SM major in `majors`, toolkit >= `toolkit`."""

    def value(device: DeviceModel) -> bool:
        return (device.vendor == "nvidia" and device.sm is not None and device.sm[0] in majors
                and _toolkit(device) >= toolkit)

    return value


def _gfx(prefix: str) -> Callable[[DeviceModel], bool]:
    return lambda device: device.vendor == "amd" and (device.gfx or "").startswith(prefix)


def _never(device: DeviceModel) -> bool:
    return False


# torch reports a capability on ROCm too (MI300X says 9.4): SGLang's SM numbers are that number.
PROBES: tuple[Probe, ...] = (
    Probe(("_is_cuda", "is_cuda()", "platform.is_cuda"), "an NVIDIA GPU (torch.version.cuda)",
          lambda d: d.vendor == "nvidia"),
    Probe(("_is_hip", "is_hip()", "platform.is_hip"), "an AMD GPU (torch.version.hip)",
          lambda d: d.vendor == "amd"),
    Probe(("_is_cuda_alike", "is_cuda_alike()"), "an NVIDIA or AMD GPU", lambda d: d.is_gpu),
    Probe(("_is_npu", "is_npu()", "_is_xpu", "is_xpu()", "_is_musa", "is_musa()", "_is_hpu", "is_hpu()",
           "_is_cpu", "is_cpu()", "platform.is_npu", "platform.is_xpu", "platform.is_cpu"),
          "Ascend NPU, Intel XPU, MUSA, Gaudi or SGLang's CPU engine: none is a simulated device", _never),
    Probe(("device_capability", "get_device_capability()"), "torch.cuda.get_device_capability()",
          lambda d: d.sm),
    Probe(("device_sm_major", "sm_major"), "torch.cuda.get_device_capability()[0]",
          lambda d: d.sm[0] if d.sm else None),
    Probe(("device_sm", "get_device_sm()"), "SGLang's get_device_sm(): major * 10 + minor",
          lambda d: d.sm[0] * 10 + d.sm[1] if d.sm else None),
    Probe(("is_sm90_supported()", "_is_sm90_supported", "is_hopper_with_cuda_12_3()", "platform.is_sm90"),
          "SM 9.x on CUDA >= 12.3", _cuda_majors((9,), (12, 3))),
    Probe(("is_sm100_supported()", "_is_sm100_supported", "platform.is_sm100"),
          "SM 10.x on CUDA >= 12.8", _cuda_majors((10,), (12, 8))),
    Probe(("is_sm100_or_sm110_supported()", "platform.is_sm100_or_sm110"), "SM 10.x or 11.x on CUDA >= 12.8",
          _cuda_majors((10, 11), (12, 8))),
    Probe(("is_sm120_supported()", "_is_sm120_supported", "platform.is_sm120"), "SM 12.x on CUDA >= 12.8",
          _cuda_majors((12,), (12, 8))),
    Probe(("is_blackwell()", "is_blackwell_supported()", "_is_blackwell", "platform.is_blackwell"),
          "SM 10.x, 11.x or 12.x on CUDA >= 12.8", _cuda_majors((10, 11, 12), (12, 8))),
    Probe(("is_sm120()",), "exactly SM 12.0 on CUDA", lambda d: d.vendor == "nvidia" and d.sm == (12, 0)),
    Probe(("is_gfx95_supported()", "_is_gfx95_supported"), "AMD gfx95x (MI355)", _gfx("gfx95")),
    Probe(("is_gfx942_supported()", "_is_gfx942_supported"), "AMD gfx942 (MI300)", _gfx("gfx942")),
)

_BY_SPELLING: dict[str, Probe] = {spelling: probe for probe in PROBES for spelling in probe.spellings}


def spelling(node: ast.expr) -> str | None:
    """The table key an expression would match: `x`, `self.x` -> "x"; `f()`, `torch.cuda.f()` -> "f()";
    `get_platform().x` -> "platform.x". None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            return node.attr
        if isinstance(base, ast.Call) and _callee_name(base.func) == "get_platform":
            return f"platform.{node.attr}"
        return None
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        name = _callee_name(node.func)
        return f"{name}()" if name else None
    return None


def _callee_name(func: ast.expr) -> str | None:
    """`f` of `f()`, `mod.f()` or `torch.cuda.f()`."""
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def probe_for(node: ast.expr) -> Probe | None:
    key = spelling(node)
    return _BY_SPELLING.get(key) if key is not None else None


def probe_table() -> list[dict[str, object]]:
    """The table as data (for `--json` and the lead's unification with `dsakit.simulate_device`)."""
    from dsakit.gates.device_model import SIMULATED

    return [
        {"spellings": list(p.spellings), "meaning": p.meaning,
         "values": {key: _jsonable(p.value(device)) for key, device in SIMULATED.items()}}
        for p in PROBES
    ]


def _jsonable(value: DeviceValue) -> object:
    return list(value) if isinstance(value, tuple) else value
