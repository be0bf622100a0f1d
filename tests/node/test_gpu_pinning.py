"""GPU pinning under xdist on a simulated 2-GPU node ($DSAKIT_GPU_COUNT): one GPU per worker,
workers-per-GPU, the outer CUDA_VISIBLE_DEVICES, multi-GPU markers, and no torch in the controller.

The xdist runs use `runpytest_subprocess` (workers are real processes either way; the controller
check needs a fresh interpreter)."""

from __future__ import annotations

import json
from dsakit.node.pytest_invocation import plugin_args
from pathlib import Path

import pytest

from dsakit.node.gpu_pinning import GpuInventory, cpu_threads_per_worker, discover, gpus_needed, multi_gpu_skip, plan

PLUGIN = tuple(plugin_args())

# Each test writes what its worker sees; the controller asserts it never imported torch.
SUITE = """
import json, os, pytest

def _dump(name):
    out = os.environ["PIN_OUT"]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(out, f"{worker}-{name}.json"), "w") as f:
        json.dump({"worker": worker, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                   "threads": os.environ.get("OMP_NUM_THREADS")}, f)

@pytest.mark.parametrize("i", range(8))
def test_one(i):
    import time; time.sleep(0.05)
    _dump(f"one{i}")

@pytest.mark.dsakit_whole_node
def test_whole():
    _dump("whole")

@pytest.mark.dsakit_gpus(3)
def test_three():
    pass
"""

CONFTEST = """
import sys
def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        assert "torch" not in sys.modules, "the controller imported torch"
"""


def _run(pytester: pytest.Pytester, tmp_path: Path, *args: str, cvd: str | None = None) -> tuple[pytest.RunResult, list[dict]]:
    out = tmp_path / "seen"
    out.mkdir()
    pytester.makepyfile(test_pin=SUITE)
    pytester.makeconftest(CONFTEST)
    pytester._monkeypatch.setenv("DSAKIT_GPU_COUNT", "2")
    pytester._monkeypatch.setenv("PIN_OUT", str(out))
    pytester._monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    pytester._monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if cvd is None:
        pytester._monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        pytester._monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    if not any(a.startswith("--dsakit-workers-per-gpu") for a in args):
        args = ("--dsakit-workers-per-gpu=1", *args)  # pinning is opt-in (test_inert.py: off unless asked)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", *args)
    return result, [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def _by_worker(seen: list[dict], test: str = "one") -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for record in seen:
        out.setdefault(record["worker"], set()).add(record["cvd"])
    return out


def test_two_workers_get_distinct_gpus(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result, seen = _run(pytester, tmp_path, "-n", "2")
    result.assert_outcomes(passed=9, skipped=1)
    single = [r for r in seen if "whole" not in str(r)]
    workers = {}
    for record in seen:
        workers.setdefault(record["worker"], set()).add(record["cvd"])
    # each worker's single-GPU tests see exactly its own GPU; the two workers differ
    own = {w: {c for c in cvds if c and "," not in c} for w, cvds in workers.items()}
    assert own == {"gw0": {"0"}, "gw1": {"1"}}, workers
    assert any(r["cvd"] == "0,1" or r["cvd"] == "1,0" for r in seen), "whole-node test sees both GPUs"
    result.stdout.fnmatch_lines(["*dsakit: GPU pinning (2 nvidia GPU(s) [[]0,1[]]*gw0 -> CUDA_VISIBLE_DEVICES=0; "
                                 "gw1 -> CUDA_VISIBLE_DEVICES=1*"])
    result.stdout.fnmatch_lines(["*[[]gpus:3[]] needs 3 GPUs, but this node has 2*"])
    assert single


@pytest.fixture(scope="module")
def four_workers_auto(tmp_path_factory: pytest.TempPathFactory) -> tuple[pytest.RunResult, list[dict]]:
    """One `-n auto --dsakit-workers-per-gpu 2 --dsakit-split-threads` run on the simulated 2-GPU
    node, for test_four_workers_two_per_gpu and test_n_auto_is_gpus_times_workers_per_gpu: auto
    must come out as 2 GPUs x 2 = 4 workers, and those 4 workers pin and split as an explicit -n 4
    would (explicit -n is what test_two_workers_get_distinct_gpus and test_oversubscription_warns
    run). As `_run`, but outside a pytester (module scope), with pytester's environment changes."""
    import os
    import subprocess
    import sys

    project = tmp_path_factory.mktemp("four-workers")
    out = project / "seen"
    out.mkdir()
    (project / "test_pin.py").write_text(SUITE, encoding="utf-8")
    (project / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "TOX_ENV_DIR", "DSAKIT_DEVICE", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")}
    env.update(DSAKIT_GPU_COUNT="2", PIN_OUT=str(out), HOME=str(project), PY_COLORS="0")
    done = subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:randomly", "-p", "no:cacheprovider",
                           f"--basetemp={project / 'basetemp'}",  # as runpytest_subprocess: inside this folder
                           "-n", "auto", "--dsakit-workers-per-gpu", "2", "--dsakit-split-threads"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    result = pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), 0.0)
    return result, [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def test_four_workers_two_per_gpu(four_workers_auto: tuple[pytest.RunResult, list[dict]]) -> None:
    result, seen = four_workers_auto
    result.assert_outcomes(passed=9, skipped=1)
    mapping = {r["worker"]: r["cvd"] for r in seen if r["cvd"] and "," not in r["cvd"]}
    assert {w: mapping[w] for w in sorted(mapping)} == {w: {"gw0": "0", "gw1": "1", "gw2": "0", "gw3": "1"}[w]
                                                        for w in sorted(mapping)}
    assert "oversubscribed" not in result.stdout.str()
    cpus = cpu_threads_per_worker(4, env={})
    assert {r["threads"] for r in seen} == {str(cpus)}, "each worker gets its share of the CPUs"
    result.stdout.fnmatch_lines([f"*dsakit: OMP_NUM_THREADS={cpus} per worker (4 workers share the CPUs*"])


def test_pinning_and_thread_split_are_off_unless_asked(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result, seen = _run(pytester, tmp_path, "-n", "2", "--dsakit-workers-per-gpu=0")
    result.assert_outcomes(passed=9, skipped=1)  # [gpus:3] still skips: the marker is a dsakit feature
    assert {r["cvd"] for r in seen} == {None} and {r["threads"] for r in seen} == {None}, seen
    assert "GPU pinning" not in result.stdout.str() and "OMP_NUM_THREADS" not in result.stdout.str()


def test_cpu_threads_split_between_workers() -> None:
    assert cpu_threads_per_worker(4, env={}, cpus=32) == 8
    assert cpu_threads_per_worker(3, env={}, cpus=2) == 1  # never 0
    assert cpu_threads_per_worker(1, env={}, cpus=32) is None  # one worker: torch's default
    assert cpu_threads_per_worker(4, env={"OMP_NUM_THREADS": "16"}, cpus=32) is None  # the user's choice wins


def test_oversubscription_warns(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result, _ = _run(pytester, tmp_path, "-n", "4")
    result.stdout.fnmatch_lines(["*[[]gpu-oversubscribed[]] 4 xdist workers > 2 GPU(s) x 1 worker(s) per GPU*"])


def test_outer_restriction_is_respected(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result, seen = _run(pytester, tmp_path, "-n", "2", cvd="2,3")
    result.assert_outcomes(passed=9, skipped=1)
    own = {r["worker"]: r["cvd"] for r in seen if r["cvd"] and "," not in r["cvd"]}
    assert set(own.values()) <= {"2", "3"} and len(set(own.values())) == len(own), own
    assert {r["cvd"] for r in seen if "," in (r["cvd"] or "")} <= {"2,3", "3,2"}


def test_n_auto_is_gpus_times_workers_per_gpu(four_workers_auto: tuple[pytest.RunResult, list[dict]]) -> None:
    result, _ = four_workers_auto
    result.stdout.fnmatch_lines(["*4 workers*"])


# ---------------------------------------------------------------- the pure parts


def test_cpu_and_simulated_devices_pin_nothing() -> None:
    assert discover(None, env={}).ids == () or discover(None, env={}).vendor != "none"  # real box: whatever it has
    simulated = discover("sm90", env={})
    assert simulated.ids == () and "simulated device sm90" in simulated.note
    assert discover("cpu", env={}).ids == ()


def test_inventory_override_and_restriction() -> None:
    assert discover(None, env={"DSAKIT_GPU_COUNT": "4"}).ids == ("0", "1", "2", "3")
    assert discover(None, env={"DSAKIT_GPU_COUNT": "4", "CUDA_VISIBLE_DEVICES": "2,3"}).ids == ("2", "3")
    assert discover(None, env={"DSAKIT_GPU_COUNT": "2", "CUDA_VISIBLE_DEVICES": ""}).ids == ()
    amd = discover("gfx942", env={"DSAKIT_GPU_COUNT": "2", "HIP_VISIBLE_DEVICES": "1"})
    assert (amd.env_var, amd.ids) == ("HIP_VISIBLE_DEVICES", ("1",))


def test_plan_round_robin_and_warning() -> None:
    inv = GpuInventory("nvidia", ("0", "1"), "test")
    two = plan(inv, ["gw0", "gw1"], 2)
    assert [p.gpu for p in two.pins.values()] == ["0", "1"] and not two.warnings
    three = plan(inv, ["gw0", "gw1", "gw2"], 1)
    assert [p.gpu for p in three.pins.values()] == ["0", "1", "0"]
    assert [w.code for w in three.warnings] == ["gpu-oversubscribed"]
    assert three.pins["gw1"].gpus_for(2) == ("1", "0")
    assert plan(inv, ["gw0"], 0).pins == {}


def test_multi_gpu_reasons() -> None:
    assert multi_gpu_skip(2, 2) is None and multi_gpu_skip(0, 1) is None
    assert multi_gpu_skip(4, 2).code == "gpus:4"  # type: ignore[union-attr]


def test_bad_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.dsakit_gpus(0)
        def test_x(): pass
    """)
    result = pytester.runpytest(*PLUGIN)
    result.stderr.fnmatch_lines(["*dsakit_gpus(n) needs a GPU count n >= 1*"])
    assert gpus_needed  # imported API
