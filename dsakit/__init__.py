"""dsakit: a pytest kit and strict mocks for contract-testing SGLang's DSA / DeepSeek-V4 backends.

This is the only name downstream suites import. Everything public is re-exported here, lazily:
`import dsakit` loads no torch, SGLang or CUDA; each name's module is imported on first use.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def _link_checkout_packages() -> None:
    """In a source checkout, mocks/ and contracts/ sit beside dsakit/; wheels and editable
    installs map them to dsakit.mocks / dsakit.contracts (pyproject package-dir). Where nothing
    maps them (`PYTHONPATH=<checkout>` on the offline GPU node), let the checkout resolve them."""
    import importlib.util

    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "mocks" / "__init__.py").is_file():
        return
    if importlib.util.find_spec("dsakit.mocks") is None:
        __path__.append(str(checkout))


_link_checkout_packages()

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
    "MockModelRunner": "dsakit.mocks.model_runner",
    "contract_reads": "dsakit.mocks.read_log",
    # capability gates
    "gate": "dsakit.gate_marks",
    "require": "dsakit.gate_marks",
    "DeviceModel": "dsakit.device_model",
    "Gate": "dsakit.gates",
    # top-k selections
    "TopkCase": "dsakit.topk_cases",
    "CASES": "dsakit.topk_cases",
    "get_case": "dsakit.topk_cases",
    "select_topk_cases": "dsakit.topk_cases",
    "assert_topk_valid": "dsakit.topk_compare",
    "assert_topk_equal": "dsakit.topk_compare",
    "check_topk": "dsakit.topk_compare",
    "compare_topk": "dsakit.topk_compare",
    "validate_lengths": "dsakit.topk_launch",
    "TOPK_PATHS": "dsakit.topk_launch",
    "SelectionSnapshotExtension": "dsakit.selection_snapshot",
    "summarize_selection": "dsakit.selection_snapshot",
    # GPU-node workflows
    "GpuInventory": "dsakit.gpu_pinning",
    "discover_gpus": "dsakit.gpu_pinning",
    "JIT_TARGETS": "dsakit.jit_warmup",
    "ci_registrations": "dsakit.rerun_test",
    # target/draft top-k backend matrix
    "topk_matrix": "dsakit.topk_backend_matrix",
    "topk_cells": "dsakit.topk_backend_matrix",
    "topk_cell": "dsakit.topk_backend_matrix",
    "TopkCell": "dsakit.topk_backend_matrix",
    "InvalidTopkCell": "dsakit.topk_backend_matrix",
    "TopkFlags": "dsakit.topk_flags",
    "release_topk_flags": "dsakit.topk_flags",
    "TopkConfig": "dsakit.topk_rules",
    "Expectation": "dsakit.topk_rules",
    "expect_topk": "dsakit.topk_rules",
    "SGLangScope": "dsakit.sglang_scope",
    "SGLangState": "dsakit.sglang_scope",
    "sglang_state": "dsakit.sglang_scope",
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
