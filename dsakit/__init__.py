"""dsakit: a pytest kit and strict mocks for contract-testing SGLang's DSA / DeepSeek-V4 backends.

This is the only name downstream suites import. Everything public is re-exported here, lazily:
`import dsakit` loads no torch, SGLang or CUDA; each name's module is imported on first use.

A dsakit checkout on PYTHONPATH (a GPU node with no install): `dsakit.mocks` and `dsakit.contracts`
are the checkout's top-level `mocks/` and `contracts/`, as pyproject's package-dir maps them in a
wheel and in an editable install, through the last meta-path finder (an install's own mapping
answers first); never under any other name. Here, in the package itself, because every wing
imports `dsakit` first.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

_MAPPED = ("mocks", "contracts")  # pyproject [tool.setuptools] package-dir: dsakit.<name> = "<name>"


class _CheckoutFinder:
    """A meta-path finder (duck-typed: importlib.abc costs every `import dsakit` ~6 ms) that finds
    dsakit.mocks / dsakit.contracts in the checkout `root`; their submodules then come from the
    package's own path."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        package, _, leaf = name.partition(".")
        if package != "dsakit" or leaf not in _MAPPED:
            return None
        import importlib.util

        folder = os.path.join(self.root, leaf)
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


def _checkout_root(package_dir: str) -> str | None:
    """The checkout `package_dir` (dsakit/) sits in, when the mapped folders are beside it and not
    inside it (a wheel has them inside); else None."""
    root = os.path.dirname(package_dir)
    beside = all(os.path.isfile(os.path.join(root, leaf, "__init__.py")) for leaf in _MAPPED)
    inside = any(os.path.isdir(os.path.join(package_dir, leaf)) for leaf in _MAPPED)
    if beside and not inside and os.path.isfile(os.path.join(root, "pyproject.toml")):
        return root
    return None


def _install(package_dir: str) -> None:
    """Called while `dsakit` imports: adds the finder only where nothing else maps the folders (a
    wheel and an editable install do; then sys.meta_path is left as it was)."""
    root = _checkout_root(package_dir)
    if root is None or any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
        return
    import importlib.util

    if importlib.util.find_spec(f"dsakit.{_MAPPED[0]}") is None:
        sys.meta_path.append(_CheckoutFinder(root))


_install(__path__[0])  # a checkout on PYTHONPATH: dsakit.mocks is ./mocks, as installed

__version__ = "0.1.0"  # the distribution pytest-dsakit reads it (pyproject: dynamic version)

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "ContractViolation": "dsakit.errors",
    "UsageError": "dsakit.errors",
    "Reason": "dsakit.reasons",
    "SGLangRelease": "dsakit.stack.sglang_release",
    "installed_release": "dsakit.stack.sglang_release",
    "release_from_tree": "dsakit.stack.sglang_release",
    "ContractEntry": "dsakit.contracts.schema",
    "Role": "dsakit.contracts.schema",
    "MODEL_RUNNER_CONTRACT": "dsakit.contracts.model_runner_contract",
    "effective_contract": "dsakit.contracts.extension",
    "MockModelRunner": "dsakit.mocks.model_runner",
    "contract_reads": "dsakit.mocks.read_log",
    # capability gates
    "gate": "dsakit.gates.marks",
    "require": "dsakit.gates.marks",
    "DeviceModel": "dsakit.gates.device_model",
    "Gate": "dsakit.gates.table",
    # top-k selections
    "TopkCase": "dsakit.topk.cases",
    "CASES": "dsakit.topk.cases",
    "get_case": "dsakit.topk.cases",
    "select_topk_cases": "dsakit.topk.cases",
    "assert_topk_valid": "dsakit.topk.checks",
    "assert_topk_equal": "dsakit.topk.checks",
    "check_topk": "dsakit.topk.checks",
    "compare_topk": "dsakit.topk.checks",
    "validate_lengths": "dsakit.topk.checks",
    "TOPK_PATHS": "dsakit.topk.launch",
    "SelectionSnapshotExtension": "dsakit.topk.snapshot",
    "summarize_selection": "dsakit.topk.snapshot",
    # GPU-node workflows
    "GpuInventory": "dsakit.node.gpu_pinning",
    "discover_gpus": "dsakit.node.gpu_pinning",
    "JIT_TARGETS": "dsakit.warm.targets",
    "ci_registrations": "dsakit.node.rerun",
    # target/draft top-k backend matrix
    "topk_matrix": "dsakit.topk.matrix",
    "topk_cells": "dsakit.topk.matrix",
    "topk_cell": "dsakit.topk.matrix",
    "TopkCell": "dsakit.topk.matrix",
    "InvalidTopkCell": "dsakit.topk.matrix",
    "TopkFlags": "dsakit.topk.flags",
    "release_topk_flags": "dsakit.topk.flags",
    "TopkConfig": "dsakit.topk.rules",
    "Expectation": "dsakit.topk.rules",
    "expect_topk": "dsakit.topk.rules",
    "SGLangScope": "dsakit.sglang_facts.scope",
    # real SGLang pools for a strict runner, and SGLang's attention kit on it
    "req_to_token_pool": "dsakit.backends.harness",
    "dsa_kv_pool": "dsakit.backends.harness",
    "deepseek_v4_kv_pool": "dsakit.backends.harness",
    "kit_on_strict_runner": "dsakit.backends.sglang_kit",
    "strict_runner_from_kit": "dsakit.backends.sglang_kit",
    "SGLangState": "dsakit.sglang_facts.scope",
    "sglang_state": "dsakit.sglang_facts.scope",
    # hardware branches on any machine
    "simulate_device": "dsakit.simulation.probe_patches",
    "SimulatedKernelLaunch": "dsakit.simulation.probe_patches",
    "SimulatedKernelAbsent": "dsakit.simulation.probe_patches",
    "KernelContractViolation": "dsakit.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dsakit' has no attribute {name!r}")
    # Not cached in globals(): the owning module stays the single source (pytester's in-process
    # runs drop and re-import modules, and a cached class would then be a stale twin). A loaded
    # module is read from sys.modules: `dsakit.gate(...)` on every param of a matrix asks here.
    loaded = sys.modules.get(module)
    return getattr(loaded if loaded is not None else importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
