"""The devices a suite itself runs on: CI registration, the mock's `device`, skip guards.

Owns the narrowing of the judged devices for one backend call: `register_cuda_ci` / `register_amd_ci`
/ `register_xpu_ci` / `register_npu_ci` in the calling file, a literal `device` on the mock, and the
`skipIf` / `skipUnless` / `pytest.mark.skipif` guards around the call (evaluated with `guard_eval`).
A device dsakit does not simulate (XPU, NPU, MUSA, HPU) is kept by name. Never imports the suite.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.guard_eval import decided
from dsakit.audit.suite_files import Scope
from dsakit.gates.device_model import DeviceModel

REGISTRATIONS = {"register_cuda_ci": "nvidia", "register_amd_ci": "amd", "register_xpu_ci": "xpu",
                 "register_npu_ci": "npu", "register_cpu_ci": "cpu", "register_musa_ci": "musa"}
NOT_SIMULATED = ("xpu", "npu", "musa", "hpu", "cpu-engine")
# SGLang's own probes for a device dsakit does not simulate: `skipUnless(is_xpu())` runs on XPU.
_NOT_SIMULATED_PROBES = {"is_xpu()": "xpu", "_is_xpu": "xpu", "is_npu()": "npu", "_is_npu": "npu",
                         "is_musa()": "musa", "_is_musa": "musa", "is_hpu()": "hpu", "_is_hpu": "hpu",
                         "is_cpu()": "cpu-engine", "_is_cpu": "cpu-engine", "_is_xpu_alike": "xpu"}
_DEVICE_STRINGS = {"cuda": ("nvidia", "amd"), "xpu": ("xpu",), "npu": ("npu",), "musa": ("musa",), "hpu": ("hpu",)}
# torch's availability probes, spelled as the probe table knows them
_AVAILABLE = {"torch.cuda.is_available()": "_is_cuda_alike", "torch.xpu.is_available()": "_is_xpu",
              "torch.npu.is_available()": "_is_npu"}


def stand_in(kind: str) -> DeviceModel:
    """A device dsakit does not simulate: no CUDA, no ROCm, no capability (every device probe false)."""
    return DeviceModel(kind, "cpu", f"{kind} (not a simulated device)", simulated=True)


@dataclass(frozen=True)
class SuiteDevices:
    """The devices one call runs on, among `devices` (selected simulated ones) plus named others.

    devices  key -> model (simulated, or a `stand_in` for xpu / npu / ...)
    why      what narrowed them ("register_xpu_ci at test_x.py:9", "device='xpu' (mock)", ...)
    """

    devices: dict[str, DeviceModel]
    why: tuple[str, ...]


def _registrations(scope: Scope) -> list[tuple[str, str]]:
    found = []
    for node in scope.file.tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call):
            name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
            if name in REGISTRATIONS:
                found.append((REGISTRATIONS[name], f"{name} at {scope.file.display}:{node.lineno}"))
    return found


def _skip_guards(scope: Scope) -> list[tuple[str, bool, str]]:
    """(condition, skips_when_true, where) of the skip decorators on the call's function, its class
    and the module (`pytestmark`)."""
    decorated: list[ast.expr] = []
    for owner in (scope.function, scope.cls):
        if owner is not None:
            decorated.extend(owner.decorator_list)
    for node in scope.file.tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                 for t in node.targets)):
            value = node.value
            decorated.extend(value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value])
    guards = []
    for decorator in decorated:
        if not isinstance(decorator, ast.Call) or not decorator.args:
            continue
        name = decorator.func.id if isinstance(decorator.func, ast.Name) else getattr(decorator.func, "attr", "")
        if name in ("skipIf", "skipif", "skipUnless"):
            text = ast.unparse(decorator.args[0])
            for spelling, probe in _AVAILABLE.items():
                text = text.replace(spelling, probe)
            where = f"{name}({ast.unparse(decorator.args[0])}) at {scope.file.display}:{decorator.lineno}"
            guards.append((text, name != "skipUnless", where))
    return guards


def mock_device(tree: AttrTree) -> str | None:
    """The mock's literal `device` ("cuda", "xpu", ...), when it sets one."""
    child = tree.children.get("device")
    value = child.value if child is not None else None
    return value.split(":", 1)[0] if isinstance(value, str) else None


def _required_stand_in(condition: str, skips_when_true: bool) -> str | None:
    """`skipUnless(is_xpu())` / `skipIf(not is_xpu())`: the not-simulated device the suite requires."""
    try:
        node = ast.parse(condition, mode="eval").body
    except SyntaxError:
        return None
    if skips_when_true:
        if not (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return None
        node = node.operand
    text = ast.unparse(node)
    text = text.split(".")[-1] if text.startswith(("torch.", "sglang.")) else text
    return _NOT_SIMULATED_PROBES.get(text)


def suite_devices(scope: Scope, tree: AttrTree, selected: dict[str, DeviceModel]) -> SuiteDevices:
    """The selected devices this call can run on, plus the not-simulated devices the suite names."""
    kinds: set[str] | None = None
    why: list[str] = []
    registered = _registrations(scope)
    if registered:
        kinds = {kind for kind, _ in registered}
        why.extend(where for _, where in registered)
    device = mock_device(tree)
    if device in _DEVICE_STRINGS:
        own = set(_DEVICE_STRINGS[device])
        kinds = own if kinds is None else (kinds & own) or own
        why.append(f"device={device!r} (the mock's)")
    devices = {k: d for k, d in selected.items() if kinds is None or d.vendor in kinds}
    if kinds is not None:
        devices.update({kind: stand_in(kind) for kind in NOT_SIMULATED if kind in kinds})
    for condition, skips_when_true, where in _skip_guards(scope):
        required = _required_stand_in(condition, skips_when_true)
        if required is not None:
            why.append(where)
            devices = {required: stand_in(required)}
            continue
        try:  # a device the guard does not decide (configuration left, a stand-in) keeps running
            kept = {k: d for k, d in devices.items()
                    if k in NOT_SIMULATED or (value := decided(condition, d)) is None or value != skips_when_true}
        except SyntaxError:
            continue
        if kept != devices:
            why.append(where)
            devices = kept
    return SuiteDevices(devices, tuple(why))
