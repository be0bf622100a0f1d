"""The run's one per-test report wrapper: a chain of report edits the run's parts add to.

Owns the pluggy wrapper around `pytest_runtest_makereport` (one per test phase, not one per
concern) and when it starts: once a test phase can need it, so a run that never imports torch nor
simulates a device pays no hook call per test phase (bench/bench_kit_overhead.py). Fault isolation
adds its attribution, the simulation its failure sections. Must not edit a report itself; imports
nothing of dsakit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

ReportEdit = Callable[[pytest.TestReport, pytest.Item, pytest.CallInfo[None]], None]

WRAPPER = "dsakit-report-edits"  # the wrapper's name among the plugins
START = "dsakit-report-edits-start"
# what makes a test phase need the wrapper: torch (a CUDA context fault isolation checks) and
# dsakit's device simulation (a failure under it); and any `pytest_dsakit_device_fault` answer but
# fault isolation's own (registered under FAULT_ISOLATION)
START_MODULES = ("torch", "dsakit.simulation.probe_patches")
FAULT_ISOLATION = "dsakit-fault-isolation"


class ReportEdits:
    """The chain: `add(edit)`; `edit(report, item, call)` runs on every phase's report as pytest
    made it, in the order added, an edit with a higher `order` after the others (the simulation's
    explanation of a failure, order 1, sees the report fault isolation left)."""

    def __init__(self) -> None:
        self.edits: tuple[ReportEdit, ...] = ()
        self._orders: tuple[int, ...] = ()

    def add(self, edit: ReportEdit, order: int = 0) -> None:
        at = sum(1 for placed in self._orders if placed <= order)
        self.edits = (*self.edits[:at], edit, *self.edits[at:])
        self._orders = (*self._orders[:at], order, *self._orders[at:])

    @pytest.hookimpl(wrapper=True)  # a new-style wrapper: an old-style one costs every test more
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report: pytest.TestReport = yield
        for edit in self.edits:
            edit(report, item, call)
        return report


class WrapperStart:
    """Starts the wrapper once: when one of `START_MODULES` is first looked for (the run's import
    watcher calls `start`, before the module runs: the phase importing it ends inside the wrapper),
    or when a plugin or conftest implementing `pytest_dsakit_device_fault` registers. `start`
    hands the wrapper to `register` (the run's session): registered mid-run, it is the outermost
    `pytest_runtest_makereport` wrapper."""

    def __init__(self, config: pytest.Config, edits: ReportEdits,
                 register: Callable[[str, object], None]) -> None:
        self.config = config
        self.edits = edits
        self.register = register
        self.started = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            self.register(WRAPPER, self.edits)

    def pytest_plugin_registered(self, plugin: object, plugin_name: str) -> None:
        # historic: also called for every plugin registered before this one
        if self.started:
            return
        impls = self.config.hook.pytest_dsakit_device_fault.get_hookimpls()
        if any(impl.plugin_name != FAULT_ISOLATION for impl in impls):
            self.start()
