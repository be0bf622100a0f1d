"""Shared scaffolding of dsakit's own tests (pytester comes from the root conftest)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.child_env import child_env

if TYPE_CHECKING:
    from dsakit.stack.sglang_release import SGLangRelease

# a separate project's suite, run from the built wheel by test_downstream_wheel.py, not collected here
collect_ignore = ["downstream_project", "suites"]


@pytest.fixture
def no_kernel_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs see no kernel modules, so gate outcomes match on this box and on a GPU node."""
    from dsakit.gates import table as gates

    monkeypatch.setattr(gates, "_importable", lambda name: False)
    monkeypatch.setattr(gates, "_package_dir", lambda name: None)


@pytest.fixture
def installed_sglang() -> SGLangRelease:
    """The SGLang installed here, whose source audits and scans read; skips with
    [sglang-not-installed] where there is none."""
    from dsakit.errors import UsageError
    from dsakit.stack.sglang_release import installed_release

    try:
        return installed_release()
    except UsageError as error:
        pytest.skip(f"[sglang-not-installed] needs the installed SGLang source: {error}")


@pytest.fixture
def write_files(tmp_path: Path) -> Callable[[dict[str, str]], Path]:
    """`write_files({"pkg/test_x.py": source, ...})`: each source dedented into tmp_path (folders
    made as needed); returns tmp_path."""
    def write(files: dict[str, str]) -> Path:
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return tmp_path

    return write


def _dsakit_in_process(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """(imported by the audit tests) `dsakit ARGS` run by `dsakit.cli.main` in this process from `cwd`: its exit code, stdout and
    stderr, as `subprocess.run([sys.executable, "-m", "dsakit", *args], cwd=cwd)` gives them, for
    the commands that import neither torch nor SGLang (audit, contract check): the SGLang source
    index and the scans then stay warm across tests instead of being rebuilt per process."""
    import contextlib
    import io

    from dsakit.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit:  # argparse: usage errors and --help
                code = exit.code if isinstance(exit.code, int) else 2
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["dsakit", *args], code, out.getvalue(), err.getvalue())


def _once_per_run(name: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  build: Callable[[Path], dict[str, str]]) -> dict[str, Path]:
    """`build(folder)` once per test run: the first xdist worker to ask builds under a file lock in
    the folder the run's workers share (pytest's basetemp; its parent under xdist), the others wait
    and read what it built. `build` returns its files by name, relative to the folder."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if hasattr(request.config, "workerinput") else base) / f"dsakit-{name}"
    done = folder.with_suffix(".json")
    with FileLock(str(folder) + ".lock", timeout=900):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a build a killed worker left half done
            folder.mkdir()
            done.write_text(json.dumps(build(folder)))
    return {key: folder / value for key, value in json.loads(done.read_text()).items()}


def _build_release(work: Path) -> dict[str, str]:
    """The sdist from a copy of the checkout, then the wheel from the unpacked sdist, as
    `python -m build` does (with this interpreter's setuptools: no download). A copy, because
    setuptools leaves build/ and *.egg-info in the source tree, and a stale build/lib would put
    deleted modules in the wheel."""
    import tarfile

    root = Path(__file__).resolve().parent.parent
    source = work / "src"
    shutil.copytree(root, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".device", ".cache", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
        "dsakit-report*.json"))
    (work / "dist").mkdir()
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                    "b.build_sdist(sys.argv[1])", str(work / "dist")], cwd=source, check=True, timeout=300,
                   capture_output=True)
    (sdist,) = (work / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        # the sdist this fixture just built; `filter` exists from Python 3.11.4 / 3.10.12 on
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(work / "unpacked", **safe)
    (unpacked,) = (work / "unpacked").iterdir()
    # -v: the build backend's own output (setuptools' warnings) is kept as wheel-build.log
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                            "-w", str(work / "dist"), str(unpacked)], check=True, timeout=300, capture_output=True,
                           text=True)
    (work / "wheel-build.log").write_text(built.stdout + built.stderr, encoding="utf-8")
    (wheel,) = (work / "dist").glob("*.whl")
    return {"sdist": str(sdist.relative_to(work)), "wheel": str(wheel.relative_to(work)),
            "unpacked": str(unpacked.relative_to(work)), "wheel_log": "wheel-build.log"}


def _venv_over_this_interpreter(work: Path) -> Path:
    """A fresh venv at work/venv whose site sees this interpreter's packages (torch, SGLang, pytest,
    ...) after its own, through a .pth; returns its python. Nothing is installed into it yet."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True, timeout=120)
    python = work / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "_parent_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.fixture(scope="session")
def venv_over_this_interpreter() -> Callable[[Path], Path]:
    """`venv_over_this_interpreter(work)`: see _venv_over_this_interpreter."""
    return _venv_over_this_interpreter


@pytest.fixture(scope="session")
def built_release(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"sdist", "wheel", "unpacked", "wheel_log"}: the pytest-dsakit sdist, the wheel built from it
    (the one PyPI gets), the unpacked sdist it was built in and the wheel build's output; built once
    per test run, shared by the workers."""
    return _once_per_run("release", request, tmp_path_factory, _build_release)


@pytest.fixture(scope="session")
def built_wheel(built_release: dict[str, Path]) -> Path:
    return built_release["wheel"]


@pytest.fixture(scope="session")
def built_sdist(built_release: dict[str, Path]) -> Path:
    return built_release["sdist"]


@pytest.fixture(scope="session")
def sglang_release_tree(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`tree("0.5.21")`: an unpacked SGLang wheel of that release (the folder holding `sglang/`),
    downloaded once with `pip download --no-deps` into the pytest cache (a session temp dir under
    -p no:cacheprovider); skips with [sglang-wheel-unavailable] where pip cannot fetch it (offline)."""
    from scripts.release_wheel import WheelUnavailable, unpacked_release

    cache = getattr(request.config, "cache", None)
    made: dict[str, Path] = {}  # -p no:cacheprovider: one temp dir per release and session, not per call

    def tree(version: str) -> Path:
        if cache is not None:
            where = Path(cache.mkdir(f"dsakit-sglang-{version}"))
        else:
            where = made.get(version) or made.setdefault(version, tmp_path_factory.mktemp(f"sglang-{version}"))
        try:
            return unpacked_release(version, where, timeout=600)
        except WheelUnavailable as error:
            pytest.skip(f"[sglang-wheel-unavailable] no SGLang {version} wheel: `pip download --no-deps "
                        f"sglang=={version}` failed (offline?): {error}")

    return tree


# ---------------------------------------------------------------- a command interrupted while its test runs

SLEEPER = """
import os
import time


def test_sleeps():
    with open(os.environ["SLEEPER_PIDS"], "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()}\\n")
    time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Interrupted:
    returncode: int
    output: str
    started: list[int]  # the sleeping tests' pids
    alive: list[int]  # of those, still running afterwards (killed by the fixture then)


@dataclass
class Sleepers:
    """`suite`: a test file whose one test sleeps 300 s after writing its pid; `scratch`: the
    command's TMPDIR. `interrupt(command, cwd, sig)` starts the command in its own session, waits
    until `runs` sleeping tests run (`while_running()` is called then), sends `sig` to the command
    alone (a CI cancel, `kill PID`) and returns what happened; whatever it left running is killed."""

    suite: Path
    scratch: Path
    pids: Path

    def interrupt(self, command: list[str], *, cwd: Path, sig: signal.Signals, runs: int = 2,
                  while_running: Callable[[], None] | None = None, timeout: float = 90) -> Interrupted:
        env = child_env()
        env.update(TMPDIR=str(self.scratch), SLEEPER_PIDS=str(self.pids))
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        started: list[int] = []
        try:
            deadline = time.monotonic() + 300
            while len(started) < runs and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                started = [int(p) for p in self.pids.read_text().split()] if self.pids.is_file() else []
            assert len(started) == runs, proc.communicate(timeout=60)[0] if proc.poll() is not None else "no run started"
            if while_running is not None:
                while_running()
            proc.send_signal(sig)
            output, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            alive = [pid for pid in started if _alive(pid)]
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # the test's own cleanup where the command left them
        return Interrupted(proc.returncode, output, started, alive)


@pytest.fixture
def sleepers(tmp_path: Path) -> Sleepers:
    suite = tmp_path / "suite" / "test_sleeper.py"
    suite.parent.mkdir()
    suite.write_text(SLEEPER, encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    return Sleepers(suite, tmp_path / "tmp", tmp_path / "pids.txt")


# ---------------------------------------------------------------- a golden written by --snapshot-update


@pytest.fixture(scope="session")
def snapshot_update_golden(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """`golden(module, suite)`: the `.topksel` golden that one complete `--snapshot-update` run of
    `suite` (saved as `<module>.py` in a new folder, simulated cpu) writes."""
    from dsakit.node.pytest_invocation import plugin_args

    def run(module: str, suite: str) -> Path:
        project = tmp_path_factory.mktemp(module)
        (project / f"{module}.py").write_text(suite, encoding="utf-8")
        env = child_env()
        done = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider",
                               "--dsakit-device=cpu", "--snapshot-update"],
                              cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (golden,) = (project / "__snapshots__" / module).glob("*.topksel")
        return golden

    return run
