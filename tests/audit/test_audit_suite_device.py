"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/suite_device.py`, the devices a
suite itself runs on (CI registration, the mock's `device`, skip guards), called directly on a parsed
suite file; the end-to-end audits of such suites are in test_audit_suites.py."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.suite_files import Scope, SourceFile
from dsakit.audit.suite_device import mock_device, stand_in, suite_devices
from dsakit.gates.device_model import SIMULATED

NVIDIA = [k for k, d in SIMULATED.items() if d.vendor == "nvidia"]
AMD = [k for k, d in SIMULATED.items() if d.vendor == "amd"]


def _scope(source: str, function: str = "test_it", cls: str | None = None) -> Scope:
    tree = ast.parse(textwrap.dedent(source))
    file = SourceFile(Path("suite/test_s.py"), "suite/test_s.py", tree, {}, {})
    owner = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls) if cls else None
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    return Scope(file, node, owner)


def _device(value: object) -> AttrTree:
    tree = AttrTree()
    tree.set("device", AttrTree.constant(value), "suite/test_s.py:1")
    return tree


def _run(source: str, tree: AttrTree | None = None, cls: str | None = None) -> tuple[list[str], list[str]]:
    found = suite_devices(_scope(source, cls=cls), tree or AttrTree(), dict(SIMULATED))
    return list(found.devices), list(found.why)


def test_nothing_narrows_a_plain_suite() -> None:
    assert _run("def test_it(): pass\n") == (list(SIMULATED), [])


def test_ci_registrations_narrow_to_their_vendors_and_name_their_line() -> None:
    source = '''
        from sglang.test.ci.ci_register import register_amd_ci
        import sglang.test.ci.ci_register as ci
        register_amd_ci(est_time=10)
        ci.register_xpu_ci(est_time=10)
        print("not a registration")
        x = register_cuda_ci(est_time=1)
        def test_it(): pass
    '''
    assert _run(source) == ([*AMD, "xpu"], ["register_amd_ci at suite/test_s.py:4", "register_xpu_ci at suite/test_s.py:5"])
    assert _run("register_cpu_ci()\nregister_npu_ci()\ndef test_it(): pass\n") == (
        ["cpu", "npu"], ["register_cpu_ci at suite/test_s.py:1", "register_npu_ci at suite/test_s.py:2"])


def test_the_mocks_device_narrows_and_meets_the_registrations() -> None:
    assert mock_device(_device("cuda:1")) == "cuda" and mock_device(_device(3)) is None
    assert mock_device(AttrTree()) is None
    assert _run("def test_it(): pass\n", _device("cuda:0")) == ([*NVIDIA, *AMD], ["device='cuda' (the mock's)"])
    assert _run("def test_it(): pass\n", _device("xpu")) == (["xpu"], ["device='xpu' (the mock's)"])
    assert _run("def test_it(): pass\n", _device("cpu")) == (list(SIMULATED), [])  # not a device string it knows
    amd = "register_amd_ci()\ndef test_it(): pass\n"
    assert _run(amd, _device("cuda")) == (AMD, ["register_amd_ci at suite/test_s.py:1", "device='cuda' (the mock's)"])
    # registered for XPU, built on "cuda": the mock's device wins over an empty intersection
    xpu = "register_xpu_ci()\ndef test_it(): pass\n"
    assert _run(xpu, _device("cuda")) == ([*NVIDIA, *AMD], ["register_xpu_ci at suite/test_s.py:1",
                                                          "device='cuda' (the mock's)"])


def test_skip_guards_of_the_function_class_and_module() -> None:
    source = '''
        import unittest
        import pytest
        pytestmark = [pytest.mark.skipif(_is_hip, reason="no ROCm"), pytest.mark.slow]
        other = pytest.mark.skipif(True, reason="not pytestmark")

        @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
        class TestX(unittest.TestCase):
            @pytest.mark.skipif(is_sm100_supported(), reason="not on Blackwell")
            @pytest.mark.parametrize("x", [1])
            @staticmethod
            def test_it(): pass
    '''
    devices, why = _run(source, cls="TestX")
    assert devices == [k for k in NVIDIA if SIMULATED[k].sm is not None and SIMULATED[k].sm[0] != 10]
    assert why == ["skipif(is_sm100_supported()) at suite/test_s.py:9",
                   "skipUnless(torch.cuda.is_available()) at suite/test_s.py:7",
                   "skipif(_is_hip) at suite/test_s.py:4"]
    assert _run("pytestmark = pytest.mark.skipif(_is_hip, reason='x')\ndef test_it(): pass\n") == (
        [k for k in SIMULATED if k not in AMD], ["skipif(_is_hip) at suite/test_s.py:1"])


def test_a_guard_the_devices_do_not_decide_keeps_them_all() -> None:
    source = '''
        @pytest.mark.skipif(os.environ.get("X") == "1", reason="configuration")
        @pytest.mark.skipif(_is_hip and flags.enabled, reason="partly configuration")
        def test_it(): pass
    '''
    devices, why = _run(source)
    assert devices == list(SIMULATED) and why == []


def test_a_probe_for_a_device_dsakit_does_not_simulate_requires_it() -> None:
    for decorator, device in (("skipUnless(is_xpu(), 'x')", "xpu"), ("skipIf(not _is_npu, 'x')", "npu"),
                              ("skipUnless(torch.xpu.is_available(), 'x')", "xpu"),
                              ("skipUnless(sglang.srt.utils.is_musa(), 'x')", "musa")):
        devices, why = _run(f"@unittest.{decorator}\ndef test_it(): pass\n")
        assert devices == [device] and why == [f"{decorator.split('(')[0]}({decorator.split('(', 1)[1].rsplit(', ', 1)[0]}) "
                                               "at suite/test_s.py:1"], decorator
    # skipIf(is_xpu()) skips on XPU: it requires nothing, and the simulated devices never are XPU
    assert _run("@unittest.skipIf(is_xpu(), 'x')\ndef test_it(): pass\n") == (list(SIMULATED), [])
    # a not-simulated device the mock names stays whatever a simulated-device guard says
    assert _run("@pytest.mark.skipif(_is_hip, reason='x')\ndef test_it(): pass\n", _device("xpu")) == (
        ["xpu"], ["device='xpu' (the mock's)"])


def test_a_stand_in_has_no_device_probe() -> None:
    xpu = stand_in("xpu")
    assert (xpu.key, xpu.vendor, xpu.name, xpu.simulated, xpu.sm, xpu.gfx) == (
        "xpu", "cpu", "xpu (not a simulated device)", True, None, None)


def test_the_last_required_device_wins_and_a_torch_module_probe_counts() -> None:
    source = "@unittest.skipUnless(is_xpu(), 'x')\n@unittest.skipUnless(is_npu(), 'y')\ndef test_it(): pass\n"
    assert _run(source) == (["npu"], ["skipUnless(is_xpu()) at suite/test_s.py:1", "skipUnless(is_npu()) at suite/test_s.py:2"])
    assert _run("@unittest.skipUnless(torch.npu_utils.is_npu(), 'x')\ndef test_it(): pass\n")[0] == ["npu"]
