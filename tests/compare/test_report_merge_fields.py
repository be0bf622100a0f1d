"""`dsakit report merge` on hand-made reports, in this process: the merged JSON and text field by
field (issue 34 item 9: the fleet merge is a user's verdict, now in the measured mutation core).

The pytester tests in test_report_merge.py merge reports of real runs; these build the reports'
JSON directly, so every outcome rank, shard, label, gate cell, skip group and exit code is set by
the test and checked exactly, in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsakit.errors import UsageError
from dsakit.gates.inventory import REPORT_FORMAT, REPORT_KIND
from dsakit.compare import report_merge
from dsakit.compare.report_merge import as_json, format_text, load_report, merge, run_report_merge


def _report(tmp_path: Path, name: str, host: str, key: str, tests: dict[str, Any], *, simulated: bool = False,
            subtests: dict[str, Any] | None = None, shard: tuple[int, int] | None = None,
            must_run: tuple[str, ...] = (), sglang: str | None = "0.5.23", table_key: str | None = None) -> str:
    data: dict[str, Any] = {
        "format": REPORT_KIND, "format_version": REPORT_FORMAT, "host": host, "sglang": sglang,
        "device": {"description": f"{key} device", "key": key, "simulated": simulated, "table_key": table_key or key},
        "tests": tests, "subtests": subtests or {}, "must_run": {"codes": list(must_run)}}
    if shard:
        data["shard"] = {"group": shard[0], "splits": shard[1]}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _skip(code: str, message: str, runs_on: tuple[str, ...] = (), note: str = "", gates: tuple[str, ...] = (),
          also: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"outcome": "skipped", "gates": list(gates),
            "reasons": [{"code": code, "message": message, "runs_on": list(runs_on), "note": note},
                        *({"code": c, "message": f"{c} closed"} for c in also)]}


def _passed(*gates: str) -> dict[str, Any]:
    return {"outcome": "passed", "gates": list(gates)}


def _fleet(tmp_path: Path) -> list[str]:
    """An H200 in two shards (one failure, a subtest) and a simulated CPU box on another release."""
    return [
        _report(tmp_path, "h1.json", "h200", "sm90", {
            "t.py::test_a": _passed("cuda"),
            "t.py::test_b": {"outcome": "failed", "gates": ["cuda", "fa3"], "signature": "E boom @ t.py"},
        }, shard=(1, 2), must_run=("cuda",)),
        _report(tmp_path, "h2.json", "h200", "sm90", {
            "t.py::test_c": _skip("fa3", "FA3 needs SM 9.x", runs_on=("sm90",), gates=("fa3",)),
            "t.py::test_d": {"outcome": "xfailed", "gates": []},
        }, subtests={"t.py::test_a [sub 1]": {"outcome": "passed", "test": "t.py::test_a"}}, shard=(2, 2)),
        _report(tmp_path, "c.json", "ci", "cpu", {
            "t.py::test_a": _skip("cuda", "no CUDA device", runs_on=("sm90", "sm100"), note="any GPU", gates=("cuda",)),
            "t.py::test_b": _passed("cuda", "fa3"),
            "t.py::test_c": _skip("cuda", "no CUDA device", runs_on=("sm90", "sm100"), note="any GPU", gates=("fa3",),
                                  also=("fa3",)),
            "t.py::test_e": {"outcome": "skipped", "gates": []},
        }, simulated=True, sglang="0.5.21"),
    ]


def test_a_fleet_merges_into_exact_json_and_text(tmp_path: Path) -> None:
    paths = _fleet(tmp_path)
    merged = merge(paths, ["fa3"], must_run_real=True)
    data = as_json(merged)
    sim = "ci (cpu simulated)"
    assert data["nodes"] == [
        {"label": "h200", "host": "h200", "device": "sm90 device [real]", "simulated": False, "sglang": "0.5.23",
         "shards": "1,2 of 2", "missing_shards": [], "reports": paths[:2]},
        {"label": sim, "host": "ci", "device": "cpu device", "simulated": True, "sglang": "0.5.21",
         "shards": "whole run", "missing_shards": [], "reports": paths[2:]}]
    assert data["gates"] == {
        "cuda": {"nodes": {"h200": {"ran": 2, "skipped": 0, "failed": 1, "skipped_by": {}},
                           sim: {"ran": 1, "skipped": 1, "failed": 0, "skipped_by": {"cuda": 1}}},
                 "ran_on": ["h200", sim], "ran_on_real": ["h200"]},
        "fa3": {"nodes": {"h200": {"ran": 1, "skipped": 1, "failed": 1, "skipped_by": {"fa3": 1}},
                          sim: {"ran": 1, "skipped": 1, "failed": 0, "skipped_by": {"cuda": 1}}},
                "ran_on": ["h200", sim], "ran_on_real": ["h200"]}}
    assert data["tests"] == {"t.py::test_a": {"h200": "passed", sim: "skipped"},
                             "t.py::test_b": {"h200": "failed", sim: "passed"},
                             "t.py::test_c": {"h200": "skipped", sim: "skipped"},
                             "t.py::test_d": {"h200": "xfailed"},
                             "t.py::test_e": {sim: "skipped"}}
    assert data["subtests"] == {"t.py::test_a [sub 1]": {"h200": "passed"}}
    assert data["failures"] == [{"test": "t.py::test_b", "where": f"h200 only (passed on {sim})",
                                 "signature": "E boom @ t.py"}]
    assert data["not_run_anywhere"] == ["t.py::test_c", "t.py::test_e"]
    assert data["skips"] == [
        {"code": "cuda", "reason": "no CUDA device", "skipped": 2, "skipped_on": sim,
         "runs_on": "sm90 (real here: h200), sm100 (no node here) — any GPU",
         "covered_on": "h200 (1 of 2 tests; the rest not covered on any node)", "uncovered": ["t.py::test_c"],
         "messages": []},
        {"code": "fa3", "reason": "FA3 needs SM 9.x", "skipped": 1, "skipped_on": "h200",
         "runs_on": "sm90 (real here: h200)", "covered_on": "not covered on any node", "uncovered": ["t.py::test_c"],
         "messages": []},
        {"code": "uncoded", "reason": "no reason given", "skipped": 1, "skipped_on": sim, "runs_on": "unknown",
         "covered_on": "not covered on any node", "uncovered": ["t.py::test_e"],
         "messages": [{"message": "no reason given", "count": 1}]}]
    assert data["why"] == ["why these skipped on h200: [fa3] FA3 needs SM 9.x (1)",
                           f"why these skipped on {sim}: [cuda] no CUDA device (2); not explained (1: 'no reason given')"]
    # the --must-run code first, then the reports' own
    assert data["must_run"] == {"codes": ["fa3", "cuda"], "real": True, "failed": {}}
    assert data["exit"] == 1
    assert format_text(merged) == [
        "dsakit report merge: 2 node(s), 3 report(s), 6 test ids; 1 failure(s); 2 test(s) ran on no node",
        f"SGLang releases differ between nodes: 0.5.21 on {sim}; 0.5.23 on h200 (each node's outcomes are for its "
        "own release; the SGLang column says which)",
        "why these skipped on h200: [fa3] FA3 needs SM 9.x (1)",
        f"why these skipped on {sim}: [cuda] no CUDA device (2); not explained (1: 'no reason given')",
        "",
        "Nodes:",
        "node                device              SGLang  shards     tests",
        "h200                sm90 device [real]  0.5.23  1,2 of 2   1 failed, 1 passed, 1 xfailed, 1 skipped; "
        "subtests: 1 passed",
        "ci (cpu simulated)  cpu device          0.5.21  whole run  1 passed, 3 skipped",
        "",
        "Gates (tests behind each gate, per node):",
        "gate  h200                        ci (cpu simulated)         fleet",
        "cuda  ran 2, failed 1             ran 1, skipped 1           ran on h200, ci (cpu simulated) (must-run)",
        "fa3   ran 1, failed 1, skipped 1  ran 1, skipped 1 (cuda 1)  ran on h200, ci (cpu simulated) (must-run)",
        "",
        "failures (1):",
        f"  t.py::test_b  on h200 only (passed on {sim}): E boom @ t.py",
        "",
        "skips by reason code (each skip once):",
        f"  [cuda] 2 skipped on {sim}; runs on: sm90 (real here: h200), sm100 (no node here) — any GPU; "
        "covered on: h200 (1 of 2 tests; the rest not covered on any node)",
        "      no CUDA device",
        "      ran on no node: t.py::test_c",
        "  [fa3] 1 skipped on h200; runs on: sm90 (real here: h200); covered on: not covered on any node",
        "      FA3 needs SM 9.x",
        "      ran on no node: t.py::test_c",
        f"  [uncoded] 1 skipped on {sim}; runs on: unknown; covered on: not covered on any node",
        "      no reason given",
        "        1x no reason given",
        "      ran on no node: t.py::test_e"]


def test_the_command_prints_the_text_writes_json_and_markdown_and_says_why_it_failed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _fleet(tmp_path)
    code = run_report_merge(paths, must_run="fa3,flashmla-sparse", json_path=str(tmp_path / "m.json"),
                            markdown_path=str(tmp_path / "m.md"))
    out, err = capsys.readouterr()
    assert code == 1
    assert out.splitlines()[0].startswith("dsakit report merge: 2 node(s), 3 report(s), 6 test ids")
    assert err == ("dsakit report merge: FAILED: must-run gate flashmla-sparse ran on no node (no test in any "
                   "report declares this gate); 1 test failure(s)\n")
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["exit"] == 1 and data["must_run"]["failed"] == {
        "flashmla-sparse": "no test in any report declares this gate"}
    assert "| `t.py::test_b` | h200 only (passed on ci (cpu simulated)) | `E boom @ t.py` |" in (tmp_path / "m.md").read_text()
    # a clean fleet: exit 0, nothing on stderr, no file asked for, none written
    clean = _report(tmp_path, "ok.json", "h200", "sm90", {"t.py::test_a": _passed("cuda")})
    assert run_report_merge([clean], must_run="cuda") == 0
    out, err = capsys.readouterr()
    assert err == "" and "failures (0):\n  none\n" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "h1.json", "h2.json", "m.json", "m.md", "ok.json"]


@pytest.mark.parametrize(("missing", "said"), [((1,), "1"), ((2,), "2"), ((4,), "4"), ((1, 4), "1, 4")])
def test_every_missing_shard_is_named_first_middle_and_last(tmp_path: Path, missing: tuple[int, ...], said: str) -> None:
    paths = [_report(tmp_path, f"g{g}.json", "h200", "sm90", {f"t.py::test_{g}": _passed()}, shard=(g, 4))
             for g in range(1, 5) if g not in missing]
    merged = merge(paths)
    assert merged.nodes[0].missing_shards == list(missing)
    assert merged.missing_shards() == [f"h200: shard {said} of 4 has no report"]
    assert merged.exit_code() == 1
    assert merged.nodes[0].shards_text == ",".join(str(g) for g in range(1, 5) if g not in missing) + " of 4"
    text = format_text(merged)
    assert f"; MISSING shard {said}  " in text[text.index("Nodes:") + 2]


def test_a_whole_run_and_a_complete_split_miss_no_shard(tmp_path: Path) -> None:
    whole = merge([_report(tmp_path, "w.json", "h200", "sm90", {"t.py::test_a": _passed()})])
    assert whole.nodes[0].missing_shards == [] and whole.nodes[0].splits is None and whole.exit_code() == 0
    one = merge([_report(tmp_path, "s.json", "b300", "sm103", {"t.py::test_a": _passed()}, shard=(1, 1))])
    assert one.nodes[0].missing_shards == [] and one.nodes[0].splits == 1 and one.nodes[0].shards_text == "1 of 1"
    assert one.exit_code() == 0 and one.missing_shards() == []


@pytest.mark.parametrize(("first", "second", "kept"), [
    ("passed", "failed", "failed"), ("failed", "passed", "failed"), ("passed", "error", "error"),
    ("skipped", "passed", "passed"), ("passed", "skipped", "passed"), ("xfailed", "xpassed", "xpassed"),
    ("xpassed", "passed", "xpassed"), ("xpassed", "failed", "failed"), ("skipped", "xfailed", "xfailed"),
    # equal ranks: the first report's entry stays
    ("passed", "xfailed", "passed"), ("xfailed", "passed", "xfailed"), ("failed", "error", "failed"),
])
def test_a_test_reported_twice_by_one_node_keeps_the_worse_outcome(tmp_path: Path, first: str, second: str,
                                                                   kept: str) -> None:
    paths = [_report(tmp_path, f"g{g}.json", "h200", "sm90", {"t.py::test_x": {"outcome": o, "gates": []}},
                     subtests={"t.py::test_x [s]": {"outcome": o, "test": "t.py::test_x"}}, shard=(g, 2))
             for g, o in ((1, first), (2, second))]
    node = merge(paths).nodes[0]
    assert node.tests["t.py::test_x"]["outcome"] == kept and node.subtests["t.py::test_x [s]"]["outcome"] == kept


def test_labels_name_the_device_where_a_host_ran_two_and_the_release_where_still_equal(tmp_path: Path) -> None:
    paths = [_report(tmp_path, "a.json", "ci", "sm90", {"t.py::test_a": _passed()}),
             _report(tmp_path, "b.json", "ci", "sm100", {"t.py::test_a": _passed()}),
             _report(tmp_path, "c.json", "h200", "sm90", {"t.py::test_a": _passed()}),
             _report(tmp_path, "d.json", "h200", "sm90", {"t.py::test_a": _passed()}, sglang="0.5.21"),
             _report(tmp_path, "e.json", "gb", "sm100", {"t.py::test_a": _passed()}, sglang=None)]
    merged = merge(paths)
    assert [n.label for n in merged.nodes] == ["ci (sm90)", "ci (sm100)", "h200 (sm90) SGLang 0.5.23",
                                               "h200 (sm90) SGLang 0.5.21", "gb"]
    assert merged.nodes[4].sglang == "not installed"
    assert report_merge._releases_note(merged) == (
        "SGLang releases differ between nodes: 0.5.21 on h200 (sm90) SGLang 0.5.21; 0.5.23 on ci (sm90), ci (sm100), "
        "h200 (sm90) SGLang 0.5.23; not installed on gb (each node's outcomes are for its own release; the SGLang "
        "column says which)")


def test_gate_cells_and_the_fleet_column(tmp_path: Path) -> None:
    paths = [_report(tmp_path, "h.json", "h200", "sm90", {
                 "t.py::test_a": {"outcome": "error", "gates": ["cuda"]},
                 "t.py::test_b": {"outcome": "xpassed", "gates": ["cuda"]},
                 "t.py::test_c": _skip("fa3", "FA3 needs SM 9.x", gates=("cuda",))}),
             _report(tmp_path, "s.json", "sim", "sm100", {
                 "t.py::test_a": _passed("cuda", "trtllm-dsa-decode"),
                 "t.py::test_d": _passed("flashmla-sparse")}, simulated=True)]
    merged = merge(paths, ["trtllm-dsa-decode", "aiter"])
    h200, sim = merged.nodes
    assert merged.gate_cell("cuda", h200) == {"ran": 2, "skipped": 1, "failed": 2, "skipped_by": {"fa3": 1}}
    assert merged.gate_cell("trtllm-dsa-decode", h200) == {"ran": 0, "skipped": 0, "failed": 0, "skipped_by": {}}
    assert merged.gate_ran_on("trtllm-dsa-decode") == ["sim (sm100 simulated)"] and merged.gate_ran_on("trtllm-dsa-decode", real=True) == []
    assert merged.simulated_only() == ["flashmla-sparse", "trtllm-dsa-decode"]
    assert merged.must_run_failures() == {"aiter": "no test in any report declares this gate"}
    text = format_text(merged)
    gates = text[text.index("Gates (tests behind each gate, per node):") + 1:]
    assert gates[:6] == [
        "gate               h200                                sim (sm100 simulated)  fleet",
        "aiter              -                                   -                      RAN ON NO NODE (must-run: FAILED)",
        "cuda               ran 2, failed 2, skipped 1 (fa3 1)  ran 1                  ran on h200, sim (sm100 simulated)",
        "flashmla-sparse    -                                   ran 1                  ran on sim (sm100 simulated) "
        "(simulated only: no real hardware)",
        "trtllm-dsa-decode  -                                   ran 1                  ran on sim (sm100 simulated) "
        "(simulated only: no real hardware) (must-run)",
        ""]
    assert text[text.index("Nodes:") + 2] == "h200                   sm90 device [real]  0.5.23  whole run  1 error, 1 xpassed, 1 skipped"
    assert text[text.index("failures (2):") + 1:text.index("failures (2):") + 3] == [
        "  t.py::test_a  on h200 only (passed on sim (sm100 simulated)): error", "  t.py::test_b  on h200: xpassed"]
    summary = text[:text.index("")]
    assert "gates that ran only on simulated devices (not real coverage): `flashmla-sparse`, `trtllm-dsa-decode`" in summary
    assert "must-run gate `aiter` ran on no node: no test in any report declares this gate" in summary
    real = merge(paths, ["trtllm-dsa-decode"], must_run_real=True)
    assert real.must_run_failures() == {
        "trtllm-dsa-decode": "it ran only on simulated devices (sim (sm100 simulated)); --must-run-real needs real hardware"}
    skipped = merge([_report(tmp_path, "k.json", "h200", "sm90", {"t.py::test_a": _skip("cuda", "no GPU", gates=("cuda",))})],
                    ["cuda"])
    assert skipped.must_run_failures() == {"cuda": "every test behind it was skipped on every node"}
    assert skipped.failures() == [] and skipped.missing_shards() == [] and skipped.exit_code() == 1
    assert "gates that ran on no node: `cuda`" in format_text(skipped)


def test_long_cells_signatures_reasons_and_uncovered_lists_are_clipped(tmp_path: Path) -> None:
    long_reason = "r" * 250
    tests = {f"t.py::test_{n}": _skip("fa3", long_reason) for n in range(7)}
    tests["t.py::test_f"] = {"outcome": "failed", "gates": [], "signature": "s" * 200}
    merged = merge([_report(tmp_path, "h.json", "h" * 80, "sm90", tests),
                    _report(tmp_path, "b.json", "b300", "sm103", {"t.py::test_f": _passed()})])
    text = format_text(merged)
    node_rows = text[text.index("Nodes:") + 2:text.index("Nodes:") + 4]
    assert node_rows == ["h" * 70 + "  sm90 device [real]   0.5.23  whole run  1 failed, 7 skipped",
                         "b300" + " " * 66 + "  sm103 device [real]  0.5.23  whole run  1 passed"]
    assert f"  t.py::test_f  on {'h' * 80} only (passed on b300): {'s' * 160}" in text
    assert f"      {'r' * 200}" in text
    assert [line for line in text if "ran on no node:" in line] == [
        f"      ran on no node: t.py::test_{n}" for n in range(5)]
    assert text[-1] == "      ... and 2 more (--json or --markdown list them)"


def test_five_uncovered_tests_are_all_listed_with_no_more_line(tmp_path: Path) -> None:
    tests = {f"t.py::test_{n}": _skip("fa3", "FA3 needs SM 9.x") for n in range(5)}
    text = format_text(merge([_report(tmp_path, "h.json", "h200", "sm90", tests)]))
    assert text[-1] == "      ran on no node: t.py::test_4" and not any("more (--json" in line for line in text)
    tests["t.py::test_5"] = _skip("fa3", "FA3 needs SM 9.x")
    text = format_text(merge([_report(tmp_path, "h.json", "h200", "sm90", tests)]))
    assert text[-2:] == ["      ran on no node: t.py::test_4", "      ... and 1 more (--json or --markdown list them)"]


def test_a_skip_with_several_reasons_counts_under_its_first_and_names_the_others(tmp_path: Path) -> None:
    entry = {"outcome": "skipped", "gates": [], "reasons": [
        {"code": "fa3", "message": "FA3 needs SM 9.x", "also": ["aiter"]}, {"code": "cuda"}, "not a dict",
        {"code": "fa3"}, {"message": "no code"}]}
    merged = merge([_report(tmp_path, "h.json", "h200", "sm90", {"t.py::test_a": entry})])
    cause = report_merge._cause(entry)
    assert (cause.code, cause.message, cause.also) == ("fa3", "FA3 needs SM 9.x", ("aiter", "cuda", "uncoded"))
    assert [g.code for g in merged.skip_groups()] == ["fa3"]
    assert report_merge._cause({"outcome": "skipped", "reasons": ["text"]}).code == "uncoded"


def test_uncoded_skips_list_their_messages_most_common_first(tmp_path: Path) -> None:
    tests = {"t.py::test_a": _skip("uncoded", "one"), "t.py::test_b": _skip("uncoded", "two"),
             "t.py::test_c": _skip("uncoded", "two")}
    group = as_json(merge([_report(tmp_path, "h.json", "h200", "sm90", tests)]))["skips"][0]
    assert group["messages"] == [{"message": "two", "count": 2}, {"message": "one", "count": 1}]
    assert group["reason"] == "two" and group["skipped"] == 3


def test_a_failure_on_two_nodes_with_one_signature_is_one_row(tmp_path: Path) -> None:
    failed = {"outcome": "failed", "gates": [], "signature": "E same"}
    paths = [_report(tmp_path, "a.json", "a", "sm90", {"t.py::test_x": failed}),
             _report(tmp_path, "b.json", "b", "sm100", {"t.py::test_x": failed}),
             _report(tmp_path, "c.json", "c", "sm103", {"t.py::test_x": {"outcome": "error", "gates": []}})]
    rows = merge(paths).failures()
    assert [(r.test, r.where, r.signature) for r in rows] == [("t.py::test_x", "a, b", "E same"),
                                                              ("t.py::test_x", "c", "error")]


@pytest.mark.parametrize(("change", "message"), [
    ({"host": 3}, "field 'host' should be str, found int: the file is damaged or not a dsakit report; pass the JSON "
                  "files written by `pytest --dsakit-report PATH`"),
    ({"shard": {"group": "1", "splits": 2}}, "field 'group' should be int, found str"),
    ({"shard": {"group": 1, "splits": None}}, "field 'splits' should be int, found NoneType"),
    ({"shard": [1, 2]}, "field 'shard' should be dict, found list"),
    ({"subtests": None}, "field 'subtests' should be dict, found NoneType"),
    ({"must_run": []}, "field 'must_run' should be dict, found list"),
    ({"device": {"key": "sm90"}}, "field 'description' should be str, found NoneType"),
    ({"tests": {"t.py::test_a": {"outcome": "maybe"}}},
     "test 't.py::test_a' has no known outcome (['error', 'failed', 'passed', 'skipped', 'xfailed', 'xpassed']); "
     "the file is damaged; pass the JSON files"),
    ({"subtests": {"t.py::test_a [s]": "passed"}}, "subtest 't.py::test_a [s]' has no known outcome"),
    ({"format_version": "3"}, "report format '3', this dsakit reads format 3; rerun that node with this dsakit"),
    ({"format_version": 1}, "report format 1, this dsakit reads format 3; rerun that node with this dsakit"),
])
def test_a_damaged_report_names_its_field(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = Path(_report(tmp_path, "r.json", "h200", "sm90", {"t.py::test_a": _passed()}))
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(UsageError) as raised:
        load_report(str(path))
    assert str(raised.value).startswith(f"{path}: {message}")


@pytest.mark.parametrize(("data", "message"), [
    ({"device": {}, "gates": {}, "must_run": {}},
     "a dsakit report of format 1 (an older dsakit: skips only, no host, shard or per-test outcomes), so what ran "
     "there cannot be known; rerun that node with this dsakit (report format 3)"),
    ({"device": {}, "gates": {}}, 'not a dsakit report (no "format": "dsakit-report"); pass the JSON files'),
    ({"format_version": 3, "device": {}, "gates": {}, "must_run": {}},
     'not a dsakit report (no "format": "dsakit-report"); pass the JSON files'),
])
def test_only_a_versionless_file_with_format_1_fields_is_called_format_1(tmp_path: Path, data: dict[str, Any],
                                                                          message: str) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError) as raised:
        load_report(str(path))
    assert str(raised.value).startswith(f"{path}: {message}")


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such report file; pass the JSON files written by `pytest --dsakit-report PATH`"),
    ("folder", "no such report file; pass the JSON files written by `pytest --dsakit-report PATH`"),
    ("{not json", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); "
                  "pass the JSON files written by `pytest --dsakit-report PATH`"),
    (b"\xff\xfe", "not JSON ("),
    ("[1, 2]", "not a dsakit report (a JSON list, not an object); pass the JSON files written by "
               "`pytest --dsakit-report PATH`"),
    ("collect", "a --collect-only report says what would skip, not what ran; merge reports of runs"),
])
def test_an_unreadable_report_is_named_with_what_is_wrong(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "r.json"
    if content == "folder":
        path.mkdir()
    elif content == "collect":
        good = Path(_report(tmp_path, "good.json", "h200", "sm90", {}))
        path.write_text(json.dumps({**json.loads(good.read_text()), "collect_only": True}))
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(UsageError) as raised:
        load_report(str(path))
    assert str(raised.value).startswith(f"{path}: {message}")
    assert raised.value.__suppress_context__ or raised.value.__context__ is None  # no chained traceback


def test_reports_of_one_node_that_do_not_fit_together_are_refused_naming_the_files(tmp_path: Path) -> None:
    def node(name: str, shard: tuple[int, int] | None) -> str:
        return _report(tmp_path, name, "h200", "sm90", {"t.py::test_a": _passed()}, shard=shard)

    cases = [
        ([node("w1.json", None), node("w2.json", None)],
         f"several reports of node 'h200' (sm90 device [real], SGLang 0.5.23) and not all are pytest-split shards: "
         f"{tmp_path}/w1.json, {tmp_path}/w2.json; give each run its own --dsakit-host-label"),
        ([node("s1.json", (1, 2)), node("w3.json", None)],
         f"several reports of node 'h200' (sm90 device [real], SGLang 0.5.23) and not all are pytest-split shards: "
         f"{tmp_path}/s1.json, {tmp_path}/w3.json; give each run its own --dsakit-host-label"),
        ([node("s1.json", (1, 2)), node("s3.json", (2, 3))],
         f"node 'h200' was split in different ways (--splits): {tmp_path}/s1.json, {tmp_path}/s3.json; "
         "merge shards of one split"),
        ([node("s1.json", (1, 2)), node("s2.json", (2, 2)), node("s1b.json", (1, 2))],
         f"node 'h200': shard 1 of 2 reported twice ({tmp_path}/s1.json, {tmp_path}/s1b.json); pass each shard's "
         "report once"),
    ]
    for paths, message in cases:
        with pytest.raises(UsageError) as raised:
            merge(paths)
        assert str(raised.value) == message


def test_a_report_reads_back_what_its_node_wrote(tmp_path: Path) -> None:
    path = _report(tmp_path, "r.json", "h200", "sm90", {"t.py::test_a": _passed()}, simulated=True,
                   shard=(2, 3), must_run=("cuda", "fa3"), table_key="sm90")
    report = load_report(path)
    assert (report.host, report.device, report.device_key, report.sglang, report.shard, report.must_run,
            report.simulated, report.table_key) == (
        "h200", "sm90 device", "sm90 simulated", "0.5.23", (2, 3), ("cuda", "fa3"), True, "sm90")
    data = json.loads(Path(path).read_text())
    data["device"] = {"description": "an H200"}
    data.pop("shard")
    Path(path).write_text(json.dumps(data))
    report = load_report(path)
    assert (report.device, report.device_key, report.shard, report.simulated, report.table_key) == (
        "an H200 [real]", "?", None, False, "")


def test_three_nodes_join_their_labels_notes_and_coverage(tmp_path: Path) -> None:
    """Where two or more nodes, notes or tests meet: each list joined in node order, a group covered
    whole or in part, a gate that only skipped on a node, a gate no node ran (not "simulated only")."""
    sa, sb = "sa (sm100 simulated)", "sb (sm103 simulated)"
    paths = [
        _report(tmp_path, "h.json", "h200", "sm90", {
            "t.py::test_f": {"outcome": "failed", "gates": [], "signature": "E x"}, "t.py::test_cov": _passed("fa3"),
            "t.py::test_two": _skip("cuda", "no GPU", gates=("cuda",)),
            "t.py::test_g": _skip("fa3", "FA3 needs SM 9.x", gates=("cuda",)),
            "t.py::test_three": _skip("cuda", "no GPU", gates=("cuda",))}),
        _report(tmp_path, "a.json", "sa", "sm100", {
            "t.py::test_f": _passed(), "t.py::test_g": _passed("cuda"), "t.py::test_two": _passed(),
            "t.py::test_cov": _skip("fa3", "FA3 needs SM 9.x", runs_on=("sm90",), note="Hopper", gates=("fa3",)),
            "t.py::test_nowhere": _skip("aiter", "no AMD", gates=("aiter",))}, simulated=True),
        _report(tmp_path, "b.json", "sb", "sm103", {
            "t.py::test_f": _passed(), "t.py::test_g": _passed("cuda"), "t.py::test_two": _passed(),
            "t.py::test_cov": _skip("fa3", "FA3 needs SM 9.x", runs_on=("sm90",), note="not Blackwell", gates=("fa3",)),
            "t.py::test_u1": {"outcome": "skipped", "gates": [], "reasons": [{"code": "uncoded", "message": "m", "note": "n"}]},
            "t.py::test_u2": {"outcome": "skipped", "gates": []}}, simulated=True)]
    merged = merge(paths, ["cuda"], must_run_real=True)
    data = as_json(merged)
    assert data["skips"] == [
        {"code": "fa3", "reason": "FA3 needs SM 9.x", "skipped": 3, "skipped_on": f"h200, {sa}, {sb}",
         "runs_on": "sm90 (real here: h200) — Hopper; not Blackwell", "covered_on": f"h200, {sa}, {sb}",
         "uncovered": [], "messages": []},
        {"code": "cuda", "reason": "no GPU", "skipped": 2, "skipped_on": "h200", "runs_on": "unknown",
         "covered_on": f"{sa}, {sb} (1 of 2 tests; the rest not covered on any node)", "uncovered": ["t.py::test_three"],
         "messages": []},
        # a skip with no reason says where it runs is unknown, beside the other skip's note
        {"code": "uncoded", "reason": "m", "skipped": 2, "skipped_on": sb, "runs_on": "n; unknown",
         "covered_on": "not covered on any node", "uncovered": ["t.py::test_u1", "t.py::test_u2"],
         "messages": [{"message": "m", "count": 1}, {"message": "no reason given", "count": 1}]},
        {"code": "aiter", "reason": "no AMD", "skipped": 1, "skipped_on": sa, "runs_on": "unknown",
         "covered_on": "not covered on any node", "uncovered": ["t.py::test_nowhere"], "messages": []}]
    assert data["gates"]["cuda"]["nodes"]["h200"] == {"ran": 0, "skipped": 3, "failed": 0, "skipped_by": {"cuda": 2, "fa3": 1}}
    assert data["failures"] == [{"test": "t.py::test_f", "where": f"h200 only (passed on {sa}, {sb})", "signature": "E x"}]
    assert merged.simulated_only() == ["cuda"]  # aiter ran on no node at all
    assert data["must_run"]["failed"] == {
        "cuda": f"it ran only on simulated devices ({sa}, {sb}); --must-run-real needs real hardware"}
    text = format_text(merged)
    gates = text[text.index("Gates (tests behind each gate, per node):") + 2:]
    assert gates[:3] == [
        "aiter  -                  skipped 1             -                     RAN ON NO NODE",
        f"cuda   skipped 3 (fa3 1)  ran 1                 ran 1                 ran on {sa}, {sb} (simulated only: "
        "no real hardware) (must-run: FAILED)",
        "fa3    ran 1              skipped 1             skipped 1             ran on h200"]



def test_one_release_no_failure_and_an_empty_node_in_the_text(tmp_path: Path) -> None:
    paths = [_report(tmp_path, "g1.json", "h200", "sm90", {
                 "t.py::test_a": _skip("fa3", "FA3 needs SM 9.x", gates=("cuda",)),
                 "t.py::test_b": _skip("aiter", "no AMD", gates=("cuda",))}, shard=(1, 2)),
             _report(tmp_path, "g2.json", "h200", "sm90", {}, shard=(2, 2)),
             _report(tmp_path, "e.json", "b300", "sm103", {})]
    merged = merge(paths)
    assert merged.exit_code() == 0
    assert format_text(merged) == [
        'dsakit report merge: 2 node(s), 3 report(s), 2 test ids; 0 failure(s); 2 test(s) ran on no node',
        'gates that ran on no node: `cuda`',
        'why these skipped on h200: [aiter] no AMD (1); [fa3] FA3 needs SM 9.x (1)',
        '',
        'Nodes:',
        'node  device               SGLang  shards     tests',
        'h200  sm90 device [real]   0.5.23  1,2 of 2   2 skipped',
        'b300  sm103 device [real]  0.5.23  whole run  no tests',
        '',
        'Gates (tests behind each gate, per node):',
        'gate  h200                        b300  fleet',
        'cuda  skipped 2 (aiter 1, fa3 1)  -     RAN ON NO NODE',
        '',
        'failures (0):',
        '  none',
        '',
        'skips by reason code (each skip once):',
        '  [aiter] 1 skipped on h200; runs on: unknown; covered on: not covered on any node',
        '      no AMD',
        '      ran on no node: t.py::test_b',
        '  [fa3] 1 skipped on h200; runs on: unknown; covered on: not covered on any node',
        '      FA3 needs SM 9.x',
        '      ran on no node: t.py::test_a',
    ]


def test_the_markdown_of_a_fleet(tmp_path: Path) -> None:
    paths = [*_fleet(tmp_path), _report(tmp_path, "n.json", "n", "sm90", {
        "t.py::test_z": _skip("aiter", "no AMD", gates=("aiter", "trtllm-dsa-decode"))}, shard=(1, 2))]
    assert run_report_merge(paths, must_run="fa3", markdown_path=str(tmp_path / "m.md"), must_run_real=True) == 1
    assert (tmp_path / "m.md").read_text(encoding="utf-8").split("\n") == [
        '## dsakit fleet coverage',
        '',
        '- 3 node(s), 4 report(s), 7 test ids; 1 failure(s); 3 test(s) ran on no node',
        "- SGLang releases differ between nodes: 0.5.21 on ci (cpu simulated); 0.5.23 on h200, n (each node's outcomes are for its own release; the SGLang column says which)",
        '- n: shard 2 of 2 has no report: its tests are counted as not run',
        '- gates that ran on no node: `aiter`, `trtllm-dsa-decode`',
        '- why these skipped on h200: [fa3] FA3 needs SM 9.x (1)',
        "- why these skipped on ci (cpu simulated): [cuda] no CUDA device (2); not explained (1: 'no reason given')",
        '- why these skipped on n: [aiter] no AMD (1)',
        '',
        '### Failures (1)',
        '',
        'A failure on some nodes only says where it passed.',
        '',
        '| test | where | signature |',
        '|---|---|---|',
        '| `t.py::test_b` | h200 only (passed on ci (cpu simulated)) | `E boom @ t.py` |',
        '',
        '### Skips by reason code (4)',
        '',
        '| code | skips | skipped on | runs on | covered on | reason |',
        '|---|---|---|---|---|---|',
        '| `cuda` | 2 | ci (cpu simulated) | sm90 (real here: h200, n), sm100 (no node here) — any GPU | h200 (1 of 2 tests; the rest not covered on any node) | no CUDA device |',
        '| `aiter` | 1 | n | unknown | not covered on any node | no AMD |',
        '| `fa3` | 1 | h200 | sm90 (real here: h200, n) | not covered on any node | FA3 needs SM 9.x |',
        '| `uncoded` | 1 | ci (cpu simulated) | unknown | not covered on any node | no reason given |',
        '',
        '<details><summary>`uncoded` messages, verbatim (1)</summary>',
        '',
        '- 1 x `no reason given`',
        '',
        '</details>',
        '',
        '<details><summary>Tests that ran on no node (3)</summary>',
        '',
        '- `cuda` (1): `t.py::test_c`',
        '- `aiter` (1): `t.py::test_z`',
        '- `fa3` (1): `t.py::test_c`',
        '- `uncoded` (1): `t.py::test_e`',
        '',
        '</details>',
        '',
        '### Nodes',
        '',
        '| node | device | SGLang | shards | tests |',
        '|---|---|---|---|---|',
        '| h200 | sm90 device [real] | 0.5.23 | 1,2 of 2 | 1 failed, 1 passed, 1 xfailed, 1 skipped; subtests: 1 passed |',
        '| ci (cpu simulated) | cpu device | 0.5.21 | whole run | 1 passed, 3 skipped |',
        '| n | sm90 device [real] | 0.5.23 | 1 of 2; MISSING shard 2 | 1 skipped |',
        '',
        '### Gates (tests behind each gate, per node)',
        '',
        '| gate | h200 | ci (cpu simulated) | n | fleet |',
        '|---|---|---|---|---|',
        '| aiter | - | - | skipped 1 | RAN ON NO NODE |',
        '| cuda | ran 2, failed 1 | ran 1, skipped 1 | - | ran on h200, ci (cpu simulated) (must-run) |',
        '| fa3 | ran 1, failed 1, skipped 1 | ran 1, skipped 1 (cuda 1) | - | ran on h200, ci (cpu simulated) (must-run) |',
        '| trtllm-dsa-decode | - | - | skipped 1 (aiter 1) | RAN ON NO NODE |',
        '',
    ]


def test_the_commands_options_are_named_in_their_errors_and_must_run_real_reaches_the_merge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = _report(tmp_path, "s.json", "ci", "sm90", {"t.py::test_a": _passed("cuda")}, simulated=True)
    for option, kwargs in (("--json", {"json_path": str(tmp_path)}), ("--markdown", {"markdown_path": str(tmp_path)})):
        with pytest.raises(UsageError) as raised:
            run_report_merge([sim], **kwargs)  # type: ignore[arg-type]
        assert str(raised.value).startswith(f"{option} {str(tmp_path)!r} is a directory")
    with pytest.raises(UsageError) as raised:
        run_report_merge([sim], must_run=",,")
    assert str(raised.value).startswith("--must-run ',,' names no gate code")
    assert capsys.readouterr().out == ""  # refused before anything was merged or printed
    assert run_report_merge([sim], must_run="cuda") == 0
    assert run_report_merge([sim], must_run="cuda", must_run_real=True) == 1
    assert capsys.readouterr().err.endswith("dsakit report merge: FAILED: must-run gate cuda ran on no node (it ran only "
                                            "on simulated devices (ci (sm90 simulated)); --must-run-real needs real "
                                            "hardware)\n")


def test_a_result_that_came_through_a_stand_in_is_marked_in_the_fleet(tmp_path: Path) -> None:
    """Issue 42 item 2: a simulated node's result judged on a reference stand-in's output says so."""
    stood_in = {"kernels": ["flashinfer.prefill.trtllm_ragged_attention_deepseek"]}
    paths = [
        _report(tmp_path, "h.json", "h200", "sm90", {"t.py::test_a": _passed(), "t.py::test_b": _passed()}),
        _report(tmp_path, "s.json", "h200", "sm103", {"t.py::test_a": {**_passed(), "through_stand_in": stood_in},
                                                      "t.py::test_b": _passed()}, simulated=True),
    ]
    merged = merge(paths)
    sim = merged.nodes[1].label
    assert as_json(merged)["through_stand_in"] == {"t.py::test_a": [sim]}
    assert (f"1 test(s) ran with a stand-in for an arch-only kernel (a reference computed its output) on {sim}"
            in format_text(merged))
    assert as_json(merge(paths[:1]))["through_stand_in"] == {}
    assert not any("stand-in" in line for line in format_text(merge(paths[:1])))
