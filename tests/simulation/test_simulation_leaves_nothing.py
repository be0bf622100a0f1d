"""A simulated AMD device leaves nothing in $TMPDIR: tvm-ffi (imported by SGLang's JIT kernel
modules) JIT-builds a ROCm DLPack addon at import whenever `torch.cuda.is_available()` and
`torch.version.hip` say ROCm. Under `--dsakit-device gfx942` on a host without ROCm that build
fails and left a `tvm-ffi-torch-c-dlpack-*` folder (its addon.cc) in $TMPDIR in every process:
~90 on this project's box. Each run is a subprocess (torch and tvm-ffi load)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsakit.node.pytest_invocation import plugin_args
from tests.child_env import child_env

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
    env = child_env(drop=[DISABLE])
    env.update(TMPDIR=str(scratch), TVM_FFI_CACHE_DIR=str(cache))  # no addon built before: tvm-ffi would build now
    done = subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "-s", "-q",
                           f"--dsakit-device={device}", "test_tvm.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert sorted(p.name for p in scratch.iterdir()) == [], output


def test_the_simulation_sets_the_variable_only_while_it_lasts(tmp_path: Path) -> None:
    """The variable is set where torch's facts are patched, which both modes of `simulate_device` do
    first; import_first=False (a whole run's mode) skips importing every probed SGLang module
    beforehand (~5 CPU-s of this child's ~11)."""
    _needs("torch")
    code = (f"import os, dsakit, torch\n"
            f"assert torch.version.hip is None, 'a ROCm build of torch builds its addon for real'\n"
            f"with dsakit.simulate_device('gfx942', import_first=False):\n"
            f"    assert os.environ.get({DISABLE!r}) == '1'\n"
            f"    with dsakit.simulate_device('sm90', import_first=False):\n"
            f"        assert os.environ.get({DISABLE!r}) == '1'\n"
            f"assert {DISABLE!r} not in os.environ\n"
            f"os.environ[{DISABLE!r}] = '0'\n"
            f"with dsakit.simulate_device('gfx942', import_first=False):\n"
            f"    assert os.environ[{DISABLE!r}] == '0'  # the user's own setting wins\n"
            f"print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != DISABLE}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.stdout.strip().endswith("ok"), done.stdout + done.stderr


def test_a_fleet_stopped_by_sigterm_ends_its_device_runs_and_removes_its_folder(sleepers: Any) -> None:
    """`--dsakit-device sm90,sm103` runs one child pytest per device, each in its own session. A
    SIGTERM to the fleet (a CI cancel) killed the fleet alone: both device runs went on running and
    its dsakit-fleet-* report folder stayed in $TMPDIR."""
    _needs("torch")
    done = sleepers.interrupt([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "-q",
                               "--dsakit-device=sm90,sm103", sleepers.suite.name],
                              cwd=sleepers.suite.parent, sig=signal.SIGTERM)
    assert done.returncode == 143, done.output
    assert done.alive == [], done.output
    assert sorted(p.name for p in sleepers.scratch.iterdir()) == [], done.output
