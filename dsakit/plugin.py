"""The pytest plugin (pytest11 entry point `dsakit`): options, markers, fixtures and hooks, wired
here and implemented in the modules that own each concept.

Must stay cheap to load: no torch, SGLang or CUDA import at module level or in the option/marker
hooks, so `pytest --help` and collection on a CPU box stay fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dsakit.mocks.model_runner import MockModelRunner


# ---------------------------------------------------------------- options & markers


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every `--dsakit-*` flag and its `dsakit_*` ini key (the table: dsakit.options; precedence:
    command line > environment variable > ini key > default)."""
    from dsakit.options import register

    register(parser)


# Every marker dsakit knows, registered here and nowhere else (names are read by the modules
# that evaluate them: dsakit.gates.marks, dsakit.node.gpu_pinning, dsakit.node.warm,
# dsakit.topk.matrix).
MARKERS = (
    "dsakit_role(name): run this test only for one model-runner role (target or draft)",
    "dsakit_requires(*codes): skip unless every dsakit gate is open (codes: `dsakit capabilities`; "
    "expressions like 'sm>=9.0', 'sm~10', 'gfx in gfx942,gfx950')",
    "dsakit_gpus(n): the test needs n GPUs; under xdist it takes the node lock exclusively and "
    "CUDA_VISIBLE_DEVICES names n GPUs for its duration (skips with [gpus:n] on smaller nodes)",
    "dsakit_whole_node: the test needs every GPU of the node, exclusively (see dsakit_gpus)",
    "dsakit_jit(*targets): JIT modules this test compiles on first use (`dsakit warm --help` names "
    "the targets); `dsakit warm` builds them before the workers start",
    "dsakit_topk_matrix(subset='pairwise', roles=('target','draft'), invalid='skip', gated=True): "
    "parametrize the `topk_cell` fixture over the DSA top-k backend matrix (subsets: full, "
    "per-role, pairwise; invalid cells: skip, drop, keep)",
    "dsakit_simulate(*devices): parametrize the `simulated_device` fixture over simulated devices "
    "(none given: every profile; --dsakit-device NAME narrows to that one); SGLang's device probes "
    "answer as that device for the whole test",
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    _rewrite_assertion_helpers_only(pluginmanager)  # first: before the imports below
    from dsakit.node import fault_hookspec
    from dsakit.pytest_invocation import load_once

    pluginmanager.add_hookspecs(fault_hookspec)
    load_once(pluginmanager, sys.modules[__name__])  # one plugin under its two names


def _rewrite_assertion_helpers_only(pluginmanager: pytest.PytestPluginManager) -> None:
    """pytest marks the whole distribution of an entry-point plugin for assertion rewriting (the
    `dsakit` package). Only dsakit's assertion helpers need it (registered below, by name); its other
    modules then load through Python's own importer, as where `-p dsakit.plugin` loads the plugin
    from a checkout, instead of through the rewriting hook, which costs every session ~2.5 M
    instructions per module (bench/README.md, "Kit overhead"). Test files (`test_*.py`, conftests)
    inside the package are rewritten as test files; no pytest API unmarks a name, hence the
    private set, left alone where a pytest lacks it."""
    hook = getattr(pluginmanager, "rewrite_hook", None)  # a dummy hook under --assert=plain
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set) and "dsakit" in marked:
        marked.discard("dsakit")
        cache = getattr(hook, "_marked_for_rewrite_cache", None)
        if isinstance(cache, dict):
            cache.clear()


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)

    # bad input fails now, before collection: ini / env values, --dsakit-roles (also where no test
    # asks for `model_runner`), and --collect-only --snapshot-update (it would delete the goldens)
    from dsakit.options import check_all, explicit, value

    check_all(config)
    given = explicit(config)  # empty: the run asks dsakit for nothing (a test may still use it)
    from dsakit import sglang_import_chain

    sglang_import_chain.SESSION.append(os.getpid())  # the sglang:import-chain gate answers in this process
    if "dsakit_roles" in given:  # the default needs no check (nor the schema's import)
        from dsakit.contracts.schema import validate_roles_option

        validate_roles_option(value(config, "dsakit_roles"))
    if config.getoption("--snapshot-update", default=False):
        from dsakit.topk.snapshot import configure_update

        configure_update(config)  # also keeps goldens when the update stops early

    # the suite's own contract entries ([tool.dsakit.contract] in its pyproject.toml): every mock
    # of this run is built from dsakit's contract plus them
    from dsakit import contract_extension

    contract_extension.configure(config)

    # the hook objects each concern asks for, registered here (in this order: it is the order of
    # their header lines): the skip-inventory reporter and its xdist aggregation
    # (dsakit.gates.marks); GPU pinning (dsakit.node.gpu_pinning: options only, so a run that
    # sets none has nothing to pin); the xdist controller's hand-over of device faults
    # (dsakit.node.fault_isolation); the whole-run device simulation (dsakit.simulation.whole_run:
    # it starts here, before collection) and the start of the one per-test report wrapper (once
    # torch, a simulation or a fault probe arrives); the contract-reads summary from every xdist
    # worker. The other per-test hooks start once the run uses dsakit.
    from dsakit.gates import marks
    from dsakit.simulation import whole_run

    # xdist's own hooks only where it distributes (a controller with workers, or a worker)
    xdist = config.pluginmanager.hasplugin("xdist") and (
        hasattr(config, "workerinput") or config.getoption("dist", "no") != "no")
    hooks = marks.configure(config, on_use=lambda: _start_per_test_hooks(config))
    if given:
        from dsakit.node import gpu_pinning

        hooks.update(gpu_pinning.configure(config))
    if xdist:
        from dsakit.node import fault_isolation

        hooks.update(fault_isolation.configure(config))
    hooks.update(whole_run.configure(config))
    if "dsakit_kernel_contracts" in given:  # after the simulation: its guards get wrapped, not the reverse
        from dsakit.topk import launch_guard

        hooks.update(launch_guard.configure(config))
    if xdist:
        from dsakit.mocks.read_log import XdistReadLog

        hooks["dsakit-xdist-contract-reads"] = XdistReadLog(config)
    for name, plugin in hooks.items():
        config.pluginmanager.register(plugin, name)
    whole_run.watch(config)  # the report wrapper: now, or once torch / a simulation / a fault probe arrives
    # a run that sets a dsakit option uses dsakit; an xdist controller records its workers'
    # reports before it can know; else a collected test or a `require()` call starts them
    if given or (not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"):
        _start_per_test_hooks(config)


_PER_TEST_STARTED = pytest.StashKey[bool]()


def _start_per_test_hooks(config: pytest.Config) -> None:
    """Once per run that uses dsakit: the skip recorder (dsakit.gates.marks) and fault isolation,
    whose report edit runs inside the simulation's report wrapper (one wrapper per test phase, from
    the first import of torch or a simulation); a run that uses nothing of dsakit pays no hook call
    per test."""
    if config.stash.get(_PER_TEST_STARTED, False):
        return
    config.stash[_PER_TEST_STARTED] = True
    from dsakit.gates.marks import per_test_hooks
    from dsakit.node.fault_isolation import start
    from dsakit.simulation.whole_run import report_wrapper

    for name, plugin in {**per_test_hooks(config), **start(config, report_wrapper(config).add_edit)}.items():
        config.pluginmanager.register(plugin, name)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`--dsakit-device sm90,sm103,...`: one pytest run per device, in parallel, then the fleet table
    (dsakit.simulation.fleet); this process runs no test itself."""
    from dsakit.options import value

    raw = value(config, "dsakit_device")
    if not raw or "," not in str(raw) or config.option.help or config.option.version:
        return None
    from dsakit.simulation.fleet import fleet_devices, run_fleet

    devices = fleet_devices(str(raw))
    return run_fleet(config, devices) if devices else None


# ---------------------------------------------------------------- capability gates


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: only selected items are gated
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from dsakit.gates.marks import apply_gates, uses_dsakit_now

    markers = apply_gates(config, items)
    if uses_dsakit_now(config):
        _start_per_test_hooks(config)
    if {"dsakit_gpus", "dsakit_whole_node"} & markers:  # tests declaring more GPUs than the node has
        from dsakit.node.gpu_pinning import skip_multi_gpu  # skip with [gpus:n]

        skip_multi_gpu(config, items)


# ---------------------------------------------------------------- GPU nodes


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own CPU count
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` on a GPU node: GPUs x --dsakit-workers-per-gpu. Module-level (not in the xdist
    class) because xdist asks in pytest_cmdline_main, before pytest_configure registers classes;
    optionalhook keeps it valid without xdist."""
    from dsakit.node.gpu_pinning import auto_num_workers

    return auto_num_workers(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    from dsakit import contract_extension
    from dsakit.gates.marks import unconfigure

    unconfigure(config)
    contract_extension.unconfigure(config)
    from dsakit import sglang_import_chain

    if os.getpid() in sglang_import_chain.SESSION:
        sglang_import_chain.SESSION.remove(os.getpid())


# ---------------------------------------------------------------- model-runner fixtures


def _loaded(name: str) -> Any:
    """The module `name`, imported on first use. For what runs per test: a `from a.b import c`
    inside a function costs every call ~8,700 instructions on Python 3.11 (it looks the module's
    `__path__` up and formats the AttributeError), a sys.modules lookup ~1,000 (bench/README.md,
    "Kit overhead"). Read each time, never kept: pytester's in-process runs drop modules."""
    module = sys.modules.get(name)
    if module is None:
        __import__(name)
        module = sys.modules[name]
    return module


RUNNER_SCOPE = "dsakit.mocks.runner_scope"


@pytest.fixture
def target_runner() -> Iterator[MockModelRunner]:
    """A strict MockModelRunner for a target worker (`is_draft_worker=False`); where the test's
    module imported SGLang and nothing is published, inside an SGLangScope with the role's server
    args for the test (dsakit.mocks.runner_scope)."""
    yield from _loaded(RUNNER_SCOPE).scoped_runner("target")


@pytest.fixture
def draft_runner() -> Iterator[MockModelRunner]:
    """A strict MockModelRunner for a draft (speculative) worker (`is_draft_worker=True`), scoped
    as `target_runner` is."""
    yield from _loaded(RUNNER_SCOPE).scoped_runner("draft")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "model_runner_role" in metafunc.fixturenames:
        from dsakit.contracts.schema import parse_roles, validate_roles_option

        from dsakit.options import value

        roles = parse_roles(value(metafunc.config, "dsakit_roles"))
        marker = metafunc.definition.get_closest_marker("dsakit_role")
        if marker is not None:
            roles = validate_roles_option(marker.args[0], what=f"{metafunc.definition.nodeid}: dsakit_role",
                                          collecting=True)
        metafunc.parametrize("model_runner_role", roles, ids=[f"role={r}" for r in roles])
    if "topk_cell" in metafunc.fixturenames:
        from dsakit.topk.matrix import parametrize

        parametrize(metafunc)  # the target/draft top-k backend matrix
    if "simulated_device" in metafunc.fixturenames:
        from dsakit.upstream import device_simulation

        device_simulation.parametrize(metafunc)  # @pytest.mark.dsakit_simulate(...)


@pytest.fixture
def model_runner(model_runner_role: str) -> Iterator[MockModelRunner]:
    """A strict MockModelRunner per role: tests using it run once per role of `--dsakit-roles`
    (ids `role=target`, `role=draft`), scoped as `target_runner` is. `model_runner_role` is that
    parametrize argument, not a fixture: name it in a test's arguments to know the role."""
    yield from _loaded(RUNNER_SCOPE).scoped_runner(model_runner_role)


@pytest.fixture
def simulated_device(request: pytest.FixtureRequest) -> Iterator[Any]:
    """SGLang's device probes answer as a simulated device for the test (`dsakit.simulate_device`):
    the `dsakit_simulate` marker's device, else --dsakit-device NAME; skips when neither names one.
    Yields the DeviceModel; restored afterwards even when the test raised."""
    from dsakit.upstream.device_simulation import fixture

    yield from fixture(request)


# ---------------------------------------------------------------- reporting


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if "dsakit.mocks.read_log" not in sys.modules:
        return  # no mock was built in this process: nothing to report
    from dsakit.mocks.read_log import format_summary

    lines = format_summary()
    if lines:
        terminalreporter.section("dsakit contract reads")
        for line in lines:
            terminalreporter.write_line(line)


# ---------------------------------------------------------------- top-k selection snapshots

# Assertion helpers: rewritten so a failed `snapshot == summary` shows syrupy's diff.
pytest.register_assert_rewrite("dsakit.topk.checks", "dsakit.topk.snapshot")


@pytest.fixture
def selection_snapshot(request: pytest.FixtureRequest) -> Any:
    """Golden top-k selections keyed by case (`dsakit.topk.snapshot.SelectionSnapshot`):
    `selection_snapshot.assert_case(case, positions)`; `reference=True` marks the path whose own
    selection is written as the golden under --snapshot-update (without one, a missing golden is
    written from dsakit's reference top-k). Needs the `snapshot` extra (syrupy 7, numpy)."""
    from dsakit.topk.snapshot_requirements import missing_snapshot_requirements

    missing = missing_snapshot_requirements()
    try:
        snapshot = None if missing else request.getfixturevalue("snapshot")
    except pytest.FixtureLookupError:
        missing = "syrupy's `snapshot` fixture (is syrupy disabled with -p no:syrupy?)"
    if missing or snapshot is None:
        from dsakit.errors import UsageError

        raise UsageError(
            f"selection_snapshot needs {missing}: pip install 'pytest-dsakit[snapshot]' (syrupy>=7, "
            "numpy); on an offline node install those wheels") from None
    from dsakit.topk.snapshot import SelectionSnapshot

    return SelectionSnapshot(snapshot)


# ---------------------------------------------------------------- top-k backend matrix


@pytest.fixture
def topk_cell(request: pytest.FixtureRequest) -> Any:
    """One cell of the DSA top-k backend matrix (`dsakit.topk.matrix.TopkCell`), parametrized
    by `@dsakit.topk_matrix(...)` / `--dsakit-topk-subset`; nothing is applied yet."""
    return request.param


@pytest.fixture
def topk_scope(topk_cell: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The `topk_cell` applied through SGLang's runtime context (server args, env flags,
    one-GPU topology) for the test, restored afterwards even when it raised; invalid cells are
    refused with their reasons before anything runs. Yields the cell."""
    from dsakit.topk.matrix import scoped

    yield from scoped(topk_cell, request.node)
