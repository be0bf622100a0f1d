"""`dsakit rerun-test`: one process per file, CI registration read statically, a result block per
file, JUnit XML per file, exit 1 when any file failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dsakit.gates.device_model import simulated_model
from dsakit.node.rerun import ci_registrations, runs_as_script

# rerun-test reads the registration statically, never by importing the file. Only UNITTEST_STYLE
# imports SGLang's ci_register (~6 CPU-s per child: `import sglang`): its `python FILE` run is the
# one where nothing but that import shows the child got this interpreter's packages (unittest is
# stdlib); this file's `-m pytest` run shows it by loading pytest and `-p dsakit.plugin`.
PYTEST_STYLE = """
def register_cuda_ci(**kw): pass
def register_cpu_ci(*args, **kw): pass

register_cuda_ci(est_time=30, stage="base-b", runner_config="1-gpu-small")
register_cpu_ci(5, "base-a-test-cpu")

def test_ok():
    pass

def test_ok_too():
    pass
"""

UNITTEST_STYLE = """
import unittest
from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=249, suite="stage-b-test-2-gpu-large")

class TestThing(unittest.TestCase):
    def test_good(self):
        pass

    def test_broken_on_purpose(self):
        self.assertEqual(1, 2)

    @unittest.skip("not here")
    def test_skipped(self):
        pass

if __name__ == "__main__":
    unittest.main()
"""


def _rerun(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsakit", "rerun-test", *args], cwd=pytester.path,
                          capture_output=True, text=True, check=False)


def test_two_files_one_failing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_pass=PYTEST_STYLE, test_fail=UNITTEST_STYLE)
    done = _rerun(pytester, "test_pass.py", "test_fail.py", "--junitxml", "junit")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "==== dsakit rerun-test: test_pass.py ====" in out
    assert "CI: register_cuda_ci runner_config=1-gpu-small stage=base-b est_time=30s -> runner base-b-test-1-gpu-small" in out
    assert "CI: register_cpu_ci suite=base-a-test-cpu est_time=5s" in out
    assert "node: this node matches" in out  # the CPU registration matches any node
    assert "-m pytest test_pass.py" in out and "result: PASSED  2 passed" in out
    assert "==== dsakit rerun-test: test_fail.py ====" in out
    assert "[ci-runner-mismatch] registered for cuda runner stage-b-test-2-gpu-large" in out
    assert "test_fail.py -v" in out  # unittest style: `python FILE`
    assert "result: FAILED  1 passed, 1 failed, 1 skipped" in out
    assert "1 passed, 1 failed: test_fail.py ====" in out
    suite = ET.parse(pytester.path / "junit" / "test_fail.py.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert ET.parse(pytester.path / "junit" / "test_pass.py.xml").getroot() is not None
    assert (pytester.path / "junit" / "test_fail.py.log").read_text().count("AssertionError") >= 1


def test_only_matching_skips_files_for_other_runners(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fail=UNITTEST_STYLE)
    done = _rerun(pytester, "test_fail.py", "--only-matching", "--junitxml", "j")
    assert done.returncode == 0 and "SKIPPED (--only-matching)" in done.stdout


def test_missing_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    done = _rerun(pytester, "nope.py")
    assert done.returncode == 2 and "no such test file or directory: nope.py" in done.stderr


def test_registrations_and_node_match(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_text(
        'register_cuda_ci(est_time=120, stage="base-b", runner_config="4-gpu-b200")\n'
        'register_amd_ci(est_time=60, suite="stage-a-test-1-gpu-amd", disabled="flaky")\n'
        "def f():\n    register_cuda_ci(est_time=1, suite='not-top-level')\n")
    cuda, amd = ci_registrations(path)
    assert (cuda.backend, cuda.runner, cuda.gpus, cuda.est_time) == ("cuda", "base-b-test-4-gpu-b200", 4, 120.0)
    assert amd.disabled == "flaky" and amd.runner == "stage-a-test-1-gpu-amd"
    h200 = simulated_model("sm90")
    assert "has 4 GPUs, this node 2" in str(cuda.match(h200, 2))
    assert cuda.match(h200, 8) is None
    assert "B200 runner" in str(cuda.model_note(h200))
    assert "not an" in str(amd.match(h200, 1)) or "registered for amd" in str(amd.match(h200, 1))
    assert not runs_as_script(path)


def test_children_load_the_plugin_on_a_node_without_an_install(pytester: pytest.Pytester) -> None:
    """The offline GPU node has dsakit on PYTHONPATH only: no entry point, so each child pytest
    must get `-p dsakit.plugin` or every dsakit marker is unknown under --strict-markers."""
    test_file = pytester.makepyfile(
        test_marked="""
        import dsakit

        @dsakit.gate("cuda")
        def test_gated():
            pass

        def test_plain():
            pass
        """
    )
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    env_note = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 stands in for 'not installed'"
    result = pytester.run(
        sys.executable, "-c",
        "import os, sys; os.environ['PYTEST_DISABLE_PLUGIN_AUTOLOAD'] = '1'; "
        "from dsakit.cli import main; sys.exit(main(['rerun-test', sys.argv[1], '--junitxml', sys.argv[2]]))",
        str(test_file), str(pytester.path / "junit"),
    )
    assert result.ret == 0, (env_note, result.stdout.str())
    result.stdout.fnmatch_lines(["*-p dsakit.plugin*"])


# ---------------------------------------------------------------- process groups, JUnit counts, arguments

_SPAWNS = """
import os, subprocess, sys

def test_leaves_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open("child.pid", "w") as out:
        out.write(str(child.pid))
"""

_FORKS_THEN_HANGS = """
import os, time

def test_forks_then_hangs():
    pid = os.fork()
    if pid == 0:  # the forked child: off the parent's pipes, then stays
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        time.sleep(300)
        os._exit(0)
    with open("child.pid", "w") as out:
        out.write(str(pid))
    time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(("source", "args", "status"), [
    (_SPAWNS, (), "result: PASSED"),
    (_FORKS_THEN_HANGS, ("--timeout", "3"), "result: TIMEOUT"),
], ids=["child-after-passed", "forked-child-after-timeout"])
def test_the_files_process_group_is_ended_after_it(pytester: pytest.Pytester, source: str,
                                                   args: tuple[str, ...], status: str) -> None:
    pytester.makepyfile(test_group=source)
    done = _rerun(pytester, "test_group.py", *args, "--junitxml", "junit")
    pid = int((pytester.path / "child.pid").read_text())
    try:
        assert status in done.stdout, done.stdout + done.stderr
        assert _gone_within(pid, 5), f"process {pid} started by the file still runs after rerun-test"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _consistent(suite: ET.Element) -> tuple[int, int, int]:
    cases = list(suite.iter("testcase"))
    counted = (len(cases), sum(c.find("failure") is not None for c in cases),
               sum(c.find("error") is not None for c in cases))
    assert (int(suite.get("tests", -1)), int(suite.get("failures", -1)), int(suite.get("errors", -1))) == counted, \
        ET.tostring(suite).decode()
    return counted


def test_junit_of_a_crash_counts_what_happened(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_crash="import os\ndef test_gone():\n    os._exit(3)\n")
    done = _rerun(pytester, "test_crash.py", "--junitxml", "junit")
    assert done.returncode == 1
    root = ET.parse(pytester.path / "junit" / "test_crash.py.xml").getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    assert [_consistent(s) for s in suites] == [(1, 0, 1)]
    (error,) = root.iter("error")
    assert error.get("message") == "the process exited with code 3"


def test_junit_of_a_passing_pytest_file_is_pytests_own_recounted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mixed="import pytest\ndef test_a():\n    pass\n"
                                   "def test_b():\n    assert 0\n@pytest.mark.skip\ndef test_c():\n    pass\n")
    done = _rerun(pytester, "test_mixed.py", "--junitxml", "junit")
    assert "result: FAILED  1 passed, 1 failed, 1 skipped" in done.stdout, done.stdout
    root = ET.parse(pytester.path / "junit" / "test_mixed.py.xml").getroot()
    (suite,) = root.iter("testsuite")
    assert _consistent(suite) == (3, 1, 0) and suite.get("skipped") == "1"
    assert not list(pytester.path.rglob("*.tmp"))


def test_timeout_inf_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    done = _rerun(pytester, "test_ok.py", "--timeout", "inf")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--timeout must be a positive number of seconds, got inf; for no limit leave --timeout out" in done.stderr
    assert "Traceback" not in done.stderr


def test_pytest_arguments_after_a_double_dash(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two="def test_one():\n    pass\ndef test_two():\n    assert 0\n")
    done = _rerun(pytester, "test_two.py", "--junitxml", "junit", "--", "-k", "one")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_two.py -q -rfEs --junitxml=" in done.stdout and " -k one" in done.stdout
    assert "result: PASSED  1 passed" in done.stdout
