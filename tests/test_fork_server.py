"""The xdist fork server: workers forked from a preloaded interpreter keep their pin, thread split
and env, crashes are still reported, failures fall back to a plain spawn, nothing is left behind.

Subprocess pytester runs with -n 2 (real workers); the preload is a module of the test's own
(`forkmarker`) so the runs stay quick, plus torch where the thread split is checked."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsakit.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())

# Imported by the server only: records the server's pid.
MARKER = """
import os
SERVER_PID = os.getpid()
"""

SUITE = """
import json, os, sys, pytest

def _dump(name, **extra):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    marker = sys.modules.get("forkmarker")
    record = {"worker": worker, "pid": os.getpid(), "ppid": os.getppid(),
              "server_pid": getattr(marker, "SERVER_PID", None),
              "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "own": os.environ.get("OWN_ENV"), **extra}
    with open(os.path.join(os.environ["SEEN"], f"{worker}-{name}.json"), "w") as f:
        json.dump(record, f)

@pytest.mark.parametrize("i", range(4))
def test_seen(i):
    import time; time.sleep(0.2)
    _dump(f"seen{i}")

def test_rewritten():
    x = [1, 2]
    assert x == [1, 3]
"""

# Per-worker env the controller sets (xdist's own hook): gw1 gets another thread count.
CONFTEST = """
def pytest_xdist_setupnodes(config, specs):
    for spec in specs:
        spec.env["OWN_ENV"] = f"own-{spec.id}"
        if spec.id == "gw1":
            spec.env["OMP_NUM_THREADS"] = "2"
"""


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short TMPDIR for the runs: the server's unix socket path must stay under 107 bytes (a
    longer temp folder makes dsakit put it in /tmp, where these tests would not look)."""
    path = Path(tempfile.mkdtemp(prefix="dsk-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _setup(pytester: pytest.Pytester, tmp_path: Path, tmp: Path) -> tuple[Path, Path]:
    seen = tmp_path / "seen"
    seen.mkdir()
    pytester.makepyfile(forkmarker=MARKER)
    pytester.makeconftest(CONFTEST)
    for name, value in (("SEEN", str(seen)), ("TMPDIR", str(tmp)), ("DSAKIT_GPU_COUNT", "2")):
        pytester._monkeypatch.setenv(name, value)
    for name in ("DSAKIT_DEVICE", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PYTEST_ADDOPTS"):
        pytester._monkeypatch.delenv(name, raising=False)
    return seen, tmp


def _run(pytester: pytest.Pytester, preload: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "2",
                                         "--dsakit-workers-per-gpu=1", "--dsakit-split-threads",  # opt-in now
                                         "-o", f"dsakit_fork_server_preload={preload}", *args)


def _server_pid(result: pytest.RunResult) -> int:
    line = next(line for line in result.outlines if line.startswith("dsakit: fork server pid "))
    return int(line.split()[4].rstrip(":"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def _left_behind(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("dsakit-fs-*"))


def test_workers_are_forked_and_keep_pin_threads_env(pytester: pytest.Pytester, tmp_path: Path, short_tmp: Path) -> None:
    seen, tmp = _setup(pytester, tmp_path, short_tmp)
    pytester.makepyfile(test_fork=SUITE + """
@pytest.mark.parametrize("i", range(4))
def test_threads(i):
    import time, torch
    time.sleep(0.3)
    _dump(f"threads{i}", threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"))
""")
    result = _run(pytester, "torch forkmarker", "--dsakit-fork-server=on")
    result.assert_outcomes(passed=8, failed=1)
    server = _server_pid(result)
    records = [json.loads(p.read_text()) for p in seen.glob("*.json")]
    assert {r["worker"] for r in records} == {"gw0", "gw1"}
    for record in records:
        assert record["ppid"] == server and record["server_pid"] == server, record  # forked, not spawned
        assert record["own"] == f"own-{record['worker']}"  # per-worker env
    pins = {r["worker"]: r["cvd"] for r in records}
    assert sorted(pins.values()) == ["0", "1"], pins  # GPU pinning holds
    threads = [r for r in records if "threads" in r]
    # the server preloaded torch with OMP_NUM_THREADS=cpus/2 (1 on a 2-core box); gw1's own value
    # (2) must win after the fork, as it would in a freshly spawned worker
    assert {r["worker"] for r in threads} == {"gw0", "gw1"}, threads
    assert all(r["threads"] == int(r["omp"]) for r in threads), threads
    assert {r["omp"] for r in threads if r["worker"] == "gw1"} == {"2"}
    # dsakit's and the test's assertions are still rewritten in a forked worker
    result.stdout.fnmatch_lines(["*assert [[]1, 2[]] == [[]1, 3[]]*"])
    assert not _alive(server)
    assert _left_behind(tmp) == []


def test_crash_is_reported_against_its_test_and_worker_replaced(pytester: pytest.Pytester, tmp_path: Path, short_tmp: Path) -> None:
    _, tmp = _setup(pytester, tmp_path, short_tmp)
    pytester.makepyfile(test_crash="""
import os
def test_crash():
    os._exit(3)
def test_a(): pass
def test_b(): pass
def test_c(): pass
""")
    result = _run(pytester, "forkmarker", "--dsakit-fork-server=on")
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'test_crash.py::test_crash'*"])
    result.assert_outcomes(passed=3, failed=1)
    assert "fork server pid" in result.stdout.str()
    assert _left_behind(tmp) == []


@pytest.mark.parametrize(("module", "code"), [
    ("import threading, time\nthreading.Thread(target=time.sleep, args=(30,), name='sleeper').start()\n",
     "fork-server-threads"),
    ("import os\nos._exit(7)\n", "fork-server-crash"),
])
def test_unsafe_or_crashing_preload_falls_back_to_spawn(pytester: pytest.Pytester, tmp_path: Path, short_tmp: Path,
                                                        module: str, code: str) -> None:
    seen, tmp = _setup(pytester, tmp_path, short_tmp)
    pytester.makepyfile(badpreload=module, test_fork=SUITE)
    result = _run(pytester, "forkmarker badpreload", "--dsakit-fork-server=on")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines([f"dsakit: fork server off, workers spawn [[]{code}[]]*"])
    records = [json.loads(p.read_text()) for p in seen.glob("*.json")]
    assert records and all(r["server_pid"] is None for r in records)  # spawned: nothing preloaded
    assert _left_behind(tmp) == []


def test_off_and_auto_without_kept_server_start_none(pytester: pytest.Pytester, tmp_path: Path, short_tmp: Path) -> None:
    _, tmp = _setup(pytester, tmp_path, short_tmp)
    pytester.makepyfile(test_fork=SUITE)
    for args in (("--dsakit-fork-server=off",), ()):  # auto without a kept server: plain spawn
        result = _run(pytester, "forkmarker", *args)
        result.assert_outcomes(passed=4, failed=1)
        assert "fork server" not in result.stdout.str()
    result = _run(pytester, "forkmarker", "--dsakit-fork-server=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _left_behind(tmp) == []


def test_interrupted_run_leaves_nothing_behind(pytester: pytest.Pytester, tmp_path: Path, short_tmp: Path) -> None:
    _, tmp = _setup(pytester, tmp_path, short_tmp)
    pytester.makeconftest(CONFTEST + """
import os
def pytest_configure(config):
    os.environ["CONTROLLER_PID"] = str(os.getpid())
""")
    pytester.makepyfile(test_interrupt="""
import os, signal, time
def test_interrupt():
    os.kill(int(os.environ["CONTROLLER_PID"]), signal.SIGINT)
    time.sleep(20)
def test_other():
    time.sleep(20)
""")
    result = _run(pytester, "forkmarker", "--dsakit-fork-server=on")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    server = _server_pid(result)
    assert not _alive(server)
    assert _left_behind(tmp) == []


def test_preload_refuses_cuda_and_never_loads_dsakit(tmp_path: Path) -> None:
    (tmp_path / "cudatoucher.py").write_text("import torch\ntorch.cuda.init()\n")
    (tmp_path / "cudacatcher.py").write_text(
        "import torch\ntry:\n    CAP = torch.cuda.get_device_capability()\nexcept Exception:\n    CAP = None\n")
    (tmp_path / "propscatcher.py").write_text(
        "import torch\ntry:\n    NAME = torch.cuda.get_device_name()\nexcept Exception:\n    NAME = None\n")
    # on a GPU node (a capability from the controller): the capability query is answered, other
    # queries are refused and, when swallowed, taint the preload; on this CPU box the refusal is
    # what CUDA itself answers, so a swallowed one is no taint
    code = ("import json, sys; from dsakit.node.fork_server_process import preload, fork_safety; "
            "r = preload(['cudatoucher', 'dsakit.topk.checks', 'json']); "
            "cpu = preload(['cudacatcher']); "
            "gpu = preload(['propscatcher'], capability=(9, 0)); "
            "import cudacatcher; cudacatcher_cap = cudacatcher.CAP; del sys.modules['cudacatcher']; "
            "answered = preload(['cudacatcher'], capability=(9, 0)); "
            "print(json.dumps({'skipped': r.skipped, 'loaded': r.loaded, 'safe': fork_safety(r.tainted), "
            "'cpu': fork_safety(cpu.tainted), 'caught': fork_safety(gpu.tainted), "
            "'answered': [sys.modules['cudacatcher'].CAP, fork_safety(answered.tainted)], "
            "'cpu_cap': cudacatcher_cap, "
            "'torch_cuda_ok': [getattr(sys.modules['torch'].cuda, n).__name__ "
            "for n in ('_lazy_init', 'current_device', 'get_device_capability')]}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env=env, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["skipped"]["cudatoucher"].startswith("CudaTouched"), report
    assert "never preloaded" in report["skipped"]["dsakit.topk.checks"]
    assert report["loaded"] == ["json"] and report["safe"] is None
    assert report["cpu"] is None and report["cpu_cap"] is None
    # a module that swallowed the refusal may cache "no GPU": the server must not serve at all
    assert report["caught"][0] == "fork-server-cuda-caught" and "propscatcher" in report["caught"][1]
    assert report["answered"] == [[9, 0], None]  # answered from the node's probe: no refusal
    # the guard is removed after the preload
    assert report["torch_cuda_ok"] == ["_lazy_init", "current_device", "get_device_capability"]


def test_client_spawns_plainly_when_the_server_is_unreachable(tmp_path: Path) -> None:
    from dsakit.node import fork_client

    done = subprocess.run([sys.executable, "-I", "-S", fork_client.__file__, str(tmp_path / "none.sock"),
                           "-u", "-c", "import sys; print('plain', sys.argv)"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "plain ['-c']"
    assert "cannot use the fork server" in done.stderr and "starting this worker plainly" in done.stderr


def test_kept_server_is_reused_until_a_preloaded_file_changes(pytester: pytest.Pytester, tmp_path: Path, short_tmp: Path) -> None:
    seen, tmp = _setup(pytester, tmp_path, short_tmp)
    pytester.makepyfile(test_fork=SUITE)
    keep = ("--dsakit-fork-server=keep", "-o", "dsakit_fork_server_keep_s=60")
    first = _run(pytester, "forkmarker", *keep)
    try:
        first.assert_outcomes(passed=4, failed=1)
        server = _server_pid(first)
        first.stdout.fnmatch_lines(["*fork server pid * (kept for later runs)*"])
        assert _alive(server) and len(_left_behind(tmp)) == 1  # it outlives the run, by design
        second = _run(pytester, "forkmarker")  # auto: reuses the live kept server
        second.assert_outcomes(passed=4, failed=1)
        second.stdout.fnmatch_lines([f"*fork server pid {server} (kept from an earlier run)*"])
        records = [json.loads(p.read_text()) for p in seen.glob("*.json")]
        assert records and all(r["ppid"] == server for r in records)
        for p in seen.glob("*.json"):
            p.unlink()
        marker = pytester.path / "forkmarker.py"
        os.utime(marker, (marker.stat().st_atime, marker.stat().st_mtime + 10))  # an edit
        third = _run(pytester, "forkmarker", *keep)
        third.assert_outcomes(passed=4, failed=1)
        third.stderr.fnmatch_lines(["*stale: *forkmarker.py changed since the preload; starting this worker plainly*"])
        records = [json.loads(p.read_text()) for p in seen.glob("*.json")]
        assert records and all(r["server_pid"] is None for r in records)  # spawned, fresh sources
        assert not _alive(server) and _left_behind(tmp) == []  # the stale server stopped itself
    finally:
        with contextlib.suppress(Exception):
            os.kill(_server_pid(first), signal.SIGTERM)  # it removes its folder


def test_kept_server_stops_itself_when_idle(pytester: pytest.Pytester, tmp_path: Path, short_tmp: Path) -> None:
    _, tmp = _setup(pytester, tmp_path, short_tmp)
    pytester.makepyfile(test_fork=SUITE)
    result = _run(pytester, "forkmarker", "--dsakit-fork-server=keep", "-o", "dsakit_fork_server_keep_s=1")
    server = _server_pid(result)
    try:
        result.assert_outcomes(passed=4, failed=1)
        deadline = time.monotonic() + 20
        while (_alive(server) or _left_behind(tmp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(server) and _left_behind(tmp) == []
    finally:
        with contextlib.suppress(Exception):
            os.kill(server, signal.SIGTERM)  # it removes its folder


def test_fork_canary_reports_what_a_forked_child_hits() -> None:
    """The server's last check before serving on a GPU node: a CUDA driver initialised before the
    fork shows only in a forked child (seen on the H200: 'CUDA error: initialization error')."""
    from dsakit.node.fork_server_process import fork_canary

    def broken_driver() -> None:
        raise RuntimeError("CUDA error: initialization error")

    assert fork_canary(lambda: None) is None
    assert fork_canary(broken_driver) == "RuntimeError: CUDA error: initialization error"
