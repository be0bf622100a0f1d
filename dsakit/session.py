"""One pytest run's dsakit state: `DsakitSession`, on `config.stash` (as syrupy keeps its
SnapshotSession and xdist its DSession); the plugin's hooks hand off to it.

Owns what a run resolves once and holds to its end: the option values (read through
`dsakit.options`), the run's device (`RunDevice`: selected, real, simulated or not, the simulation's
plan), the contract, the gate session, the run's import watcher and report chain, and its parts:
each concern of a run (the skip inventory, pinning, fault isolation, the simulation, ...) is one
object the session talks to through one protocol (`Part`, as pytest-xdist's DSession talks to its
scheduler), answering the once-per-run hooks by iterating over them: header lines, summary, one
worker hand-over and its merge, xdist's node configuration, close. It is the only registrar of hook
objects. Must stay cheap where unused: every part is imported when the run needs it, and a run that
uses nothing of dsakit pays no hook call per test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from dsakit import active
from dsakit.options import RunOptions

if TYPE_CHECKING:
    from dsakit.contracts.schema import Contract
    from dsakit.gates.device_model import DeviceModel
    from dsakit.gates.inventory import InventoryReporter
    from dsakit.gates.marks import GateSession
    from dsakit.gates.report_edits import ReportEdits
    from dsakit.node.gpu_pinning import Pinning
    from dsakit.stack.import_hooks import ImportWatch
    from dsakit.simulation.branch_coverage import BranchCoverage
    from dsakit.simulation.runtime import SimulationPlan

REAL = "real"  # dsakit.gates.device_model.REAL: this machine's own device
DEVICE_KEY = "dsakit_device"  # workerinput: the controller's device, as its workers take it
WORKER_KEY = "dsakit"  # workeroutput: the one hand-over, every part's data under its name
NAME = "dsakit-session"  # the session's own hooks, by name
RECORDER_PLUGIN = "dsakit.compare.recorder"  # `-p` loads it for `dsakit compare`


class Part(Protocol):
    """What the session asks of a part of the run. Every method is optional: the session calls the
    ones a part defines, in the order the parts were added (the summary in reverse, as pluggy calls
    the plugin registered last first: the skip inventory, added early, closes it). A part that
    implements pytest hooks itself (per-test ones, or a place the session's hooks cannot give) is
    registered under its name as well; nothing else registers a hook object."""

    def header_lines(self) -> list[str]:
        """pytest_report_header: this part's lines."""

    def summary(self, terminalreporter: Any) -> None:
        """pytest_terminal_summary: this part's lines or section."""

    def worker_output(self) -> Any:
        """An xdist worker's end of the session: what its controller's `merge` gets (JSON-able)."""

    def merge(self, data: Any) -> None:
        """The controller: one worker's `worker_output`, as that worker went down."""

    def setup_nodes(self, specs: Sequence[Any]) -> None:
        """The controller, before the workers start: their execnet specs (the environment)."""

    def configure_node(self, node: Any) -> None:
        """The controller: one worker's `workerinput`, before it starts."""

    def handle_crash_item(self, crashitem: str, report: pytest.TestReport) -> None:
        """The controller: the report of the test a worker crashed in."""

    def close(self) -> None:
        """pytest_unconfigure: undo what the part changed (in reverse order of the parts)."""



class RunDevice:
    """The run's device, resolved once: `selected` ('real' or a device-table key) from
    --dsakit-device, $DSAKIT_DEVICE or the ini key (an xdist worker takes its controller's), the
    `fleet`'s devices where several are named, the `simulated` model (None: the real device), the
    `real` one (read on first use: NVML, nvidia-smi, rocminfo) and the simulation's `plan`."""

    def __init__(self, raw: str | None, allow_torch: bool) -> None:
        self.allow_torch = allow_torch  # --dsakit-device-from-torch
        self.fleet: list[str] | None = None
        self.selected = REAL
        self.simulated: DeviceModel | None = None
        self._real: DeviceModel | None = None
        self._plan: SimulationPlan | None = None
        if raw and "," in raw:
            from dsakit.simulation.fleet import fleet_devices

            self.fleet = fleet_devices(raw)  # None: one device, named with a stray comma (refused below)
            if self.fleet:
                return
        if raw and raw.strip().lower() != REAL:
            from dsakit.errors import UsageError
            from dsakit.gates.device_model import simulated_model

            try:
                self.simulated = simulated_model(raw)
            except UsageError as error:
                raise pytest.UsageError(str(error)) from None
            self.selected = self.simulated.key

    @property
    def simulated_key(self) -> str | None:
        return self.simulated.key if self.simulated is not None else None

    @property
    def real(self) -> DeviceModel:
        if self._real is None:
            from dsakit.gates.device_model import real_device

            # the plain call is the one everything else makes (one cache entry, filled before a
            # simulation patches torch): a failure's "ran as ... on <this machine>" reads it too
            self._real = real_device(allow_torch=True) if self.allow_torch else real_device()
        return self._real

    @property
    def model(self) -> DeviceModel:
        """The device gates see: the simulated one, else this machine's."""
        return self.simulated if self.simulated is not None else self.real

    @property
    def plan(self) -> SimulationPlan | None:
        """How the simulation runs on this machine (None: nothing is simulated)."""
        if self._plan is None and self.simulated is not None:
            from dsakit.simulation.runtime import plan

            self._plan = plan(self.simulated, self.real)
        return self._plan


class DsakitSession:
    """A pytest run as dsakit serves it (`session_of(config)`). Built on first ask (xdist and the
    fleet ask in pytest_cmdline_main, before pytest_configure), configured at pytest_configure, and
    closed at pytest_unconfigure: it registers itself (`NAME`) first, so whatever part a failed
    configure built is closed too."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.pid = os.getpid()
        self.options = RunOptions(config)
        self._device: RunDevice | None = None
        self.contract: Contract | None = None  # None: dsakit's own (the suite declares nothing)
        self.gates: GateSession | None = None
        self.reporter: InventoryReporter | None = None
        self.imports: ImportWatch | None = None  # the run's one import watcher
        self.edits: ReportEdits | None = None  # the run's one per-test report chain
        self._pinning: Pinning | None = None
        self.parts: dict[str, object] = {}  # every part of the run, by name, in the order added
        self.per_test_started = False
        self.is_worker = hasattr(config, "workerinput")
        self.is_controller = not self.is_worker and config.getoption("dist", "no") != "no"
        # xdist's own hooks only where it distributes (a controller with workers, or a worker)
        self.xdist = config.pluginmanager.hasplugin("xdist") and (self.is_worker or self.is_controller)

    # ------------------------------------------------------------ what the run resolved

    @property
    def device(self) -> RunDevice:
        if self._device is None:
            workerinput = getattr(self.config, "workerinput", None)
            raw = (workerinput[DEVICE_KEY] if workerinput is not None and DEVICE_KEY in workerinput
                   else self.options["dsakit_device"])
            self._device = RunDevice(str(raw) if raw else None, bool(self.options["dsakit_device_from_torch"]))
        return self._device

    @property
    def pinning(self) -> Pinning:
        if self._pinning is None:
            from dsakit.node.gpu_pinning import Pinning

            self._pinning = Pinning(self.config, int(self.options["dsakit_workers_per_gpu"] or 0),
                                    bool(self.options["dsakit_split_threads"]), self.device.selected)
        return self._pinning

    @property
    def given(self) -> tuple[str, ...]:
        """The dsakit options the run sets itself: empty, dsakit stays silent (a test may still use it)."""
        return self.options.given

    # ------------------------------------------------------------ the parts

    def add(self, name: str, part: object) -> None:
        """A part of the run (`Part`); one implementing pytest hooks is registered under `name` too."""
        self.parts[name] = part
        if any(attribute.startswith("pytest_") for attribute in dir(type(part))):
            self.config.pluginmanager.register(part, name)

    def _each(self, method: str, parts: Iterable[tuple[str, object]] | None = None) -> Iterator[tuple[str, Any]]:
        """(name, bound method) of every part defining `method`, in the order added."""
        for name, part in list(self.parts.items()) if parts is None else parts:
            bound = getattr(part, method, None)
            if bound is not None:
                yield name, bound

    # ------------------------------------------------------------ pytest_cmdline_main

    def run_fleet(self) -> int | None:
        """`--dsakit-device sm90,sm103,...`: one pytest run per device, then the fleet table (this
        process runs no test itself); None: not a fleet."""
        devices = self.device.fleet
        if not devices:
            return None
        from dsakit.simulation.fleet import run_fleet

        return run_fleet(self.config, devices, self.options["dsakit_report"])

    # ------------------------------------------------------------ pytest_configure

    def configure(self) -> None:
        """Bad input fails now, before collection; then the contract, the device, the gate session,
        and the parts the run asks for (in the order of their header lines)."""
        config, options = self.config, self.options
        options.check_all()  # ini / env values, also of options this run never reads
        if "dsakit_roles" in self.given:  # the default needs no check (nor the schema's import)
            from dsakit.contracts.schema import validate_roles_option

            validate_roles_option(options["dsakit_roles"])
        update_guard = None
        if config.getoption("--snapshot-update", default=False):
            from dsakit.topk.snapshot import configure_update

            update_guard = configure_update(config)  # refuses --collect-only
        from dsakit.contracts.extension import suite_contract

        self.contract = suite_contract(config)  # [tool.dsakit.contract]: every mock of the run
        self.device  # the selection is validated now
        config.pluginmanager.register(self, NAME)
        active.enter_run(self)
        self.add("dsakit-contract-reads", ContractReads())  # first: its section ends the summary
        self._configure_gates()
        if update_guard is not None:  # keeps goldens when the update stops early
            self.add("dsakit-snapshot-update-guard", update_guard)
        if self.given:  # pinning is opt-in: a run that sets no option has nothing to pin
            self._configure_pinning()
        if self.xdist and not self.is_worker:
            from dsakit.node.fault_isolation import XdistFaultHandoff

            self.add("dsakit-fault-handoff", XdistFaultHandoff(config))
        from dsakit.stack.import_hooks import ImportWatch

        self.imports = ImportWatch()
        self._configure_report_edits(self.imports)
        self._configure_simulation(self.imports)
        if options["dsakit_kernel_contracts"]:  # after the simulation: its guards get wrapped, not the reverse
            from dsakit.topk.launch_guard import LaunchGuard

            guard = LaunchGuard(config)
            guard.install(self.imports)
            self.add("dsakit-kernel-contracts", guard)
        recorder = config.pluginmanager.get_plugin(RECORDER_PLUGIN)
        if recorder is not None:
            self._configure_recorder(recorder)
        # a run that sets a dsakit option uses dsakit; an xdist controller records its workers'
        # reports before it can know; else a collected test or a `require()` call starts them
        if self.given or self.is_controller:
            self.start_per_test_hooks()

    def _configure_gates(self) -> None:
        from dsakit.errors import UsageError
        from dsakit.gates.inventory import InventoryReporter, host_label
        from dsakit.gates.marks import GateSession

        options, device = self.options, self.device
        try:
            must_run: tuple[str, ...] = ()
            if options["dsakit_must_run"] or "dsakit_must_run" in self.given:  # given empty: refused
                from dsakit.gates.table import split_codes, validate_codes

                must_run = validate_codes(split_codes(options["dsakit_must_run"], "--dsakit-must-run", given=True))
            report_path = options["dsakit_report"]
            if report_path is not None and not self.is_worker:
                from dsakit.output_paths import output_file

                output_file(report_path, "--dsakit-report")  # refuse now, not after the whole run
        except UsageError as error:
            raise pytest.UsageError(str(error)) from None
        self.gates = gates = GateSession(lambda: device.model)
        gates.on_use = self.start_per_test_hooks
        if self.is_controller:
            gates.inventory.declared = None  # a controller collects nothing: unknown until a worker reports
        self.reporter = InventoryReporter(
            self.config, gates.inventory, lambda: gates.device, must_run, report_path,
            host_label(options["dsakit_host_label"]) if report_path else "",
            must_run_strict=bool(options["dsakit_must_run_strict"]), announce=bool(self.given))
        self.add("dsakit-skip-inventory", self.reporter)

    def _configure_pinning(self) -> None:
        pinning = self.pinning  # validates --dsakit-workers-per-gpu
        if self.is_worker:
            from dsakit.node.gpu_pinning import configure_worker

            worker = configure_worker(self.config)
            if worker is not None:
                self.add("dsakit-gpu-worker", worker)
        elif (pinning.pin or pinning.threads) and self.config.pluginmanager.hasplugin("xdist"):
            self.add("dsakit-gpu-pinning", pinning)

    def _configure_report_edits(self, imports: ImportWatch) -> None:
        """The run's one report chain, started once a test phase can need it (every run): torch or a
        device simulation looked for, or a conftest answering the fault hook; the simulation adds its
        edit once this process can simulate."""
        from dsakit.gates.report_edits import START, START_MODULES, ReportEdits, WrapperStart

        edits = self.edits = ReportEdits()
        start = WrapperStart(self.config, edits, self.add)
        self.add(START, start)
        imports.looked_for(START_MODULES, start.start)
        imports.watch("dsakit.simulation.probe_patches", self._add_simulation_edit)

    def _add_simulation_edit(self, module: object) -> None:
        from dsakit.simulation.whole_run import explain_failure

        assert self.edits is not None
        self.edits.add(explain_failure, order=1)  # after the others: it explains the final report

    def _configure_simulation(self, imports: ImportWatch) -> None:
        """The whole-run simulation where the run's device is simulated: it starts here, before
        collection."""
        plan = self.device.plan
        if plan is None:
            if "dsakit_simulation_timeout" in self.given:  # a bad value is refused with or without a device
                from dsakit.simulation.watchdog import checked_timeout

                checked_timeout(int(self.options["dsakit_simulation_timeout"]))
            return
        from dsakit.simulation import watchdog
        from dsakit.simulation.whole_run import WholeRun

        run = WholeRun(self.config, plan, in_this_process=not self.is_controller)
        timeout = watchdog.checked_timeout(int(self.options["dsakit_simulation_timeout"]))
        coverage = self._device_branches(plan)
        if run.in_this_process:
            dog = watchdog.start(self.config, plan.device.key, timeout)
            if dog is not None:
                self.add("dsakit-simulation-watchdog", dog)
            if coverage is not None:
                coverage.start()  # before the simulation imports anything of SGLang's
            self.add("dsakit-whole-run", run)
            run.start(imports)
        else:
            self.add("dsakit-whole-run", run)
        if coverage is not None:  # after the simulation: its summary line comes first
            self.add("dsakit-device-branches", coverage)

    def _device_branches(self, plan: SimulationPlan) -> BranchCoverage | None:
        """Which of SGLang's device-gated branches the simulated device took (a GPU simulated on a
        GPU or on this CPU; the summary line, `-v`'s listing, the report's `device_branches`)."""
        if not plan.device.is_gpu:
            return None
        from dsakit.errors import UsageError
        from dsakit.stack.sglang_release import installed_release
        from dsakit.simulation.branch_coverage import BranchCoverage

        try:
            package_dir = installed_release().package_dir
        except UsageError:
            package_dir = None
        coverage = BranchCoverage(self.config, plan.device, plan.real, package_dir)
        if self.reporter is not None:
            self.reporter.sections["device_branches"] = coverage.as_json
        return coverage

    def _configure_recorder(self, plugin: Any) -> None:
        """`-p dsakit.compare.recorder --dsakit-record PATH` (`dsakit compare`): each outcome
        as a JSON line, on the controller."""
        recorder = plugin.recorder(self.config)
        if recorder is not None:
            self.add("dsakit-compare-recorder", recorder)

    def start_per_test_hooks(self) -> None:
        """Once per run that uses dsakit: the skip inventory's source and fault isolation, whose report
        edit runs in the report chain (one wrapper per test phase, from the first import of torch or a
        simulation). The skips are read from the terminal reporter's reports at the end (a worker's
        reach its controller), so only a run recording every outcome (`--dsakit-report`), or one without
        a terminal reporter, pays the recorder's hook call per test phase."""
        if self.per_test_started or self.gates is None or self.reporter is None:
            return
        self.per_test_started = True
        self.gates.on_use = None
        from dsakit.node.fault_isolation import PLUGIN_NAME, FaultIsolation

        if not self.is_worker:  # a worker's reports reach its controller, which records them
            self._start_skip_recording(self.reporter)
        isolation = FaultIsolation(self.config, self.add)
        assert self.edits is not None
        self.edits.add(isolation.edit_report)
        self.add(PLUGIN_NAME, isolation)

    def _start_skip_recording(self, reporter: InventoryReporter) -> None:
        manager = self.config.pluginmanager
        if not reporter.records_every_outcome and manager.has_plugin("terminal"):  # not -p no:terminal
            reporter.reads_kept_reports = True  # the terminal reporter's: every one so far and to come
            return
        from dsakit.gates.inventory import SkipRecorder

        # started after configure, the recorder first counts the skips the terminal reporter holds
        terminal = manager.get_plugin("terminalreporter")
        for report in getattr(terminal, "stats", {}).get("skipped", ()):
            reporter.log_report(report)
        self.add("dsakit-skip-recorder", SkipRecorder(reporter))

    # ------------------------------------------------------------ what the plugin hands on

    def auto_num_workers(self) -> int | None:
        return self.pinning.auto_num_workers()

    def generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """The parametrizations dsakit owns: `model_runner_role` (--dsakit-roles, the `dsakit_role`
        marker), `topk_cell` (the matrix), `simulated_device` (the `dsakit_simulate` marker)."""
        names = metafunc.fixturenames
        if "model_runner_role" in names:
            from dsakit.contracts.schema import parse_roles, validate_roles_option

            roles = parse_roles(self.options["dsakit_roles"])
            marker = metafunc.definition.get_closest_marker("dsakit_role")
            if marker is not None:
                roles = validate_roles_option(marker.args[0], what=f"{metafunc.definition.nodeid}: dsakit_role",
                                              collecting=True)
            metafunc.parametrize("model_runner_role", roles, ids=[f"role={r}" for r in roles])
        if "topk_cell" in names:
            from dsakit.topk.matrix import parametrize

            parametrize(metafunc, self.options["dsakit_topk_subset"], self.options["dsakit_roles"])
        if "simulated_device" in names:
            from dsakit.simulation.probe_patches import parametrize as simulate

            simulate(metafunc, self.device.simulated_key)

    def simulated_device(self, request: pytest.FixtureRequest) -> Iterator[Any]:
        """The `simulated_device` fixture: the marker's device, else the run's simulated one."""
        from dsakit.simulation.probe_patches import fixture

        yield from fixture(request, self.device.simulated_key)

    def collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """After -k/-m deselection: closed gates skip; tests declaring more GPUs than the node has skip."""
        from dsakit.gates.marks import apply_gates

        assert self.gates is not None
        markers = apply_gates(self.gates, items)
        if self.gates.inventory.used:
            self.start_per_test_hooks()
        if {"dsakit_gpus", "dsakit_whole_node"} & markers:
            from dsakit.node.gpu_pinning import skip_multi_gpu

            skip_multi_gpu(self.pinning, items)

    # ------------------------------------------------------------ once-per-run hooks (registered as NAME)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """Every part's lines (the skip inventory's where the run set an option, GPU pinning's, the
        simulation's, the kernel-launch contracts')."""
        return [line for _, lines in self._each("header_lines") for line in lines()]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.reporter is not None:
            self.reporter.collection_finish(session)

    @pytest.hookimpl(trylast=True)  # after xdist's own: a worker's hand-over, the must-run verdict last
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:  # the one hand-over: every part's data under its name
            handed = {name: data for name, data in ((name, output()) for name, output in self._each("worker_output"))
                      if data is not None}
            self.config.workeroutput[WORKER_KEY] = handed  # type: ignore[attr-defined]
        if self.reporter is not None:
            self.reporter.sessionfinish(session)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        """Every part's lines, the part added last first (fault isolation's, the simulation's, ...,
        the skip inventory's, the contract reads')."""
        for _, summary in self._each("summary", reversed(list(self.parts.items()))):
            summary(terminalreporter)

    @pytest.hookimpl(trylast=True)  # the simulation ends after everything else
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        try:
            if self.imports is not None:
                self.imports.close()  # nothing more arrives for the parts now closing
            errors: list[BaseException] = []
            for _, close in self._each("close", reversed(list(self.parts.items()))):
                try:
                    close()
                except Exception as error:  # noqa: BLE001 - close the other parts too
                    errors.append(error)
            if errors:
                raise errors[0]
        finally:
            active.leave_run(self)

    # xdist (optional hooks: valid without it)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: Sequence[Any]) -> None:
        for _, setup in self._each("setup_nodes"):
            setup(specs)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[DEVICE_KEY] = self.device.selected
        for _, configure in self._each("configure_node"):
            configure(node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        handed = (getattr(node, "workeroutput", None) or {}).get(WORKER_KEY, {})
        for name, merge in self._each("merge"):
            if name in handed:
                merge(handed[name])

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        for _, handle in self._each("handle_crash_item"):
            handle(crashitem, report)


class ContractReads:
    """The strict mocks' read log (dsakit.mocks.read_log) as a part: its summary section, and a
    worker's log merged into its controller's. Loaded by no run that builds no mock."""

    _MODULE = "dsakit.mocks.read_log"

    def summary(self, terminalreporter: Any) -> None:
        log = sys.modules.get(self._MODULE)
        lines = log.format_summary() if log is not None else []
        if lines:
            terminalreporter.section("dsakit contract reads")
            for line in lines:
                terminalreporter.write_line(line)

    def worker_output(self) -> Any:
        log = sys.modules.get(self._MODULE)  # not loaded: no mock, nothing to hand over
        return log.worker_output() if log is not None else None

    def merge(self, data: Any) -> None:
        import dsakit.mocks.read_log as read_log  # the module sys.modules holds (see dsakit.mocks.strict_node)

        read_log.merge(data)


_KEY = pytest.StashKey[DsakitSession]()  # the run's one stash key


def session_of(config: pytest.Config) -> DsakitSession:
    """The run's session, built on first ask."""
    try:
        return config.stash[_KEY]
    except KeyError:
        session = config.stash[_KEY] = DsakitSession(config)
        return session
