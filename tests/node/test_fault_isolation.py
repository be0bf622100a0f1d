"""Fault isolation on CPU: a simulated sticky device error in test 2 of 5 (the probe hook answered
by a conftest, the tests' `cuda` fixture raising like a poisoned CUDA context) is blamed on test 2
alone, in one process (later GPU tests not run, [cuda-context-poisoned]) and under xdist (worker
replaced, the rest pass). tests/node/test_fault_isolation_gpu.py shows the same with a real kernel fault.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsakit.node.pytest_invocation import plugin_args
from tests.child_env import child_env

PLUGIN = tuple(plugin_args())

# What a CUDA context does after a device-side assert: the kernel returns at once (the fault is
# asynchronous), then every later use in the process raises, and a synchronize reports it.
CONFTEST = '''
import pytest

FAULT = "CUDA error: device-side assert triggered"
STATE = {"poisoned": False}


class AcceleratorError(RuntimeError):
    pass


class Device:
    def launch_out_of_bounds_scatter(self):
        STATE["poisoned"] = True

    def use(self):
        if STATE["poisoned"]:
            raise AcceleratorError(FAULT)


@pytest.fixture
def cuda():
    return Device()


@pytest.hookimpl(tryfirst=True)
def pytest_dsakit_device_fault(item):
    return f"AcceleratorError: {FAULT}" if STATE["poisoned"] else None
'''

SUITE = '''
import pytest
import dsakit

@dsakit.gate("cuda")
def test_1(cuda):
    cuda.use()

@dsakit.gate("cuda")
@pytest.mark.parametrize("lengths", [[-3, 7] * 200], ids=["negative-padded"])
def test_2_faults(cuda, lengths):
    cuda.use()
    cuda.launch_out_of_bounds_scatter()

@dsakit.gate("cuda")
def test_3(cuda):
    cuda.use()

@dsakit.gate("sm>=9.0")
def test_4(cuda):
    cuda.use()

@dsakit.gate("cuda")
def test_5(cuda):
    cuda.use()
'''

# Ungated tests cannot be known to use the GPU: they run; one that meets the poisoned context is
# a victim (not run), one that does not touch the GPU passes.
UNGATED = '''
import dsakit

@dsakit.gate("cuda")
def test_1_faults(cuda):
    cuda.launch_out_of_bounds_scatter()

def test_2_cpu_only():
    assert 1 + 1 == 2

def test_3_touches_gpu(cuda):
    cuda.use()
'''


def _write(pytester: pytest.Pytester, suite: str) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_faults=suite)
    pytester._monkeypatch.delenv("DSAKIT_DEVICE", raising=False)


def _literal(text: str) -> str:
    """`text` as an fnmatch pattern matching itself (brackets escaped)."""
    return re.sub(r"[\[\]]", lambda m: f"[{m.group()}]", text)


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    """nodeid -> PASSED/FAILED/SKIPPED/ERROR from `-rA`-free verbose lines."""
    seen: dict[str, str] = {}
    for line in result.outlines:
        for word in ("PASSED", "FAILED", "SKIPPED", "ERROR"):
            if f" {word}" in line and "test_faults.py::" in line:
                nodeid = line.split("test_faults.py::", 1)[1].split(" ", 1)[0]
                seen.setdefault(nodeid, word)
    return seen


def test_one_process_blames_the_culprit_and_does_not_run_later_gpu_tests(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    _write(pytester, SUITE)
    report = tmp_path / "inventory.json"
    result = pytester.runpytest_subprocess(
        *PLUGIN, "-p", "no:randomly", "-p", "no:xdist", "--dsakit-device=sm90", "-v", "-rs",
        f"--dsakit-report={report}",
    )
    result.assert_outcomes(passed=1, failed=1, skipped=3)
    culprit = _literal("test_faults.py::test_2_faults[negative-padded]")
    assert _outcomes(result) == {
        "test_1": "PASSED", "test_2_faults[negative-padded]": "FAILED",
        "test_3": "SKIPPED", "test_4": "SKIPPED", "test_5": "SKIPPED",
    }
    result.stdout.fnmatch_lines([
        "*- CUDA context poisoned by this test -*",
        f"{culprit} left a sticky device error (found after its call phase):",
        "  kernel error: AcceleratorError: CUDA error: device-side assert triggered",
        "  inputs: [[]negative-padded[]] lengths=[[]-3, 7, -3, 7, *...",
    ])
    result.stdout.fnmatch_lines([
        f"SKIPPED [[]1[]] test_faults.py:{line}: [[]cuda-context-poisoned[]] CUDA context poisoned by {culprit}; "
        "rerun them (e.g. `pytest -n 1` restarts the worker after a fault)"
        for line in (14, 18, 22)
    ])
    # the skip inventory counts them under the code; the fault-isolation summary names the culprit
    result.stdout.fnmatch_lines([
        "*dsakit skip inventory*", "*", "   3 skipped  [[]cuda-context-poisoned[]] CUDA context poisoned by *",
    ])
    result.stdout.fnmatch_lines([
        "*dsakit fault isolation*",
        f"CUDA context poisoned by {culprit}: AcceleratorError: CUDA error: device-side assert triggered",
        "3 later GPU test(s) not run [[]cuda-context-poisoned[]]*",
    ])
    groups = {g["code"]: g for g in json.loads(report.read_text())["skips"]["groups"]}
    assert groups["cuda-context-poisoned"]["count"] == 3
    assert groups["cuda-context-poisoned"]["tests"] == [f"test_faults.py::test_{n}" for n in (3, 4, 5)]
    assert groups["cuda-context-poisoned"]["reason"].startswith(
        "CUDA context poisoned by test_faults.py::test_2_faults[negative-padded]; rerun them")


def test_one_process_ungated_tests_run_and_victims_are_not_failed(pytester: pytest.Pytester) -> None:
    _write(pytester, UNGATED)
    result = pytester.runpytest_subprocess(
        *PLUGIN, "-p", "no:randomly", "-p", "no:xdist", "--dsakit-device=sm90", "-v", "-rs",
    )
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    assert _outcomes(result) == {
        "test_1_faults": "FAILED", "test_2_cpu_only": "PASSED", "test_3_touches_gpu": "SKIPPED",
    }
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *[[]cuda-context-poisoned[]] CUDA context poisoned by *test_1_faults*"])


@pytest.mark.parametrize("workers", ["1", "2"])
def test_xdist_replaces_the_worker_and_blames_only_the_culprit(
    pytester: pytest.Pytester, tmp_path: Path, workers: str
) -> None:
    pytest.importorskip("xdist")
    _write(pytester, SUITE)
    temp = tmp_path / "tmp"
    temp.mkdir()
    pytester._monkeypatch.setenv("TMPDIR", str(temp))
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest_subprocess(
        *PLUGIN, "-p", "no:randomly", "--dsakit-device=sm90", "-n", workers, "-v",
        f"--junitxml={junit}",
    )
    # -n 1: the one worker had tests 3-5 queued behind the culprit; they are re-scheduled on the
    # replacement worker (fresh context) and pass, none is failed for the crash.
    result.assert_outcomes(passed=4, failed=1)
    assert _outcomes(result)["test_2_faults[negative-padded]"] == "FAILED"
    result.stdout.fnmatch_lines(["*replacing crashed worker gw*"])
    result.stdout.fnmatch_lines([
        "*- CUDA context poisoned by this test -*",
        "*test_2_faults[[]negative-padded[]] left a sticky device error (found after its call phase):",
    ])
    assert "crashed while running" not in result.stdout.str()
    # the crash report became the culprit's teardown: one <testcase> per test, one failure
    xml = junit.read_text()
    assert xml.count("<testcase ") == 5 and xml.count("<failure ") == 1
    assert not list(temp.glob("dsakit-fault-*")), "the hand-over folder is left behind"


def test_the_device_error_check_never_imports_torch_nor_initialises_cuda() -> None:
    code = (
        "import sys\n"
        "from dsakit.node.fault_isolation import pending_device_error\n"
        "assert pending_device_error() is None and 'torch' not in sys.modules\n"
        "import torch\n"
        "assert pending_device_error() is None and not torch.cuda.is_initialized()\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_device_errors_are_recognised_by_type_and_text() -> None:
    from dsakit.node.fault_isolation import is_device_error

    class AcceleratorError(Exception):
        pass

    def info(error: BaseException) -> pytest.ExceptionInfo[BaseException]:
        try:
            raise error
        except BaseException:
            return pytest.ExceptionInfo.from_current()

    assert is_device_error(info(AcceleratorError("anything")))
    assert is_device_error(info(RuntimeError("CUDA error: an illegal memory access was encountered")))
    assert is_device_error(info(RuntimeError("HIP error: device-side assert triggered")))
    assert not is_device_error(info(AssertionError("[out-of-range] index 10 >= length 10")))
    assert not is_device_error(None)


# ---------------------------------------------------------------- nothing left in the temp dir

STOPPED = '''
import os
import time


def test_1():
    pass


def test_2():
    with open(os.environ["STARTED"], "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()}\\n")
    if os.environ.get("HOW") == "worker-exit":
        os._exit(1)
    if os.environ.get("HOW") == "teardown-raises":
        return
    time.sleep(float(os.environ.get("SLEEP", "0")))
    assert os.environ.get("HOW") != "fail"


def test_3(request):
    if os.environ.get("HOW") == "teardown-raises":
        request.addfinalizer(lambda: 1 / 0)
'''


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "worker-exit", "fail", "teardown-raises"])
def test_an_xdist_run_leaves_no_dsakit_folder_in_the_temp_dir(tmp_path: Path, how: str) -> None:
    """The controller's hand-over folder and the pinned run's node lock live under pytest's basetemp,
    so not even a controller killed by SIGTERM (a CI cancel: no unconfigure runs) leaves them loose
    in $TMPDIR; pytest's own retention removes what a killed run left there. Before, SIGTERM left
    a dsakit-fault-* and a dsakit-gpu-lock-* folder in /tmp for good."""
    pytest.importorskip("xdist")
    (tmp_path / "test_stopped.py").write_text(STOPPED, encoding="utf-8")
    scratch, started = tmp_path / "tmp", tmp_path / "started.txt"
    scratch.mkdir()
    env = child_env()
    env.update(TMPDIR=str(scratch), STARTED=str(started), HOW=how, DSAKIT_GPU_COUNT="2",
               SLEEP="120" if how.startswith("SIG") else "0")
    command = [sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "-n", "2",
               "--dsakit-workers-per-gpu=1", "-x" if how == "fail" else "-q", "test_stopped.py"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        if how.startswith("SIG"):
            deadline = time.monotonic() + 120
            while not started.is_file() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert started.is_file(), "test_2 never started"
            assert [p.name for p in scratch.iterdir() if p.name.startswith("dsakit-")] == []  # not even meanwhile
            proc.send_signal(getattr(signal, how))  # the controller alone, as a CI runner's cancel does
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, output
    assert sorted(p.name for p in scratch.iterdir() if not p.name.startswith("pytest-of-")) == [], output
    if how != "SIGTERM":  # a run that reached its unconfigure removed its folders from the basetemp too
        assert [p for p in scratch.rglob("dsakit-*")] == [], output
