"""dsakit: a pytest kit and strict mocks for contract-testing SGLang's DSA / DeepSeek-V4 backends.

This is the only name downstream suites import. Everything public is re-exported here, lazily:
`import dsakit` loads no torch, SGLang or CUDA; each name's module is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from dsakit import checkout_layout as _checkout_layout

_checkout_layout.install(__path__[0])  # a checkout on PYTHONPATH: dsakit.mocks is ./mocks, as installed

__version__ = "0.1.0"  # the distribution pytest-dsakit reads it (pyproject: dynamic version)

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "ContractViolation": "dsakit.errors",
    "UsageError": "dsakit.errors",
    "Reason": "dsakit.reasons",
    "SGLangRelease": "dsakit.sglang_release",
    "installed_release": "dsakit.sglang_release",
    "release_from_tree": "dsakit.sglang_release",
    "ContractEntry": "dsakit.contracts.schema",
    "Role": "dsakit.contracts.schema",
    "MODEL_RUNNER_CONTRACT": "dsakit.contracts.model_runner_contract",
    "effective_contract": "dsakit.contract_extension",
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
    "JIT_TARGETS": "dsakit.node.warm",
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
    "SGLangScope": "dsakit.upstream.scope",
    # real SGLang pools for a strict runner, and SGLang's attention kit on it
    "req_to_token_pool": "dsakit.backends.harness",
    "dsa_kv_pool": "dsakit.backends.harness",
    "deepseek_v4_kv_pool": "dsakit.backends.harness",
    "kit_on_strict_runner": "dsakit.backends.sglang_kit",
    "strict_runner_from_kit": "dsakit.backends.sglang_kit",
    "SGLangState": "dsakit.upstream.scope",
    "sglang_state": "dsakit.upstream.scope",
    # hardware branches on any machine
    "simulate_device": "dsakit.upstream.device_simulation",
    "SimulatedKernelLaunch": "dsakit.upstream.device_simulation",
    "SimulatedKernelAbsent": "dsakit.upstream.device_simulation",
    "KernelContractViolation": "dsakit.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dsakit' has no attribute {name!r}")
    # Not cached in globals(): the owning module stays the single source (pytester's in-process
    # runs drop and re-import modules, and a cached class would then be a stale twin).
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
