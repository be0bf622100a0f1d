"""The pytest plugin (pytest11 entry point `dsakit`): options, markers, fixtures and hooks, wired
here and implemented in the modules that own each concept.

Must stay cheap to load: no torch, SGLang or CUDA import at module level or in the option/marker
hooks, so `pytest --help` and collection on a CPU box stay fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dsakit.mocks.model_runner import MockModelRunner


# ---------------------------------------------------------------- options & markers


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dsakit", "dsakit: SGLang DSA / DeepSeek-V4 contract testing")
    group.addoption(
        "--dsakit-roles",
        default="target,draft",
        help="roles the `model_runner` fixture is parametrized over (comma-separated: target, draft)",
    )

    # -- capability gates and the skip inventory (dsakit.gates.marks, dsakit.gates.inventory)
    group.addoption(
        "--dsakit-device",
        default=None,
        metavar="NAME",
        help="simulate a device for the capability gates (sm90, sm100, sm103, sm120, gfx90a, gfx942, "
        "gfx950, cpu; or 'real', the default; env DSAKIT_DEVICE). Module gates still look at this machine",
    )
    group.addoption(
        "--dsakit-probe-torch",
        action="store_true",
        default=False,
        help="let the real-device probe fall back to torch.cuda when NVML, nvidia-smi and rocminfo find nothing",
    )
    group.addoption(
        "--dsakit-report",
        default=None,
        metavar="PATH",
        help="write the run's report as JSON: the node (device, SGLang release, host label, "
        "pytest-split shard), every test's outcome and gates, skips per gate (`dsakit report merge` "
        "merges nodes and shards)",
    )
    group.addoption(
        "--dsakit-host-label",
        default=None,
        metavar="LABEL",
        help="this node's name in --dsakit-report (default: $DSAKIT_HOST_LABEL, else the hostname)",
    )
    group.addoption(
        "--dsakit-must-run",
        default="",
        metavar="CODE,...",
        help="fail the run when any test behind these gate codes was skipped (per shard: tests of "
        "other shards are not skipped; `dsakit report merge` checks they ran on some node)",
    )

    # -- GPU nodes: one GPU per xdist worker (dsakit.node.gpu_pinning)
    group.addoption(
        "--dsakit-workers-per-gpu",
        type=int,
        default=1,
        metavar="N",
        help="xdist workers allowed per GPU (default 1; 0 turns GPU pinning off). Each worker gets "
        "its own CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES entry; -n auto becomes GPUs x N",
    )

    # -- xdist workers forked from a preloaded interpreter (dsakit.node.fork_server)
    group.addoption(
        "--dsakit-fork-server",
        default=None,
        choices=("auto", "on", "off", "keep"),
        help="fork xdist workers from one server that imported torch and SGLang once, without CUDA "
        "(on: started by this run; keep: it outlives the run and later runs with the same interpreter, "
        "cwd and environment reuse it; auto, the default: reuse a kept one if alive, else spawn plainly; "
        "off. Falls back to a plain spawn with a reason in the header; ini: dsakit_fork_server)",
    )
    parser.addini("dsakit_fork_server", "default of --dsakit-fork-server (auto, on, off, keep)", default="auto")
    parser.addini("dsakit_fork_server_keep_s", "seconds a kept fork server waits for the next run (default 900)",
                  default="900")
    parser.addini("dsakit_fork_server_preload", "modules the fork server imports (default: torch and the "
                  "SGLang modules the contract suites import)", type="args", default=[])

    # -- target/draft top-k backend matrix (dsakit.topk.matrix)
    group.addoption(
        "--dsakit-topk-subset",
        default=None,
        choices=("full", "per-role", "pairwise"),
        help="top-k backend matrix subset for every `topk_cell` test of this run (overrides the "
        "dsakit_topk_matrix marker; default: the marker's, else pairwise)",
    )


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
    "dsakit_jit(*targets): JIT modules this test compiles on first use (flashinfer-topk, "
    "sglang-topk-v2); `dsakit warm` builds them before the workers start",
    "dsakit_topk_matrix(subset='pairwise', roles=('target','draft'), invalid='skip', gated=True): "
    "parametrize the `topk_cell` fixture over the DSA top-k backend matrix (subsets: full, "
    "per-role, pairwise; invalid cells: skip, drop, keep)",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)

    # the hook objects each concern asks for, registered here: the skip-inventory reporter and
    # its xdist aggregation (dsakit.gates.marks), GPU pinning (dsakit.node.gpu_pinning)
    from dsakit.gates import marks
    from dsakit.node import fork_server, gpu_pinning

    for hooks in (marks.configure(config), gpu_pinning.configure(config), fork_server.configure(config)):
        for name, plugin in hooks.items():
            config.pluginmanager.register(plugin, name)


# ---------------------------------------------------------------- capability gates


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: only selected items are gated
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from dsakit.gates.marks import apply_gates

    apply_gates(config, items)

    # -- GPU nodes: tests declaring more GPUs than the node has skip with [gpus:n]
    from dsakit.node.gpu_pinning import skip_multi_gpu

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
    from dsakit.gates.marks import unconfigure

    unconfigure(config)


# ---------------------------------------------------------------- model-runner fixtures


def _runner(role: str) -> MockModelRunner:
    from dsakit.mocks.model_runner import MockModelRunner

    return MockModelRunner(role=role)


@pytest.fixture
def target_runner() -> MockModelRunner:
    """A strict MockModelRunner for a target worker (`is_draft_worker=False`)."""
    return _runner("target")


@pytest.fixture
def draft_runner() -> MockModelRunner:
    """A strict MockModelRunner for a draft (speculative) worker (`is_draft_worker=True`)."""
    return _runner("draft")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "model_runner_role" in metafunc.fixturenames:
        from dsakit.contracts.schema import parse_roles

        roles = parse_roles(metafunc.config.getoption("--dsakit-roles"))
        marker = metafunc.definition.get_closest_marker("dsakit_role")
        if marker is not None:
            roles = parse_roles(marker.args[0])
        metafunc.parametrize("model_runner_role", roles, ids=[f"role={r}" for r in roles])
    if "topk_cell" in metafunc.fixturenames:
        from dsakit.topk.matrix import parametrize

        parametrize(metafunc)  # the target/draft top-k backend matrix


@pytest.fixture
def model_runner(model_runner_role: str) -> MockModelRunner:
    """A strict MockModelRunner, parametrized over the roles (target, draft)."""
    return _runner(model_runner_role)


# ---------------------------------------------------------------- reporting


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    import sys

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
    `selection_snapshot.assert_case(case, positions, reference=...)`. Needs syrupy."""
    try:
        snapshot = request.getfixturevalue("snapshot")
    except pytest.FixtureLookupError:
        from dsakit.errors import UsageError

        raise UsageError(
            "selection_snapshot needs syrupy (the `snapshot` fixture): pip install 'syrupy>=7' "
            "(dsakit[test]); on an offline node install its wheel") from None
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
