"""Fault isolation: a test that leaves a sticky device error (device-side assert, illegal address)
is failed with the kernel error and its inputs, and no later test is blamed for it.

Owns: the per-test check (`pending_device_error`, answering the `pytest_dsakit_device_fault`
hook), the attribution, the `cuda-context-poisoned` not-run reason in one process, and under xdist the worker
exit plus the controller's hand-over of the culprit's last report. Never imports torch itself and
never initialises CUDA: the check runs only where torch already did.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsakit import active
from dsakit.gates.report_edits import FAULT_ISOLATION
from dsakit.node.run_dirs import private_dir
from dsakit.reasons import Reason

PLUGIN_NAME = FAULT_ISOLATION  # its hooks' name: the report chain's start tells its own answer apart

CODE = "cuda-context-poisoned"
SECTION = "CUDA context poisoned by this test"
HANDOFF_KEY = "dsakit_fault_handoff"
WORKER_EXIT_STATUS = 86  # any non-zero status: xdist reports the worker down and replaces it
_INPUT_REPR_LIMIT = 200
# Text of the errors a CUDA/HIP context gives once poisoned (torch.AcceleratorError on torch >= 2.8,
# RuntimeError before; cuBLAS/cuDNN surface it as their own execution failures).
_DEVICE_ERROR_MARKS = (
    "CUDA error", "HIP error", "device-side assert", "illegal memory access", "illegal address",
    "CUBLAS_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_EXECUTION_FAILED", "unspecified launch failure",
)


# ---------------------------------------------------------------- the check and what it names


def pending_device_error() -> str | None:
    """The pending device error of this process, or None. Cheap when the test never touched CUDA
    (torch not imported, or CUDA not initialised): then nothing is called at all."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    if active.simulated_device() is not None:
        # torch.cuda answers as the simulated device until the fixture's teardown restores it:
        # a sync now would report the simulation, not the device; the teardown phase checks
        return None
    try:
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - any error raised by a sync is the device's
        return f"{type(error).__name__}: {error}".strip()
    return None


def is_device_error(excinfo: pytest.ExceptionInfo[BaseException] | None) -> bool:
    """True for the errors a poisoned CUDA/HIP context raises on its next use."""
    if excinfo is None:
        return False
    if type(excinfo.value).__name__ == "AcceleratorError":
        return True
    text = str(excinfo.value)
    return any(mark in text for mark in _DEVICE_ERROR_MARKS)


def _truncated(text: str, limit: int = _INPUT_REPR_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def inputs_text(item: pytest.Item) -> str:
    """The test's inputs: its parametrization id and each parameter's repr (truncated)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return "not parametrized"
    params = ", ".join(f"{name}={_truncated(repr(value))}" for name, value in callspec.params.items())
    return f"[{callspec.id}] {params}"


def attribution(item: pytest.Item, error: str, when: str) -> str:
    return (
        f"{item.nodeid} left a sticky device error (found after its {when} phase):\n"
        f"  kernel error: {error}\n"
        f"  inputs: {inputs_text(item)}\n"
        "  every later CUDA call in this process would fail with it; dsakit runs the remaining GPU "
        "tests in a fresh CUDA context (xdist: a new worker) or reports them not run "
        f"[{CODE}]"
    )


def poisoned_reason(culprit: str) -> Reason:
    return Reason(
        CODE,
        f"CUDA context poisoned by {culprit}; rerun them (e.g. `pytest -n 1` restarts the worker "
        "after a fault)",
    )


def needs_gpu(item: pytest.Item) -> bool:
    """A test behind a dsakit gate that no CPU can open (cuda, fa3, sm>=9.0, ...) uses the GPU."""
    from dsakit.gates.device_model import SIMULATED
    from dsakit.gates.marks import MARKER
    from dsakit.gates.table import gate_for

    cpu = SIMULATED["cpu"]
    codes = [code for marker in item.iter_markers(MARKER) for code in marker.args]
    return any(not gate_for(code).device_allows(cpu) for code in codes)


# ---------------------------------------------------------------- report edits


def _attribute(report: pytest.TestReport, item: pytest.Item, error: str) -> None:
    text = attribution(item, error, report.when or "?")
    report.sections.append((SECTION, text))
    if not report.failed:
        report.outcome = "failed"
        report.longrepr = text


def _as_not_run(report: pytest.TestReport, item: pytest.Item, reason: Reason) -> None:
    """A victim's setup/call failure (the poisoned context raising) becomes a coded skip; its
    teardown failure is dropped into a section: it did nothing wrong."""
    if report.when == "teardown":
        report.sections.append((f"{CODE}: teardown error", str(report.longrepr)))
        report.outcome = "passed"
        report.longrepr = None
        return
    report.outcome = "skipped"
    report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {reason}")


# ---------------------------------------------------------------- hooks


class FaultIsolation:
    """A part of the run's DsakitSession, once the run uses dsakit: check after each phase,
    attribute, then keep the run honest; the summary section. Its report edit (`edit_report`) runs
    in the run's one report chain (dsakit.gates.report_edits, which starts once torch is imported
    or a conftest answers `pytest_dsakit_device_fault`), and the setup hook that skips later GPU
    tests (`PoisonedContext`) is handed to `add` (the session's) only once a test poisoned the
    context."""

    def __init__(self, config: pytest.Config, add: Callable[[str, object], None]) -> None:
        self.config = config
        self._add = add
        self.culprit: str | None = None
        self.error: str | None = None
        workerinput = getattr(config, "workerinput", None)
        self.handoff: Path | None = None
        if workerinput is not None and workerinput.get(HANDOFF_KEY):
            self.handoff = Path(workerinput[HANDOFF_KEY]) / f"{workerinput['workerid']}.json"
        self.not_run: list[str] = []
        # the hook's caller, looked up once (its implementations are read per check: a conftest or
        # plugin registered later answers too)
        self._fault_hook = config.hook.pytest_dsakit_device_fault

    @pytest.hookimpl(trylast=True)
    def pytest_dsakit_device_fault(self, item: pytest.Item) -> str | None:
        return pending_device_error()

    def edit_report(self, report: pytest.TestReport, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
        """Every phase's report, as pytest made it (the plugin's report wrapper calls this)."""
        if self.culprit is None:
            # setup only when it failed (a fixture that faulted); else the call phase finds it
            if report.when in ("call", "teardown") or report.failed:
                error = self._device_fault(item)
                if error:
                    self.culprit, self.error = item.nodeid, str(error)
                    _attribute(report, item, self.error)
                    self._add("dsakit-poisoned-context", PoisonedContext(self))
        elif report.failed and is_device_error(call.excinfo):
            if item.nodeid != self.culprit or report.when == "teardown":
                if item.nodeid != self.culprit and report.when != "teardown":
                    self.not_run.append(item.nodeid)
                _as_not_run(report, item, poisoned_reason(self.culprit))
        if self.handoff is not None and report.when == "teardown" and self.culprit == item.nodeid:
            self._exit_worker(report)

    def _device_fault(self, item: pytest.Item) -> str | None:
        """The `pytest_dsakit_device_fault` answer; where this object is the hook's only
        implementation, `pending_device_error()` directly: a hook call per phase is most of what fault
        isolation costs a test that never touched CUDA (bench/bench_kit_overhead.py)."""
        hook = self._fault_hook
        impls = hook.get_hookimpls()
        if len(impls) == 1 and impls[0].plugin is self:
            return pending_device_error()
        result: str | None = hook(item=item)
        return result

    def _exit_worker(self, report: pytest.TestReport) -> None:
        """xdist worker: hand the culprit's teardown report to the controller (which logs it in
        place of the crash report, so the culprit alone is blamed and the worker's queue is
        re-scheduled), then die so a fresh worker with a fresh CUDA context replaces this one."""
        assert self.handoff is not None
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        self.handoff.write_text(json.dumps({"nodeid": report.nodeid, "report": data}), encoding="utf-8")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(WORKER_EXIT_STATUS)

    def summary(self, terminalreporter: Any) -> None:
        """The run's summary section."""
        if self.culprit is None or hasattr(self.config, "workerinput"):
            return
        terminalreporter.section("dsakit fault isolation")
        terminalreporter.write_line(f"CUDA context poisoned by {self.culprit}: {self.error}", red=True)
        terminalreporter.write_line(
            f"{len(self.not_run)} later GPU test(s) not run [{CODE}]; rerun them in a fresh process "
            "(under `-n 1` or more dsakit replaces the worker instead)"
        )


class PoisonedContext:
    """The setup hook of a process whose CUDA context a test poisoned (registered then, so no test
    before pays for it): later GPU tests skip with the not-run reason."""

    def __init__(self, isolation: FaultIsolation) -> None:
        self.isolation = isolation

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        culprit = self.isolation.culprit
        if culprit is None or item.get_closest_marker("skip") is not None or not needs_gpu(item):
            return
        self.isolation.not_run.append(item.nodeid)
        # a marker, not pytest.skip(): the skip then points at the test, like a closed gate's
        item.add_marker(pytest.mark.skip(reason=str(poisoned_reason(culprit))))


class XdistFaultHandoff:
    """The xdist controller's side, a part of the run's DsakitSession: a private folder for the
    workers' hand-over files (each worker's, in its workerinput; removed at close), and the crash
    report of a deliberately exited worker turned back into its test's teardown report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.directory: str | None = None

    def configure_node(self, node: Any) -> None:
        if self.directory is None:
            self.directory = private_dir(self.config, "dsakit-fault")
        node.workerinput[HANDOFF_KEY] = self.directory

    def handle_crash_item(self, crashitem: str, report: pytest.TestReport) -> None:
        if self.directory is None:
            return
        path = Path(self.directory) / f"{report.node.gateway.id}.json"
        if not path.exists():
            return  # a real crash: xdist's own report stands
        handed = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
        if handed["nodeid"] != crashitem:
            return
        rebuilt = self.config.hook.pytest_report_from_serializable(config=self.config, data=handed["report"])
        node = report.node
        report.__dict__.update(rebuilt.__dict__)
        report.node = node  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

