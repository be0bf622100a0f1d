"""A fleet's `--dsakit-must-run` is judged over the merged table (issue 45 item 5): a gate whose
tests skip on sm90 and run on sm103 ran, so the fleet passes; a gate no device ran fails it once;
a real test failure still fails it. The suites import no torch (a run is ~3 CPU-s)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsakit.node.pytest_invocation import plugin_args

PLUGIN = plugin_args()
GATED = """\
import pytest


@pytest.mark.dsakit_requires("sm~10")
def test_blackwell():
    pass


def test_anywhere():
    pass
"""


def _fleet(path: Path, devices: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "--dsakit-device",
                           devices, "--dsakit-must-run", "sm~10", *args], capture_output=True, text=True,
                          timeout=300, cwd=path, env={**os.environ, "TMPDIR": str(path)})


def test_a_gate_skipped_on_one_device_and_run_on_another_passes_the_fleet(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gated=GATED)
    done = _fleet(pytester.path, "sm90,sm103")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dsakit fleet: --dsakit-must-run sm~10: ran on " in done.stdout, done.stdout
    assert "(sm103 simulated)" in done.stdout.split("--dsakit-must-run sm~10: ran on ", 1)[1].splitlines()[0]


def test_a_gate_no_device_ran_fails_the_fleet_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gated=GATED)
    done = _fleet(pytester.path, "sm90,gfx942")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("fails the fleet") == 1, done.stdout
    assert ("dsakit fleet: --dsakit-must-run sm~10: every test behind it was skipped on every node -> fails the "
            "fleet") in done.stdout, done.stdout


def test_a_failing_test_still_fails_a_fleet_whose_gate_ran(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gated=GATED + "\n\ndef test_broken():\n    assert False\n")
    done = _fleet(pytester.path, "sm90,sm103")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "dsakit fleet: --dsakit-must-run sm~10: ran on " in done.stdout, done.stdout
