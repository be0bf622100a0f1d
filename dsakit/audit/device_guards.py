"""How SGLang spells a device probe in a guard, mapped to the device table's answer.

Owns the mapping from a spelling (`_is_cuda`, `self.device_sm_major`, `is_sm100_supported()`,
`get_platform().is_sm100`, ...) to a question of `dsakit.devices.ANSWERS`, which holds the
values. Static: imports neither torch nor SGLang. Must not decide what a guard means (that is
`dsakit.audit.guard_eval`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from dsakit.devices import ANSWERS, Answer, Device

DeviceValue = Answer
"""What a spelling answers: a flag, an SM number, a capability pair, or None (no capability: CPU)."""


@dataclass(frozen=True)
class GuardSpelling:
    """The spellings of one SGLang device probe in a guard, and the question they ask (`answer`,
    a code of `dsakit.devices.ANSWERS`: the device table answers it)."""

    spellings: tuple[str, ...]
    answer: str

    @property
    def meaning(self) -> str:
        return ANSWERS[self.answer].meaning

    def value(self, device: Device) -> DeviceValue:
        return ANSWERS[self.answer].value(device)


SPELLINGS: tuple[GuardSpelling, ...] = (
    GuardSpelling(("_is_cuda", "is_cuda()", "platform.is_cuda"), "is_cuda"),
    GuardSpelling(("_is_hip", "is_hip()", "platform.is_hip"), "is_hip"),
    GuardSpelling(("_is_cuda_alike", "is_cuda_alike()"), "is_cuda_alike"),
    GuardSpelling(("_is_npu", "is_npu()", "_is_xpu", "is_xpu()", "_is_musa", "is_musa()", "_is_hpu", "is_hpu()",
                   "_is_cpu", "is_cpu()", "platform.is_npu", "platform.is_xpu", "platform.is_cpu"), "other_platform"),
    GuardSpelling(("device_capability",), "device_capability"),
    GuardSpelling(("get_device_capability()",), "sglang_device_capability"),
    GuardSpelling(("device_sm_major", "sm_major"), "sm_major"),
    GuardSpelling(("device_sm", "get_device_sm()"), "device_sm"),
    GuardSpelling(("is_sm90_supported()", "_is_sm90_supported", "is_hopper_with_cuda_12_3()", "platform.is_sm90"),
                  "is_sm90_supported"),
    GuardSpelling(("is_sm100_supported()", "_is_sm100_supported", "platform.is_sm100"), "is_sm100_supported"),
    GuardSpelling(("is_sm100_or_sm110_supported()", "platform.is_sm100_or_sm110"), "is_sm100_or_sm110_supported"),
    GuardSpelling(("is_sm100_or_newer()",), "sm100_or_newer"),
    # `_is_sm120` (0.5.17-0.5.18) and `_IS_SM120` (0.5.20-) are module constants = is_sm120_supported()
    GuardSpelling(("is_sm120_supported()", "_is_sm120_supported", "platform.is_sm120", "_is_sm120", "_IS_SM120"),
                  "is_sm120_supported"),
    GuardSpelling(("is_blackwell()", "is_blackwell_supported()", "_is_blackwell", "platform.is_blackwell"),
                  "is_blackwell"),
    GuardSpelling(("is_sm120()",), "is_sm120"),
    GuardSpelling(("is_gfx95_supported()", "_is_gfx95_supported", "_IS_GFX95"), "is_gfx95"),
    GuardSpelling(("is_gfx942_supported()", "_is_gfx942_supported"), "is_gfx942"),
    GuardSpelling(("is_gfx1250_supported()", "_is_gfx1250_supported"), "is_gfx1250"),
    GuardSpelling(("is_fp8_fnuz()", "_is_fp8_fnuz"), "is_fp8_fnuz"),
)

_BY_SPELLING: dict[str, GuardSpelling] = {spelling: entry for entry in SPELLINGS for spelling in entry.spellings}


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


def spelling_for(node: ast.expr) -> GuardSpelling | None:
    key = spelling(node)
    return _BY_SPELLING.get(key) if key is not None else None


def probe_table() -> list[dict[str, object]]:
    """The table as data (for `--json` and the lead's unification with `dsakit.simulate_device`)."""
    from dsakit.gates.device_model import SIMULATED

    return [
        {"spellings": list(s.spellings), "meaning": s.meaning,
         "values": {key: _jsonable(s.value(device)) for key, device in SIMULATED.items()}}
        for s in SPELLINGS
    ]


def _jsonable(value: DeviceValue) -> object:
    return list(value) if isinstance(value, tuple) else value
