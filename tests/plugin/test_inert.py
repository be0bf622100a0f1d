"""Inert unless used: a suite that uses no dsakit fixture, marker, gate or option runs exactly as
with `-p no:dsakit` (environment each test sees, xdist worker count, output lines, subprocesses,
files left in $TMPDIR); and the checkout's `-p dsakit.plugin` is harmless where the wheel is
installed.

`nvidia-smi` and `rocminfo` on PATH are stubs that log every call and report more GPUs than this
machine has CPUs, so GPU pinning would change `-n auto` and a device read would show in the log.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
import sys
import time
from pathlib import Path

import pytest

from dsakit.node.pytest_invocation import plugin_args, plugin_autoloads

PLUGIN = tuple(plugin_args())
CONTROL = ("-p", "no:dsakit")

UNRELATED = """
import json, os, pytest

def _dump(tag):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["INERT_OUT"], f"{worker}-{tag}.json"), "w") as handle:
        json.dump(dict(os.environ), handle)

@pytest.mark.parametrize("i", range(4))
def test_env(i):
    _dump(f"env{i}")

def test_plain_skip():
    pytest.skip("not on this box")

@pytest.mark.skipif(True, reason="a skipif of the suite's own")
def test_skipif():
    pass
"""

# varies between any two runs, with or without a plugin (xdist hands tests to whichever worker
# is free, so which worker ran a test is not compared: how many workers there were is)
PER_RUN_ENV = {"PYTEST_XDIST_TESTRUNUID", "PYTEST_XDIST_WORKER", "INERT_OUT", "TMPDIR"}
_GPUS = (os.cpu_count() or 1) + 1


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def device_tool_log(pytester: pytest.Pytester, tmp_path: Path) -> Path:
    """Stub nvidia-smi / rocminfo first on PATH; each call appends its name to the log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "device_tools.log"
    rows = "".join(f"echo 'NVIDIA H200, 143771, 9.0'\n" for _ in range(_GPUS))
    _stub(bin_dir, "nvidia-smi", f"echo nvidia-smi >> '{log}'\n{rows}")
    _stub(bin_dir, "rocminfo", f"echo rocminfo >> '{log}'\nexit 1\n")
    pytester._monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name in ("DSAKIT_DEVICE", "DSAKIT_GPU_COUNT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                 "HIP_VISIBLE_DEVICES", "PYTEST_ADDOPTS", "PYTEST_XDIST_AUTO_NUM_WORKERS"):
        pytester._monkeypatch.delenv(name, raising=False)
    log.touch()
    return log


def normalized_lines(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if line.startswith("plugins: "):
            line = re.sub(r"dsakit-[^,\s]+(, )?", "", line)
        line = re.sub(r"\bin \d+\.\d+s\b", "in Ns", line)
        line = re.sub(r"\(\d+:\d+:\d+\)", "", line)
        if re.fullmatch(r"[.sxXFE]+\s*(\[\s*\d+%\])?", line.strip()):
            line = "".join(sorted(line.split("[")[0].strip())) + " [progress]"  # xdist: completion order
        out.append(line.rstrip())
    return out


def _session(pytester: pytest.Pytester, tmp_path: Path, tag: str, *args: str) -> dict[str, object]:
    out = tmp_path / f"seen-{tag}"
    out.mkdir()
    scratch = tmp_path / f"tmp-{tag}"
    scratch.mkdir()
    pytester._monkeypatch.setenv("INERT_OUT", str(out))
    pytester._monkeypatch.setenv("TMPDIR", str(scratch))
    result = pytester.runpytest_subprocess("-rs", "-p", "no:randomly", *args)
    envs, workers = {}, set()
    for path in sorted(out.glob("*.json")):
        env = json.loads(path.read_text())
        worker, tag = path.stem.split("-", 1)
        workers.add(worker)
        envs[tag] = {k: v for k, v in env.items() if k not in PER_RUN_ENV}
    counts = {env.get("PYTEST_XDIST_WORKER_COUNT") for env in envs.values()}
    return {"ret": result.ret, "lines": normalized_lines(result.outlines), "errlines": normalized_lines(result.errlines),
            "envs": envs, "workers": workers, "worker_count": counts,
            "tmp": sorted(p.name for p in scratch.iterdir())}


@pytest.mark.parametrize("xdist", [(), ("-n", "auto")], ids=["plain", "xdist-auto"])
def test_unrelated_suite_runs_as_with_no_dsakit(pytester: pytest.Pytester, tmp_path: Path, device_tool_log: Path,
                                                xdist: tuple[str, ...]) -> None:
    if xdist:
        pytest.importorskip("xdist")
    pytester.makepyfile(test_unrelated=UNRELATED)
    used = _session(pytester, tmp_path, "used", *PLUGIN, *xdist)
    control = _session(pytester, tmp_path, "control", *CONTROL, *xdist)
    assert used["ret"] == control["ret"] == 0, used["lines"]
    assert used["worker_count"] == control["worker_count"], "worker count differs"
    assert used["envs"] == control["envs"], "the tests saw another environment"
    # under xdist the summary lists skips in completion order: compare the lines as a multiset there
    order = sorted if xdist else list
    assert order(used["lines"]) == order(control["lines"])
    assert used["errlines"] == control["errlines"]
    assert used["tmp"] == control["tmp"] == []
    assert device_tool_log.read_text() == "", "a device tool ran in a session that uses no gate"


def test_a_gate_is_what_starts_the_device_read(pytester: pytest.Pytester, tmp_path: Path, device_tool_log: Path) -> None:
    """The control for the device-tool log above: one evaluated gate reads this machine's device, and the
    skip inventory appears because a dsakit gate skipped something."""
    pytester.makepyfile(test_gated="import dsakit\n\n@dsakit.gate('rocm')\ndef test_amd():\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly")
    result.assert_outcomes(skipped=1)
    assert "nvidia-smi" in device_tool_log.read_text()
    result.stdout.fnmatch_lines(["*dsakit skip inventory*", "   1 skipped  [[]rocm[]]*"])


def test_gpu_pinning_and_thread_split_when_asked(pytester: pytest.Pytester, tmp_path: Path, device_tool_log: Path) -> None:
    """The control for the worker count above: the same stub makes `-n auto` GPUs x N once asked."""
    pytest.importorskip("xdist")
    pytester.makepyfile(test_unrelated=UNRELATED)
    asked = _session(pytester, tmp_path, "asked", *PLUGIN, "-n", "auto", "--dsakit-workers-per-gpu=1",
                     "--dsakit-split-threads")
    assert any(f"{_GPUS} workers" in line for line in asked["lines"]), asked["lines"]
    assert asked["worker_count"] == {str(_GPUS)}
    assert {env.get("CUDA_VISIBLE_DEVICES") for env in asked["envs"].values()} <= {str(k) for k in range(_GPUS)}
    assert all(env.get("OMP_NUM_THREADS") for env in asked["envs"].values())
    assert "nvidia-smi" in device_tool_log.read_text()


def test_plain_skips_alone_print_no_inventory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\ndef test_x():\n    pytest.skip('[looks-coded] but not dsakit')\n"
                        "\ndef test_y():\n    pytest.skip('plain')\n")
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(skipped=2)
    text = result.stdout.str()
    assert "dsakit" not in text.replace("dsakit-", ""), text  # no header, no section


def test_a_hung_device_tool_is_cut_short_and_leaves_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dsakit.gates import device_model

    pids = tmp_path / "pids"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the stub and a child of it both hang: a kill of the stub alone would leave `sleep` behind
    _stub(bin_dir, "nvidia-smi", f"sleep 60 &\necho $$ $! > '{pids}'\nwait\n")
    _stub(bin_dir, "rocminfo", "exit 1\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(device_model, "TOOL_TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(device_model, "_read_nvml", lambda: None)
    started = time.monotonic()
    found = device_model.real_device.__wrapped__(allow_torch=False)
    assert time.monotonic() - started < 5, "a hung nvidia-smi stretched the device read"
    assert found.vendor == "cpu"
    for pid in pids.read_text().split():
        state = Path(f"/proc/{pid}/stat")
        alive = state.exists() and state.read_text().split(") ", 1)[1][0] not in "ZX"
        assert not alive, f"device tool process {pid} left running"


@pytest.mark.skipif(not plugin_autoloads(), reason="[no-entry-point] dsakit is not installed here, so "
                    "`-p dsakit.plugin` is the only way it loads")
def test_p_dsakit_plugin_where_the_entry_point_loads_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_fixture(target_runner):\n    assert target_runner.is_draft_worker is False\n")
    result = pytester.runpytest_subprocess("-p", "dsakit.plugin")
    assert "already registered" not in result.stderr.str()
    result.assert_outcomes(passed=1)
    control = pytester.runpytest_subprocess("-p", "dsakit.plugin", "-p", "no:dsakit")
    control.assert_outcomes(passed=1)  # the module named by -p still loads


def test_plugin_module_loads_nothing_heavy() -> None:
    import subprocess

    code = ("import sys, dsakit.plugin; heavy = [m for m in ('torch', 'sglang', 'dsakit.gates.table', "
            "'dsakit.gates.device_model', 'dsakit.contracts.model_runner_contract') if m in sys.modules]; "
            "print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_fixture_list_names_every_dsakit_fixture() -> None:
    """A test asking for any dsakit fixture uses dsakit (its skips reach the inventory)."""
    import dsakit.plugin as plugin
    from dsakit.gates.marks import FIXTURES

    defined = {name for name, value in vars(plugin).items() if "FixtureFunction" in type(value).__name__}
    assert defined and FIXTURES == defined | {"model_runner_role"}


def test_coded_skip_of_a_test_using_a_dsakit_fixture_is_inventoried(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\ndef test_x(target_runner):\n    pytest.skip('[my-code] why')\n")
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.stdout.fnmatch_lines(["*dsakit skip inventory*", "   1 skipped  [[]my-code[]] why"])


def test_an_unused_session_loads_no_gate_table_device_model_or_contract(pytester: pytest.Pytester) -> None:
    """What a session that uses nothing of dsakit imports is its start-up cost (it was +0.16-0.2 s):
    the gate table, the device model and the contract load on first use, not with the plugin's hooks."""
    pytester.makepyfile(test_unrelated=(
        "import sys\n\n"
        "def test_nothing_heavy_loaded():\n"
        "    heavy = [m for m in ('dsakit.gates.table', 'dsakit.gates.device_model', 'dsakit.stack.sglang_release',\n"
        "                         'dsakit.contracts.model_runner_contract', 'dsakit.mocks.model_runner',\n"
        "                         'torch', 'sglang') if m in sys.modules]\n"
        "    assert heavy == []\n"))
    for xdist in ((), ("-n", "1")):
        if xdist and importlib.util.find_spec("xdist") is None:
            continue
        pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", *xdist).assert_outcomes(passed=1)
