"""The skip inventory: every skip grouped by its reason code (gate codes, invalid-cell and
unsupported-shape codes, "uncoded" for bare skips), with counts and what it means.

Owns: recording gated skips from test reports, the xdist hand-over (workers put their inventory
in `config.workeroutput`, the controller merges it in `pytest_testnodedown`), the terminal section
"dsakit skip inventory", the `--dsakit-report` JSON file, `--dsakit-must-run` and the report header
line. Never imports torch or SGLang (the device is probed lazily through `dsakit.gates.device_model`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dsakit.gates.device_model import DeviceModel
from dsakit.reasons import Reason

WORKER_KEY = "dsakit_skip_inventory"
# the key in pytest's final summary line ("1 passed, 2 --dsakit-must-run gate(s) failed in 3s"); it
# starts with "--" so that tools parsing "N word" outcomes (pytester, CI log scrapers) do not count
# it as failed tests
MUST_RUN_STAT = "--dsakit-must-run gate(s) failed"
DEVICE_KEY = "dsakit_device"

# "[code] sentence" as written by `format_reasons` and by every dsakit Reason (gates, invalid
# matrix cells, unsupported kernel shapes); codes are lower-case slugs starting with a letter.
_CODE_IN_MESSAGE = re.compile(r"\[([a-z][a-z0-9:_.\-]*)\] ([^|]*)")
UNCODED = "uncoded"


def format_reasons(reasons: Iterable[Reason]) -> str:
    """The skip message for closed gates: each reason as '[code] sentence', joined by ' | '."""
    return " | ".join(str(reason) for reason in reasons)


def reasons_from_message(message: str) -> list[Reason]:
    """Reasons back from a skip message written by `format_reasons` (empty for other skips)."""
    return [Reason(code, text.strip()) for code, text in _CODE_IN_MESSAGE.findall(message)]


def _skip_message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


@dataclass
class GateSkips:
    code: str
    reason: str
    tests: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"count": len(self.tests), "reason": self.reason, "tests": list(self.tests)}


class SkipInventory:
    """Gated skips of one process (or, on the xdist controller, of all workers)."""

    def __init__(self) -> None:
        self.planned: dict[str, tuple[Reason, ...]] = {}
        self.gates: dict[str, GateSkips] = {}

    def plan(self, nodeid: str, reasons: Iterable[Reason]) -> None:
        """Closed gates known for a test before it runs (collection markers, `require`)."""
        self.planned[nodeid] = tuple(reasons)

    def add(self, nodeid: str, reasons: Iterable[Reason]) -> None:
        for reason in reasons:
            entry = self.gates.setdefault(reason.code, GateSkips(reason.code, reason.message))
            if nodeid not in entry.tests:
                entry.tests.append(nodeid)

    def record(self, report: pytest.TestReport) -> None:
        if not report.skipped or report.when not in ("setup", "call") or hasattr(report, "wasxfail"):
            return
        message = _skip_message(report)
        reasons = self.planned.get(report.nodeid) or tuple(reasons_from_message(message))
        if not reasons:
            # A skip without a reason code still shows up: invisible skips are what this is for.
            reasons = (Reason(UNCODED, message.removeprefix("Skipped: ").strip() or "no reason given"),)
        self.add(report.nodeid, reasons)

    def add_planned(self) -> None:
        """Collect-only runs: count what collection decided would skip."""
        for nodeid, reasons in self.planned.items():
            self.add(nodeid, reasons)

    def to_data(self) -> dict[str, Any]:
        return {code: entry.as_dict() for code, entry in self.gates.items()}

    def merge(self, data: dict[str, Any]) -> None:
        for code, entry in data.items():
            self.add_tests(code, str(entry["reason"]), [str(t) for t in entry["tests"]])

    def add_tests(self, code: str, reason: str, tests: Iterable[str]) -> None:
        entry = self.gates.setdefault(code, GateSkips(code, reason))
        for test in tests:
            if test not in entry.tests:
                entry.tests.append(test)

    def skipped_behind(self, codes: Iterable[str]) -> dict[str, list[str]]:
        return {code: list(self.gates[code].tests) for code in codes if code in self.gates}


def _sglang_version() -> str | None:
    from dsakit.errors import UsageError
    from dsakit.upstream.release import installed_release

    try:
        return installed_release().version
    except UsageError:
        return None


def header_line(device: DeviceModel) -> str:
    return f"dsakit: device {_device_text(device)}; SGLang {_sglang_version() or 'not installed'}"


def _device_text(device: DeviceModel) -> str:
    """The description, marked [real] or (already) [simulated KEY]."""
    return device.describe() if device.simulated else f"{device.describe()} [real]"


class InventoryReporter:
    """Per-run hooks (registered from the plugin's pytest_configure)."""

    def __init__(
        self,
        config: pytest.Config,
        inventory: SkipInventory,
        device: Callable[[], DeviceModel],
        must_run: tuple[str, ...],
        report_path: str | None,
    ) -> None:
        self.config = config
        self.inventory = inventory
        self.device = device
        self.must_run = must_run
        self.report_path = report_path
        self.failures: dict[str, list[str]] = {}

    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    def pytest_report_header(self, config: pytest.Config) -> str:
        return header_line(self.device())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # On the xdist controller the workers' reports arrive here too (they carry `node`);
        # their inventory comes whole through workeroutput instead.
        if getattr(report, "node", None) is not None:
            return
        self.inventory.record(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            self.config.workeroutput[WORKER_KEY] = self.inventory.to_data()  # type: ignore[attr-defined]
            return
        if self.config.option.collectonly:
            self.inventory.add_planned()
        self.failures = self.inventory.skipped_behind(self.must_run)
        if self.failures and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.failures and terminal is not None:
            # counted in pytest's final line, which the terminal reporter writes after this
            # trylast hook
            terminal.stats.setdefault(MUST_RUN_STAT, []).extend(self.failures)
        if self.report_path:
            self.write_report(Path(self.report_path))

    def as_json(self) -> dict[str, Any]:
        device = self.device()
        return {
            "device": device.as_dict(),
            "sglang": _sglang_version(),
            "collect_only": bool(self.config.option.collectonly),
            "gates": self.inventory.to_data(),
            "must_run": {"codes": list(self.must_run), "failed": self.failures},
        }

    def write_report(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.as_json(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
        tmp.replace(path)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.is_worker or (not self.inventory.gates and not self.must_run):
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


class XdistHooks:
    """xdist-only hooks, registered when xdist is loaded (pytest-randomly style)."""

    def __init__(self, inventory: SkipInventory, device_name: str) -> None:
        self.inventory = inventory
        self.device_name = device_name

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[DEVICE_KEY] = self.device_name

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        data = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if data:
            self.inventory.merge(data)
