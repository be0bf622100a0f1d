"""Gaps in the audit's tests found by mutation testing: the text report and the JSON document of
`dsakit/audit/report.py` (and the findings' `as_dict`), rendered in-process from hand-made findings,
asserted exactly. The end-to-end audits (test_audit*.py) run `dsakit audit` in a subprocess, which
no mutant reaches."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.device_guards import probe_table
from dsakit.audit.findings import MissingEntry, MockFinding, ReadFinding
from dsakit.audit.suite_files import Scope, SourceFile
from dsakit.audit.mock_finder import MockValue
from dsakit.audit.report import CONFIG_RULE, AuditResult, outcome_text, render_reads
from dsakit.audit.usage import Backend, BackendCall, Route
from dsakit.stack.sglang_release import SGLangRelease
from dsakit.sglang_facts.runner_source import SourceSite
from dsakit.sglang_facts.backend_reads import RunnerRead

RELEASE = SGLangRelease(Path("/opt/sgl/sglang"), "0.5.99")
DSA = Backend("DeepseekSparseAttnBackend", "srt/layers/attention/dsa_backend.py", "DeepseekSparseAttnBackend")
V4 = Backend("DeepseekV4AttnBackend", "srt/layers/attention/deepseek_v4_backend.py", "DeepseekV4AttnBackend")
SCOPE = Scope(SourceFile(Path("suite/test_a.py"), "suite/test_a.py", ast.parse(""), {}, {}))
ATT = "sglang/srt/layers/attention/"


def _read(path: str, line: int, function: str = "DeepseekSparseAttnBackend.__init__", *, guards: tuple[str, ...] = (),
          soft: bool = False, via: tuple[str, ...] = (), file: str = ATT + "dsa_backend.py") -> RunnerRead:
    return RunnerRead(path, SourceSite(file, line), function, soft=soft, guards=guards, via=via)


def _finding(read: RunnerRead, fails_on: tuple[str, ...] = (), only_with: tuple[tuple[str, tuple[str, ...]], ...] = (),
             backends: tuple[str, ...] = ("DeepseekSparseAttnBackend",)) -> ReadFinding:
    return ReadFinding(read, backends, fails_on, only_with)


def _call(site: str, argument: str = "runner", routes: tuple[Route, ...] = (Route(DSA),), via: str = "",
          expected: str = "", skipped: str = "") -> BackendCall:
    return BackendCall(via, routes, site, argument, SCOPE, expected=expected, skipped=skipped)


def _full_mock() -> MockFinding:
    """A mock with every part of the report: a name, writes after construction, two calls (one of them
    reaching no backend), narrowed devices, a device dsakit does not simulate, a silent-skip harness, an
    open subtree, a hard entry with two kinds of read, one covered by another contract entry, a soft read."""
    tree = AttrTree()
    tree.set("device", AttrTree.constant("cuda"), "suite/runners.py:5")
    tree.set("model_config", AttrTree.opaque("a MagicMock without spec"), "suite/runners.py:6")
    value = MockValue("class", "MockModelRunner", "suite/runners.py:4", tree, name="runner",
                      added=["page_size (suite/test_a.py:9)", "max_running_requests (suite/test_a.py:10)"])
    page = MissingEntry("page_size", "page_size", (
        _finding(_read("page_size", 120, guards=("self.device_sm_major >= 10",)), fails_on=("sm100",)),
        _finding(_read("page_size", 130, guards=("self.device_sm_major >= 10",)), fails_on=("sm100",)),
        _finding(_read("page_size", 140, "helper", via=(ATT + "dsa_backend.py:77 (in __init__)",)),
                 only_with=(("self.x == 'y'", ("sm90", "xpu")),)),
    ))
    pool = MissingEntry("token_to_kv_pool", "token_to_kv_pool.kv_cache_dim", (
        _finding(_read("token_to_kv_pool.size", 150, "build_pool", file="sglang/srt/mem_cache/pool.py"),
                 fails_on=("sm90",), backends=("DeepseekSparseAttnBackend", "DeepseekV4AttnBackend")),))
    soft = MissingEntry("is_draft_worker", None, (
        _finding(_read("is_draft_worker", 160, soft=True), fails_on=("sm90", "sm100")),))
    return MockFinding(value, [_call("suite/test_a.py:20"), _call("suite/test_a.py:21", routes=()),
                               _call("suite/test_a.py:22", "make()", routes=(Route(V4),), via="ATTENTION_BACKENDS['dsv4']")],
                       ("DeepseekSparseAttnBackend", "DeepseekV4AttnBackend"),
                       devices={"sm90": "", "xpu": "device = 'xpu'"}, narrowed_by=("its device is 'cuda'", "a skipif"),
                       skipped=("suite/test_a.py:30", "suite/test_a.py:31"), missing=[page, pool], soft=[soft])


def _assumed_mock() -> MockFinding:
    """Used with no backend call found (its backends assumed from its file's imports), lacking nothing,
    named as its label, judged on every selected device."""
    value = MockValue("SimpleNamespace", "SimpleNamespace", "suite/conftest.py:8", AttrTree(), name="SimpleNamespace")
    return MockFinding(value, [], ("DeepseekV4AttnBackend", "DeepseekSparseAttnBackend"), assumed=True)


def _expected_mock() -> MockFinding:
    """Every call sits in pytest.raises: what it lacks is a note, on the devices it runs on."""
    value = MockValue("type()", "Runner", "suite/test_b.py:3", AttrTree(open="a base the audit cannot read"))
    entry = MissingEntry("page_size", "page_size", (_finding(_read("page_size", 120), fails_on=("sm90", "sm100")),))
    return MockFinding(value, [_call("suite/test_b.py:9", expected="pytest.raises at suite/test_b.py:8")],
                       ("DeepseekSparseAttnBackend",), devices={"sm90": "", "sm100": ""},
                       expected=("pytest.raises at suite/test_b.py:8",), missing=[entry])


def _result(**changes: object) -> AuditResult:
    other = MockValue("class", "CpuRunner", "suite/cpu.py:2", AttrTree())
    fields: dict[str, object] = dict(
        release=RELEASE, devices=["sm90", "sm100"], files=["suite/test_a.py", "suite/test_b.py", "suite/conftest.py"],
        mocks=[_full_mock(), _assumed_mock(), _expected_mock()],
        untraced=[_call("suite/test_c.py:4", "some_runner")],
        strict=[_call("suite/test_c.py:9", "model_runner")],
        warnings=["a warning about the tree"],
        not_dsa=[MockFinding(other, [], (), for_dsa=False)],
        unparsed=["suite/broken.py: invalid syntax (line 3)"],
        mismatches=["suite/test_a.py imports X, which SGLang 0.5.99 lacks"])
    fields.update(changes)
    return AuditResult(**fields)  # type: ignore[arg-type]


FULL_MOCK_TEXT = [
    "MockModelRunner 'runner' (class, suite/runners.py:4)",
    "  sets after construction: page_size (suite/test_a.py:9), max_running_requests (suite/test_a.py:10)",
    "  used with: DeepseekSparseAttnBackend at suite/test_a.py:20; ATTENTION_BACKENDS['dsv4'] -> DeepseekV4AttnBackend "
    "at suite/test_a.py:22",
    "  runs on: sm90, xpu (narrowed by its device is 'cuda'; a skipif)",
    "  xpu: not a simulated device; reads checked without device guards",
    "  silent-skip harness: suite/test_a.py:30 turns construction errors into skips, so a missing attribute below "
    "shows as a skip, not a failure",
    "  silent-skip harness: suite/test_a.py:31 turns construction errors into skips, so a missing attribute below "
    "shows as a skip, not a failure",
    "  lacks page_size:",
    "      dsa_backend.py:120, dsa_backend.py:130 (DeepseekSparseAttnBackend.__init__) when self.device_sm_major >= 10"
    " -> fails on sm100",
    "      dsa_backend.py:140 (helper, via dsa_backend.py:77) unconditionally -> only with self.x == 'y' on "
    "every device it runs on",
    "  lacks token_to_kv_pool [contract entry token_to_kv_pool.kv_cache_dim]: sglang/srt/mem_cache/pool.py:150 "
    "(build_pool, reached from DeepseekSparseAttnBackend and DeepseekV4AttnBackend) unconditionally -> fails on sm90",
    "  note (soft read: getattr default / hasattr): is_draft_worker [not in dsakit's contract]: dsa_backend.py:160 "
    "(DeepseekSparseAttnBackend.__init__) unconditionally -> falls back on sm90, sm100",
]

SUMMARY = ("dsakit audit: SGLang 0.5.99: 3 files (1 not audited), 3 mock runners for DSA / DSv4, 1 lacking an entry "
           "read on sm90, sm100; 1 runners not for DSA / DSv4 \u2192 FAILED")


def test_the_text_report_shows_every_part_of_a_finding_in_order() -> None:
    assert _result().render().split("\n") == [
        "SGLang 0.5.99 at /opt/sgl/sglang", "devices: sm90, sm100", f"({CONFIG_RULE})", "",
        *FULL_MOCK_TEXT, "",
        "SimpleNamespace (SimpleNamespace, suite/conftest.py:8)",
        "  used with: unknown (no backend call found; assumed DeepseekV4AttnBackend, DeepseekSparseAttnBackend from "
        "its file's imports)",
        "  lacks nothing its backends read on the devices it runs on", "",
        "Runner (type(), suite/test_b.py:3)",
        "  used with: DeepseekSparseAttnBackend at suite/test_b.py:9",
        "  expected to raise (pytest.raises at suite/test_b.py:8): reads after the raise are not checked; what it "
        "lacks is a note",
        "  provides anything below: a base the audit cannot read; nothing it lacks can be shown",
        "  note (expected to raise): lacks page_size: dsa_backend.py:120 (DeepseekSparseAttnBackend.__init__) "
        "unconditionally -> fails on every device", "",
        "note: suite/test_c.py:4: DeepseekSparseAttnBackend(some_runner): the runner argument is not a mock the "
        "audit can trace (a parameter without a fixture, or a value built elsewhere)",
        "note: suite/test_c.py:9: DeepseekSparseAttnBackend(model_runner): dsakit's strict MockModelRunner fixture, "
        "built from the contract: nothing to audit",
        "warning: suite/test_a.py imports X, which SGLang 0.5.99 lacks",
        "warning: suite/broken.py: invalid syntax (line 3): not audited",
        "warning: a warning about the tree", "",
        SUMMARY,
    ]
    assert CONFIG_RULE == (
        "a read 'fails on' a device when it fires there in the default configuration (configuration "
        "conditions count as off: flags false, == 'choice' false, is None true); 'only with' names the "
        "configuration a read needs elsewhere")


def test_the_json_document_holds_every_part_of_the_result() -> None:
    result = _result()
    data = result.as_dict()
    assert list(data) == ["sglang", "devices", "files", "rule", "ok", "exit_code", "summary", "mocks", "not_for_dsa",
                          "untraced_calls", "strict_mock_calls", "not_audited", "release_mismatch", "warnings",
                          "probe_table"]
    assert {k: v for k, v in data.items() if k not in ("mocks", "probe_table")} == {
        "sglang": {"version": "0.5.99", "package_dir": "/opt/sgl/sglang"},
        "devices": ["sm90", "sm100"], "files": ["suite/test_a.py", "suite/test_b.py", "suite/conftest.py"],
        "rule": CONFIG_RULE, "ok": False, "exit_code": 1, "summary": SUMMARY,
        "not_for_dsa": [{"label": "CpuRunner", "site": "suite/cpu.py:2"}],
        "untraced_calls": [{"backend": "DeepseekSparseAttnBackend", "site": "suite/test_c.py:4", "argument": "some_runner",
                            "expected_to_raise": None, "errors_become_skips": None}],
        "strict_mock_calls": [{"backend": "DeepseekSparseAttnBackend", "site": "suite/test_c.py:9",
                               "argument": "model_runner", "expected_to_raise": None, "errors_become_skips": None}],
        "not_audited": ["suite/broken.py: invalid syntax (line 3)"],
        "release_mismatch": ["suite/test_a.py imports X, which SGLang 0.5.99 lacks"],
        "warnings": ["a warning about the tree"],
    }
    assert data["probe_table"] == probe_table() and data["probe_table"]
    assert data["mocks"] == [m.as_dict() for m in result.mocks]


def test_a_mock_finding_as_json() -> None:
    full, assumed, expected = _full_mock().as_dict(), _assumed_mock().as_dict(), _expected_mock().as_dict()
    page_reads = [
        {"site": ATT + "dsa_backend.py:120", "function": "DeepseekSparseAttnBackend.__init__",
         "guard": "self.device_sm_major >= 10", "soft": False, "via": [], "backends": ["DeepseekSparseAttnBackend"],
         "fails_on": ["sm100"], "only_with": []},
        {"site": ATT + "dsa_backend.py:130", "function": "DeepseekSparseAttnBackend.__init__",
         "guard": "self.device_sm_major >= 10", "soft": False, "via": [], "backends": ["DeepseekSparseAttnBackend"],
         "fails_on": ["sm100"], "only_with": []},
        {"site": ATT + "dsa_backend.py:140", "function": "helper", "guard": "", "soft": False,
         "via": [ATT + "dsa_backend.py:77 (in __init__)"], "backends": ["DeepseekSparseAttnBackend"],
         "fails_on": [], "only_with": [{"condition": "self.x == 'y'", "devices": ["sm90", "xpu"]}]},
    ]
    assert full == {
        "label": "MockModelRunner", "kind": "class", "site": "suite/runners.py:4", "name": "runner",
        "added_after_construction": ["page_size (suite/test_a.py:9)", "max_running_requests (suite/test_a.py:10)"],
        "used_with": ["DeepseekSparseAttnBackend", "DeepseekV4AttnBackend"], "assumed_backends": None,
        "calls": [{"backend": "DeepseekSparseAttnBackend", "site": "suite/test_a.py:20", "argument": "runner",
                   "expected_to_raise": None, "errors_become_skips": None},
                  {"backend": "", "site": "suite/test_a.py:21", "argument": "runner",
                   "expected_to_raise": None, "errors_become_skips": None},
                  {"backend": "ATTENTION_BACKENDS['dsv4'] -> DeepseekV4AttnBackend", "site": "suite/test_a.py:22",
                   "argument": "make()", "expected_to_raise": None, "errors_become_skips": None}],
        "devices": ["sm90", "xpu"], "narrowed_by": ["its device is 'cuda'", "a skipif"],
        "not_simulated_devices": ["xpu"], "expected_to_raise": [],
        "errors_become_skips": ["suite/test_a.py:30", "suite/test_a.py:31"],
        "open": "", "provides": ["device", "model_config.*"], "failing": True,
        "missing": [
            {"path": "page_size", "contract_entry": "page_size", "failing": True, "fails_on": ["sm100"],
             "reads": page_reads},
            {"path": "token_to_kv_pool", "contract_entry": "token_to_kv_pool.kv_cache_dim", "failing": True,
             "fails_on": ["sm90"],
             "reads": [{"site": "sglang/srt/mem_cache/pool.py:150", "function": "build_pool", "guard": "", "soft": False,
                        "via": [], "backends": ["DeepseekSparseAttnBackend", "DeepseekV4AttnBackend"],
                        "fails_on": ["sm90"], "only_with": []}]}],
        "soft_reads_missing": [
            {"path": "is_draft_worker", "contract_entry": None, "failing": False, "fails_on": [],
             "reads": [{"site": ATT + "dsa_backend.py:160", "function": "DeepseekSparseAttnBackend.__init__",
                        "guard": "", "soft": True, "via": [], "backends": ["DeepseekSparseAttnBackend"],
                        "fails_on": ["sm90", "sm100"], "only_with": []}]}],
    }
    assert (assumed["used_with"], assumed["assumed_backends"], assumed["failing"], assumed["missing"]) == (
        None, ["DeepseekV4AttnBackend", "DeepseekSparseAttnBackend"], False, [])
    assert (assumed["devices"], assumed["provides"], assumed["name"]) == ([], [], "SimpleNamespace")
    # an expected raise: the entry fails on its devices, but neither it nor the mock counts as failing
    assert expected["open"] == "a base the audit cannot read"
    assert expected["failing"] is False and expected["expected_to_raise"] == ["pytest.raises at suite/test_b.py:8"]
    assert [(m["path"], m["failing"], m["fails_on"]) for m in expected["missing"]] == [("page_size", False, ["sm90", "sm100"])]
    assert expected["calls"][0]["expected_to_raise"] == "pytest.raises at suite/test_b.py:8"


def test_an_open_mock_shows_its_openness_in_json() -> None:
    value = MockValue("MagicMock", "MagicMock", "suite/t.py:1", AttrTree.opaque("a MagicMock without spec"))
    assert MockFinding(value, [], ()).as_dict()["open"] == "a MagicMock without spec"


@pytest.mark.parametrize(("changes", "verdict", "code", "files"), [
    ({}, "FAILED", 1, "3 files (1 not audited)"),
    ({"unparsed": []}, "FAILED", 1, "3 files"),
    ({"mocks": [_assumed_mock(), _expected_mock()]}, "INCOMPLETE", 1, "3 files (1 not audited)"),
    ({"mocks": [_assumed_mock(), _expected_mock()], "unparsed": []}, "OK", 0, "3 files"),
    ({"mocks": [], "unparsed": ["a.py: x", "b.py: y"], "files": []}, "INCOMPLETE", 1, "0 files (2 not audited)"),
])
def test_the_verdict_and_exit_code(changes: dict[str, object], verdict: str, code: int, files: str) -> None:
    result = _result(**changes)
    mocks = len(result.mocks)
    failing = 1 if verdict == "FAILED" else 0
    assert result.summary_line() == (f"dsakit audit: SGLang 0.5.99: {files}, {mocks} mock runners for DSA / DSv4, "
                                     f"{failing} lacking an entry read on sm90, sm100; 1 runners not for DSA / DSv4 "
                                     f"\u2192 {verdict}")
    assert result.exit_code == code and result.as_dict()["exit_code"] == code
    assert result.as_dict()["ok"] is (verdict != "FAILED")
    assert [m.mock.label for m in result.failing] == (["MockModelRunner"] if failing else [])


@pytest.mark.parametrize("kept", ["untraced", "strict", "warnings", "mismatches", "unparsed"])
def test_any_note_or_warning_gets_a_blank_line_before_the_summary(kept: str) -> None:
    empty = {name: [] for name in ("untraced", "strict", "warnings", "mismatches", "unparsed") if name != kept}
    lines = _result(mocks=[], **empty).render().split("\n")
    assert len(lines) == 7 and lines[4].startswith(("note: ", "warning: "))
    assert lines[5:] == ["", lines[6]] and lines[6].startswith("dsakit audit: ")


def test_nothing_to_note_puts_the_summary_right_after_the_last_mock() -> None:
    lines = _result(mocks=[_assumed_mock()], untraced=[], strict=[], warnings=[], mismatches=[], unparsed=[]).render()
    assert lines.split("\n")[-3:] == ["  lacks nothing its backends read on the devices it runs on", "",
                                      "dsakit audit: SGLang 0.5.99: 3 files, 1 mock runners for DSA / DSv4, 0 lacking "
                                      "an entry read on sm90, sm100; 1 runners not for DSA / DSv4 \u2192 OK"]


def test_a_narrowed_mock_on_no_device_and_one_judged_on_all_selected() -> None:
    value = MockValue("class", "R", "s.py:1", AttrTree(), name="")
    entry = MissingEntry("page_size", "page_size", (_finding(_read("page_size", 1), fails_on=("sm90", "sm100")),))
    nowhere = MockFinding(value, [_call("s.py:5")], ("DeepseekSparseAttnBackend",), narrowed_by=("never",))
    both = MockFinding(value, [_call("s.py:5")], ("DeepseekSparseAttnBackend",), devices={"sm100": "", "sm90": ""},
                       missing=[entry])
    text = _result(mocks=[nowhere, both], untraced=[], strict=[], warnings=[], mismatches=[], unparsed=[]).render()
    assert text.split("\n")[4:12] == [
        "R (class, s.py:1)", "  used with: DeepseekSparseAttnBackend at s.py:5",
        "  runs on: no simulated device (narrowed by never)",
        "  lacks nothing its backends read on the devices it runs on", "",
        "R (class, s.py:1)", "  used with: DeepseekSparseAttnBackend at s.py:5",
        "  lacks page_size: dsa_backend.py:1 (DeepseekSparseAttnBackend.__init__) unconditionally -> fails on every device",
    ]


def test_outcome_text_names_devices_unless_the_read_covers_several_judged_ones() -> None:
    read = _read("x", 1)
    assert outcome_text(_finding(read, fails_on=("sm90", "sm100")), ["sm90", "sm100"]) == "fails on every device"
    assert outcome_text(_finding(read, fails_on=("sm90", "sm100")), ["sm90", "sm100"], "all") == "fails on all"
    assert outcome_text(_finding(read, fails_on=("sm90",)), ["sm90"]) == "fails on sm90"  # one device: named
    assert outcome_text(_finding(read, fails_on=("sm90", "sm100")), ["sm90", "sm100", "sm120"]) == "fails on sm90, sm100"
    soft = _finding(_read("x", 1, soft=True), fails_on=("sm90",), only_with=(("a", ("sm100",)), ("b", ("sm90", "sm100"))))
    assert outcome_text(soft, ["sm90", "sm100"]) == "falls back on sm90; only with a on sm100; only with b on every device"
    assert outcome_text(_finding(read, only_with=(("a", ("sm100",)),)), ["sm100"]) == "only with a on sm100"
    assert outcome_text(_finding(read, only_with=(("a", ("sm90", "sm100")),)), ["sm90", "sm100", "sm120"]) == (
        "only with a on sm90, sm100")
    assert outcome_text(_finding(read), ["sm90"]) == ""


def test_render_reads_lists_each_site_and_function_once() -> None:
    reads = [_finding(_read("x", 3)), _finding(_read("x", 3)), _finding(_read("x", 4, "DeepseekSparseAttnBackend.other")),
             _finding(_read("x", 5, file="sglang/srt/other/attention/f.py"))]
    assert render_reads(reads, "fails on sm90") == (
        "dsa_backend.py:3, dsa_backend.py:4, sglang/srt/other/attention/f.py:5 "
        "(DeepseekSparseAttnBackend.__init__, DeepseekSparseAttnBackend.other) unconditionally -> fails on sm90")
    guarded = [_finding(_read("x", 3, guards=("a", "b or c")))]
    assert render_reads(guarded, "o") == "dsa_backend.py:3 (DeepseekSparseAttnBackend.__init__) when a and (b or c) -> o"


def test_a_helper_reached_from_only_some_backends_names_none_of_them() -> None:
    # DeepseekV4AttnBackend's own method, also reached from DSA: not every backend is outside it
    read = _finding(_read("x", 3, "DeepseekV4AttnBackend.helper"), backends=("DeepseekSparseAttnBackend", "DeepseekV4AttnBackend"))
    assert render_reads([read], "o") == "dsa_backend.py:3 (DeepseekV4AttnBackend.helper) unconditionally -> o"
    dotted = _finding(_read("x", 3, "DSATopKBackend.resolve"), backends=("DSATopKBackend.resolve",))
    assert render_reads([dotted], "o") == "dsa_backend.py:3 (DSATopKBackend.resolve) unconditionally -> o"
    prefix = _finding(_read("x", 3, "DeepseekSparseAttnBackendX.f"), backends=("DeepseekSparseAttnBackend",))
    assert render_reads([prefix], "o") == ("dsa_backend.py:3 (DeepseekSparseAttnBackendX.f, reached from "
                                           "DeepseekSparseAttnBackend) unconditionally -> o")
