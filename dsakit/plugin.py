"""The pytest plugin (pytest11 entry point `dsakit`): options, markers, fixtures and hooks, wired
here and implemented in the modules that own each concept.

Must stay cheap to load: no torch, SGLang or CUDA import at module level or in the option/marker
hooks, so `pytest --help` and collection on a CPU box stay fast.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from dsakit.session import session_of

if TYPE_CHECKING:
    from dsakit.mocks.model_runner import MockModelRunner


# ---------------------------------------------------------------- options & markers


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every `--dsakit-*` flag and its `dsakit_*` ini key (the table: dsakit.options; precedence:
    command line > environment variable > ini key > default)."""
    from dsakit.options import register

    register(parser)


# Every marker dsakit knows, registered here and nowhere else (names are read by the modules
# that evaluate them: dsakit.gates.marks, dsakit.node.gpu_pinning, dsakit.warm.targets,
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
    "(none given: every profile; --dsakit-device NAME narrows to that one where the marker names it or "
    "none, other devices run inside it); SGLang's device probes answer as that device for the whole test",
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    _rewrite_assertion_helpers_only(pluginmanager)  # first: before the imports below
    from dsakit import hookspec
    from dsakit.node.pytest_invocation import load_once

    pluginmanager.add_hookspecs(hookspec)
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
    session_of(config).configure()  # the run's session: options, device, contract, gates, its parts


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`--dsakit-device sm90,sm103,...`: one pytest run per device, in parallel, then the fleet table
    (dsakit.simulation.fleet); this process runs no test itself."""
    if config.option.help or config.option.version:
        return None
    return session_of(config).run_fleet()


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: only selected items are gated
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    session_of(config).collection_modifyitems(items)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own CPU count
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` on a GPU node: GPUs x --dsakit-workers-per-gpu. Module-level (not on the session)
    because xdist asks in pytest_cmdline_main, before pytest_configure registers it; optionalhook
    keeps it valid without xdist."""
    return session_of(config).auto_num_workers()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    session_of(metafunc.config).generate_tests(metafunc)


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
    yield from session_of(request.config).simulated_device(request)


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
