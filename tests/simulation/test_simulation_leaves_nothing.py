"""A simulated AMD device leaves nothing in $TMPDIR: tvm-ffi (imported by SGLang's JIT kernel
modules) JIT-builds a ROCm DLPack addon at import whenever `torch.cuda.is_available()` and
`torch.version.hip` say ROCm. Under `--dsakit-device gfx942` on a host without ROCm that build
fails and left a `tvm-ffi-torch-c-dlpack-*` folder (its addon.cc) in $TMPDIR in every process:
~90 on this project's box. Each run is a subprocess (torch and tvm-ffi load)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsakit.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())
DISABLE = "TVM_FFI_DISABLE_TORCH_C_DLPACK"

IMPORTS_TVM_FFI = f'''
import os


def test_imports_tvm_ffi_as_sglang_does():
    import tvm_ffi  # the addon is built (or refused) while this module imports

    assert tvm_ffi is not None
    print("inside:", os.environ.get("{DISABLE}"))
'''


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"[module:{module}] the leak is tvm-ffi's addon build under a simulated ROCm torch")


@pytest.mark.parametrize("device", ["gfx942", "sm90"])
def test_a_whole_run_as_another_device_leaves_no_tvm_ffi_build_folder(tmp_path: Path, device: str) -> None:
    _needs("torch")
    _needs("tvm_ffi")
    (tmp_path / "test_tvm.py").write_text(IMPORTS_TVM_FFI, encoding="utf-8")
    scratch, cache = tmp_path / "tmp", tmp_path / "tvm-ffi-cache"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST_", "PYTEST_ADDOPTS")) and k != DISABLE}
    env.update(TMPDIR=str(scratch), TVM_FFI_CACHE_DIR=str(cache))  # no addon built before: tvm-ffi would build now
    done = subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "-s", "-q",
                           f"--dsakit-device={device}", "test_tvm.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert sorted(p.name for p in scratch.iterdir()) == [], output


def test_the_simulation_sets_the_variable_only_while_it_lasts(tmp_path: Path) -> None:
    _needs("torch")
    code = (f"import os, dsakit, torch\n"
            f"assert torch.version.hip is None, 'a ROCm build of torch builds its addon for real'\n"
            f"with dsakit.simulate_device('gfx942'):\n"
            f"    assert os.environ.get({DISABLE!r}) == '1'\n"
            f"    with dsakit.simulate_device('sm90'):\n"
            f"        assert os.environ.get({DISABLE!r}) == '1'\n"
            f"assert {DISABLE!r} not in os.environ\n"
            f"os.environ[{DISABLE!r}] = '0'\n"
            f"with dsakit.simulate_device('gfx942'):\n"
            f"    assert os.environ[{DISABLE!r}] == '0'  # the user's own setting wins\n"
            f"print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != DISABLE}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.stdout.strip().endswith("ok"), done.stdout + done.stderr


SLEEPER = '''
import os
import time


def test_sleeps():
    with open(os.environ["SLEEPER_PIDS"], "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()}\\n")
    time.sleep(300)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_fleet_stopped_by_sigterm_ends_its_device_runs_and_removes_its_folder(tmp_path: Path) -> None:
    """`--dsakit-device sm90,sm103` runs one child pytest per device, each in its own session. A
    SIGTERM to the fleet (a CI cancel) killed the fleet alone: both device runs went on running and
    its dsakit-fleet-* report folder stayed in $TMPDIR."""
    _needs("torch")
    (tmp_path / "test_sleeper.py").write_text(SLEEPER, encoding="utf-8")
    scratch, pids = tmp_path / "tmp", tmp_path / "pids.txt"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_ADDOPTS"))}
    env.update(TMPDIR=str(scratch), SLEEPER_PIDS=str(pids))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "-q",
                             "--dsakit-device=sm90,sm103", "test_sleeper.py"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    started: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while len(started) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            started = [int(p) for p in pids.read_text().split()] if pids.is_file() else []
        assert len(started) == 2, "the device runs never started"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # this test's own cleanup where the fleet left them
    assert proc.returncode == 143, output
    assert [pid for pid in started if _alive(pid)] == [], output
    assert sorted(p.name for p in scratch.iterdir()) == [], output
