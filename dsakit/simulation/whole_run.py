"""`--dsakit-device NAME`: the whole test process runs as the simulated device.

Owns entering the simulation at configure (before collection: import-time `skipIf(torch.cuda...)`,
SGLang's module constants and cached probes see it) and leaving it at unconfigure; the header line;
a `SimulatedKernelLaunch` turned into a skip; the report sections of a failure under simulation
(`explain_failure`, an edit of the run's one report chain, dsakit.gates.report_edits). An xdist
controller runs no test: its workers simulate. Imports torch and SGLang only when a device is
simulated.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from dsakit import active

if TYPE_CHECKING:  # the plan loads when a device is simulated, not with every session's hooks
    from dsakit.stack.import_hooks import ImportWatch
    from dsakit.simulation.runtime import SimulationPlan

SECTION = "dsakit simulated device"
EXPLAINED = "dsakit model_runner read"


class WholeRun:
    """The run's simulation, a part of the run's DsakitSession (header lines, summary, close): started
    at configure, stopped at its close (also after a failed run); its per-test hooks are registered
    with it."""

    def __init__(self, config: pytest.Config, plan: SimulationPlan, in_this_process: bool) -> None:
        self.config = config
        self.device = plan.device
        self.plan = plan
        self.in_this_process = in_this_process  # an xdist controller runs no test: its workers simulate
        self.stand_ins: list[str] = []
        self.imported_first: list[str] = []
        self._stack = contextlib.ExitStack()
        self._modules_before: set[str] = set()
        self._subtests: dict[str, list[Any]] = {}  # nodeid -> [subtests, refused, first refusal]
        self._ran: dict[str, int] = {}  # kernel -> tests that ran it for real (portable plans)
        self._stood_in: dict[str, int] = {}  # kernel -> tests a reference stood in for it
        self._refused: dict[str, int] = {}  # kernel -> tests it was refused in
        self._arch = ""

    def start(self, hooks: ImportWatch) -> None:
        """Stand-ins now (the simulated GPU's import-time branches import its kernel libraries); the
        rest as each module arrives: torch's facts, placement or the two views when torch imports,
        kernel guards when Triton / a JIT loader / DeepGEMM / an arch-only entry point's module
        imports, probes when SGLang's modules import, each through the run's import watcher `hooks`. A
        suite that never imports torch pays nothing."""
        from dsakit.simulation import kernels, runtime
        from dsakit.stack.import_hooks import Patches
        from dsakit.simulation.probe_patches import announced, patch_arrived, watched_modules

        self._modules_before = set(sys.modules)
        try:
            patches = Patches()
            self._stack.callback(patches.restore)
            self._stack.enter_context(announced(self.device))
            if not self.plan.exact and self.device.is_gpu:
                same_vendor = self.plan.placement == "device"
                if same_vendor:
                    self.imported_first = kernels.import_present_libraries(self.device)
                self.stand_ins = kernels.install_stand_ins(patches, self.device, same_vendor=same_vendor)
            device, simulation = self.device, self.plan
            real = simulation.real_key if simulation.portable else None
            # SGLang's own kernel entry points (KERNEL_GUARDS) run where the plan is portable
            guard_sglang = not simulation.exact and not simulation.portable

            def on_torch(module: Any) -> None:
                own = runtime.real_queries(module)
                patch_arrived(patches, device, "torch", module)
                runtime.install(patches, simulation, own)

            def probes_of(name: str) -> Callable[[Any], None]:
                return lambda module: patch_arrived(patches, device, name, module, guard_kernels=guard_sglang)

            def guard_of(guard: Callable[..., None]) -> Callable[[Any], None]:
                return lambda module: guard(patches, module, device)

            def entries_of(entries: list[Any]) -> Callable[[Any], None]:
                return lambda module: kernels.guard_entry_points(patches, module, entries, device, real)

            def rules_of(entries: list[Any]) -> Callable[[Any], None]:
                return lambda module: kernels.check_arch_rules(patches, module, entries, device, real)

            hooks.watch("torch", on_torch)
            for name in watched_modules()[1:]:
                hooks.watch(name, probes_of(name))
            if not simulation.exact:
                for name, entries in kernels.arch_only_modules().items():
                    hooks.watch(name, entries_of(entries))
                if simulation.portable:  # kernels run for real here: each checked by the simulated arch's rules
                    for name, ruled in kernels.runnable_arch_rules(device, real).items():
                        hooks.watch(name, rules_of(ruled))
                guards = (kernels.jit_guards(real, portable=True) if simulation.portable
                          else kernels.GUARDED_LIBRARIES)
                for name, guard in guards.items():
                    hooks.watch(name, guard_of(guard))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        try:
            self._stack.close()
        finally:
            # SGLang modules first imported under the simulation computed their constants from it
            for name in set(sys.modules) - self._modules_before:
                if name == "sglang" or name.startswith("sglang."):
                    sys.modules.pop(name, None)

    # ------------------------------------------------------------ the session's part

    def header_lines(self) -> list[str]:
        where = "this process" if self.in_this_process else "every xdist worker"
        line = (f"dsakit: {where} runs as simulated {self.device.key} ({self.device.name}) on "
                f"{self.plan.real.describe()}: {self.plan.describe()}")
        if self.stand_ins:
            line += f"; absent kernel libraries stand in: {', '.join(self.stand_ins)}"
        if self.imported_first:
            line += f"; imported for the real arch first: {', '.join(self.imported_first)}"
        lines = [line]
        if self.device.vendor == "amd":
            lines.append(f"dsakit: {amd_environment()}")
        return lines

    # ------------------------------------------------------------ per-test hooks (a simulated run only)

    @pytest.hookimpl(tryfirst=True)  # before the terminal, the skip recorder and xdist's worker see it
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Honest outcomes: a test whose every subtest was refused as a kernel launch ran nothing, so it
        is reported skipped with the reason (pytest calls such a test passed)."""
        if report.when != "call":
            return
        if not self.in_this_process:  # the controller: what ran for real, per test, from the workers
            self._note_ran(report)
            return
        if type(report).__name__ != "SubtestReport":
            self._hand_on(report)
            self._note_ran(report)
        if type(report).__name__ == "SubtestReport":
            counts = self._subtests.setdefault(report.nodeid, [0, 0, None])
            counts[0] += 1
            reason = _skip_reason(report)
            if reason is not None and reason.startswith(f"[{KERNEL_LAUNCH}]"):
                counts[1] += 1
                counts[2] = counts[2] or reason
            return
        counts = self._subtests.pop(report.nodeid, [0, 0, None])
        if report.passed and counts[0] and counts[0] == counts[1]:
            report.outcome = "skipped"
            report.longrepr = (str(report.location[0]), (report.location[1] or 0) + 1,
                               f"Skipped: [{KERNEL_LAUNCH}] every subtest ({counts[0]}) was refused under "
                               f"simulated {self.device.key}, so nothing ran; the first: {counts[2]}")

    def _hand_on(self, report: pytest.TestReport) -> None:
        """The test's launches, as user properties (the report, the fleet and xdist's controller read them)."""
        from dsakit.gates.outcomes import RAN_ON_THIS_GPU, REFUSED_HERE, THROUGH_STAND_IN  # a simulated run only

        launched = sys.modules.get("dsakit.simulation.kernels")
        if launched is None:
            return
        if launched.RAN and self.plan.portable:
            report.user_properties.append((RAN_ON_THIS_GPU, {"arch": self.plan.real_key or self.plan.real.sm_text,
                                                          "kernels": list(launched.RAN)}))
        if launched.STOOD_IN:
            report.user_properties.append((THROUGH_STAND_IN, {"kernels": list(launched.STOOD_IN)}))
        if launched.REFUSED:
            report.user_properties.append((REFUSED_HERE, {"kernels": list(launched.REFUSED)}))
        for tally in (launched.RAN, launched.STOOD_IN, launched.REFUSED):
            tally.clear()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        launched = sys.modules.get("dsakit.simulation.kernels")
        if launched is not None:  # what the previous test left (a setup that launched, then failed)
            for tally in (launched.RAN, launched.STOOD_IN, launched.REFUSED):
                tally.clear()

    def _note_ran(self, report: pytest.TestReport) -> None:
        from dsakit.gates.outcomes import RAN_ON_THIS_GPU, REFUSED_HERE, THROUGH_STAND_IN  # a simulated run only

        counts = {RAN_ON_THIS_GPU: self._ran, THROUGH_STAND_IN: self._stood_in, REFUSED_HERE: self._refused}
        for name, value in report.user_properties:
            if name in counts and isinstance(value, dict):
                if name == RAN_ON_THIS_GPU:
                    self._arch = str(value.get("arch"))
                for kernel in value.get("kernels", ()):
                    counts[name][str(kernel)] = counts[name].get(str(kernel), 0) + 1

    def summary(self, terminalreporter: Any) -> None:
        if not (self._ran or self._stood_in or self._refused):
            return
        terminalreporter.section("dsakit simulated device")
        here = f" on this GPU ({self._arch})" if self._arch else ""
        terminalreporter.write_line(
            f"under simulated {self.device.key}{here}: {len(self._ran)} kernel(s) ran for real, "
            f"{len(self._stood_in)} ran with a stand-in, {len(self._refused)} refused (tests that launched each):")
        for title, counts in (("ran for real, built for this GPU", self._ran),
                              ("ran with a stand-in (a reference computed the result)", self._stood_in),
                              ("refused (their tests skipped)", self._refused)):
            if counts:
                terminalreporter.write_line(f"  {title}:")
                for kernel, tests in sorted(counts.items()):
                    terminalreporter.write_line(f"    {kernel} ({tests})")

    def close(self) -> None:
        if self.in_this_process:
            self.stop()


def explain_failure(report: pytest.TestReport, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """The simulation's edit in the run's report chain (dsakit.gates.report_edits), added once this
    process can simulate (dsakit.simulation.probe_patches imported: whole-run, marker or fixture):
    a failure while a device is simulated is explained."""
    if not report.failed or call.excinfo is None or active.simulated_device() is None:
        return  # nothing is simulated now
    simulation = sys.modules["dsakit.simulation.probe_patches"]  # what simulates imported it
    _explain(report, item, call.excinfo, simulation, simulation.active_simulation())


def _explain(report: pytest.TestReport, item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException],
             simulation: Any, device: Any) -> None:
    """A failure under a simulation: a kernel launch becomes its skip; else the device it ran as and,
    for a model-runner read, the read explained (its traceback in pytest's --tb=short style where
    the run chose no --tb: the long one prints the whole SGLang function, ~300 lines above it)."""
    raised = excinfo.value
    launch = _in_chain(raised, simulation.SimulatedKernelLaunch)
    if launch is None:
        launch = _no_image(raised, device, simulation)
    if launch is not None:  # also wrapped: SGLang's CustomTestCase re-raises after its retries
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {launch.reason}")
        return
    from dsakit.gates.device_model import SIMULATED, real_device

    report.sections.append((SECTION, f"ran as simulated {device.key} ({device.name}) on "
                                     f"{real_device().describe()}"))
    from dsakit.simulation.explain import explain, missing_read

    error = _in_chain(raised, AttributeError)
    read = missing_read(pytest.ExceptionInfo.from_exception(error)) if error is not None else None
    if read is not None:
        devices = {key: d for key, d in SIMULATED.items() if key != "cpu"}
        report.sections.append((EXPLAINED, explain(read, devices)))
        shorten = getattr(item, "_repr_failure_py", None)  # pytest's own rendering, at another --tb style
        if item.config.getoption("tbstyle", "auto") == "auto" and callable(shorten):
            report.longrepr = shorten(excinfo, style="short")


KERNEL_LAUNCH = "simulated-kernel-launch"  # dsakit.simulation.probe_patches.KERNEL_LAUNCH, without its import


def _skip_reason(report: pytest.TestReport) -> str | None:
    """A skip's message without pytest's "Skipped: " prefix (None: not a skip)."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    message = str(report.longrepr[2])
    return message[len("Skipped: "):] if message.startswith("Skipped: ") else message


def amd_environment() -> str:
    """What an AMD image sets for SGLang, and what this run does instead (the header's line)."""
    import os

    aiter = os.environ.get("SGLANG_USE_AITER")
    if aiter is not None:
        return (f"SGLANG_USE_AITER={aiter} (yours): SGLang takes its AITER paths where it is truthy; AITER "
                "kernels cannot run on this machine and skip with [simulated-kernel-launch]")
    return ("SGLANG_USE_AITER is not set: SGLang's HIP paths without AITER run (the variant an MI300 / "
            "MI355 image without AITER runs; ROCm images usually set SGLANG_USE_AITER=1: set it to run "
            "that variant)")


def _absent_answer(traceback: Any) -> str:
    """Which stand-in's answer a library call choked on: the innermost frame's local that is one
    (`make_persistent_...(): num_bytes = flashinfer.utils.get_trtllm_gen_..._bytes(...)`), else the
    generic words."""
    from dsakit.simulation.kernels import AbsentLibraryValue

    frames = []
    while traceback is not None:
        frames.append(traceback.tb_frame)
        traceback = traceback.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, AbsentLibraryValue):
                return f"the answer of {value._dsakit_kernel}"
    return "a kernel library's answer"


def _no_image(raised: BaseException, device: Any, simulation: Any) -> Any:
    """A launch that failed with "no kernel image" (or its library's wording of it) on a GPU that is
    not the simulated one: the kernel exists for the simulated device, not here. The same skip as a
    refusal, naming the call site; never a failure. (dsakit's arch-only table misses this kernel.)"""
    from dsakit.gates.device_model import real_device
    from dsakit.simulation.kernel_archs import is_no_image

    error: BaseException | None = raised
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, TypeError) and "AbsentLibraryValue" in str(error):
            from dsakit.simulation.kernels import site_of

            return simulation.SimulatedKernelLaunch(
                _absent_answer(error.__traceback__), site_of(error.__traceback__), device,
                f"the library is absent on this machine (it stands in: {str(error).strip()[:160]!r})")
        if is_no_image(str(error)):
            real = real_device()
            if simulation.is_this_machine(device, real):
                return None  # the simulated device is this one: a real failure
            from dsakit.simulation.kernels import site_of

            first = str(error).strip().splitlines()[0][:200]
            return simulation.SimulatedKernelLaunch(
                "a kernel", site_of(error.__traceback__), device,
                f"it has no image for this GPU ({real.describe()}): {first!r}; dsakit's table of arch-only "
                "kernels (dsakit/simulation/kernel_archs.py) does not list it yet")
        error = error.__cause__ or error.__context__
    return None


def _in_chain(error: BaseException | None, kind: type[BaseException]) -> Any:
    """The first exception of `kind` in `error`'s cause / context chain (None when there is none)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
