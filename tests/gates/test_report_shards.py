"""`--dsakit-report` format 2 under pytest-split shards: node identity (host label, shard), every
test's outcome and gates, and a skip inventory and `--dsakit-must-run` that count only the shard's
own tests (another shard's tests are deselected, not skipped)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from dsakit.node.pytest_invocation import plugin_args

# pytest-split is a pinned test requirement (requirements/test.txt): fail loudly, never skip, without it
import pytest_split  # noqa: F401

PLUGIN = tuple(plugin_args())
pytestmark = pytest.mark.usefixtures("no_kernel_modules")

# test_slow alone outweighs the rest, so duration_based_chunks puts it alone in shard 1 and every
# other test (the fa3 and cuda gated ones among them) in shard 2.
SUITE = """
import pytest
import dsakit

def test_slow():
    pass

@dsakit.gate("fa3")
@pytest.mark.parametrize("n", range(3))
def test_fa3(n):
    pass

def test_cuda_inside():
    dsakit.require("cuda")

@pytest.mark.xfail(raises=KeyError, strict=True)
def test_known_bug():
    raise KeyError("upstream")

def test_broken():
    raise ValueError("bad value 0x7f00")
"""


def _durations(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "durations.json"
    others = ["test_fa3[0]", "test_fa3[1]", "test_fa3[2]", "test_cuda_inside", "test_known_bug", "test_broken"]
    durations = {"test_suite.py::test_slow": 100.0, **{f"test_suite.py::{t}": 1.0 for t in others}}
    path.write_text(json.dumps(durations))  # a test missing here would count the average
    return path


def _shard(pytester: pytest.Pytester, group: int, *args: str, device: str = "sm90") -> tuple[pytest.RunResult, dict[str, Any]]:
    report = pytester.path / f"g{group}.json"
    result = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", f"--dsakit-device={device}", "--splits=2",
                                f"--group={group}", f"--durations-path={_durations(pytester)}",
                                f"--dsakit-report={report}", "--dsakit-host-label=h200", *args)
    return result, json.loads(report.read_text())


def test_each_shard_reports_its_identity_and_only_its_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    first, one = _shard(pytester, 1)
    second, two = _shard(pytester, 2)
    first.assert_outcomes(passed=1)
    second.assert_outcomes(passed=1, failed=1, skipped=3, xfailed=1)
    assert one["format"] == "dsakit-report" and one["format_version"] == 3
    assert (one["host"], one["shard"], two["shard"]) == ("h200", {"group": 1, "splits": 2}, {"group": 2, "splits": 2})
    assert one["device"]["key"] == "sm90" and one["sglang"]
    assert set(one["tests"]) == {"test_suite.py::test_slow"}
    assert one["skips"] == {"total": 0, "groups": [], "why": ""}  # shard 1 skips nothing: none counted there
    tests = two["tests"]
    assert set(tests) | set(one["tests"]) == {
        "test_suite.py::test_slow", "test_suite.py::test_fa3[0]", "test_suite.py::test_fa3[1]",
        "test_suite.py::test_fa3[2]", "test_suite.py::test_cuda_inside", "test_suite.py::test_known_bug",
        "test_suite.py::test_broken"}
    # fa3 is closed on this box (no sgl_kernel), cuda is open on a simulated sm90
    assert tests["test_suite.py::test_fa3[0]"]["outcome"] == "skipped"
    assert tests["test_suite.py::test_fa3[0]"]["gates"] == ["fa3"]
    assert [r["code"] for r in tests["test_suite.py::test_fa3[0]"]["reasons"]] == ["fa3"]
    assert tests["test_suite.py::test_cuda_inside"] == {"outcome": "passed", "gates": ["cuda"]}  # require(), open
    assert tests["test_suite.py::test_known_bug"]["outcome"] == "xfailed"
    assert tests["test_suite.py::test_broken"]["outcome"] == "failed"
    assert tests["test_suite.py::test_broken"]["signature"] == "ValueError: bad value 0x? @ test_suite.py"
    assert [(g["code"], g["count"]) for g in two["skips"]["groups"]] == [("fa3", 3)]
    assert two["skips"]["total"] == 3 and two["subtests"] == {}


def test_must_run_fails_only_the_shard_that_skipped_the_gate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    first, one = _shard(pytester, 1, "--dsakit-must-run=fa3")
    second, two = _shard(pytester, 2, "--dsakit-must-run=fa3", "-k", "not broken")
    assert first.ret == pytest.ExitCode.OK  # its fa3 tests are in shard 2: deselected, not skipped
    # not skipped, but no test of this shard sits behind fa3: said, and fatal only when strict
    assert one["must_run"] == {"codes": ["fa3"], "failed": {}, "no_test_behind": ["fa3"], "strict": False}
    assert second.ret == pytest.ExitCode.TESTS_FAILED
    assert sorted(two["must_run"]["failed"]["fa3"]) == [f"test_suite.py::test_fa3[{n}]" for n in range(3)]


def test_collect_only_shard_counts_only_its_own_planned_skips(pytester: pytest.Pytester) -> None:
    # gates are applied before pytest-split deselects the other shard's tests
    pytester.makepyfile(test_suite=SUITE)
    report = pytester.path / "c1.json"
    result = pytester.runpytest(*PLUGIN, "--collect-only", "-q", "--dsakit-device=cpu", "--splits=2", "--group=1",
                                f"--durations-path={_durations(pytester)}", f"--dsakit-report={report}",
                                "--dsakit-must-run=fa3")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert json.loads(report.read_text())["skips"]["groups"] == []


def test_xdist_shard_reports_every_workers_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    report = pytester.path / "x2.json"
    result = pytester.runpytest_subprocess(
        *PLUGIN, "-p", "no:cacheprovider", "-n", "2", "--dsakit-device=sm90", "--splits=2", "--group=2",
        f"--durations-path={_durations(pytester)}", f"--dsakit-report={report}")
    result.assert_outcomes(passed=1, failed=1, skipped=3, xfailed=1)
    data = json.loads(report.read_text())
    assert data["shard"] == {"group": 2, "splits": 2}
    assert len(data["tests"]) == 6 and "test_suite.py::test_slow" not in data["tests"]
    assert data["tests"]["test_suite.py::test_cuda_inside"]["gates"] == ["cuda"]  # declared on a worker
    assert data["tests"]["test_suite.py::test_fa3[1]"]["gates"] == ["fa3"]


def test_host_label_from_option_env_or_hostname(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    report = pytester.path / "r.json"
    monkeypatch.delenv("DSAKIT_HOST_LABEL", raising=False)
    pytester.runpytest(*PLUGIN, f"--dsakit-report={report}")
    data = json.loads(report.read_text())
    assert data["host"] == socket.gethostname() and data["shard"] is None
    monkeypatch.setenv("DSAKIT_HOST_LABEL", "b300-ci")
    pytester.runpytest(*PLUGIN, f"--dsakit-report={report}")
    assert json.loads(report.read_text())["host"] == "b300-ci"
    pytester.runpytest(*PLUGIN, f"--dsakit-report={report}", "--dsakit-host-label=mi355")
    assert json.loads(report.read_text())["host"] == "mi355"
