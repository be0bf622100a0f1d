"""What a whole-run simulation reports (issue 35): a test whose every subtest was refused is skipped,
never passed; a "no kernel image" launch is the same skip, a fault stays a failure; a test that runs
past --dsakit-simulation-timeout is stopped naming the call in flight; an AMD device says which
SGLang environment it runs. The suites import torch, so every run is a subprocess."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

from dsakit.gates.device_model import real_device
from dsakit.node.pytest_invocation import plugin_args

HAS_TORCH = importlib.util.find_spec("torch") is not None
torch_needed = pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] the simulation patches torch")
PLUGIN = plugin_args()

SUBTESTS = '''
import unittest

import torch

from dsakit import SimulatedKernelLaunch
from dsakit.gates.device_model import simulated_model


def launch(name):
    raise SimulatedKernelLaunch(name, "kit.py:1", simulated_model("sm103"))


class TestKernels(unittest.TestCase):
    def test_every_subtest_refused(self):
        for impl in ("flashmla_sparse", "flashmla_kv", "trtllm"):
            with self.subTest(impl=impl):
                launch(impl)

    def test_some_subtests_ran(self):
        for impl in ("flashmla_sparse", "reference"):
            with self.subTest(impl=impl):
                if impl != "reference":
                    launch(impl)
                self.assertEqual(torch.ones(2).sum().item(), 2.0)

    def test_no_kernel_image(self):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    def test_a_fault_stays_a_failure(self):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
'''


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-rs", *args)


@torch_needed
def test_a_test_whose_every_subtest_was_refused_is_skipped_not_passed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kit=SUBTESTS)
    result = _run(pytester, "--dsakit-device", "sm103", "-k", "subtest")
    result.stdout.fnmatch_lines([
        "SKIPPED [[]1[]] test_kit.py:*: [[]simulated-kernel-launch[]] every subtest (3) was refused under "
        "simulated sm103, so nothing ran; the first: [[]simulated-kernel-launch[]] flashmla_sparse (called at "
        "kit.py:1)*",
    ])
    outcome = result.parseoutcomes()
    # the test with a subtest that ran still passes (its refused subtest is a subtest skip)
    assert (outcome.get("passed"), outcome.get("skipped"), outcome.get("failed")) == (1, 1, None), outcome
    assert "test_some_subtests_ran PASSED" in pytester.runpytest_subprocess(
        *PLUGIN, "-p", "no:cacheprovider", "-v", "--dsakit-device", "sm103", "-k", "some").stdout.str()


@torch_needed
def test_without_a_simulation_the_same_suite_is_pytests_own(pytester: pytest.Pytester) -> None:
    """Honest outcomes are the simulation's: without it nothing is rewritten (the refusals are then
    ordinary errors of the test's own making, and fail)."""
    pytester.makepyfile(test_kit=SUBTESTS)
    result = _run(pytester, "-rf", "-k", "refused or image")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAILED*test_kit.py::TestKernels::test_every_subtest_refused*",
                                 "FAILED test_kit.py::TestKernels::test_no_kernel_image*"])
    assert "every subtest" not in result.stdout.str()


@torch_needed
@pytest.mark.skipif(real_device().is_gpu, reason="[real-gpu] a GPU here may be the simulated device itself")
def test_no_kernel_image_is_the_refusal_skip_and_a_fault_stays_a_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kit=SUBTESTS)
    result = _run(pytester, "-rsf", "--dsakit-device", "sm103", "-k", "image or fault")
    result.stdout.fnmatch_lines([
        "SKIPPED [[]1[]] test_kit.py:*: [[]simulated-kernel-launch[]] a kernel (called at test_kit.py:*) would "
        "launch a kernel for simulated sm103; it has no image for this GPU (*): 'CUDA error: no kernel image is "
        "available for execution on the device'; dsakit's table of arch-only kernels "
        "(dsakit/simulation/kernel_archs.py) does not list it yet: it runs on real NVIDIA B300 hardware",
        "FAILED test_kit.py::TestKernels::test_a_fault_stays_a_failure*",
    ])


SLOW = '''
import time

import torch


def test_python_that_never_returns():
    while True:
        time.sleep(0.01)


def test_after():
    assert torch.ones(1).item() == 1.0
'''


@torch_needed
def test_a_test_past_the_simulation_timeout_fails_naming_the_call_in_flight(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_slow=SLOW)
    start = time.monotonic()
    result = _run(pytester, "--dsakit-device", "sm103", "--dsakit-simulation-timeout", "2")
    assert time.monotonic() - start < 120
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*SimulationTimeout: test_slow.py::test_python_that_never_returns ran longer than "
        "--dsakit-simulation-timeout=2 s under simulated sm103; stopped. In flight: *test_slow.py:8 in "
        "test_python_that_never_returns*",
    ])


BLOCKING = '''
import subprocess
import time

import torch


def test_sleeps():
    torch.ones(1)
    time.sleep(30)


def test_waits():
    subprocess.Popen(["sleep", "30"]).wait()


def test_after():
    assert torch.ones(1).item() == 1.0
'''


@torch_needed
def test_a_sleep_or_a_wait_past_the_timeout_fails_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    """In one process: each blocked test fails naming its call, the next test runs, every report is
    written, and the waited-for subprocess does not outlive its test."""
    pytester.makepyfile(test_blocking=BLOCKING)
    result = _run(pytester, "--dsakit-device", "sm103", "--dsakit-simulation-timeout", "2",
                  "--junitxml=junit.xml", "--dsakit-report=skips.json")
    result.assert_outcomes(passed=1, failed=2)
    # neither 30 s call ran to its end: each test's own time (pytest's start-up is not the watchdog's)
    import xml.etree.ElementTree as ElementTree

    times = {case.get("name"): float(case.get("time", "0"))
             for case in ElementTree.parse(pytester.path / "junit.xml").iter("testcase")}
    assert times.keys() == {"test_sleeps", "test_waits", "test_after"} and max(times.values()) < 25, times
    result.stdout.fnmatch_lines([
        "E *SimulationTimeout: test_blocking.py::test_sleeps ran longer than --dsakit-simulation-timeout=2 s "
        "under simulated sm103; stopped. In flight: test_blocking.py:9 in test_sleeps",
        "E *SimulationTimeout: test_blocking.py::test_waits ran longer than --dsakit-simulation-timeout=2 s "
        "under simulated sm103; stopped. In flight: *subprocess.py:* in *, called from test_blocking.py:13 in "
        "test_waits; waiting for: sleep 30",
        "*= 2 failed, 1 passed in *",
    ])
    assert "this process ends" not in result.stderr.str()
    assert (pytester.path / "junit.xml").read_text().count("SimulationTimeout") >= 2
    assert (pytester.path / "skips.json").is_file()
    assert not [p for p in _descendant_commands() if p == "sleep 30"]


def _descendant_commands() -> list[str]:
    """The command lines of every process whose ancestor is this one (the pytester run's children)."""
    from dsakit.simulation.watchdog import _descendants

    found = []
    for pid in _descendants(os.getpid()):
        try:
            found.append((Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
        except OSError:
            continue
    return found


BLOCKED = '''
import signal
import time

import pytest
import torch


def test_first():
    pass


def test_second():
    pytest.skip("nothing to do")


def test_blocked_in_c():
    torch.ones(1)
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())  # as a driver call that retries EINTR
    time.sleep(600)
'''


@torch_needed
def test_a_test_blocked_in_c_ends_the_process_with_the_message_and_leaves_no_child(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_blocked=BLOCKED)
    start = time.monotonic()
    result = _run(pytester, "--dsakit-device", "sm103", "--dsakit-simulation-timeout", "2")
    assert time.monotonic() - start < 120
    assert result.ret == 1
    result.stderr.fnmatch_lines([
        "dsakit: test_blocked.py::test_blocked_in_c ran longer than --dsakit-simulation-timeout=2 s under "
        "simulated sm103; stopped. In flight: *test_blocked.py:19 in test_blocked_in_c*; the main thread did not "
        "return within 10 s, so this process ends*",
        "dsakit: before the stop: 1 passed, 1 skipped, then 1 stopped",
    ])
    result.stdout.fnmatch_lines(["test_blocked.py .s*"])  # what the reporter wrote before the stop is kept


@pytest.mark.parametrize("value", ["-5", "soon"])
def test_a_bad_simulation_timeout_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device", "sm103",
                                           f"--dsakit-simulation-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert ("expected a number of seconds >= 0" in text) if value == "-5" else ("invalid int value" in text)


@torch_needed
@pytest.mark.parametrize(("env", "says"), [
    (None, "SGLANG_USE_AITER is not set: SGLang's HIP paths without AITER run*"),
    ("1", "SGLANG_USE_AITER=1 (yours): SGLang takes its AITER paths*"),
])
def test_a_simulated_amd_device_says_which_sglang_environment_it_runs(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     env: str | None, says: str) -> None:
    if env is None:
        monkeypatch.delenv("SGLANG_USE_AITER", raising=False)
    else:
        monkeypatch.setenv("SGLANG_USE_AITER", env)
    pytester.makepyfile(test_x="import torch\n\ndef test_x():\n    assert torch.cuda.is_available()\n")
    result = _run(pytester, "--dsakit-device", "gfx942")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"dsakit: {says}"])


BUILDING = '''
import subprocess
import sys

import torch


def test_waits_for_a_build():
    torch.ones(1)
    child = "import os, time; open('child.pid', 'w').write(str(os.getpid())); time.sleep(60)"
    subprocess.run([sys.executable, "-c", child, "nvcc-stand-in"], check=True)
'''


@torch_needed
def test_a_test_waiting_for_a_subprocess_is_stopped_naming_its_command(pytester: pytest.Pytester) -> None:
    """A JIT build that never ends: the test fails naming the compiler's command line, and the
    compiler (the test's child process) does not outlive the run."""
    pytester.makepyfile(test_building=BUILDING)
    start = time.monotonic()
    result = _run(pytester, "--dsakit-device", "sm103", "--dsakit-simulation-timeout", "2")
    assert time.monotonic() - start < 50
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E *SimulationTimeout: test_building.py::test_waits_for_a_build ran longer than "
        "--dsakit-simulation-timeout=2 s under simulated sm103; stopped. In flight: *subprocess.py:* in *, "
        "called from test_building.py:10 in test_waits_for_a_build; waiting for: * -c import os, time; * "
        "nvcc-stand-in",
    ])
    pid = int((pytester.path / "child.pid").read_text())
    time.sleep(0.5)
    try:  # gone, or a zombie its new parent has not reaped yet: not running either way
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z", "X"), state


JIT_BUILD = '''
import time


class Module:
    name = "a_module_the_plain_run_never_built"

    def build(self, seconds):
        deadline = time.monotonic() + seconds  # nvcc, as Python sees it: busy, then done
        while time.monotonic() < deadline:
            time.sleep(0.05)
        return "built"
'''

BUILDS = '''
import time

from tvm_ffi.cpp.build import Module


def test_builds_past_the_timeout():
    assert Module().build(5) == "built"


def test_then_sleeps_past_it():
    time.sleep(30)
'''


@torch_needed
def test_a_jit_build_does_not_count_toward_the_simulation_timeout(pytester: pytest.Pytester) -> None:
    # on the H200 contracts/ under sm103 spent > 150 s in flashinfer's JitSpec.build_and_load (modules
    # the plain run never built): a build is progress; the time around it still counts. tvm-ffi's C++
    # builds (SGLang's JIT kernels) stand for every build here: the CPU plan stubs flashinfer's
    pytester.mkpydir("tvm_ffi")
    (pytester.path / "tvm_ffi" / "cpp").mkdir()
    (pytester.path / "tvm_ffi" / "cpp" / "__init__.py").write_text("")
    (pytester.path / "tvm_ffi" / "cpp" / "build.py").write_text(JIT_BUILD)
    pytester.makepyfile(test_builds=BUILDS)
    result = _run(pytester, "--dsakit-device", "sm103", "--dsakit-simulation-timeout", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*SimulationTimeout: test_builds.py::test_then_sleeps_past_it ran longer than*"])
