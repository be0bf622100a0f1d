"""`--dsakit-device NAME` simulates the whole test process: import-time CUDA checks, unittest classes,
tensor placement, kernel launches, failure sections, xdist workers, restore at the end.

The suites below are written the way SGLang writes its own (unittest.TestCase, a hand-written
runner class on device="cuda", a class-level `skipIf(not torch.cuda.is_available())`); they import
torch (and SGLang), so every run is a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsakit.gates.device_model import real_device
from dsakit.node.pytest_invocation import plugin_args

try:
    import importlib.util as _util

    HAS_TORCH = _util.find_spec("torch") is not None
    HAS_SGLANG = _util.find_spec("sglang") is not None
    HAS_TRITON = _util.find_spec("triton") is not None
except (ImportError, ValueError):
    HAS_TORCH = HAS_SGLANG = HAS_TRITON = False

torch_needed = pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] the simulation patches torch")
sglang_needed = pytest.mark.skipif(not HAS_SGLANG, reason="[module:sglang] the suite builds SGLang's backend")
no_gpu_here = pytest.mark.skipif(real_device().is_gpu, reason="[real-gpu] checks CPU placement: this machine has a GPU")

IMPORT_TIME_SKIP = '''
import unittest
import torch

AT_IMPORT = torch.cuda.is_available()


@unittest.skipIf(not torch.cuda.is_available(), "Test requires CUDA")
class TestOnCuda(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.capability = torch.cuda.get_device_capability()

    def test_sees_the_device(self):
        self.assertTrue(AT_IMPORT)
        self.assertEqual(self.capability, (10, 3))
        self.assertEqual(torch.cuda.get_device_name(), "NVIDIA B300")

    def test_tensors_on_cuda(self):
        x = torch.arange(4, device="cuda", dtype=torch.float32)
        layer = torch.nn.Linear(4, 2).cuda()
        with torch.device("cuda"):
            y = torch.ones(4)
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            z = (x + y).to("cuda", non_blocking=True)
        self.assertEqual(layer(z).shape, (2,))
        self.assertEqual(str(z.device), PLACED)
        # SGLang asserts `seq_lens.is_cuda`: a "cuda" tensor answers as one wherever it lives
        self.assertTrue(z.is_cuda and (z * 2)[1:].is_cuda and layer.weight.is_cuda)
        host = z.cpu()
        self.assertFalse(host.is_cuda)
        self.assertEqual(str(host.device), "cpu")
        self.assertTrue(z.is_cuda)
        generator = torch.Generator(device="cuda").manual_seed(0)
        self.assertIsInstance(generator, torch.Generator)
        self.assertTrue(torch.randn(3, device="cuda", generator=generator).is_cuda)
'''

SGLANG_SHAPED = (Path(__file__).parents[1] / "suites" / "indexer_shaped.py").read_text(encoding="utf-8")


PLUGIN = plugin_args()  # a checkout on PYTHONPATH (the offline GPU node) has no entry point


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-rs", *args)


@torch_needed
@no_gpu_here
def test_import_time_cuda_checks_and_unittest_classes_see_the_simulated_gpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=IMPORT_TIME_SKIP.replace("PLACED", "'cuda:0'"))
    plain = _run(pytester)
    plain.assert_outcomes(skipped=2)
    # the ini key (an alias): its simulation is on before the test module imports, as the option's
    # is in the runs of the other tests here (the SGLang-shaped suite's class-level skipIf)
    pytester.makeini("[pytest]\ndsakit_device = b300\n")
    simulated = _run(pytester)
    simulated.assert_outcomes(passed=2)
    simulated.stdout.fnmatch_lines([
        "dsakit: this process runs as simulated sm103 (NVIDIA B300) on CPU*: tensors and pools created on "
        '"cuda" live on the CPU and answer as cuda; kernel launches skip with [[]simulated-kernel-launch[]]*'])


@torch_needed
def test_the_env_variable_and_the_ini_key_simulate_the_whole_run_too(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The env variable here; the ini key is the import-time test's (`dsakit_device = b300`)."""
    pytester.makepyfile(test_cap="import torch\n\ndef test_cap():\n"
                                 "    assert torch.cuda.get_device_capability() == (9, 4)\n")
    monkeypatch.setenv("DSAKIT_DEVICE", "gfx942")
    _run(pytester).assert_outcomes(passed=1)


@torch_needed
def test_everything_is_restored_after_the_run_also_when_a_test_raised(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_boom="import torch\n\ndef test_boom():\n"
                                  "    assert torch.cuda.is_available()\n    raise RuntimeError('boom')\n")
    script = pytester.makepyfile(check=textwrap.dedent(f"""
        import json, sys
        import pytest
        import torch
        before = (torch.cuda.is_available(), torch.version.cuda, list(sys.meta_path))
        code = pytest.main([*{PLUGIN!r}, "-p", "no:cacheprovider", "-q", {str(pytester.path / 'test_boom.py')!r},
                            "--dsakit-device", "sm103"])
        from torch.overrides import _get_current_function_mode_stack
        after = (torch.cuda.is_available(), torch.version.cuda, list(sys.meta_path))
        print(json.dumps({{"code": int(code), "same": before == after,
                          "modes": len(_get_current_function_mode_stack()),
                          "stand_ins": [n for n, m in sys.modules.items() if type(m).__name__ == "StandIn"],
                          "placed": str(torch.zeros(1).device)}}))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=pytester.path)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 1, "same": True, "modes": 0, "stand_ins": [], "placed": "cpu"}, done.stdout


@torch_needed
@no_gpu_here
@pytest.mark.skipif(not HAS_TRITON, reason="[module:triton] launches a real Triton kernel")
def test_kernel_launches_skip_naming_the_kernel_and_the_call_site(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kernels='''
import torch
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def test_triton():
    x = torch.zeros(8, device="cuda")
    add_one[(1,)](x, 8, BLOCK=8)
    assert False, "a simulated Triton launch must not run"


def test_kernel_library_op():
    lib = torch.library.Library("dsakit_test_kernels", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: x * 2, "CUDA")  # a device kernel only, as a kernel library registers it
    torch.ops.dsakit_test_kernels.scale(torch.ones(2, device="cuda"))
    assert False, "a kernel library's op must not run"


def test_absent_kernel_library():
    from sgl_kernel import fast_topk  # the simulated GPU has sgl-kernel; this machine has not
    fast_topk(torch.ones(1, 8, device="cuda"), torch.ones(1, 8), 4)


def test_cuda_graph():
    torch.cuda.CUDAGraph()


def test_torch_ops_run():
    assert torch.ops.aten.add(torch.ones(2, device="cuda"), 1).sum().item() == 4
''')
    result = _run(pytester, "--dsakit-device", "sm100")
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines_random([
        "SKIPPED [[]1[]] test_kernels.py:*: [[]simulated-kernel-launch[]] the Triton kernel add_one "
        "(called at test_kernels.py:*) would launch a kernel for simulated sm100*",
        "SKIPPED [[]1[]] test_kernels.py:*: [[]simulated-kernel-launch[]] the kernel "
        "torch.ops.dsakit_test_kernels.scale (called at test_kernels.py:*)*",
        "SKIPPED [[]1[]] test_kernels.py:*: [[]simulated-kernel-launch[]] sgl_kernel.fast_topk "
        "(called at test_kernels.py:*)*",
        "SKIPPED [[]1[]] test_kernels.py:*: [[]simulated-kernel-launch[]] CUDA graph capture*",
    ])
    # the gate inventory counts them under their code
    result.stdout.fnmatch_lines(["*4 skipped*[[]simulated-kernel-launch[]]*"])


OWN_MOCK = '''
import dsakit
from dsakit.backends.harness import dsa_backend


def test_omitted():
    runner = dsakit.MockModelRunner("target", omit=["max_running_requests"])
    with dsa_backend(runner):
        pass
'''


@torch_needed
@no_gpu_here
def test_a_stand_in_kernel_library_keeps_its_module_gate_closed(pytester: pytest.Pytester) -> None:
    """Under `--dsakit-device sm90` a kernel library this machine lacks imports as a stand-in, and
    its module gate stays closed, before and after the import (issue 34 item 9): a test behind the
    gate skips with the gate's reason, not later with a refused launch."""
    import importlib.util

    from dsakit.gates.table import gate_table
    from dsakit.stack.kernel_libraries import installed_on

    absent = [n for n in installed_on("nvidia") if f"module:{n}" in gate_table() and importlib.util.find_spec(n) is None]
    if not absent:
        pytest.skip("[kernel-libraries-installed] every NVIDIA kernel library is installed here")
    name = absent[0]
    pytester.makepyfile(test_stand_in=f"""
import dsakit


@dsakit.gate("module:{name}")
def test_gated():
    pass


def test_imported_then_required():
    import {name}  # the stand-in: the simulated GPU has it, this machine has not
    assert type({name}).__name__ == "StandIn"
    dsakit.require("module:{name}")
""")
    result = _run(pytester, "--dsakit-device", "sm90")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([f"*[[]module:{name}[]] needs the Python module '{name}', but it is not installed*"])


@torch_needed
@no_gpu_here
def test_a_stand_in_answer_used_as_a_size_names_the_call_that_gave_it(pytester: pytest.Pytester) -> None:
    """SGLang sizes a buffer from a kernel library's helper (trtllm_mla_backend.py:
    `num_bytes = flashinfer.utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(...)`, then
    `torch.zeros(num_bytes)`); where the library stands in, the skip names that helper (seen on CPU
    as "a kernel library's answer" x42 in SGLang's test_dsa.py under sm103)."""
    import importlib.util

    from dsakit.stack.kernel_libraries import installed_on

    absent = [n for n in installed_on("nvidia") if importlib.util.find_spec(n) is None]
    if not absent:
        pytest.skip("[kernel-libraries-installed] every NVIDIA kernel library is installed here")
    name = absent[0]
    pytester.makepyfile(test_sized=f"""
import torch


def _buffer(heads):
    import {name}
    num_bytes = {name}.counter_bytes(heads)
    return torch.zeros(num_bytes, dtype=torch.uint8, device="cuda")


def test_sized_by_the_library():
    _buffer(8)
""")
    result = _run(pytester, "--dsakit-device", "sm103", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"*[[]simulated-kernel-launch[]] the answer of {name}.counter_bytes() (called at "
                                 "test_sized.py:*"])


@torch_needed
@sglang_needed
@no_gpu_here
def test_an_sglang_shaped_suite_and_dsakits_own_mock_fail_on_the_simulated_b300_with_the_read_explained(
        pytester: pytest.Pytester) -> None:
    """SGLang's hand-written runner and dsakit's strict mock with the read omitted, side by side in
    one run per device (each run imports SGLang: the runs are the cost)."""
    pytester.makepyfile(test_indexer_shape=SGLANG_SHAPED)
    _run(pytester).assert_outcomes(skipped=2)  # plain pytest on CPU: "Test requires CUDA"
    _run(pytester, "--dsakit-device", "sm90").assert_outcomes(passed=2)
    pytester.makepyfile(test_strict=OWN_MOCK)
    b300 = _run(pytester, "--dsakit-device", "sm103")
    b300.assert_outcomes(failed=2, passed=1)
    b300.stdout.fnmatch_lines([
        "E * AttributeError: 'MockModelRunner' object has no attribute 'max_running_requests'",
        "*dsakit simulated device*",
        "ran as simulated sm103 (NVIDIA B300) on CPU*",
        "*dsakit model_runner read*",
        "model_runner.max_running_requests is missing on MockModelRunner: read at "
        "sglang/srt/layers/attention/dsa_backend.py:*",
        "  dsa_backend.py:* (DeepseekSparseAttnBackend.__init__) when * -> fails on sm100, sm103, sm120*",
        "  the real ModelRunner: sglang/srt/model_executor/model_runner.py:*",
    ])
    # dsakit's own mock gets the same explanation, naming itself
    b300.stdout.fnmatch_lines([
        "*ContractViolation: model_runner.max_running_requests was omitted*on simulated sm103 (NVIDIA B300)*",
        "ran as simulated sm103 (NVIDIA B300) on *",
        "model_runner.max_running_requests is missing on dsakit's MockModelRunner: read at "
        "sglang/srt/layers/attention/dsa_backend.py:*",
        "  dsa_backend.py:* (DeepseekSparseAttnBackend.__init__) when * -> fails on sm100, sm103, sm120*",
    ])


@torch_needed
def test_xdist_workers_simulate_and_the_controller_says_so(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_w="import torch\n\ndef test_a():\n    assert torch.cuda.get_device_capability() == (10, 0)\n"
                               "\ndef test_b():\n    assert torch.cuda.is_available()\n")
    result = _run(pytester, "-n", "2", "--dsakit-device", "sm100")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["dsakit: every xdist worker runs as simulated sm100 (NVIDIA B200)*"])


def test_a_failure_without_simulation_gets_no_dsakit_section(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_f="def test_f():\n    raise AttributeError('x')\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "dsakit simulated device" not in result.stdout.str()


def test_an_unknown_device_in_a_list_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    for spec in ("sm90,sm999", "sm999"):
        result = pytester.runpytest_subprocess(*PLUGIN, "--dsakit-device", spec)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*unknown dsakit device 'sm999'; valid names: real*sm90, sm100, sm103*"])


@torch_needed
def test_a_fleet_runs_each_device_and_prints_the_merged_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fleet="import torch\n\ndef test_hopper_only():\n"
                                   "    assert torch.cuda.get_device_capability()[0] == 9\n\n"
                                   "def test_anywhere():\n    assert True\n")
    tmp = pytester.path / "tmp"
    tmp.mkdir()
    result = _fleet(pytester, tmp, "sm90,sm103,gfx942")
    assert result.returncode == 1, result.stdout
    out = result.stdout
    for line in ("dsakit fleet: 3 runs in parallel, one per device: sm90, sm103, gfx942",
                 "dsakit fleet: sm90 (simulated sm90): 2 passed",
                 "dsakit fleet: sm103 (simulated sm103): 1 failed, 1 passed",
                 "dsakit report merge: 3 node(s), 3 report(s), 2 test ids; 1 failure(s)"):
        assert line in out, out
    assert "test_fleet.py::test_hopper_only  on " in out and "(sm103 simulated) only (passed on " in out
    assert list(tmp.iterdir()) == [], "the fleet's report folder was left behind"
    # where the reports are kept does not depend on the suite: one that imports no torch (~3 CPU-s a run)
    pytester.makepyfile(test_kept="def test_kept():\n    pass\n")
    kept = _fleet(pytester, tmp, "sm90,sm103", "--dsakit-report", str(pytester.path / "out" / "r.json"),
                  "test_kept.py")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "dsakit fleet: sm103 (simulated sm103): 1 passed" in kept.stdout, kept.stdout
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == [
        "r-sm103.json", "r-sm103.log", "r-sm90.json", "r-sm90.log"]


def _fleet(pytester: pytest.Pytester, tmp: Path, devices: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "--dsakit-device", devices,
                           *args], capture_output=True, text=True, timeout=600, cwd=pytester.path,
                          env={**os.environ, "TMPDIR": str(tmp)})


@torch_needed
def test_rerun_test_device_simulates_each_files_run(pytester: pytest.Pytester) -> None:
    suite = pytester.makepyfile(test_b300="import unittest\nimport torch\n\n\n"
                                          "@unittest.skipIf(not torch.cuda.is_available(), 'Test requires CUDA')\n"
                                          "class TestB300(unittest.TestCase):\n"
                                          "    def test_capability(self):\n"
                                          "        self.assertEqual(torch.cuda.get_device_capability(), (10, 3))\n\n\n"
                                          "if __name__ == '__main__':\n    unittest.main()\n")
    def rerun(*device: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dsakit", "rerun-test", str(suite), *device,
                               "--junitxml", str(pytester.path / "junit")], capture_output=True, text=True,
                              timeout=600, cwd=pytester.path)

    simulated = rerun("--device", "b300")
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    assert "--dsakit-device=sm103" in simulated.stdout and "result: PASSED  1 passed" in simulated.stdout
    if not real_device().is_gpu:  # the control: on this CPU box the class skips "Test requires CUDA"
        assert "1 skipped" in rerun().stdout
