"""pr-check's and compare's verdicts on hand-made run records, in this process (issue 34 item 9: what
a PR's author is told is a user's verdict, now in the measured mutation core): every class of
change, every verdict, the exit codes, the grouped rows, the runs that compared nothing, a crashed
run's record. The end-to-end tests in tests/cli/test_pr_check.py run real trees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsakit.compare import pr_check, pr_vs_base
from dsakit.compare.pr_vs_base import Change, Run, classify
from dsakit.compare.pr_check import DeviceCheck, PrCheck, Verdict


def _out(outcome: str, *, message: str = "", frame: str = "", reason: str = "", **extra: Any) -> dict[str, Any]:
    return {"outcome": outcome, "message": message, "frame": frame, "reason": reason, **extra}


def _changes(base: dict[str, Any], pr: dict[str, Any]) -> list[tuple[str, str, str | None, str | None, str]]:
    return [(c.nodeid, c.kind, c.base, c.pr, c.detail) for c in classify(base, pr)]


def test_every_class_of_change_with_its_detail() -> None:
    boom = _out("failed", message="ValueError: boom", frame="t.py:3")
    other = _out("failed", message="KeyError: 'k'", frame="t.py:9")
    skip = _out("skipped", reason="Skipped:  [cuda]\n  no GPU")
    base = {"t::pass_fail": _out("passed"), "t::skip_fail": skip, "t::fail_pass": boom, "t::fail_skip": boom,
            "t::same": boom, "t::differ": boom, "t::pass_skip": _out("passed"), "t::skip_pass": skip,
            "t::skip_skip": skip, "t::skip_moved": _out("skipped", reason="x.py:3: closed"),
            "t::skip_other": skip, "t::pass_pass": _out("passed"), "t::gone": boom, "t::xfail_pass": _out("xfailed"),
            "t::error": _out("passed"), "t::fixed_xpass": _out("xpassed", message="XPASS")}
    pr = {"t::pass_fail": boom, "t::skip_fail": boom, "t::fail_pass": _out("passed"),
          "t::fail_skip": _out("skipped", reason="no GPU"), "t::same": _out("error", message="ValueError: boom",
                                                                           frame="t.py:4"),
          "t::differ": other, "t::pass_skip": _out("skipped", reason="no GPU"), "t::skip_pass": _out("passed"),
          "t::skip_skip": skip, "t::skip_moved": _out("skipped", reason="x.py:7: closed"),
          "t::skip_other": _out("skipped", reason="no ROCm"), "t::pass_pass": _out("passed"),
          "t::new": _out("failed", message="E: new", frame="n.py:1"), "t::new_skip": _out("skipped", reason="r"),
          "t::xfail_pass": _out("passed"), "t::error": _out("crashed", message="Segfault"),
          "t::fixed_xpass": _out("passed"), "t::new_xfail": _out("xfailed", reason="known bug")}
    assert _changes(base, pr) == [
        ("t::pass_fail", "regression", "passed", "failed", "ValueError: boom @ t.py"),
        ("t::skip_fail", "regression", "skipped", "failed", "ValueError: boom @ t.py (was skipped: Skipped: [cuda] no GPU)"),
        ("t::fail_pass", "fixed", "failed", "passed", "was: ValueError: boom @ t.py"),
        ("t::fail_skip", "skip-change", "failed", "skipped", "was: ValueError: boom @ t.py; now skipped: no GPU"),
        ("t::same", "pre-existing", "failed", "error", "ValueError: boom @ t.py"),
        ("t::differ", "failing-differently", "failed", "failed", "base: ValueError: boom @ t.py | pr: KeyError: 'k' @ t.py"),
        ("t::pass_skip", "skip-change", "passed", "skipped", "no GPU"),
        ("t::skip_pass", "skip-change", "skipped", "passed", "Skipped: [cuda] no GPU"),
        ("t::skip_skip", "unchanged", "skipped", "skipped", ""),
        ("t::skip_moved", "unchanged", "skipped", "skipped", ""),  # the skipping call moved: the same skip
        ("t::skip_other", "skip-change", "skipped", "skipped", "base: Skipped: [cuda] no GPU | pr: no ROCm"),
        ("t::pass_pass", "unchanged", "passed", "passed", ""),
        ("t::gone", "removed", "failed", None, "ValueError: boom @ t.py"),
        ("t::xfail_pass", "unchanged", "xfailed", "passed", ""),
        ("t::error", "regression", "passed", "crashed", "Segfault"),
        ("t::fixed_xpass", "fixed", "xpassed", "passed", "was: XPASS"),
        ("t::new", "added", None, "failed", "E: new @ n.py"),
        ("t::new_skip", "added", None, "skipped", "r"),
        ("t::new_xfail", "added", None, "xfailed", "")]  # an xfail's reason is not a skip's
    assert Change("t::a", "added", None, "passed").as_dict() == {
        "test": "t::a", "class": "added", "base": None, "pr": "passed", "detail": ""}
    assert _changes({}, {"t::p": _out("passed")}) == [("t::p", "added", None, "passed", "")]


def test_a_skip_reads_paths_inside_an_overlay_as_paths_in_the_tree() -> None:
    outcome = {"reason": "('/w/base-overlay/sglang/srt/x.py', 12, 'Skipped: no\n  GPU')"}
    assert pr_vs_base.skip_reason(outcome) == "('sglang/srt/x.py', 12, 'Skipped: no GPU')"
    assert pr_vs_base._skip_key({"reason": "at a.py:12 and b.py:3 (c.pyx:4)"}) == "at a.py and b.py (c.pyx:4)"
    assert pr_vs_base.skip_reason({}) == ""
    assert pr_vs_base.in_tree("x /w/pr-overlay/sglang/a.py and /w/pr-overlay/other") == "x sglang/a.py and /w/pr-overlay/other"


def test_fingerprint_mismatch_names_every_difference() -> None:
    base = Run("base", "b", 0, 1.0, env={"python": "3.12", "implementation": "cpython", "device": "cpu",
                                         "packages": {"torch": "2.1", "numpy": "1"}})
    same = Run("pr", "p", 0, 1.0, env=json.loads(json.dumps(base.env)))
    assert pr_vs_base.fingerprint_mismatch(base, same) == []
    pr = Run("pr", "p", 0, 1.0, env={"python": "3.13", "implementation": "pypy", "device": "sm90",
                                     "packages": {"torch": "2.2", "triton": "3"}})
    assert pr_vs_base.fingerprint_mismatch(base, pr) == [
        "python: base '3.12' vs pr '3.13'", "implementation: base 'cpython' vs pr 'pypy'", "device: base 'cpu' vs pr 'sm90'", "numpy: base 1 vs pr None",
        "torch: base 2.1 vs pr 2.2", "triton: base None vs pr 3"]


@pytest.mark.parametrize(("base_code", "pr_code", "lines", "pr_only"), [
    (0, 0, [], False),
    (1, 1, [], False),
    (0, 2, ["the pr run (p) was interrupted (collection errors or Ctrl-C) (pytest exit 2)"], True),
    (1, 3, ["the pr run (p) hit a pytest internal error (pytest exit 3)"], True),
    (0, 4, ["the pr run (p) was a pytest usage error (a missing path or a bad option) (pytest exit 4)"], False),
    (0, 5, ["the pr run (p) collected no tests (pytest exit 5)"], False),
    (2, 2, ["the base run (b) was interrupted (collection errors or Ctrl-C) (pytest exit 2)",
            "the pr run (p) was interrupted (collection errors or Ctrl-C) (pytest exit 2)"], False),
    (5, 0, ["the base run (b) collected no tests (pytest exit 5)"], False),
])
def test_runs_that_compared_nothing(base_code: int, pr_code: int, lines: list[str], pr_only: bool) -> None:
    base, pr = Run("base", "b", base_code, 1.0), Run("pr", "p", pr_code, 1.0)
    assert pr_vs_base.unusable_runs(base, pr) == (lines, pr_only)
    crashed = Run("pr", "p", pr_code, 1.0, crashed="the test process died")
    assert pr_vs_base.unusable_runs(Run("base", "b", 0, 1.0), crashed) == ([], False)


@pytest.mark.parametrize(("output", "code", "message"), [
    ("x\nFatal Python error: Aborted\nmore", 0, "Fatal Python error: Aborted"),
    ("Segmentation fault (core dumped)", -11, "Segmentation fault (core dumped)"),
    ("Aborted (core dumped)", 0, "Aborted (core dumped)"),
    ("RuntimeError: CUDA error: an illegal memory access", 1, "RuntimeError: CUDA error: an illegal memory access"),
    ("[gw0] node down: worker 'gw0' crashed while running t.py::a", 1, "worker 'gw0' crashed while running t.py::a"),
    ("", -9, "the test process was killed by SIGKILL"),
    ("", -1, "the test process was killed by SIGHUP"),
    ("", -200, "the test process was killed by signal 200"),
    ("", 0, "the test process died"),
    ("", 1, "the test process died"),
])
def test_a_crash_is_named_by_its_fatal_line_or_signal(output: str, code: int, message: str) -> None:
    assert pr_vs_base._crash_message(output, code) == message


def test_a_record_cut_by_a_crash_marks_the_tests_in_flight(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    lines = [{"kind": "env", "fingerprint": {"python": "3.12"}, "sglang": {"version": "0.5.23"}},
             {"kind": "start", "nodeid": "t::a"}, {"kind": "test", "nodeid": "t::a", "outcome": "passed"},
             {"kind": "start", "nodeid": "t::b"}]
    record.write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"kind\": \"te")
    output = "\n".join(f"line {n}" for n in range(30)) + "\nSegmentation fault"
    run = pr_vs_base.load_record(record, "pr", "src", -11, 2.0, output)
    assert run.env == {"python": "3.12"} and run.sglang == {"version": "0.5.23"}
    assert run.crashed == "Segmentation fault"
    assert run.tests == {"t::a": {"kind": "test", "nodeid": "t::a", "outcome": "passed"},
                         "t::b": {"nodeid": "t::b", "outcome": "crashed", "message": "Segmentation fault", "frame": ""}}
    assert run.output_tail.splitlines() == [f"line {n}" for n in range(11, 30)] + ["Segmentation fault"]
    record.write_text("\n".join(json.dumps(x) for x in [*lines, {"kind": "end"}]) + "\n")
    whole = pr_vs_base.load_record(record, "pr", "src", 1, 2.0, "")
    assert whole.crashed is None and list(whole.tests) == ["t::a"]
    missing = pr_vs_base.load_record(tmp_path / "none.jsonl", "pr", "src", 0, 2.0, "")
    assert missing.crashed == "the test process died" and missing.tests == {}
    # a cut line in the middle is skipped, the records after it still read; a record of another kind is
    # not the end; a death by a signal without a fatal line says which signal
    mixed = [json.dumps(lines[1]), '{"kind": "te', json.dumps(lines[2]), json.dumps({"kind": "note"})]
    record.write_text("\n".join(mixed) + "\n")
    cut = pr_vs_base.load_record(record, "pr", "src", -11, 2.0, "no fatal line here")
    assert cut.crashed == "the test process was killed by SIGSEGV"
    assert cut.tests == {"t::a": {"kind": "test", "nodeid": "t::a", "outcome": "passed"}}


def _check(base: dict[str, Any], pr: dict[str, Any], *, device: str = "sm90", runs_as: str = "sm90",
           reruns: dict[str, dict[str, Any]] | None = None) -> DeviceCheck:
    check = DeviceCheck(device, runs_as, Run("base", "b", 0, 1.0, tests=base), Run("pr", "p", 0, 1.0, tests=pr))
    check.reruns = {label: Run(f"{label}-rerun", "x", 0, 1.0, tests=tests) for label, tests in (reruns or {}).items()}
    check.verdicts = pr_check.verdicts(check)
    return check


def test_every_verdict_with_its_detail_explanation_and_both_outcomes() -> None:
    boom = _out("failed", message="ValueError: boom", frame="t.py:3", explained="why\n  the read lacks it")
    skip = _out("skipped", reason="no GPU", explained="skip words")
    base = {"t::reg": _out("passed"), "t::flaky_pr": _out("passed"), "t::flaky_base": boom, "t::pre": boom,
            "t::differ": _out("failed", message="KeyError: 'k'", frame="t.py:9"), "t::fixed": boom,
            "t::newskip": _out("passed"), "t::unskip": skip, "t::notrun": skip, "t::passed": _out("passed"), "t::gone": skip,
            "t::xfail": _out("xfailed")}
    pr = {"t::reg": boom, "t::flaky_pr": boom, "t::flaky_base": boom, "t::pre": boom, "t::differ": boom,
          "t::fixed": _out("passed"), "t::newskip": skip, "t::unskip": _out("passed"), "t::notrun": skip, "t::passed": _out("passed"),
          "t::added_fail": boom, "t::added_pass": _out("passed"), "t::added_skip": skip, "t::xfail": _out("xfailed")}
    check = _check(base, pr, reruns={"pr": {"t::flaky_pr": _out("passed"), "t::reg": _out("failed")},
                                     "base": {"t::flaky_base": _out("xfailed")}})
    got = {v.test: (v.verdict, v.detail, v.explanation, v.base_reason, v.pr_reason) for v in check.verdicts}
    sig = "ValueError: boom @ t.py"
    assert got == {
        "t::reg": ("regression", sig, "why\n  the read lacks it", "passed", f"failed: {sig}"),
        "t::flaky_pr": ("flaky", sig, "why\n  the read lacks it", "passed", f"failed: {sig}"),
        "t::flaky_base": ("flaky", sig, "why\n  the read lacks it", f"failed: {sig}", f"failed: {sig}"),
        "t::pre": ("pre-existing", sig, "why\n  the read lacks it", f"failed: {sig}", f"failed: {sig}"),
        "t::differ": ("pre-existing", f"base: KeyError: 'k' @ t.py | pr: {sig}", "why\n  the read lacks it",
                      "failed: KeyError: 'k' @ t.py", f"failed: {sig}"),
        "t::fixed": ("fixed", f"was: {sig}", "why\n  the read lacks it", f"failed: {sig}", "passed"),
        "t::newskip": ("newly-skipped", "no GPU", "", "passed", "skipped: no GPU"),
        "t::unskip": ("skip-change", "no GPU", "skip words", "skipped: no GPU", "passed"),
        "t::notrun": ("not-run", "", "skip words", "skipped: no GPU", "skipped: no GPU"),
        "t::passed": ("passed", "", "", "passed", "passed"),
        "t::gone": ("not-run", "no GPU", "skip words", "skipped: no GPU", "not collected"),
        "t::xfail": ("passed", "", "", "xfailed", "xfailed"),
        "t::added_fail": ("regression", sig, "why\n  the read lacks it", "not collected", f"failed: {sig}"),
        "t::added_pass": ("passed", "", "", "not collected", "passed"),
        "t::added_skip": ("not-run", "no GPU", "", "not collected", "skipped: no GPU")}
    assert Verdict("t::a", "sm90", "passed", "passed", "passed").as_dict() == {
        "test": "t::a", "device": "sm90", "verdict": "passed", "base": "passed", "pr": "passed", "detail": "",
        "explanation": "", "base_reason": "", "pr_reason": ""}


def test_a_failure_the_rerun_did_not_reach_is_not_flaky() -> None:
    boom = _out("failed", message="E", frame="t.py:1")
    check = _check({"t::a": _out("passed")}, {"t::a": boom}, reruns={"pr": {"t::other": _out("passed")}})
    assert [v.verdict for v in check.verdicts] == ["regression"]
    check = _check({"t::a": boom}, {"t::a": _out("passed")}, reruns={"pr": {"t::a": _out("passed")}})
    assert [v.verdict for v in check.verdicts] == ["fixed"]  # the PR's rerun says nothing of the base's failure


def _pr_check(*checks: DeviceCheck, must_run: tuple[str, ...] = ()) -> PrCheck:
    return PrCheck("base-src", "pr-src", list(checks), [], must_run)


def test_exit_codes_and_must_run() -> None:
    boom = _out("failed", message="E", frame="t.py:1")
    clean = _check({"t::a": _out("passed")}, {"t::a": _out("passed"), "t::s": _out("skipped", reason="r")})
    assert _pr_check(clean).exit_code() == 0
    regressed = _check({"t::a": _out("passed")}, {"t::a": boom})
    assert _pr_check(clean, regressed).exit_code() == 1
    assert _pr_check(_check({"t::a": boom}, {"t::a": boom})).exit_code() == 0  # pre-existing only
    # a test that passes on base and skips on the PR: the PR stops running it there (a dispatch change
    # that sends the simulated B300 down a path the test does not cover skips it, fails nothing)
    lost = _check({"t::a": _out("passed")}, {"t::a": _out("skipped", reason="MHA_ONE_SHOT is not selected here")},
                  device="sm103", runs_as="sm103")
    assert [v.verdict for v in lost.verdicts] == ["newly-skipped"] and _pr_check(lost).exit_code() == 1
    unskipped = _check({"t::a": _out("skipped", reason="r")}, {"t::a": _out("passed")})
    assert [v.verdict for v in unskipped.verdicts] == ["skip-change"] and _pr_check(unskipped).exit_code() == 0
    clean.pr_gates = {"t::a": ("cuda",), "t::s": ("fa3",)}
    assert _pr_check(clean, must_run=("cuda",)).must_run_failures() == {}
    assert _pr_check(clean, must_run=("fa3", "aiter")).must_run_failures() == {
        "fa3": "no test behind it ran on any device in the PR runs",
        "aiter": "no test behind it ran on any device in the PR runs"}
    assert _pr_check(clean, must_run=("fa3",)).exit_code() == 1
    # a subtest's record names its pytest node id: its gates are its test's
    sub = _check({}, {"t::a [x]": _out("passed", pytest_nodeid="t::a")})
    sub.pr_gates = {"t::a": ("cuda",)}
    assert _pr_check(sub, must_run=("cuda",)).must_run_failures() == {}
    broken = _check({"t::a": _out("passed")}, {})
    broken.pr = Run("pr", "p", 2, 1.0)
    assert _pr_check(broken).unusable() == (["sm90 (simulated): the pr run (p) was interrupted (collection errors "
                                             "or Ctrl-C) (pytest exit 2)"], True)
    assert _pr_check(broken).exit_code() == 1
    empty = _check({}, {})
    empty.pr = Run("pr", "p", 5, 1.0)
    assert _pr_check(clean, empty).exit_code() == 2
    assert clean.label == "sm90 (simulated)" and _check({}, {}, runs_as="real").label == "sm90 (real)"


def test_rows_group_tests_by_device_and_signature_and_name_four() -> None:
    checks = [_check({}, {}, device="sm90"), _check({}, {}, device="sm100")]
    verdicts = [Verdict(f"t::{n}", "sm100", "regression", "passed", "failed", "E one") for n in range(6)]
    verdicts += [Verdict("t::x", "sm90", "regression", "passed", "failed", "E two",
                         explanation="first line\n  the second line \nthird"),
                 Verdict("t::y", "sm90", "regression", "passed", "failed", "E two", explanation="one line"),
                 Verdict("t::a", "sm90", "regression", "passed", "failed", "E one")]
    section = pr_check._section("Regressions", verdicts, _pr_check(*checks))
    assert [(r.test, r.where, r.signature) for r in section.rows] == [
        ("`t::a`", "sm90 (simulated)", "E one"),
        ("`t::x`", "sm90 (simulated)", "E two — the second line"),
        ("`t::y`", "sm90 (simulated)", "E two"),
        ("`t::0`, `t::1`, `t::2`, `t::3` and 2 more", "sm100 (simulated)", "E one")]
    assert section.note == "9 test x device in 4 row(s) (one per device and signature)"
    four = pr_check._rows(verdicts[:4], _pr_check(*checks))
    assert [r.test for r in four] == ["`t::0`, `t::1`, `t::2`, `t::3`"]
    assert pr_check._section("Fixed", [], _pr_check(*checks)).note == ""


@pytest.mark.parametrize(("detail", "path", "mock"), [
    ("AttributeError: model_runner.server_args.x is not in the dsakit role contract (role=target)",
     "server_args.x", "dsakit.MockModelRunner(role=target)"),
    ("AttributeError: model_runner.server_args.y is not in the dsakit role contract (role=target)",
     "server_args.x", None),
    ("AttributeError: 'FakeRunner' object has no attribute 'page_size'", "server_args.page_size", "FakeRunner"),
    ("AttributeError: 'FakeRunner' object has no attribute 'page_size'", "page_size", "FakeRunner"),
    ("AttributeError: 'FakeRunner' object has no attribute 'page'", "page_size", None),
    ("ValueError: boom", "page_size", None),
])
def test_the_mock_a_signature_says_lacks_a_read(detail: str, path: str, mock: str | None) -> None:
    assert pr_check._mock_lacking(detail, path) == mock


def test_failing_mocks_count_regressions_per_mock_file_and_device() -> None:
    lacks = "AttributeError: 'FakeRunner' object has no attribute 'page_size'"
    one = _check({}, {}, device="sm90")
    one.verdicts = [Verdict("a.py::t1", "sm90", "regression", "passed", "failed", lacks),
                    Verdict("a.py::t2", "sm90", "regression", "passed", "failed", lacks),
                    Verdict("b.py::t3", "sm90", "pre-existing", "failed", "failed", lacks),
                    Verdict("b.py::t4", "sm90", "regression", "passed", "failed", "ValueError")]
    two = _check({}, {}, device="sm100")
    two.verdicts = [Verdict("a.py::t1", "sm100", "regression", "passed", "failed", lacks)]
    changes = [pr_check.ReadChange("added", "page_size", "f", "x.py:3", "", breaks=("static",)),
               pr_check.ReadChange("removed", "page_size", "f", "x.py:3", ""),
               pr_check.ReadChange("guard-changed", "other", "f", "x.py:4", "")]
    result = pr_check.failing_mocks(changes, [one, two])
    assert result[0].breaks == ("static", "FakeRunner in a.py on sm90 (2 regressions), sm100 (1 regressions)")
    assert result[1] is changes[1] and result[2] is changes[2]


def test_read_changes_name_added_removed_and_re_guarded_reads() -> None:
    from types import SimpleNamespace

    def read(guard: str, site: str) -> Any:
        return SimpleNamespace(guard=guard, site=site)

    base = {("a", "f"): [read("", "x.py:1")], ("b", "g"): [read("is_cuda()", "x.py:2"), read("", "x.py:5")],
            ("c", "h"): [read("", "x.py:3")]}
    pr = {("a", "f"): [read("", "x.py:1")], ("b", "g"): [read("is_hip()", "x.py:2")], ("d", "k"): [read("", "x.py:4")]}
    changes = pr_check.read_changes(base, pr, ["sm90", "mi300"])
    assert [(c.kind, c.path, c.function, c.site, c.guard, c.before) for c in changes] == [
        ("guard-changed", "b", "g", "x.py:2", "is_hip()", "always or is_cuda()"),
        ("added", "d", "k", "x.py:4", "", ""),
        ("removed", "c", "h", "x.py:3", "", "")]
    assert changes[0].fires_on == ("mi300",) and changes[1].fires_on == ("sm90", "mi300")
    assert changes[2].as_dict() == {"kind": "removed", "path": "c", "function": "h", "site": "x.py:3", "guard": "",
                                    "before": "", "fires_on": [], "breaks": []}


def test_the_json_counts_each_verdict_and_names_the_runs() -> None:
    boom = _out("failed", message="E", frame="t.py:1")
    check = _check({"t::a": _out("passed"), "t::b": boom}, {"t::a": boom, "t::b": boom})
    check.pr.sglang = {"version": "0.5.23"}  # type: ignore[union-attr]
    data = pr_check.as_json(_pr_check(check, must_run=("cuda",)))
    assert data["counts"] == {"regression": 1, "newly-skipped": 0, "flaky": 0, "pre-existing": 1, "fixed": 0, "not-run": 0,
                              "skip-change": 0, "passed": 0}
    assert data["devices"] == [{"device": "sm90", "runs_as": "sm90", "label": "sm90 (simulated)", "base_exit": 0,
                                "pr_exit": 0, "sglang": {"base": {}, "pr": {"version": "0.5.23"}}}]
    assert data["must_run"] == {"codes": ["cuda"], "failed": {"cuda": "no test behind it ran on any device in the PR runs"}}
    assert (data["base"], data["pr"], data["exit"], data["unusable_runs"], data["why"]) == (
        "base-src", "pr-src", 1, [], [])
    assert [v["test"] for v in data["verdicts"]] == ["t::a", "t::b"]


def _everything() -> PrCheck:
    boom = _out("failed", message="ValueError: boom", frame="t.py:3", explained="why\n  the read lacks it")
    old = _out("failed", message="KeyError: 'k'", frame="t.py:9")
    skip = _out("skipped", reason="[cuda] no GPU")
    a = _check({"t::reg": _out("passed"), "t::pre": old, "t::flaky": _out("passed"), "t::fixed": old,
                  "t::lost": _out("passed"), "t::chg": skip, "t::nr": skip},
                 {"t::reg": boom, "t::pre": old, "t::flaky": boom, "t::fixed": _out("passed"),
                  "t::lost": _out("skipped", reason="[fa3] FA3 needs SM 9.x"), "t::chg": _out("passed"),
                  "t::nr": skip},
                 device="sm90", runs_as="real", reruns={"pr": {"t::flaky": _out("passed")}})
    b = _check({"t::reg": _out("passed"), "t::nr": skip}, {"t::reg": boom, "t::nr": skip}, device="sm100")
    assert a.base is not None and a.pr is not None and b.pr is not None
    a.base.env = {"python": "3.12", "packages": {"torch": "2.1"}}
    a.pr.env = {"python": "3.12", "packages": {"torch": "2.2"}}
    b.pr = Run("pr", "p", 2, 1.0, tests=b.pr.tests)
    reads = [pr_check.ReadChange("added", "server_args.x", "init", "a.py:3", "is_cuda()", fires_on=("sm90", "sm100"),
                                 breaks=("FakeRunner in t.py on sm90 (1 regressions)", "static")),
             pr_check.ReadChange("guard-changed", "page_size", "forward", "b.py:7", "", "is_hip()"),
             pr_check.ReadChange("added", "y", "f", "c.py:1", ""),
             pr_check.ReadChange("removed", "z", "g", "d.py:2", "")]
    return pr_check.PrCheck("base-src", "pr-src", [a, b], reads, ("aiter",))


def test_the_pr_comment_of_every_kind_of_finding() -> None:
    from dsakit.compare import markdown

    assert markdown.render(pr_check.comment(_everything())).split("\n") == [
        '## dsakit pr-check',
        '',
        '- base `base-src`, PR `pr-src` on sm90 (real), sm100 (simulated)',
        '- test x device: 2 regression, 1 newly-skipped, 1 flaky, 1 pre-existing, 1 fixed, 2 not-run, 1 skip-change',
        '- must-run gate `aiter`: no test behind it ran on any device in the PR runs',
        '- **sm100 (simulated): the pr run (p) was interrupted (collection errors or Ctrl-C) (pytest exit 2)** (the PR breaks the selection: a regression)',
        '- sm90 (real): the two runs differ in environment: torch: base 2.1 vs pr 2.2',
        "- why these skipped on sm90 (real), PR run: cuda needs an NVIDIA GPU (CUDA) (1); fa3 needs exactly SM 9.x on NVIDIA (Hopper) with sgl_kernel's flash_ops extension (1)",
        '- why these skipped on sm100 (simulated), PR run: cuda needs an NVIDIA GPU (CUDA) (1)',
        '',
        '### Regressions (pass on base, fail on the PR) (2)',
        '',
        '2 test x device in 2 row(s) (one per device and signature)',
        '',
        '| test | where | signature |',
        '|---|---|---|',
        '| `t::reg` | sm90 (real) | `ValueError: boom @ t.py — the read lacks it` |',
        '| `t::reg` | sm100 (simulated) | `ValueError: boom @ t.py — the read lacks it` |',
        '',
        '### model_runner reads the PR adds or re-guards, and the mocks they break',
        '',
        '| change | read | site | guard | fires on | mocks that lack it |',
        '|---|---|---|---|---|---|',
        '| added | model_runner.server_args.x in init | a.py:3 | is_cuda() | sm90, sm100 | FakeRunner in t.py on sm90 (1 regressions); static |',
        '| guard-changed | model_runner.page_size in forward | b.py:7 | always (was: is_hip()) | - | none in the selection |',
        '| added | model_runner.y in f | c.py:1 | always | - | none in the selection |',
        '',
        '### model_runner reads the PR removes',
        '',
        '| read | site |',
        '|---|---|',
        '| model_runner.z in g | d.py:2 |',
        '',
        '### Newly skipped (pass on base, skip on the PR: the PR stops running them there), by device and skip reason (1)',
        '',
        '1 test x device in 1 row(s) (one per device and signature)',
        '',
        '| test | where | signature |',
        '|---|---|---|',
        '| `t::lost` | sm90 (real) | `[fa3] FA3 needs SM 9.x` |',
        '',
        '### Pre-existing failures (fail on base and PR), by device and signature (1)',
        '',
        '1 test x device in 1 row(s) (one per device and signature)',
        '',
        '| test | where | signature |',
        '|---|---|---|',
        "| `t::pre` | sm90 (real) | `KeyError: 'k' @ t.py` |",
        '',
        '### Flaky or order-dependent (passed when the failures were rerun alone) (1)',
        '',
        '1 test x device in 1 row(s) (one per device and signature)',
        '',
        '| test | where | signature |',
        '|---|---|---|',
        '| `t::flaky` | sm90 (real) | `ValueError: boom @ t.py — the read lacks it` |',
        '',
        '### Fixed by the PR (1)',
        '',
        '1 test x device in 1 row(s) (one per device and signature)',
        '',
        '| test | where | signature |',
        '|---|---|---|',
        "| `t::fixed` | sm90 (real) | `was: KeyError: 'k' @ t.py` |",
        '',
        '### Skips by reason code (1)',
        '',
        '| code | skips | skipped on | runs on | covered on | reason |',
        '|---|---|---|---|---|---|',
        '| `cuda` | 2 | sm90 (real), sm100 (simulated) | sm90 (real here: sm90 (real)), sm100 (only simulated here), sm103, sm120 (no node here) | no device | no GPU |',
        '',
        '<details><summary>Tests that ran on no node (1)</summary>',
        '',
        '- `cuda` (1): `t::nr`',
        '',
        '</details>',
        '',
        '### Skip changes (1): skipped on one tree only, or for another reason',
        '',
        '| test | device | base | PR |',
        '|---|---|---|---|',
        '| `t::chg` | sm90 (real) | skipped: [cuda] no GPU | passed |',
        '',
    ]


def test_a_test_the_pr_no_longer_collects_passed_on_base_is_passed_not_not_run() -> None:
    check = _check({"t::gone": _out("passed"), "t::gone_skip": _out("skipped", reason="r")}, {})
    assert [(v.test, v.verdict) for v in check.verdicts] == [("t::gone", "passed"), ("t::gone_skip", "not-run")]


def test_runs_that_compared_nothing_on_several_devices() -> None:
    broken, fine, empty = _check({}, {}, device="sm90"), _check({}, {}, device="sm100"), _check({}, {}, device="sm103")
    broken.pr = Run("pr", "p", 2, 1.0)
    empty.pr = Run("pr", "p", 5, 1.0)
    assert _pr_check(broken, fine, empty).unusable() == ([
        "sm90 (simulated): the pr run (p) was interrupted (collection errors or Ctrl-C) (pytest exit 2)",
        "sm103 (simulated): the pr run (p) collected no tests (pytest exit 5)"], True)
    assert _pr_check().unusable() == ([], False)


def test_rows_name_the_second_line_of_a_two_line_explanation_and_five_tests_as_four_and_one_more() -> None:
    checks = [_check({}, {}, device="sm90")]
    verdicts = [Verdict("t::x", "sm90", "regression", "passed", "failed", "E", explanation="first\n  second ")]
    assert [r.signature for r in pr_check._rows(verdicts, _pr_check(*checks))] == ["E — second"]
    five = [Verdict(f"t::{n}", "sm90", "regression", "passed", "failed", "E") for n in range(5)]
    assert [r.test for r in pr_check._rows(five, _pr_check(*checks))] == ["`t::0`, `t::1`, `t::2`, `t::3` and 1 more"]


def test_a_read_change_lists_where_it_fires_and_what_it_breaks_and_names_its_first_read() -> None:
    from types import SimpleNamespace

    change = pr_check.ReadChange("added", "p", "f", "x.py:1", "g", "", ("sm90",), ("m",))
    assert change.as_dict()["fires_on"] == ["sm90"] and change.as_dict()["breaks"] == ["m"]

    def read(guard: str, site: str) -> Any:
        return SimpleNamespace(guard=guard, site=site)

    base = {("gone", "f"): [read("is_cuda()", "x.py:1"), read("", "x.py:9")]}
    pr = {("new", "f"): [read("is_hip()", "y.py:2"), read("", "y.py:8")]}
    changes = pr_check.read_changes(base, pr, ["sm90"])
    assert [(c.kind, c.site, c.guard) for c in changes] == [("added", "y.py:2", "is_hip()"),
                                                           ("removed", "x.py:1", "is_cuda()")]


def test_tests_that_ran_on_no_device_group_each_test_x_device_once() -> None:
    skip = _out("skipped", reason="[cuda] no GPU")
    plain = _out("skipped", reason="just skipped")
    one = _check({}, {"t::c1": skip, "t::c2": skip, "t::u1": plain, "t::u2": plain, "t::ran": skip}, device="sm90")
    two = _check({"t::ran": _out("passed")}, {"t::ran": _out("passed"), "t::c1": skip}, device="sm100")
    groups = pr_check._not_run_groups(_pr_check(one, two))
    assert [(g.code, g.skipped, g.skipped_on, g.covered_on, g.uncovered, g.messages) for g in groups] == [
        ("cuda", 3, "sm90 (simulated), sm100 (simulated)", "no device", ("t::c1", "t::c2"), ()),
        ("uncoded", 2, "sm90 (simulated)", "no device", ("t::u1", "t::u2"), (("just skipped", 2),))]
    data = pr_check.as_json(_pr_check(one, two))
    assert data["reads"] == [] and data["why"] == [
        "why these skipped on sm90 (simulated), PR run: cuda needs an NVIDIA GPU (CUDA) (3); not explained "
        "(2: 'just skipped' x2)",
        "why these skipped on sm100 (simulated), PR run: cuda needs an NVIDIA GPU (CUDA) (1)"]
    changed = _pr_check(one)
    changed.reads = [pr_check.ReadChange("removed", "z", "g", "d.py:2", "")]
    assert pr_check.as_json(changed)["reads"] == [{"kind": "removed", "path": "z", "function": "g", "site": "d.py:2",
                                                   "guard": "", "before": "", "fires_on": [], "breaks": []}]


def test_the_comment_names_four_tests_per_not_run_group() -> None:
    from dsakit.compare import markdown

    skip = _out("skipped", reason="[cuda] no GPU")
    check = _check({}, {f"t::c{n}": skip for n in range(6)}, device="sm90")
    md = markdown.render(pr_check.comment(_pr_check(check)))
    assert "- `cuda` (6): `t::c0`, `t::c1`, `t::c2`, `t::c3`, ... and 2 more" in md.splitlines()


def test_the_comments_summary_when_nothing_ran_and_both_runs_broke() -> None:
    check = _check({}, {})
    assert check.base is not None and check.pr is not None
    check.base = Run("base", "b", 5, 1.0, env={"python": "3.12", "device": "cpu"})
    check.pr = Run("pr", "p", 5, 1.0, env={"python": "3.13", "device": "sm90"})
    summary = pr_check.comment(_pr_check(check)).summary
    assert summary == [
        "base `base-src`, PR `pr-src` on sm90 (simulated)",
        "test x device: no test ran",
        "**sm90 (simulated): the base run (b) collected no tests (pytest exit 5)**",
        "**sm90 (simulated): the pr run (p) collected no tests (pytest exit 5)**",
        "sm90 (simulated): the two runs differ in environment: python: base '3.12' vs pr '3.13'; device: base 'cpu' "
        "vs pr 'sm90'"]


def test_a_not_run_group_with_two_notes_names_both() -> None:
    """Two of SGLang's TileLang messages classify under one code with different notes ("where
    tilelang is installed", "no device: ..."): the group's where-it-runs names both (the last real
    survivor of the mutation run's pr_check group, bench/notes/2026-12-02-mutation-testing.md 'Round 2')."""
    unavailable = _out("skipped", reason="tilelang_kernel unavailable: No module named 'tilelang'")
    fixture = _out("skipped", reason="DSA tilelang decode requires topk=2048; the shared sparse fixture uses topk=128.")
    check = _check({}, {"t::a": unavailable, "t::b": fixture}, device="sm90")
    assert check.pr is not None
    check.pr.sglang = {"version": "0.5.21"}  # SGLang's messages are classified per release
    [group] = pr_check._not_run_groups(_pr_check(check))
    assert group.code == "module:tilelang"
    assert "where tilelang is installed; no device: " in group.runs_on, group.runs_on
