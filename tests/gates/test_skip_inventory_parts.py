"""The skip inventory's parts called directly, in this process (issue 34 item 9: the inventory is a
user's verdict, now in the measured mutation core): reasons written and read back, a phase
report's skip message, what counts once, the must-run sets, a worker's hand-over, the count line
and a group's lines. The pytester tests in test_skip_inventory.py drive the same through runs."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dsakit.gates import inventory
from dsakit.gates.inventory import InventoryReporter, SkipInventory, format_reasons, reasons_from_message
from dsakit.gates.skip_causes import Cause, CauseGroup
from dsakit.reasons import Reason


def _report(nodeid: str, longrepr: Any, *, skipped: bool = True, context: Any = None, xfail: bool = False) -> Any:
    report = SimpleNamespace(nodeid=nodeid, longrepr=longrepr, skipped=skipped)
    if context is not None:
        report.context = context
    if xfail:
        report.wasxfail = "known"
    return report


def test_reasons_are_written_joined_and_read_back() -> None:
    reasons = [Reason("fa3", "FA3 needs SM 9.x"), Reason("sm>=10.0", "needs SM 10.0")]
    message = format_reasons(reasons)
    assert message == "[fa3] FA3 needs SM 9.x | [sm>=10.0] needs SM 10.0"
    assert reasons_from_message(message) == reasons
    assert reasons_from_message("Skipped: " + message) == reasons
    assert reasons_from_message("  [cuda] no GPU ") == [Reason("cuda", "no GPU")]
    assert reasons_from_message("plain text [cuda] no GPU") == []  # a code only counts at the start
    assert format_reasons([]) == ""


@pytest.mark.parametrize(("longrepr", "message"), [
    (("t.py", 3, "Skipped: [cuda] no GPU"), "Skipped: [cuda] no GPU"),
    (("t.py", 3), "('t.py', 3)"),
    ("Skipped: text", "Skipped: text"),
    (None, ""),
])
def test_a_phase_reports_skip_message(longrepr: Any, message: str) -> None:
    assert inventory._skip_message(_report("t.py::test_a", longrepr)) == message


def test_record_counts_skips_once_with_planned_or_read_back_reasons() -> None:
    inv = SkipInventory()
    inv.plan("t.py::test_planned", [Reason("fa3", "FA3 needs SM 9.x")])
    inv.record(_report("t.py::test_planned", ("t.py", 1, "Skipped: [cuda] other words")))
    inv.record(_report("t.py::test_read", ("t.py", 2, "Skipped: [cuda] no GPU ")))
    inv.record(_report("t.py::test_plain", ("t.py", 3, "Skipped: just skipped")))
    inv.record(_report("t.py::test_xfail", ("t.py", 4, "Skipped: [cuda] x"), xfail=True))
    inv.record(_report("t.py::test_passed", None, skipped=False))
    inv.record(_report("t.py::test_planned", ("t.py", 5, "Skipped: [cuda] sub"), context=SimpleNamespace(
        msg="case 1", kwargs={})))
    assert [(s.test, s.nodeid, s.message, s.reasons) for s in inv.skips] == [
        ("t.py::test_planned", "t.py::test_planned", "[cuda] other words", (Reason("fa3", "FA3 needs SM 9.x"),)),
        ("t.py::test_read", "t.py::test_read", "[cuda] no GPU", (Reason("cuda", "no GPU"),)),
        ("t.py::test_plain", "t.py::test_plain", "just skipped", ()),
        ("t.py::test_planned [case 1]", "t.py::test_planned", "[cuda] sub", (Reason("cuda", "sub"),))]
    assert repr(inv.skips[2]) == "Skip(test='t.py::test_plain', message='just skipped', reasons=())"
    assert inv.skipped_behind(["fa3", "cuda", "aiter"]) == {
        "fa3": ["t.py::test_planned"], "cuda": ["t.py::test_read", "t.py::test_planned [case 1]"]}
    assert inv.gated  # plan() marks the run as using dsakit


def test_gated_needs_a_coded_skip_and_a_run_that_uses_dsakit() -> None:
    inv = SkipInventory()
    inv.record(_report("t.py::test_a", ("t.py", 1, "Skipped: [cuda] no GPU")))
    assert not inv.gated
    inv.declare("t.py::test_b", ["cuda"])
    assert inv.gated
    plain = SkipInventory()
    plain.declare("t.py::test_b", ["cuda"])
    plain.record(_report("t.py::test_a", ("t.py", 1, "Skipped: no code")))
    assert not plain.gated


def test_declared_codes_keep_their_order_once_and_follow_deselection() -> None:
    inv = SkipInventory()
    assert not inv.used
    inv.declare("t.py::test_a", ["cuda", "fa3", "cuda"])
    inv.declare("t.py::test_a", ["fa3", "aiter"])
    inv.declare("t.py::test_b", [])
    assert inv.used and inv.declared == {"t.py::test_a": ["cuda", "fa3", "aiter"], "t.py::test_b": []}
    inv.keep_declared(["t.py::test_b", "t.py::test_c"])
    assert inv.declared == {"t.py::test_b": []}
    assert inv.without_tests(["cuda", "fa3"]) == ["cuda", "fa3"]
    inv.add("t.py::test_x", [Reason("fa3", "FA3 needs SM 9.x"), Reason("cuda", "no GPU")])
    assert inv.skips[0].message == "[fa3] FA3 needs SM 9.x | [cuda] no GPU"
    assert inv.without_tests(["cuda", "fa3", "aiter"]) == ["aiter"]  # a skip's codes count as behind
    unknown = SkipInventory()
    unknown.declared = None
    unknown.keep_declared(["t.py::test_a"])
    assert unknown.declared is None and unknown.without_tests(["cuda"]) == []


def test_a_workers_hand_over_and_a_controller_that_collected_nothing() -> None:
    worker = SkipInventory()
    assert worker.worker_data() == {"declared": {}, "used": False}
    worker.declare("t.py::test_a", ["cuda"])
    controller = SkipInventory()
    controller.declared = None  # an xdist controller, before any worker reported
    controller.merge(worker.worker_data())
    assert controller.declared == {"t.py::test_a": ["cuda"]} and controller.used
    idle = SkipInventory()
    idle.merge({"declared": {}})
    assert not idle.used and idle.declared == {}
    none = SkipInventory()
    none.declared = None
    assert none.worker_data() == {"declared": {}, "used": False}


def test_planned_skips_count_for_the_selected_tests_only() -> None:
    inv = SkipInventory()
    inv.plan("t.py::test_a", [Reason("fa3", "FA3 needs SM 9.x")])
    inv.plan("t.py::test_b", [Reason("cuda", "no GPU")])
    inv.add_planned(["t.py::test_b", "t.py::test_c"])
    assert [(s.test, s.message) for s in inv.skips] == [("t.py::test_b", "[cuda] no GPU")]


def test_host_label_option_else_hostname() -> None:
    """The option's value (`--dsakit-host-label`, $DSAKIT_HOST_LABEL or the ini key, read once by the
    option table: tests/gates/test_report_shards.py runs each), else the hostname."""
    import socket

    assert inventory.host_label(" h200 ") == "h200"
    assert inventory.host_label(None) == socket.gethostname()
    assert inventory.host_label("  ") == socket.gethostname()


def test_shard_of_needs_both_group_and_splits() -> None:
    def config(**options: Any) -> Any:
        return SimpleNamespace(option=SimpleNamespace(**options))

    assert inventory.shard_of(config(group=2, splits=3)) == {"group": 2, "splits": 3}
    assert inventory.shard_of(config(group=2)) is None
    assert inventory.shard_of(config(splits=3)) is None
    assert inventory.shard_of(config(group=None, splits=3)) is None


def _reporter(skips: list[tuple[str, str]]) -> InventoryReporter:
    config = SimpleNamespace(option=SimpleNamespace(collectonly=False))
    reporter = InventoryReporter(config, SkipInventory(), lambda: None, (), None)  # type: ignore[arg-type]
    for test, nodeid in skips:
        reporter.inventory.skips.append(inventory.Skip(test, nodeid, "m", ()))
    return reporter


@pytest.mark.parametrize(("skips", "counted", "line"), [
    ([("a", "a")], 1, "1 skip, each in one group below (pytest counts 1 skipped)"),
    ([("a", "a"), ("b", "b")], 2, "2 skips, each in one group below (pytest counts 2 skipped)"),
    ([("a", "a"), ("a [s]", "a"), ("a [t]", "a")], 1,
     "3 skips, each in one group below (pytest counts 1 skipped: at this verbosity it leaves out the 2 skipped "
     "subtests; -q, -v or -o verbosity_subtests=1 count them)"),
    ([("a", "a"), ("a [s]", "a")], 0, "2 skips, each in one group below (pytest counts 0 skipped)"),
    ([("a", "a"), ("a [s]", "a")], 2, "2 skips, each in one group below (pytest counts 2 skipped)"),
])
def test_the_count_line_explains_what_pytest_leaves_out(skips: list[tuple[str, str]], counted: int, line: str) -> None:
    assert _reporter(skips)._count_line(counted) == line


class _Terminal:
    def __init__(self) -> None:
        self.out = io.StringIO()

    def write_line(self, line: str, **markup: bool) -> None:
        self.out.write(line + "\n")


def _group(code: str, skips: list[tuple[str, str]], also: tuple[str, ...] = ()) -> CauseGroup:
    group = CauseGroup(code)
    for test, message in skips:
        group.add(test, Cause(code, message, f"[{code}] {message}", ("sm90",), "", also))
    return group


@pytest.mark.parametrize("verbose", [False, True])
def test_a_groups_lines_with_and_without_v(verbose: bool) -> None:
    group = _group("fa3", [("t.py::a", "FA3 needs SM 9.x"), ("t.py::b", "FA3 needs SM 9.x"), ("t.py::c", "other")],
                   also=("cuda", "aiter"))
    terminal = _Terminal()
    InventoryReporter._write_group(terminal, group, verbose=verbose)
    plain = ["   3 skipped  [fa3] FA3 needs SM 9.x", "           runs on: sm90; also closed: cuda (3), aiter (3)"]
    every = ["             2x FA3 needs SM 9.x", "               t.py::a", "               t.py::b",
             "             1x other", "               t.py::c"]
    assert terminal.out.getvalue().splitlines() == plain + (every if verbose else [])


@pytest.mark.parametrize("verbose", [False, True])
def test_an_uncoded_group_lists_its_messages_and_one_message_its_tests_unindented(verbose: bool) -> None:
    terminal = _Terminal()
    InventoryReporter._write_group(terminal, _group("uncoded", [("t.py::a", "why")]), verbose=verbose)
    assert terminal.out.getvalue().splitlines() == [
        "   1 skipped  [uncoded] why", "           runs on: sm90", "             1x why",
        *(["           t.py::a"] if verbose else [])]
    terminal = _Terminal()
    InventoryReporter._write_group(terminal, _group("fa3", [("t.py::a", "one")]), verbose=verbose)
    assert terminal.out.getvalue().splitlines() == [
        "   1 skipped  [fa3] one", "           runs on: sm90", *(["           t.py::a"] if verbose else [])]


def test_a_workers_used_flag_reaches_the_controller_without_declarations() -> None:
    controller = SkipInventory()
    controller.merge({"declared": {}, "used": True})
    assert controller.used is True
    controller.merge({"declared": {}, "used": False})
    assert controller.used is True  # one worker that used dsakit is enough


def test_a_test_skipped_twice_behind_one_code_is_named_once() -> None:
    inv = SkipInventory()
    inv.add("t.py::test_a", [Reason("cuda", "no GPU")])
    inv.add("t.py::test_a", [Reason("cuda", "no GPU"), Reason("fa3", "FA3 needs SM 9.x")])
    assert inv.skipped_behind(["fa3", "cuda"]) == {"fa3": ["t.py::test_a"], "cuda": ["t.py::test_a"]}


def test_the_header_line_marks_a_real_device_and_a_missing_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    real = SimpleNamespace(simulated=False, describe=lambda: "NVIDIA H200 (sm90)")
    simulated = SimpleNamespace(simulated=True, describe=lambda: "B300 [simulated sm103]")
    monkeypatch.setattr(inventory, "_sglang_version", lambda: None)
    assert inventory.header_line(real) == "dsakit: device NVIDIA H200 (sm90) [real]; SGLang not installed"  # type: ignore[arg-type]
    monkeypatch.setattr(inventory, "_sglang_version", lambda: "0.5.23")
    assert inventory.header_line(simulated) == "dsakit: device B300 [simulated sm103]; SGLang 0.5.23"  # type: ignore[arg-type]


def test_the_report_json_of_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsakit.gates.device_model import simulated_model

    monkeypatch.setattr(inventory, "_sglang_version", lambda: "0.5.23")
    config = SimpleNamespace(option=SimpleNamespace(collectonly=False, group=2, splits=3))
    reporter = InventoryReporter(config, SkipInventory(), lambda: simulated_model("sm90"), ("cuda", "fa3"),  # type: ignore[arg-type]
                                 "r.json", host="h200", must_run_strict=True, announce=False)
    assert (reporter.failures, reporter.untested, reporter.report_error, reporter.selected, reporter.is_worker,
            reporter._recorder) == ({}, [], None, [], False, None)
    assert reporter.header_lines() == []  # type: ignore[arg-type]
    reporter.inventory.add("t.py::test_a", [Reason("fa3", "FA3 needs SM 9.x")])
    reporter.failures, reporter.untested = {"fa3": ["t.py::test_a"]}, ["cuda"]
    data = reporter.as_json()
    assert (data["format"], data["format_version"], data["host"], data["shard"], data["sglang"],
            data["collect_only"]) == ("dsakit-report", 3, "h200", {"group": 2, "splits": 3}, "0.5.23", False)
    assert data["device"]["table_key"] == "sm90" and data["device"]["simulated"] is True
    assert data["must_run"] == {"codes": ["cuda", "fa3"], "failed": {"fa3": ["t.py::test_a"]},
                                "no_test_behind": ["cuda"], "strict": True}
    assert data["skips"]["total"] == 1 and [g["code"] for g in data["skips"]["groups"]] == ["fa3"]
    assert data["skips"]["why"].startswith("why these skipped on sm90 (simulated): ")
    assert (data["tests"], data["subtests"]) == ({}, {})
    assert reporter.recorder is reporter.recorder  # made once


class _Stats:
    def __init__(self) -> None:
        self.stats: dict[str, list[Any]] = {}


def _finishing(must_run: tuple[str, ...] = ("cuda",), *, strict: bool = False, worker: bool = False,
               collectonly: bool = False, terminal: Any = None, report_path: str | None = None) -> InventoryReporter:
    config = SimpleNamespace(option=SimpleNamespace(collectonly=collectonly),
                             pluginmanager=SimpleNamespace(get_plugin=lambda name: terminal if name == "terminalreporter" else None))
    if worker:
        config.workerinput, config.workeroutput = {}, {}
    from dsakit.gates.device_model import simulated_model

    return InventoryReporter(config, SkipInventory(), lambda: simulated_model("sm90"), must_run, report_path,  # type: ignore[arg-type]
                             host="h", must_run_strict=strict)


@pytest.mark.parametrize(("status", "after"), [
    (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED),
    (pytest.ExitCode.NO_TESTS_COLLECTED, pytest.ExitCode.TESTS_FAILED),
    (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.TESTS_FAILED),
    (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERRUPTED),
    (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.USAGE_ERROR),
])
def test_a_must_run_gate_skipped_fails_only_a_run_that_would_pass(status: pytest.ExitCode, after: pytest.ExitCode) -> None:
    terminal = _Stats()
    reporter = _finishing(("cuda", "fa3"), terminal=terminal)
    reporter.inventory.add("t.py::test_a", [Reason("cuda", "no GPU")])
    session = SimpleNamespace(exitstatus=status)
    reporter.sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == after
    assert reporter.failures == {"cuda": ["t.py::test_a"]}
    # what no test sits behind is known only when the run was not interrupted
    assert reporter.untested == ([] if status == pytest.ExitCode.INTERRUPTED else ["fa3"])
    assert [(entry.code, entry.tests) for entry in terminal.stats.pop(inventory.MUST_RUN_STAT)] == [
        ("cuda", ["t.py::test_a"])]
    assert terminal.stats == {}


@pytest.mark.parametrize("strict", [False, True])
def test_a_must_run_gate_no_test_sits_behind_fails_the_run_only_when_strict(strict: bool) -> None:
    terminal = _Stats()
    reporter = _finishing(("fa3",), strict=strict, terminal=terminal)
    reporter.inventory.declare("t.py::test_a", ["cuda"])
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    reporter.sessionfinish(session)  # type: ignore[arg-type]
    assert reporter.untested == ["fa3"] and reporter.failures == {}
    assert session.exitstatus == (pytest.ExitCode.TESTS_FAILED if strict else pytest.ExitCode.OK)
    assert terminal.stats == {}  # only skipped must-run tests count in pytest's final line
    plain = _finishing((), strict=True)
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    plain.sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.OK  # strict, but nothing asked for


def test_a_worker_hands_its_declarations_over_and_decides_nothing() -> None:
    reporter = _finishing(("cuda",), worker=True, strict=True)
    assert reporter.is_worker
    reporter.inventory.declare("t.py::test_a", ["fa3"])
    reporter.inventory.add("t.py::test_a", [Reason("cuda", "no GPU")])
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    reporter.sessionfinish(session)  # type: ignore[arg-type]
    # what the run's session hands the controller, under the inventory's name
    assert reporter.worker_output() == {"declared": {"t.py::test_a": ["fa3"]}, "used": True}
    assert reporter.config.workeroutput == {}  # the session's one hand-over writes it, not the part
    assert session.exitstatus == pytest.ExitCode.OK and reporter.failures == {} and reporter.untested == []


def test_a_skipped_must_run_test_without_a_terminal_still_fails_the_run() -> None:
    reporter = _finishing(("cuda",), terminal=None)
    reporter.inventory.add("t.py::test_a", [Reason("cuda", "no GPU")])
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    reporter.sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED


def test_a_collect_only_run_counts_the_planned_skips_of_its_selection() -> None:
    reporter = _finishing(("cuda",), collectonly=True, terminal=_Stats())
    reporter.inventory.plan("t.py::test_a", [Reason("cuda", "no GPU")])
    reporter.inventory.plan("t.py::test_b", [Reason("cuda", "no GPU")])
    reporter.inventory.declare("t.py::test_a", ["cuda"])
    reporter.collection_finish(SimpleNamespace(items=[SimpleNamespace(nodeid="t.py::test_a")]))  # type: ignore[arg-type]
    assert reporter.selected == ["t.py::test_a"]
    reporter.sessionfinish(SimpleNamespace(exitstatus=pytest.ExitCode.OK))  # type: ignore[arg-type]
    assert reporter.failures == {"cuda": ["t.py::test_a"]}
    interrupted = _finishing(("cuda",), collectonly=True)  # collection never finished: nothing selected
    interrupted.inventory.plan("t.py::test_a", [Reason("cuda", "no GPU")])
    interrupted.sessionfinish(SimpleNamespace(exitstatus=pytest.ExitCode.INTERRUPTED))  # type: ignore[arg-type]
    assert interrupted.inventory.skips == [] and interrupted.failures == {}


@pytest.mark.parametrize(("status", "after"), [
    (pytest.ExitCode.OK, pytest.ExitCode.USAGE_ERROR),
    (pytest.ExitCode.NO_TESTS_COLLECTED, pytest.ExitCode.USAGE_ERROR),
    (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.TESTS_FAILED),
])
def test_a_report_that_cannot_be_written_fails_a_passing_run(tmp_path: Any, status: pytest.ExitCode,
                                                              after: pytest.ExitCode) -> None:
    reporter = _finishing((), report_path=str(tmp_path))  # a folder: not written
    session = SimpleNamespace(exitstatus=status)
    reporter.sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == after
    assert reporter.report_error == (f"not written at the end of the run: --dsakit-report {str(tmp_path)!r} is a "
                                     f"directory; pass a file path (for example {tmp_path}/report.json)")
    written = _finishing((), report_path=str(tmp_path / "r.json"))
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    written.sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.OK and written.report_error is None
    assert (tmp_path / "r.json").is_file()


def test_outcomes_are_recorded_only_by_a_controller_that_writes_a_report() -> None:
    passed = pytest.TestReport("t.py::test_a", ("t.py", 1, "test_a"), {}, "passed", None, "call")
    for kwargs, recorded in (({"report_path": None}, False), ({"report_path": "r.json", "worker": True}, False),
                             ({"report_path": "r.json"}, True)):
        reporter = _finishing((), **kwargs)  # type: ignore[arg-type]
        reporter.log_report(passed)
        assert (reporter._recorder is not None) == recorded
        if recorded:
            assert list(reporter.recorder.outcomes) == ["t.py::test_a"]


class _Summary:
    def __init__(self, skipped: int = 0) -> None:
        self.lines: list[tuple[str, tuple[str, ...]]] = []
        self.stats: dict[str, list[Any]] = {"skipped": [None] * skipped} if skipped else {}

    def section(self, title: str) -> None:
        self.lines.append(("== " + title, ()))

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append((line, tuple(sorted(k for k, v in markup.items() if v))))


def _summary_of(reporter: InventoryReporter, *, skipped: int = 0, collectonly: bool = False,
                verbose: int = 0) -> list[tuple[str, tuple[str, ...]]]:
    terminal = _Summary(skipped)
    reporter.config.option.collectonly, reporter.config.option.verbose = collectonly, verbose
    reporter.summary(terminal)
    return terminal.lines


@pytest.mark.parametrize("strict", [True, False])
def test_the_inventory_section(monkeypatch: pytest.MonkeyPatch, strict: bool) -> None:
    monkeypatch.setattr(inventory, "_sglang_version", lambda: "0.5.23")
    reporter = _finishing(("cuda", "fa3"), strict=strict)
    reporter.inventory.add("t.py::a", [Reason("cuda", "no GPU")])
    reporter.inventory.add("t.py::b", [Reason("fa3", "FA3 needs SM 9.x")])
    reporter.failures, reporter.untested = {"cuda": ["t.py::a"]}, ["aiter"]
    reporter.report_error = "--dsakit-report 'x' is a directory"
    untested = ("fails the run (--dsakit-must-run-strict)" if strict else
                "nothing to check; --dsakit-must-run-strict makes this fail the run")
    assert _summary_of(reporter, skipped=2) == [
        ("== dsakit skip inventory", ()),
        ("device: NVIDIA H200 (SM 9.0, CUDA 12.8, 141 GiB) [simulated sm90]; SGLang 0.5.23", ()),
        ("2 skips, each in one group below (pytest counts 2 skipped)", ()),
        ("   1 skipped  [cuda] no GPU", ()),
        ("           runs on: sm90, sm100, sm103, sm120", ()),
        ("   1 skipped  [fa3] FA3 needs SM 9.x", ()),
        ("           runs on: sm90", ()),
        ("why these skipped on sm90 (simulated): cuda needs an NVIDIA GPU (CUDA) (1); fa3 needs exactly SM 9.x on "
         "NVIDIA (Hopper) with sgl_kernel's flash_ops extension (1)", ()),
        ("dsakit: --dsakit-must-run cuda: 1 test(s) behind gate cuda skipped: t.py::a", ("red",)),
        (f"dsakit: --dsakit-must-run aiter: no collected test sits behind gate aiter: {untested}",
         ("red",) if strict else ("yellow",)),
        ("dsakit: --dsakit-report 'x' is a directory", ("red",))]


def test_the_section_without_skips_and_in_collect_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory, "_sglang_version", lambda: None)
    reporter = _finishing(("cuda",))
    device = ("device: NVIDIA H200 (SM 9.0, CUDA 12.8, 141 GiB) [simulated sm90]; SGLang not installed", ())
    assert _summary_of(reporter) == [("== dsakit skip inventory", ()), device,
                                     ("no test skipped behind a dsakit gate", ())]
    reporter.inventory.add("t.py::a", [Reason("cuda", "no GPU")])
    lines = _summary_of(reporter, collectonly=True)
    assert lines[:3] == [("== dsakit skip inventory", ()), device, ("collect-only: skips decided at collection", ())]
    assert ("no test skipped behind a dsakit gate", ()) not in lines


def test_no_section_for_a_worker_or_a_run_with_nothing_to_say() -> None:
    worker = _finishing(("cuda",), worker=True)
    worker.inventory.add("t.py::a", [Reason("cuda", "no GPU")])
    assert _summary_of(worker) == []
    quiet = InventoryReporter(SimpleNamespace(option=SimpleNamespace(collectonly=False)), SkipInventory(),  # type: ignore[arg-type]
                              lambda: None, (), None, announce=False)  # type: ignore[arg-type,return-value]
    quiet.inventory.record(_report("t.py::test_a", ("t.py", 1, "Skipped: [cuda] looks coded")))  # a plain skip
    assert _summary_of(quiet, skipped=1) == []  # the run uses nothing of dsakit: not its business
    announced = _finishing(())  # a dsakit option set, but nothing skipped, asked for or failed
    assert _summary_of(announced) == []
    announced.inventory.record(_report("t.py::test_a", ("t.py", 1, "Skipped: plain")))
    assert _summary_of(announced, skipped=1)[0] == ("== dsakit skip inventory", ())  # an option set: shown
    gated = InventoryReporter(SimpleNamespace(option=SimpleNamespace(collectonly=False)), SkipInventory(),  # type: ignore[arg-type]
                              announced.device, (), None, announce=False)
    gated.inventory.declare("t.py::test_a", ["cuda"])
    gated.inventory.record(_report("t.py::test_a", ("t.py", 1, "Skipped: [cuda] no GPU")))
    assert _summary_of(gated, skipped=1)[0] == ("== dsakit skip inventory", ())  # a gate skipped: shown
    for attribute, value in (("must_run", ("cuda",)), ("report_error", "x")):
        reporter = InventoryReporter(SimpleNamespace(option=SimpleNamespace(collectonly=False)), SkipInventory(),  # type: ignore[arg-type]
                                     announced.device, (), None, announce=False)
        setattr(reporter, attribute, value)
        assert _summary_of(reporter)[0] == ("== dsakit skip inventory", ())


def test_each_tests_entry_in_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planned reasons win over the message's; the first reason explained, the others as written; a
    failure's signature; every test's declared gates."""
    monkeypatch.setattr(inventory, "_sglang_version", lambda: "0.5.23")
    reporter = _finishing(("cuda",), report_path="r.json")
    reporter.inventory.declare("t.py::test_p", ["fa3", "cuda"])
    reporter.inventory.plan("t.py::test_p", [Reason("fa3", "FA3 needs SM 9.x")])

    def phase(nodeid: str, outcome: str, longrepr: Any, when: str = "call") -> pytest.TestReport:
        return pytest.TestReport(nodeid, ("t.py", 1, nodeid), {}, outcome, longrepr, when)

    reporter.log_report(phase("t.py::test_p", "skipped", ("t.py", 1, "Skipped: [cuda] written"), "setup"))
    reporter.log_report(phase("t.py::test_m", "skipped", ("t.py", 2, "Skipped: [aiter] no AMD | [cuda] no GPU"), "setup"))
    reporter.log_report(phase("t.py::test_f", "failed", "E   ValueError: boom"))
    reporter.log_report(phase("t.py::test_ok", "passed", None))
    tests, subtests = reporter.tests_json()
    assert subtests == {}
    assert tests == {
        "t.py::test_p": {"outcome": "skipped", "gates": ["fa3", "cuda"], "reasons": [
            {"code": "fa3", "message": "FA3 needs SM 9.x", "also": [], "note": "", "runs_on": ["sm90"],
             "words": "fa3 needs exactly SM 9.x on NVIDIA (Hopper) with sgl_kernel's flash_ops extension"}]},
        "t.py::test_m": {"outcome": "skipped", "gates": [], "reasons": [
            {"code": "aiter", "message": "no AMD", "also": ["cuda"], "note": "", "runs_on": ["gfx942", "gfx950"],
             "words": "aiter needs an AMD gfx942 (MI300) or gfx950 (MI355) GPU"},
            {"code": "cuda", "message": "no GPU"}]},
        "t.py::test_f": {"outcome": "failed", "gates": [], "signature": "E ValueError: boom"},
        "t.py::test_ok": {"outcome": "passed", "gates": []}}
    reporter.inventory.declared = None  # an xdist controller whose workers never reported
    assert reporter.tests_json()[0]["t.py::test_p"]["gates"] == []


def test_the_runs_device_key_is_its_table_entry_else_its_own_key() -> None:
    def device(key: str, sm: str, simulated: bool) -> Any:
        return SimpleNamespace(key=key, simulated=simulated,
                               as_dict=lambda: {"key": key, "vendor": "nvidia", "sm": sm, "gfx": None})

    reporter = _finishing(())
    for dev, key, where in ((device("h200-box", "9.0", False), "sm90", "sm90 (real)"),
                            (device("v100-box", "7.0", False), "v100-box", "v100-box (real)"),
                            (device("sm103", "10.3", True), "sm103", "sm103 (simulated)")):
        reporter.device = lambda dev=dev: dev
        assert (reporter.device_key(), reporter.where()) == (key, where)


def test_the_recorder_hook_passes_every_outcome_only_to_a_controller_writing_a_report() -> None:
    assert inventory.SkipRecorder(_finishing((), report_path="r.json")).every_outcome is True
    assert inventory.SkipRecorder(_finishing((), report_path="r.json", worker=True)).every_outcome is False
    assert inventory.SkipRecorder(_finishing(())).every_outcome is False


def test_the_recorder_hook_hands_on_skips_always_and_other_outcomes_only_for_a_report() -> None:
    passed = pytest.TestReport("t.py::test_a", ("t.py", 1, "test_a"), {}, "passed", None, "call")
    skipped = pytest.TestReport("t.py::test_b", ("t.py", 2, "test_b"), {}, "skipped", ("t.py", 2, "Skipped: x"), "setup")
    for kwargs, handed in (({}, ["t.py::test_b"]), ({"report_path": "r.json"}, ["t.py::test_a", "t.py::test_b"])):
        reporter = _finishing((), **kwargs)  # type: ignore[arg-type]
        seen: list[str] = []
        reporter.log_report = lambda report: seen.append(report.nodeid)  # type: ignore[method-assign]
        hook = inventory.SkipRecorder(reporter)
        hook.pytest_runtest_logreport(passed)
        hook.pytest_runtest_logreport(skipped)
        assert seen == handed


def test_a_workers_hand_over_merges_into_the_controllers_inventory() -> None:
    """The controller's inventory starts unknown (declared None: it collects nothing) and takes each
    worker's declarations and use (the xdist hooks that hand them over are the run's DsakitSession's,
    tested through pytester under -n 2 in tests/gates/test_skip_inventory.py)."""
    inv = SkipInventory()
    inv.declared = None
    inv.merge({"declared": {"t.py::test_a": ["cuda"]}, "used": True})
    assert inv.declared == {"t.py::test_a": ["cuda"]} and inv.used


def test_a_report_write_that_fails_after_its_path_was_accepted_keeps_the_writers_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path passed output_file's check (at configure and again now); the write itself then fails
    (a full disk, a permission lost): the summary gets the writer's own sentence (the last real
    survivor of the mutation run's inventory group, bench/notes/2026-12-02-mutation-testing.md 'Round 2')."""
    import errno
    import os

    path = str(tmp_path / "r.json")
    reporter = _finishing((), report_path=path)

    def refuse(src: str, dst: str) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    reporter.write_report(path)
    assert reporter.report_error == f"--dsakit-report {path}: not written: Permission denied"
    assert not list(tmp_path.iterdir()), "the temporary file was left behind"
