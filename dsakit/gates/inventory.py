"""The skip inventory: every skip grouped by its reason code ("uncoded" for bare skips), with counts.

Owns: recording skips (on the xdist controller too, from every forwarded report, so a crashed
worker's skips stay) and declared gates, the xdist hand-over, the "dsakit skip inventory" section,
the `--dsakit-report` JSON (format `REPORT_FORMAT`: node identity, every test's outcome and gates),
`--dsakit-must-run` and the header line. Never imports torch or SGLang (the device lazily).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dsakit.gates.device_model import DeviceModel
    from dsakit.outcomes import OutcomeRecorder
    from dsakit.reasons import Reason

WORKER_KEY = "dsakit_skip_inventory"
# the key in pytest's final summary line ("1 passed, 2 --dsakit-must-run gate(s) failed in 3s"); it
# starts with "--" so that tools parsing "N word" outcomes (pytester, CI log scrapers) do not count
# it as failed tests
MUST_RUN_STAT = "--dsakit-must-run gate(s) failed"
DEVICE_KEY = "dsakit_device"
HOST_LABEL_ENV = "DSAKIT_HOST_LABEL"

# The `--dsakit-report` file: `format` names it, `format_version` says which fields it has
# (1: device, sglang, gates, must_run; 2 adds host, shard and per-test outcomes and gates).
REPORT_KIND = "dsakit-report"
REPORT_FORMAT = 2

# "[code] sentence" as written by `format_reasons` and by every dsakit Reason (gates, invalid
# matrix cells, unsupported kernel shapes): codes are lower-case slugs starting with a letter, or a
# capability expression in its canonical form (dsakit.gates.table.parse_expression), which an xdist
# controller reads back from the forwarded message before the worker's own record arrives.
_CODE = r"sm(?:>=|==|~)\d+(?:\.\d+)?|gfx in gfx[0-9a-f]+(?:,gfx[0-9a-f]+)*|[a-z][a-z0-9:_.\-]*"
_CODE_IN_MESSAGE = rf"\[({_CODE})\] ([^|]*)"  # compiled on first use (re caches it): not in every session
UNCODED = "uncoded"


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


class GateSkips:
    """The tests skipped behind one code. A plain class: a dataclass compiles its methods when the
    module loads, which every pytest session would pay (bench/bench_kit_overhead.py)."""

    __slots__ = ("code", "reason", "tests")

    def __init__(self, code: str, reason: str, tests: list[str] | None = None) -> None:
        self.code = code
        self.reason = reason
        self.tests: list[str] = [] if tests is None else tests

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GateSkips):
            return NotImplemented
        return (self.code, self.reason, self.tests) == (other.code, other.reason, other.tests)

    def __repr__(self) -> str:
        return f"GateSkips(code={self.code!r}, reason={self.reason!r}, tests={self.tests!r})"

    def as_dict(self) -> dict[str, Any]:
        return {"count": len(self.tests), "reason": self.reason, "tests": list(self.tests)}


class SkipInventory:
    """Gated skips of one process (or, on the xdist controller, of all workers)."""

    def __init__(self) -> None:
        self.planned: dict[str, tuple[Reason, ...]] = {}
        self.gates: dict[str, GateSkips] = {}
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
        for reason in reasons:
            self.add_tests(reason.code, reason.message, [nodeid])

    def record(self, report: pytest.TestReport) -> None:
        if not report.skipped or report.when not in ("setup", "call") or hasattr(report, "wasxfail"):
            return
        message = _skip_message(report)
        reasons = self.planned.get(report.nodeid) or tuple(reasons_from_message(message))
        if not reasons:
            from dsakit.reasons import Reason

            # A skip without a reason code still shows up: invisible skips are what this is for.
            reasons = (Reason(UNCODED, message.removeprefix("Skipped: ").strip() or "no reason given"),)
        self.add(report.nodeid, reasons)

    def add_planned(self, selected: Iterable[str]) -> None:
        """Collect-only runs: count what collection decided would skip, for the selected tests only
        (gates are applied before pytest-split deselects another shard's tests)."""
        for nodeid in selected:
            if nodeid in self.planned:
                self.add(nodeid, self.planned[nodeid])

    def to_data(self) -> dict[str, Any]:
        return {code: entry.as_dict() for code, entry in self.gates.items()}

    def worker_data(self) -> dict[str, Any]:
        return {"gates": self.to_data(), "declared": self.declared or {}, "used": self.used}

    def merge(self, data: dict[str, Any]) -> None:
        """A worker's `worker_data()`."""
        self.used = self.used or bool(data.get("used"))
        for code, entry in data["gates"].items():
            self.add_tests(code, str(entry["reason"]), [str(t) for t in entry["tests"]])
        for nodeid, codes in data["declared"].items():
            self.declare(nodeid, codes)

    def add_tests(self, code: str, reason: str, tests: Iterable[str]) -> None:
        """Count `tests` under `code`. A test counts once: under its codes, or else as uncoded (an
        xdist controller may have filed it as uncoded from the forwarded message before the
        worker's record names its code)."""
        tests = list(tests)
        if code == UNCODED:
            coded = {t for c, e in self.gates.items() if c != UNCODED for t in e.tests}
            tests = [t for t in tests if t not in coded]
            if not tests:
                return
        else:
            self._drop_uncoded(tests)
        entry = self.gates.setdefault(code, GateSkips(code, reason))
        for test in tests:
            if test not in entry.tests:
                entry.tests.append(test)

    def _drop_uncoded(self, tests: Iterable[str]) -> None:
        uncoded = self.gates.get(UNCODED)
        if uncoded is None:
            return
        uncoded.tests[:] = [t for t in uncoded.tests if t not in set(tests)]
        if not uncoded.tests:
            del self.gates[UNCODED]

    @property
    def gated(self) -> bool:
        """Something skipped behind a dsakit reason code in a run that uses dsakit."""
        return self.used and any(code != UNCODED for code in self.gates)

    def skipped_behind(self, codes: Iterable[str]) -> dict[str, list[str]]:
        return {code: list(self.gates[code].tests) for code in codes if code in self.gates}

    def without_tests(self, codes: Iterable[str]) -> list[str]:
        """Codes no collected test sits behind (nothing for --dsakit-must-run to check); empty when
        unknown (an xdist run whose workers all died before reporting)."""
        if self.declared is None:
            return []
        behind = {code for codes in self.declared.values() for code in codes}
        return [code for code in codes if code not in self.gates and code not in behind]


def host_label(option: str | None) -> str:
    """The node's name in merged reports: `--dsakit-host-label`, else $DSAKIT_HOST_LABEL, else the
    hostname."""
    label = (option if option is not None else os.environ.get(HOST_LABEL_ENV, "")).strip()
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
    from dsakit.sglang_release import installed_release

    try:
        return installed_release().version
    except UsageError:
        return None


def header_line(device: DeviceModel) -> str:
    return f"dsakit: device {_device_text(device)}; SGLang {_sglang_version() or 'not installed'}"


class InventoryReporter:
    """Per-run hooks (registered from the plugin's pytest_configure)."""

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
        self.selected: list[str] = []
        self.is_worker = hasattr(config, "workerinput")

    @property
    def recorder(self) -> OutcomeRecorder:
        """Every test's outcome record (controller side, --dsakit-report only)."""
        if self._recorder is None:
            from dsakit.outcomes import OutcomeRecorder

            self._recorder = OutcomeRecorder()
        return self._recorder

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        # a run that set no dsakit option gets no line (and no device probe) at start-up; the
        # inventory section names the device once a gate skipped something
        return [header_line(self.device())] if self.announce else []

    def log_report(self, report: pytest.TestReport) -> None:
        """One test phase's report (`SkipRecorder` hands each one here)."""
        # On the xdist controller every worker report arrives here as it happens (it carries
        # `node`): recording it here keeps the skips of a worker that dies later, and of a run
        # interrupted with Ctrl-C, whose workeroutput never arrives.
        self.inventory.record(report)
        if self.report_path and not self.is_worker:
            # every test's outcome, from this process's reports and the workers' that arrive here
            self.recorder.record(report)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = [item.nodeid for item in session.items]
        self.inventory.keep_declared(self.selected)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            self.config.workeroutput[WORKER_KEY] = self.inventory.worker_data()  # type: ignore[attr-defined]
            return
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
            terminal.stats.setdefault(MUST_RUN_STAT, []).extend(self.failures)
        if self.report_path:
            self.write_report(self.report_path)
            if self.report_error and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.USAGE_ERROR  # a requested output is missing

    def as_json(self) -> dict[str, Any]:
        device = self.device()
        return {
            "format": REPORT_KIND,
            "format_version": REPORT_FORMAT,
            "host": self.host,
            "shard": shard_of(self.config),
            "device": device.as_dict(),
            "sglang": _sglang_version(),
            "collect_only": bool(self.config.option.collectonly),
            "gates": self.inventory.to_data(),
            "must_run": {"codes": list(self.must_run), "failed": self.failures,
                         "no_test_behind": self.untested, "strict": self.must_run_strict},
            "tests": self.tests_json(),
        }

    def tests_json(self) -> dict[str, dict[str, Any]]:
        """Per test id: outcome, the gates it declared, skip reasons (codes) or failure signature."""
        from dsakit.outcomes import FAILING, signature
        from dsakit.reasons import Reason

        tests: dict[str, dict[str, Any]] = {}
        for nodeid, record in self.recorder.outcomes.items():
            entry: dict[str, Any] = {"outcome": record["outcome"],
                                     "gates": list((self.inventory.declared or {}).get(nodeid, ()))}
            if record["outcome"] == "skipped":
                reasons = self.inventory.planned.get(nodeid) or reasons_from_message(record["reason"])
                entry["reasons"] = [r.as_dict() for r in reasons] or [
                    Reason(UNCODED, record["reason"].strip() or "no reason given").as_dict()]
            elif record["outcome"] in FAILING:
                entry["signature"] = signature(record)
            tests[nodeid] = entry
        return tests

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

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        # a plain pytest.skip is not dsakit's business: it is listed (as uncoded) only in a run where
        # something skipped behind a dsakit reason code
        if self.is_worker or not (self.inventory.gated or self.announce or self.must_run or self.report_error):
            return
        if not self.inventory.gates and not self.must_run and not self.report_error:
            return
        device = self.device()
        terminalreporter.section("dsakit skip inventory")
        terminalreporter.write_line(
            f"device: {_device_text(device)}; SGLang {_sglang_version() or 'not installed'}"
        )
        if config.option.collectonly:
            terminalreporter.write_line("collect-only: skips decided at collection")
        if not self.inventory.gates:
            terminalreporter.write_line("no test skipped behind a dsakit gate")
        for code, entry in sorted(self.inventory.gates.items(), key=lambda kv: (-len(kv[1].tests), kv[0])):
            terminalreporter.write_line(f"{len(entry.tests):4d} skipped  [{code}] {entry.reason}")
            if config.option.verbose > 0:
                for test in entry.tests:
                    terminalreporter.write_line(f"           {test}")
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


class SkipRecorder:
    """The reporter's one per-test hook, registered only where the run uses dsakit (a dsakit
    option, a collected test using a dsakit fixture, marker or gate, a `require()` call) and on an
    xdist controller, which cannot know before its workers report: a run that uses nothing of
    dsakit pays no hook call per test."""

    def __init__(self, reporter: InventoryReporter) -> None:
        self.reporter = reporter
        # every report only where `--dsakit-report` records each outcome (not on a worker, whose
        # reports the controller records); else only skips concern the inventory, and a passed or
        # failed phase costs one comparison (bench/bench_kit_overhead.py)
        self.every_outcome = bool(reporter.report_path) and not reporter.is_worker

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.every_outcome or report.outcome == "skipped":
            self.reporter.log_report(report)


class XdistHooks:
    """xdist-only hooks, registered when xdist is loaded (pytest-randomly style)."""

    def __init__(self, inventory: SkipInventory, device_name: str) -> None:
        self.inventory = inventory
        self.device_name = device_name

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[DEVICE_KEY] = self.device_name

    def pytest_configure(self, config: pytest.Config) -> None:
        if getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput"):
            self.inventory.declared = None  # a controller collects nothing: unknown until a worker reports

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", {})
        data = output.get(WORKER_KEY)
        if data:
            self.inventory.merge(data)
