"""The skip inventory: every skip pytest counts (subtests too), each once, grouped by its cause.

Owns: recording skips (on the xdist controller too, from every forwarded report, so a crashed
worker's skips stay: read at the end of the run from the reports pytest's terminal reporter keeps,
or per report where every outcome is recorded) and declared gates, the xdist hand-over, the
"dsakit skip inventory" section, the `--dsakit-report` JSON (format `REPORT_FORMAT`: node identity,
every test's and subtest's outcome, gates and skip cause, the skip groups and paragraph),
`--dsakit-must-run` and the header line. What a skip's cause is and how skips group:
`dsakit.gates.skip_causes`, read at the end of the run only. Never imports torch or SGLang (the
device lazily).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dsakit.gates.device_model import DeviceModel
    from dsakit.gates.skip_causes import CauseGroup
    from dsakit.gates.outcomes import OutcomeRecorder
    from dsakit.reasons import Reason

# the key in pytest's final summary line ("1 passed, 2 --dsakit-must-run gate(s) failed in 3s"); it
# starts with "--" so that tools parsing "N word" outcomes (pytester, CI log scrapers) do not count
# it as failed tests
MUST_RUN_STAT = "--dsakit-must-run gate(s) failed"

# The `--dsakit-report` file: `format` names it, `format_version` says which fields it has
# (1: device, sglang, gates, must_run; 2 adds host, shard and per-test outcomes and gates; 3 counts
# skips as pytest does: subtests with their own records, each skip's cause with where it runs, the
# skip groups and the "why these skipped" paragraph, instead of 2's skipped test ids per gate code).
REPORT_KIND = "dsakit-report"
REPORT_FORMAT = 3

# "[code] sentence" as written by `format_reasons` and by every dsakit Reason (gates, invalid
# matrix cells, unsupported kernel shapes): codes are lower-case slugs starting with a letter, or a
# capability expression in its canonical form (dsakit.gates.table.parse_expression), which an xdist
# controller reads back from the forwarded message before the worker's own record arrives.
_CODE = r"sm(?:>=|==|~)\d+(?:\.\d+)?|gfx in gfx[0-9a-f]+(?:,gfx[0-9a-f]+)*|[a-z][a-z0-9:_.\-]*"
_CODE_IN_MESSAGE = rf"\[({_CODE})\] ([^|]*)"  # compiled on first use (re caches it): not in every session


def format_reasons(reasons: Iterable[Reason]) -> str:
    """The skip message for closed gates: each reason as '[code] sentence', joined by ' | '."""
    return " | ".join(str(reason) for reason in reasons)


def reasons_from_message(message: str) -> list[Reason]:
    """Reasons back from a skip message written by `format_reasons` (empty for other skips: it
    starts with its first "[code] ")."""
    from dsakit.reasons import Reason

    text = message.removeprefix("Skipped: ").lstrip()
    if not re.match(_CODE_IN_MESSAGE, text):
        return []
    return [Reason(code, sentence.strip()) for code, sentence in re.findall(_CODE_IN_MESSAGE, text)]


def _skip_message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


class Skip:
    """One skip as pytest counted it: a test's (setup, call or teardown) or a subtest's. A plain
    class: a dataclass compiles its methods when the module loads, which every pytest session would
    pay (bench/bench_kit_overhead.py)."""

    __slots__ = ("test", "nodeid", "message", "reasons")

    def __init__(self, test: str, nodeid: str, message: str, reasons: tuple[Reason, ...]) -> None:
        self.test = test  # the test id, or a subtest's (dsakit.gates.outcomes.subtest_id)
        self.nodeid = nodeid
        self.message = message  # as written, without pytest's "Skipped: "
        self.reasons = reasons  # dsakit's reasons (planned, or read back from the message); () for others

    def __repr__(self) -> str:
        return f"Skip(test={self.test!r}, message={self.message!r}, reasons={self.reasons!r})"


class MustRunFailure:
    """A `--dsakit-must-run` gate whose tests skipped, as an entry of the terminal reporter's `stats`
    (counted in pytest's final line). An object with an instance dict, like a report: plugins read
    every entry so (Hypothesis's summary reads `entry.__dict__`; a plain string there crashed the end
    of the run on a node with Hypothesis installed)."""

    def __init__(self, code: str, tests: list[str]) -> None:
        self.code = code
        self.tests = tests

    def __repr__(self) -> str:
        return f"MustRunFailure(code={self.code!r}, tests={self.tests!r})"


class SkipInventory:
    """The skips of one process (or, on the xdist controller, of all workers: their reports are
    forwarded to it as they happen), each counted once, as pytest counts them."""

    def __init__(self) -> None:
        self.planned: dict[str, tuple[Reason, ...]] = {}
        self.skips: list[Skip] = []
        # test id -> gate codes it declared, open or closed; unknown (None) on an xdist controller
        # until a worker hands its collection over (the controller collects nothing)
        self.declared: dict[str, list[str]] | None = {}
        # a collected test uses a dsakit gate, marker or fixture (here or in a worker): only then
        # are "[code] ..." skips dsakit's business (a plain pytest.skip may look the same)
        self.used = False

    def declare(self, nodeid: str, codes: Iterable[str]) -> None:
        """A collected test (or a `require` call) sits behind these gate codes."""
        self.used = True
        declared = self.declared if self.declared is not None else {}
        entry = declared.get(nodeid)
        if entry is None:
            declared[nodeid] = list(dict.fromkeys(codes))
        else:
            entry.extend(code for code in codes if code not in entry)
        self.declared = declared

    def keep_declared(self, selected: Iterable[str]) -> None:
        """After deselection (-k, -m, pytest-split): only the selected tests sit behind gates."""
        if self.declared is not None:
            keep = set(selected)
            self.declared = {nodeid: codes for nodeid, codes in self.declared.items() if nodeid in keep}

    def plan(self, nodeid: str, reasons: Iterable[Reason]) -> None:
        """Closed gates known for a test before it runs (collection markers, `require`)."""
        self.used = True
        self.planned[nodeid] = tuple(reasons)

    def add(self, nodeid: str, reasons: Iterable[Reason]) -> None:
        reasons = tuple(reasons)
        self.skips.append(Skip(nodeid, nodeid, format_reasons(reasons), reasons))

    def record(self, report: pytest.TestReport) -> None:
        """A skipped phase report (pytest's "skipped" count: any phase, subtests too, not xfails)."""
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        message = _skip_message(report).removeprefix("Skipped: ").strip()
        context = getattr(report, "context", None)  # pytest's SubtestReport
        if context is None:
            test = report.nodeid
            reasons = self.planned.get(test) or tuple(reasons_from_message(message))
        else:  # a test's planned gates are not its subtests' reasons
            from dsakit.gates.outcomes import subtest_id

            test = subtest_id(report.nodeid, context)
            reasons = tuple(reasons_from_message(message))
        self.skips.append(Skip(test, report.nodeid, message, reasons))

    def record_kept(self, kept: dict[Any, list[Any]]) -> None:
        """Every skipped test phase among the reports a terminal reporter kept (its `stats`: each
        report once, under its category), in the order they were kept within a category."""
        for reports in list(kept.values()):
            for report in reports:
                if isinstance(report, pytest.TestReport) and report.skipped:
                    self.record(report)

    def add_planned(self, selected: Iterable[str]) -> None:
        """Collect-only runs: count what collection decided would skip, for the selected tests only
        (gates are applied before pytest-split deselects another shard's tests)."""
        for nodeid in selected:
            if nodeid in self.planned:
                self.add(nodeid, self.planned[nodeid])

    def worker_data(self) -> dict[str, Any]:
        """What a worker hands the controller at its end: what its tests declared (the controller
        collects nothing). Its skips reach the controller report by report, as they happen."""
        return {"declared": self.declared or {}, "used": self.used}

    def merge(self, data: dict[str, Any]) -> None:
        """A worker's `worker_data()`."""
        self.used = self.used or bool(data.get("used"))
        for nodeid, codes in data["declared"].items():
            self.declare(nodeid, codes)

    @property
    def gated(self) -> bool:
        """Something skipped behind a dsakit reason code in a run that uses dsakit."""
        return self.used and any(skip.reasons for skip in self.skips)

    def skipped_behind(self, codes: Iterable[str]) -> dict[str, list[str]]:
        """Per code, the tests a skip behind it (any of its closed gates) hit, each once."""
        behind: dict[str, list[str]] = {}
        wanted = set(codes)
        for skip in self.skips:
            for reason in skip.reasons:
                if reason.code in wanted:
                    tests = behind.setdefault(reason.code, [])
                    if skip.test not in tests:
                        tests.append(skip.test)
        return {code: behind[code] for code in codes if code in behind}

    def without_tests(self, codes: Iterable[str]) -> list[str]:
        """Codes no collected test sits behind (nothing for --dsakit-must-run to check); empty when
        unknown (an xdist run whose workers all died before reporting)."""
        if self.declared is None:
            return []
        behind = {code for codes in self.declared.values() for code in codes}
        behind.update(reason.code for skip in self.skips for reason in skip.reasons)
        return [code for code in codes if code not in behind]


def host_label(option: str | None) -> str:
    """The node's name in merged reports: the run's `dsakit_host_label` (`--dsakit-host-label`,
    $DSAKIT_HOST_LABEL or the ini key, read once by the option table), else the hostname."""
    label = (option or "").strip()
    if label:
        return label
    import socket

    return socket.gethostname()


def shard_of(config: pytest.Config) -> dict[str, int] | None:
    """pytest-split's `--group K --splits N` of this run, when it splits."""
    group, splits = getattr(config.option, "group", None), getattr(config.option, "splits", None)
    if isinstance(group, int) and isinstance(splits, int):
        return {"group": group, "splits": splits}
    return None


def _device_text(device: DeviceModel) -> str:
    """The description, marked [real] or (already) [simulated KEY]."""
    return device.describe() if device.simulated else f"{device.describe()} [real]"


def _sglang_version() -> str | None:
    from dsakit.errors import UsageError
    from dsakit.stack.sglang_release import installed_release

    try:
        return installed_release().version
    except UsageError:
        return None


def header_line(device: DeviceModel) -> str:
    return f"dsakit: device {_device_text(device)}; SGLang {_sglang_version() or 'not installed'}"


class InventoryReporter:
    """The run's skip inventory as the end of the run shows it, a part of the run's DsakitSession:
    the header line, the summary section, a worker's hand-over and its merge; `--dsakit-report` and
    `--dsakit-must-run` at the end of the session (`SkipRecorder` hands it each report)."""

    def __init__(
        self,
        config: pytest.Config,
        inventory: SkipInventory,
        device: Callable[[], DeviceModel],
        must_run: tuple[str, ...],
        report_path: str | None,
        host: str = "",
        must_run_strict: bool = False,
        announce: bool = True,
    ) -> None:
        self.config = config
        self.inventory = inventory
        self.device = device
        self.must_run = must_run
        self.must_run_strict = must_run_strict
        self.announce = announce  # the header line: only where the run set a dsakit option
        self.report_path = report_path
        self.host = host
        self.failures: dict[str, list[str]] = {}
        self.untested: list[str] = []  # must-run codes with no collected test behind them
        self.report_error: str | None = None
        self._recorder: OutcomeRecorder | None = None  # made when the first outcome is recorded
        # the skips are read at the end from the reports the terminal reporter kept (else each report
        # is handed to `log_report` as it happens, or the run does not use dsakit)
        self.reads_kept_reports = False
        self.selected: list[str] = []
        self.is_worker = hasattr(config, "workerinput")
        # the report's sections other parts of the run own, by key (the simulation's device branches)
        self.sections: dict[str, Callable[[], Any]] = {}

    @property
    def recorder(self) -> OutcomeRecorder:
        """Every test's outcome record (controller side, --dsakit-report only)."""
        if self._recorder is None:
            from dsakit.gates.outcomes import OutcomeRecorder

            self._recorder = OutcomeRecorder()
        return self._recorder

    @property
    def records_every_outcome(self) -> bool:
        """`--dsakit-report` on a controller or a single process: every test's outcome, report by
        report (a worker's reports reach its controller, which records them)."""
        return bool(self.report_path) and not self.is_worker

    def header_lines(self) -> list[str]:
        # a run that set no dsakit option gets no line (and no device probe) at start-up; the
        # inventory section names the device once a gate skipped something
        return [header_line(self.device())] if self.announce else []

    def log_report(self, report: pytest.TestReport) -> None:
        """One test phase's report (`SkipRecorder` hands each one here)."""
        # On the xdist controller every worker report arrives here as it happens (it carries
        # `node`): recording it here keeps the skips of a worker that dies later, and of a run
        # interrupted with Ctrl-C, whose workeroutput never arrives.
        self.inventory.record(report)
        if self.records_every_outcome:
            # every test's outcome, from this process's reports and the workers' that arrive here
            self.recorder.record(report)

    def collection_finish(self, session: pytest.Session) -> None:
        self.selected = [item.nodeid for item in session.items]
        self.inventory.keep_declared(self.selected)

    def worker_output(self) -> dict[str, Any]:
        """What a worker's tests declared (the controller collects nothing)."""
        return self.inventory.worker_data()

    def merge(self, data: dict[str, Any]) -> None:
        self.inventory.merge(data)

    def sessionfinish(self, session: pytest.Session) -> None:
        """Late in pytest_sessionfinish (trylast): the must-run verdict and the report (a worker's
        tests are judged by its controller)."""
        if self.is_worker:
            return
        if self.reads_kept_reports:
            self.reads_kept_reports = False  # read once
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            self.inventory.record_kept(getattr(terminal, "stats", {}))
        if self.config.option.collectonly:
            self.inventory.add_planned(self.selected)
        self.failures = self.inventory.skipped_behind(self.must_run)
        if session.exitstatus != pytest.ExitCode.INTERRUPTED:
            self.untested = self.inventory.without_tests(self.must_run)
        failing = self.failures or (self.untested and self.must_run_strict)
        if failing and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.failures and terminal is not None:
            # counted in pytest's final line, which the terminal reporter writes after this
            # trylast hook
            terminal.stats.setdefault(MUST_RUN_STAT, []).extend(
                MustRunFailure(code, tests) for code, tests in self.failures.items())
        if self.report_path:
            self.write_report(self.report_path)
            if self.report_error and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.USAGE_ERROR  # a requested output is missing

    def device_key(self) -> str:
        """The device table's entry this run's device is (simulated, or matched by arch)."""
        from dsakit.gates.skip_causes import table_key

        device = self.device()
        return table_key(device.as_dict()) or device.key

    def where(self) -> str:
        """The run's device as the paragraph names it: `sm103 (simulated)`, `sm90 (real)`."""
        return f"{self.device_key()} ({'simulated' if self.device().simulated else 'real'})"

    def cause_groups(self) -> list[CauseGroup]:
        """Every skip once, grouped by its cause (classified here, at the end: nothing per test)."""
        from dsakit.gates.skip_causes import explain, group_causes

        release, key = _sglang_version(), self.device_key()
        return group_causes((skip.test, explain(skip.message, skip.reasons, release, key))
                            for skip in self.inventory.skips)

    def as_json(self) -> dict[str, Any]:
        from dsakit.gates.skip_causes import why_paragraph

        device = self.device()
        groups = self.cause_groups()
        tests, subtests = self.tests_json()
        return {
            "format": REPORT_KIND,
            "format_version": REPORT_FORMAT,
            "host": self.host,
            "shard": shard_of(self.config),
            "device": {**device.as_dict(), "table_key": self.device_key()},
            "sglang": _sglang_version(),
            "collect_only": bool(self.config.option.collectonly),
            "skips": {"total": len(self.inventory.skips), "groups": [g.as_dict() for g in groups],
                      "why": why_paragraph(groups, self.where())},
            "must_run": {"codes": list(self.must_run), "failed": self.failures,
                         "no_test_behind": self.untested, "strict": self.must_run_strict},
            "tests": tests,
            "subtests": subtests,
            **{name: section() for name, section in self.sections.items()},
        }

    def tests_json(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """Per test id: outcome, the gates it declared, its skip's cause (then the other closed
        gates) or failure signature; per subtest id the same, with its test (`test`)."""
        from dsakit.gates.skip_causes import explain
        from dsakit.gates.outcomes import FAILING, signature

        release, key = _sglang_version(), self.device_key()
        declared = self.inventory.declared or {}

        def entry(record: dict[str, Any], planned: tuple[Reason, ...]) -> dict[str, Any]:
            result: dict[str, Any] = {"outcome": record["outcome"]}
            if record["outcome"] == "skipped":
                reasons = planned or tuple(reasons_from_message(record["reason"]))
                cause = explain(record["reason"], reasons, release, key)
                result["reasons"] = [cause.as_dict(), *(r.as_dict() for r in reasons[1:])]
            elif record["outcome"] in FAILING:
                result["signature"] = signature(record)
            return result

        tests = {nodeid: {**entry(record, self.inventory.planned.get(nodeid, ())),
                          "gates": list(declared.get(nodeid, ()))}
                 for nodeid, record in self.recorder.outcomes.items()}
        subtests = {sub: {"test": record["subtest_of"], **entry(record, ())}
                    for sub, record in self.recorder.subtests.items()}
        return tests, subtests

    def write_report(self, path: str) -> None:
        """Through dsakit's one output writer (atomic, never replacing a special file); a path
        that turned unwritable since configure is named in the summary and fails the run."""
        from dsakit.errors import UsageError
        from dsakit.output_paths import OutputError, output_file

        try:
            output_file(path, "--dsakit-report").write_json(self.as_json())
        except OutputError as error:
            self.report_error = str(error)
        except UsageError as error:  # the path itself changed since configure
            self.report_error = f"not written at the end of the run: {error}"

    def summary(self, terminalreporter: Any) -> None:
        config = self.config
        # a plain pytest.skip is not dsakit's business: it is listed (as uncoded) only in a run where
        # something skipped behind a dsakit reason code
        if self.is_worker or not (self.inventory.gated or self.announce or self.must_run or self.report_error):
            return
        if not self.inventory.skips and not self.must_run and not self.report_error:
            return
        device = self.device()
        terminalreporter.section("dsakit skip inventory")
        terminalreporter.write_line(
            f"device: {_device_text(device)}; SGLang {_sglang_version() or 'not installed'}"
        )
        if config.option.collectonly:
            terminalreporter.write_line("collect-only: skips decided at collection")
        elif self.inventory.skips:
            terminalreporter.write_line(self._count_line(len(terminalreporter.stats.get("skipped", ()))))
        if not self.inventory.skips:
            terminalreporter.write_line("no test skipped behind a dsakit gate")
        groups = self.cause_groups() if self.inventory.skips else []
        for group in groups:
            self._write_group(terminalreporter, group, verbose=config.option.verbose > 0)
        if groups:
            from dsakit.gates.skip_causes import why_paragraph

            terminalreporter.write_line(why_paragraph(groups, self.where()))
        for code, tests in self.failures.items():
            terminalreporter.write_line(
                f"dsakit: --dsakit-must-run {code}: {len(tests)} test(s) behind gate {code} skipped: "
                + ", ".join(tests),
                red=True,
            )
        for code in self.untested:
            verdict = ("fails the run (--dsakit-must-run-strict)" if self.must_run_strict else
                       "nothing to check; --dsakit-must-run-strict makes this fail the run")
            terminalreporter.write_line(
                f"dsakit: --dsakit-must-run {code}: no collected test sits behind gate {code}: {verdict}",
                red=self.must_run_strict, yellow=not self.must_run_strict,
            )
        if self.report_error:
            terminalreporter.write_line(f"dsakit: {self.report_error}", red=True)

    def _count_line(self, counted: int) -> str:
        """The inventory's total beside pytest's own count of skipped (its final line)."""
        total = len(self.inventory.skips)
        line = f"{total} skip{'' if total == 1 else 's'}, each in one group below (pytest counts {counted} skipped"
        subtests = sum(1 for skip in self.inventory.skips if skip.test != skip.nodeid)
        if counted != total and counted == total - subtests:
            # pytest's subtests report a skipped subtest as nothing at verbosity 0 (_pytest/subtests.py)
            line += (f": at this verbosity it leaves out the {subtests} skipped subtests; -q, -v or "
                     "-o verbosity_subtests=1 count them")
        return line + ")"

    @staticmethod
    def _write_group(terminalreporter: Any, group: CauseGroup, *, verbose: bool) -> None:
        """The group's count, code and representative reason, where it runs; an uncoded group's
        messages verbatim; with -v every test (under its message where the group has several)."""
        from dsakit.gates.skip_causes import UNCODED

        indent = " " * 11
        terminalreporter.write_line(f"{group.count:4d} skipped  [{group.code}] {group.reason}")
        where = f"{indent}runs on: {group.runs_on_text()}"
        if group.also:
            where += "; also closed: " + ", ".join(f"{code} ({n})" for code, n in group.also.items())
        terminalreporter.write_line(where)
        several = len(group.messages) > 1
        for message, count in group.messages.most_common():
            if group.code == UNCODED or (several and verbose):
                terminalreporter.write_line(f"{indent}{count:3d}x {message}")
            if verbose:
                for test in group.by_message[message]:
                    terminalreporter.write_line(f"{indent}{'    ' if several else ''}{test}")


class SkipRecorder:
    """The reporter's one per-test hook, registered only where the run uses dsakit (a dsakit
    option, a collected test using a dsakit fixture, marker or gate, a `require()` call) and
    records every outcome (`--dsakit-report`), or where no terminal reporter keeps the reports (`-p
    no:terminal`); else the skips are read from the terminal reporter's at the end of the run: a
    run pays no dsakit hook call per test phase (bench/bench_kit_overhead.py)."""

    def __init__(self, reporter: InventoryReporter) -> None:
        self.reporter = reporter
        # every report only where `--dsakit-report` records each outcome; else only skips concern
        # the inventory, and a passed or failed phase costs one comparison
        self.every_outcome = reporter.records_every_outcome

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.every_outcome or report.outcome == "skipped":
            self.reporter.log_report(report)
