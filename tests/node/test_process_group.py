"""dsakit.node.process_group: a command's children end with it, and SIGTERM to a `dsakit` command
runs its cleanup (no half-written output, no workdir) and exits 143. No torch, no SGLang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsakit.errors import UsageError
from dsakit.node.process_group import check_timeout, run_in_own_group
from dsakit.node.pytest_invocation import plugin_args
from tests.child_env import child_env

# `dsakit report merge --json OUT`, with the writer's first write sending SIGTERM to the process:
# the signal arrives while the atomic writer's temp file exists beside OUT
SIGTERM_MID_WRITE = """
import os, signal, sys
import dsakit.output_paths as paths

real_fdopen = os.fdopen

class Interrupted:
    def __init__(self, f):
        self.f = f
    def write(self, data):
        os.kill(os.getpid(), signal.SIGTERM)
        return self.f.write(data)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self.f.__exit__(*exc)
    def __getattr__(self, name):
        return getattr(self.f, name)

paths.os.fdopen = lambda *a, **k: Interrupted(real_fdopen(*a, **k))
from dsakit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_during_a_write_leaves_no_temp_file_and_exits_143(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n", encoding="utf-8")
    report = tmp_path / "r.json"
    env = child_env()
    made = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-q", "-p", "no:cacheprovider",
                           f"--dsakit-report={report}", "test_ok.py"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)
    assert made.returncode == 0 and report.is_file(), made.stdout + made.stderr
    out = tmp_path / "out" / "merged.json"
    out.parent.mkdir()
    script = tmp_path / "interrupt.py"
    script.write_text(SIGTERM_MID_WRITE, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), "report", "merge", "--json", str(out), str(report)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 143, done.stdout + done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == [], "the writer's temp file was left behind"


def test_a_child_left_running_after_the_command_exits_is_ended(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = ("import subprocess, sys\n"
            "child = subprocess.Popen(['sleep', '300'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n")
    run = run_in_own_group([sys.executable, "-c", code])
    pid = int(pid_file.read_text())
    assert run.returncode == 0 and run.leftovers and not run.timed_out
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the command's child outlived it")


def test_a_timed_out_pytest_child_gets_sigint_first_and_cleans_up(tmp_path: Path) -> None:
    """On a timeout the group gets SIGINT before SIGTERM: a pytest child then runs its own cleanup
    (here a finalizer), which SIGTERM would skip."""
    (tmp_path / "test_hangs.py").write_text(
        "import time\nimport pytest\n\n@pytest.fixture\ndef marker(tmp_path_factory):\n    yield\n"
        f"    open({str(tmp_path / 'cleaned')!r}, 'w').write('yes')\n\n"
        "def test_hangs(marker):\n    time.sleep(300)\n", encoding="utf-8")
    run = run_in_own_group([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:dsakit",
                            "test_hangs.py"], cwd=tmp_path, timeout=5)
    assert run.timed_out
    assert (tmp_path / "cleaned").read_text() == "yes", run.output


@pytest.mark.parametrize(("value", "message"), [
    (float("inf"), "got inf; for no limit leave --timeout out"),
    (float("nan"), "got nan"),
    (0.0, "got 0"),
    (-1.0, "got -1"),
])
def test_a_timeout_is_a_positive_finite_number(value: float, message: str) -> None:
    with pytest.raises(UsageError, match=f"--timeout must be a positive number of seconds, {message}"):
        check_timeout(value)
    check_timeout(None)
    check_timeout(0.5)
