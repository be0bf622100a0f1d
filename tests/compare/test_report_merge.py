"""`dsakit report merge`: shards and nodes in one coverage table, what ran on no node, the fleet-wide
must-run check, failures with where they happen, the markdown, and refused inputs (exit 2)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsakit.node.pytest_invocation import plugin_args

import pytest_split  # noqa: F401  - a pinned test requirement: fail loudly without it

PLUGIN = tuple(plugin_args())
pytestmark = pytest.mark.usefixtures("no_kernel_modules")

SUITE = """
import pytest
import dsakit
from dsakit.gates.marks import active_session

def test_plain():
    pass

@dsakit.gate("fa3")
@pytest.mark.parametrize("n", range(2))
def test_fa3(n):
    pass

def test_cuda_inside():
    dsakit.require("cuda")

def test_b300_only():
    if active_session().device.key == "sm103":
        raise RuntimeError("selection differs at row 0x1f on B300")
"""


def _run(pytester: pytest.Pytester, name: str, *args: str) -> Path:
    report = pytester.path / f"{name}.json"
    pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", f"--dsakit-report={report}", *args)
    assert report.is_file()
    return report


def _merge(pytester: pytest.Pytester, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`dsakit report merge ARGS`, in this process: it reads JSON files only (no torch, no SGLang,
    no process-global state), so a child interpreter per call (~0.2 CPU-s each) buys nothing."""
    from tests.conftest import _dsakit_in_process

    return _dsakit_in_process(pytester.path, "report", "merge", *map(str, args))


def _shards(pytester: pytest.Pytester, *extra: str) -> list[Path]:
    return [_run(pytester, f"h200-g{g}", "--dsakit-device=sm90", "--dsakit-host-label=h200", "--splits=2",
                 f"--group={g}", "-k", "not b300", *extra) for g in (1, 2)]


def test_two_shards_merge_into_one_node(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    shards = _shards(pytester)
    done = _merge(pytester, *shards, "--json", "merged.json")
    assert done.returncode == 0, done.stdout + done.stderr  # nothing failed, no must-run gate
    data: dict[str, Any] = json.loads((pytester.path / "merged.json").read_text())
    assert [(n["label"], n["shards"], n["missing_shards"]) for n in data["nodes"]] == [("h200 (sm90 simulated)", "1,2 of 2", [])]
    tests = data["tests"]
    assert sorted(tests) == ["test_suite.py::test_cuda_inside", "test_suite.py::test_fa3[0]",
                             "test_suite.py::test_fa3[1]", "test_suite.py::test_plain"]
    # a simulated node's column always says so: its coverage is not real hardware's
    assert tests["test_suite.py::test_cuda_inside"] == {"h200 (sm90 simulated)": "passed"}
    assert data["gates"]["cuda"]["ran_on"] == ["h200 (sm90 simulated)"] and data["gates"]["fa3"]["ran_on"] == []
    assert data["gates"]["cuda"]["ran_on_real"] == []
    assert data["not_run_anywhere"] == ["test_suite.py::test_fa3[0]", "test_suite.py::test_fa3[1]"]
    assert "h200 (sm90 simulated)  " in done.stdout and "1,2 of 2" in done.stdout
    assert "RAN ON NO NODE" in done.stdout  # fa3: reported, but not a must-run gate here


def test_missing_shard_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    done = _merge(pytester, _shards(pytester)[1])
    assert "MISSING shard 1" in done.stdout


def _node_report(template: dict[str, Any], pytester: pytest.Pytester, name: str, group: int, splits: int,
                 tests: dict[str, str]) -> Path:
    """A report of a real run (`template`) recast as shard `group` of `splits` holding `tests`."""
    path = pytester.path / name
    entries = {t: {"outcome": o, "gates": [], **({"signature": f"E   {t} broke"} if o == "failed" else {})}
               for t, o in tests.items()}
    path.write_text(json.dumps({**template, "host": "h200", "shard": {"group": group, "splits": splits},
                                "tests": entries}))
    return path


@pytest.mark.parametrize("missing", [1, 3], ids=["first", "last"])
def test_a_missing_shard_is_named_and_fails_the_merge(pytester: pytest.Pytester, missing: int) -> None:
    """A shard without a report (its job crashed or was cancelled) leaves its tests' outcomes
    unknown: named in the table and the summary, and the merge exits 1 (issue 34 item 9: a missing
    *last* shard went unnamed by an off-by-one, and a missing shard never failed the merge)."""
    template = _report(pytester)
    shards = [_node_report(template, pytester, f"g{g}.json", g, 3, {f"t.py::test_{g}": "passed"})
              for g in (1, 2, 3) if g != missing]
    done = _merge(pytester, *shards, "--json", "merged.json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"MISSING shard {missing}" in done.stdout
    assert f"h200 (cpu simulated): shard {missing} of 3 has no report: its tests are counted as not run" in done.stdout
    assert done.stderr.strip() == (f"dsakit report merge: FAILED: h200 (cpu simulated): shard {missing} of 3 has no "
                                   "report (merge every shard's report, or rerun the shard)")
    data = json.loads((pytester.path / "merged.json").read_text())
    assert data["nodes"][0]["missing_shards"] == [missing] and data["exit"] == 1
    every = [_node_report(template, pytester, f"all{g}.json", g, 3, {f"t.py::test_{g}": "passed"}) for g in (1, 2, 3)]
    assert _merge(pytester, *every).returncode == 0


@pytest.mark.parametrize("order", ["failed-first", "passed-first"])
def test_a_test_one_node_reports_twice_keeps_its_worst_outcome(pytester: pytest.Pytester, order: str) -> None:
    """Two shards of one node that both ran a test (overlapping selections): a pass in one never
    hides the failure in the other, whichever report comes first (issue 34 item 9)."""
    template = _report(pytester)
    failed = _node_report(template, pytester, "g1.json", 1, 2, {"t.py::test_x": "failed", "t.py::test_y": "skipped"})
    passed = _node_report(template, pytester, "g2.json", 2, 2, {"t.py::test_x": "passed", "t.py::test_y": "passed"})
    done = _merge(pytester, *((failed, passed) if order == "failed-first" else (passed, failed)), "--json", "m.json")
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads((pytester.path / "m.json").read_text())
    assert data["tests"] == {"t.py::test_x": {"h200 (cpu simulated)": "failed"},
                             "t.py::test_y": {"h200 (cpu simulated)": "passed"}}  # a run beats a skip
    assert data["failures"] == [{"test": "t.py::test_x", "where": "h200 (cpu simulated)",
                                 "signature": "E   t.py::test_x broke"}]
    assert "dsakit report merge: FAILED: 1 test failure(s)" in done.stderr


def test_simulated_sm103_and_cpu_runs_share_one_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    b300 = _run(pytester, "b300", "--dsakit-device=sm103", "--dsakit-host-label=ci", "-k", "not b300")
    cpu = _run(pytester, "cpu", "--dsakit-device=cpu", "--dsakit-host-label=ci", "-k", "not b300")
    done = _merge(pytester, b300, cpu, "--markdown", "merged.md", "--json", "merged.json")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((pytester.path / "merged.json").read_text())
    # one host label, two devices: two columns
    assert [n["label"] for n in data["nodes"]] == ["ci (sm103 simulated)", "ci (cpu simulated)"]
    assert data["tests"]["test_suite.py::test_cuda_inside"] == {"ci (sm103 simulated)": "passed",
                                                               "ci (cpu simulated)": "skipped"}
    md = (pytester.path / "merged.md").read_text()
    # skipped on cpu, covered on sm103; where it runs: the device table's entries, marked with the fleet's
    assert ("| `cuda` | 1 | ci (cpu simulated) | sm103 (only simulated here), sm90, sm100, sm120 (no node here) "
            "| ci (sm103 simulated) |") in md
    assert "| `fa3` | 4 | ci (sm103 simulated), ci (cpu simulated) | sm90 (no node here) | not covered on any node |" in md
    assert "<details><summary>Tests that ran on no node (2)</summary>" in md
    assert "- `fa3` (2): `test_suite.py::test_fa3[0]`, `test_suite.py::test_fa3[1]`" in md
    assert "| cuda | ran 1 | skipped 1 | ran on ci (sm103 simulated) (simulated only: no real hardware) |" in md
    assert "- gates that ran only on simulated devices (not real coverage): `cuda`" in md


def test_a_must_run_gate_that_ran_on_no_node_fails_the_merge(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    # shard 1 holds no fa3 test, so its own --dsakit-must-run passes; shard 2 skips them on this box
    shards = _shards(pytester, "--dsakit-must-run=fa3")
    cpu = _run(pytester, "cpu", "--dsakit-device=cpu", "--dsakit-host-label=cpu", "-k", "not b300")
    done = _merge(pytester, *shards, cpu, "--markdown", "merged.md")
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"\nfa3 +skipped 2 +skipped 2 +RAN ON NO NODE \(must-run: FAILED\)", done.stdout), done.stdout
    assert "must-run gate fa3 ran on no node (every test behind it was skipped on every node)" in done.stderr
    md = (pytester.path / "merged.md").read_text()
    assert "- must-run gate `fa3` ran on no node: every test behind it was skipped on every node" in md
    # the reports' own must-run codes count fleet-wide: shard 1 alone still asks for fa3
    done = _merge(pytester, shards[0], cpu)
    assert done.returncode == 1 and done.stderr.count("must-run gate fa3 ran on no node") == 1
    # a must-run gate that ran somewhere passes; one that no test declares fails
    h200 = _run(pytester, "h200", "--dsakit-device=sm90", "--dsakit-host-label=h200", "-k", "not b300")
    assert _merge(pytester, h200, cpu, "--must-run", "cuda").returncode == 0
    done = _merge(pytester, h200, cpu, "--must-run", "flashmla-sparse")
    assert done.returncode == 1 and "no test in any report declares this gate" in done.stderr


def test_a_must_run_gate_met_only_by_a_simulated_device_says_so_and_fails_with_must_run_real(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    simulated = _run(pytester, "b300", "--dsakit-device=sm103", "--dsakit-host-label=ci", "-k", "not b300")
    real = _run(pytester, "cpu", "--dsakit-host-label=ci", "-k", "not b300")  # this CPU box, unsimulated
    done = _merge(pytester, simulated, real, "--must-run", "cuda")
    assert done.returncode == 0, done.stdout + done.stderr  # it ran (simulated): not a failure by default
    assert "gates that ran only on simulated devices (not real coverage): `cuda`" in done.stdout
    done = _merge(pytester, simulated, real, "--must-run", "cuda", "--must-run-real")
    assert done.returncode == 1
    assert ("must-run gate cuda ran on no node (it ran only on simulated devices (ci (sm103 simulated)); "
            "--must-run-real needs real hardware)") in done.stderr


def test_a_failure_on_one_node_fails_the_merge_and_says_where(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    b300 = _run(pytester, "b300", "--dsakit-device=sm103", "--dsakit-host-label=b300")
    h200 = _run(pytester, "h200", "--dsakit-device=sm90", "--dsakit-host-label=h200")
    done = _merge(pytester, h200, b300, "--markdown", "merged.md", "--json", "merged.json")
    assert done.returncode == 1
    failures = json.loads((pytester.path / "merged.json").read_text())["failures"]
    assert failures == [{"test": "test_suite.py::test_b300_only", "where": "b300 (sm103 simulated) only (passed on h200 (sm90 simulated))",
                         "signature": "RuntimeError: selection differs at row 0x? on B300 @ test_suite.py"}]
    md = (pytester.path / "merged.md").read_text()
    assert md.index("### Failures (1)") < md.index("### Skips by reason code")  # failures first
    assert "1 test failure(s)" in done.stderr


def test_other_sglang_releases_merge_with_a_column(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    cpu = _run(pytester, "cpu", "--dsakit-device=cpu", "--dsakit-host-label=ci", "-k", "not b300")
    node = _run(pytester, "node", "--dsakit-device=sm90", "--dsakit-host-label=h200", "-k", "not b300")
    data = json.loads(node.read_text())
    data["sglang"] = "0.5.17"
    node.write_text(json.dumps(data))
    done = _merge(pytester, cpu, node)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SGLang releases differ between nodes: 0.5.17 on h200 (sm90 simulated); " in done.stdout
    assert any(line.startswith("h200 ") and " 0.5.17 " in line for line in done.stdout.splitlines())


def _report(pytester: pytest.Pytester) -> dict[str, Any]:
    pytester.makepyfile(test_suite="def test_x():\n    pass\n")
    return dict(json.loads(_run(pytester, "good", "--dsakit-device=cpu", "--dsakit-host-label=n").read_text()))


@pytest.mark.parametrize(("content", "message"), [
    (None, "nowhere.json: no such report file; pass the JSON files written by `pytest --dsakit-report PATH`"),
    ("{not json", "bad.json: not JSON (Expecting property name"),
    ("[1, 2]", "bad.json: not a dsakit report (a JSON list, not an object)"),
    ({"junit": 1}, "bad.json: not a dsakit report (no \"format\": \"dsakit-report\")"),
    ({"device": {}, "sglang": "0.5.23", "gates": {}, "must_run": {}},
     "bad.json: a dsakit report of format 1 (an older dsakit: skips only, no host, shard or per-test outcomes)"),
    ("format2", "bad.json: a dsakit report of format 2 (an older dsakit: subtests folded into their tests and skips "
     "without causes), so its skips cannot be counted or explained as pytest counts them; rerun that node with "
     "this dsakit (report format 3)"),
    ("format4", "bad.json: report format 4, this dsakit reads format 3; merge with the newer dsakit that wrote it"),
    ("collect", "bad.json: a --collect-only report says what would skip, not what ran"),
    ("damaged", "bad.json: field 'tests' should be dict, found list"),
])
def test_bad_input_is_a_usage_error(pytester: pytest.Pytester, content: Any, message: str) -> None:
    good = _report(pytester)
    name = "nowhere.json" if content is None else "bad.json"
    if content == "format2":
        content = {**good, "format_version": 2}
    elif content == "format4":
        content = {**good, "format_version": 4}
    elif content == "collect":
        content = {**good, "collect_only": True}
    elif content == "damaged":
        content = {**good, "tests": []}
    if content is not None:
        (pytester.path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    done = _merge(pytester, name)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("dsakit: error: " + message), done.stderr


def test_conflicting_shards_and_codes_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    g1 = _run(pytester, "g1", "--dsakit-device=sm90", "--dsakit-host-label=h200", "--splits=2", "--group=1")
    copy = pytester.path / "g1-again.json"
    copy.write_text(g1.read_text())
    done = _merge(pytester, g1, copy)
    assert done.returncode == 2 and "node 'h200': shard 1 of 2 reported twice" in done.stderr
    whole = _run(pytester, "whole", "--dsakit-device=sm90", "--dsakit-host-label=h200")
    done = _merge(pytester, g1, whole)
    assert done.returncode == 2 and "give each run its own --dsakit-host-label" in done.stderr
    done = _merge(pytester, g1, "--must-run", "fa4")
    assert done.returncode == 2 and "unknown dsakit gate 'fa4'" in done.stderr
    assert _merge(pytester).returncode == 2  # no report at all


def test_many_failures_are_summed_up_per_signature() -> None:
    from dsakit.compare.markdown import Comment, FailureRow, FailureSection, render

    rows = [FailureRow(f"t.py::test_{n}", "b300 only (passed on h200)", "RuntimeError: no driver @ x.py") for n in range(11)]
    rows.append(FailureRow("t.py::test_other", "h200", "KeyError: 'k' @ y.py"))
    md = render(Comment("fleet", failures=[FailureSection("Failures", tuple(rows))]))
    head, folded = md.split("<details><summary>every test</summary>")
    assert "| 11 | b300 only (passed on h200) | `RuntimeError: no driver @ x.py` |" in head
    assert "| 1 | h200 | `KeyError: 'k' @ y.py` |" in head and "test_0" not in head
    assert all(f"`t.py::test_{n}`" in folded for n in range(11))


def test_releases_are_named_in_release_order_not_text_order() -> None:
    """0.5.9 before 0.5.17 before 0.6.0 (text order put 0.5.17 first and 0.6.0 before 0.5.9)."""
    from types import SimpleNamespace

    from dsakit.compare.report_merge import _releases_note

    nodes = [SimpleNamespace(sglang=release, label=label) for release, label in
             (("0.6.0", "b300"), ("0.5.17", "h200"), ("not installed", "ci"), ("0.5.9", "mi300"))]
    note = _releases_note(SimpleNamespace(nodes=nodes))  # type: ignore[arg-type]
    assert note.startswith("SGLang releases differ between nodes: 0.5.9 on mi300; 0.5.17 on h200; 0.6.0 on b300; "
                           "not installed on ci (")


BEHIND_TWO = """
import dsakit

@dsakit.gate("cuda")
def test_cuda():
    pass

@dsakit.gate("cuda", "fa3")
def test_cuda_and_fa3():
    pass
"""


def test_a_gate_row_and_the_skip_groups_count_each_skip_once_under_the_same_code(pytester: pytest.Pytester) -> None:
    """Issue 34: the `cuda` row counted a test behind cuda and fa3 that skipped for fa3 (on a B300) as a
    cuda skip, and the skip list counted its CPU skip under both codes: the row said 3 skips behind
    cuda, the list 2 [cuda] and 2 [fa3] for 3 skips in all. Now each skip is in one group (its first
    closed gate, the others named), and a row names the code its other skips count under."""
    pytester.makepyfile(test_suite=BEHIND_TWO)
    b300 = _run(pytester, "b300", "--dsakit-device=sm103", "--dsakit-host-label=b300")
    cpu = _run(pytester, "cpu", "--dsakit-device=cpu", "--dsakit-host-label=cpu")
    done = _merge(pytester, b300, cpu, "--json", "merged.json")
    assert re.search(r"\ncuda +ran 1, skipped 1 \(fa3 1\) +skipped 2 +ran on", done.stdout), done.stdout
    assert re.search(r"\nfa3 +skipped 1 +skipped 1 \(cuda 1\) +RAN ON NO NODE", done.stdout), done.stdout
    assert "  [cuda] 2 skipped on cpu (cpu simulated); " in done.stdout
    assert "  [fa3] 1 skipped on b300 (sm103 simulated); " in done.stdout
    data = json.loads((pytester.path / "merged.json").read_text())
    by_group = {g["code"]: g["skipped"] for g in data["skips"]}
    assert sum(by_group.values()) == 3  # the skips pytest counted on the two nodes
    for code in ("cuda", "fa3"):  # a row's skips under its own code are the group's
        cells = data["gates"][code]["nodes"].values()
        assert sum(cell["skipped_by"].get(code, 0) for cell in cells) == by_group[code]


PARTLY = """
import pytest
from dsakit.gates.marks import active_session

def test_on_h200_only():
    if active_session().device.key != "sm90":
        pytest.skip("[my-code] only on an H200")

def test_nowhere():
    pytest.skip("[my-code] on no device")
"""


def test_a_skip_group_with_one_uncovered_test_is_not_covered(pytester: pytest.Pytester) -> None:
    """Issue 34's surviving mutant: a group is covered only when every test in it ran somewhere; one
    test that ran nowhere beside one that ran on the H200 is named, and the group says 1 of 2."""
    pytester.makepyfile(test_suite=PARTLY)
    h200 = _run(pytester, "h200", "--dsakit-device=sm90", "--dsakit-host-label=h200")
    b300 = _run(pytester, "b300", "--dsakit-device=sm103", "--dsakit-host-label=b300")
    done = _merge(pytester, h200, b300, "--json", "merged.json")
    group = json.loads((pytester.path / "merged.json").read_text())["skips"][0]
    assert group["code"] == "my-code" and group["skipped"] == 3
    assert group["covered_on"] == "h200 (sm90 simulated) (1 of 2 tests; the rest not covered on any node)"
    assert group["uncovered"] == ["test_suite.py::test_nowhere"]
    assert "      ran on no node: test_suite.py::test_nowhere" in done.stdout
