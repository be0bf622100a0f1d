"""The top-k backend table (dsakit.topk.backends): each record is consistent with the gate table,
the warm caches and the installed SGLang, and everything about a backend derives from its record,
so adding one is one record (CONTRIBUTING.md, "Adding a top-k backend")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsakit.topk.backends import TOPK_BACKENDS, entry_points, jit_builds, topk_backend
from dsakit.topk.cases import select_topk_cases


def test_every_record_names_known_gates_caches_and_bugs() -> None:
    from dsakit.gates.table import validate_codes
    from dsakit.warm.jit_caches import cache_roots

    roots = cache_roots()
    for backend in TOPK_BACKENDS.values():
        validate_codes(backend.gates + (backend.v2_gates or ()))  # UsageError on an unknown code
        library = backend.kernel_library  # UsageError where `library` names no KernelLibrary record
        if library is not None:
            assert library.gate is not None and library.gate in backend.gates, backend.value
        for entry in backend.entry_points:
            if entry.jit is not None:
                assert set(entry.jit.caches) <= set(roots), entry.jit
                assert entry.jit.implied_by in backend.gates_of(entry), entry.jit
            for case in select_topk_cases():
                bug = entry.contract(case).known_bug
                assert not bug or bug in entry.known_bugs, (entry.path_id, case.case_id)
    path_ids = [entry.path_id for _, entry in entry_points()]
    assert len(path_ids) == len(set(path_ids))
    assert [b.value for b in TOPK_BACKENDS.values() if any(e.reference for e in b.entry_points)] == ["torch"]


def test_the_installed_sglang_offers_exactly_the_recorded_backends(installed_sglang: object) -> None:
    from dsakit.topk.flags import topk_flags

    flags = topk_flags()
    assert set(flags.enum_values) == set(TOPK_BACKENDS)
    assert set(flags.all_choices) <= set(TOPK_BACKENDS)


def test_quirks_are_the_records_known_bugs_and_refusals() -> None:
    assert topk_backend("torch").quirks == (
        "SGLang's fused transform refuses it: SGLANG_DSA_FUSE_TOPK must be false",)
    assert any("sglang#36807" in q for q in topk_backend("sgl-kernel").quirks)
    assert any("sglang#35257" in q for q in topk_backend("sgl-kernel").quirks)
    assert topk_backend("flashinfer").quirks == ()


_ADDED = r"""
import contextlib, io, json, sys
from dsakit.topk import backends as b
jit = b.TopkJit("tilelang-topk", "TileLang's top-k (JIT on first call)", ("tilelang",), "module:tilelang")
b.TOPK_BACKENDS["tilelang"] = b.TopkBackend(
    "tilelang", "tilelang", ("cuda", "module:tilelang"),
    (b.EntryPoint("tilelang.topk_func", "topk_func", "tilelang.topk", jit=jit, cuda_graph_replay=True),
     b.EntryPoint("tilelang.transform-paged", "transform", "tilelang.topk_transform", layout="paged", jit=jit)))

from dsakit.cli import main
from dsakit.warm.targets import GATE_TARGETS, JIT_TARGETS
from dsakit.topk.flags import TopkFlags, ServerArgField
from dsakit.topk.launch import TOPK_PATHS, topk_func_path
from dsakit.topk.matrix import TopkCell
from dsakit.topk.rules import TopkConfig, expect
import importlib
indexer = importlib.import_module("dsakit.contracts.test_dsa_indexer_topk")
selection = importlib.import_module("dsakit.contracts.test_topk_selection")

field = ServerArgField("dsa_topk_backend", ("sgl-kernel", "torch", "flashinfer", "tilelang"), "sgl-kernel", "x")
flags = TopkFlags("0.5.24", field, None, ("sgl-kernel", "torch", "flashinfer", "tilelang"), {})
cell = TopkCell("target", TopkConfig("tilelang", "tilelang", True, True), flags)
help_text = io.StringIO()
with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
    main(["warm", "--help"])
print(json.dumps({
    "paths": {p: list(TOPK_PATHS[p].gates) for p in TOPK_PATHS if p.startswith("tilelang.")},
    "topk_func": topk_func_path("tilelang").path_id,
    "warm": [JIT_TARGETS["tilelang-topk"].gates, list(JIT_TARGETS["tilelang-topk"].inputs(()))],
    "implied": GATE_TARGETS.get("module:tilelang"),
    "help": "tilelang-topk" in " ".join(help_text.getvalue().split()),
    "cell": [list(cell.gates), cell.expectation.transform, [r.code for r in cell.expectation.notes]],
    "indexer": indexer.TOPK_CHOICES.get("tilelang"),
    "graph": "tilelang.topk_func" in selection._GRAPH_PATHS,
}))
"""


def test_a_backend_is_one_record_everything_else_derives_from_it() -> None:
    """A record added to the table (and nothing else) gives the backend its launch paths and their
    gates, a warm target and the gate that implies it, the CLI help, the matrix's gates and rules,
    the indexer suite's choice and the selection suite's CUDA-graph replay."""
    done = subprocess.run([sys.executable, "-c", _ADDED], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    gates = ["cuda", "module:tilelang"]
    assert out["paths"] == {"tilelang.topk_func": gates, "tilelang.transform-paged": gates}
    assert out["topk_func"] == "tilelang.topk_func"
    assert out["warm"] == [gates, ["tilelang.topk_func", "tilelang.transform-paged"]]
    assert out["implied"] == ["tilelang-topk"] and out["help"] is True
    assert out["cell"] == [gates, "fused:tilelang", ["v2-not-applicable"]]
    assert out["indexer"] == ["tilelang", {"SGLANG_DSA_FUSE_TOPK": True, "SGLANG_OPT_USE_TOPK_V2": False}, gates]
    assert out["graph"] is True


@pytest.mark.parametrize("value", ["flashinfer-gvr", "sgl_kernel", ""])
def test_no_record_is_a_usage_error_naming_the_known_backends(value: str) -> None:
    import dsakit

    with pytest.raises(dsakit.UsageError) as error:
        topk_backend(value)
    assert str(error.value) == (
        f"SGLang top-k backend {value!r} has no dsakit TopkBackend record (dsakit/topk/backends.py), so its "
        "gates, launch paths and rules are unknown; known: torch, sgl-kernel, flashinfer")


def test_jit_builds_group_the_entry_points_that_need_them() -> None:
    builds = {jit.name: value for jit, value in jit_builds().items()}
    assert builds["flashinfer-topk"] == (("cuda", "module:flashinfer"),
                                         ("flashinfer.topk_func", "flashinfer.transform-paged",
                                          "flashinfer.transform-ragged"))
    assert builds["sglang-topk-v2"] == (("cuda", "module:sgl_kernel", "sglang:topk-v2-fold", "jit:tvm-ffi-nvcc"),
                                        ("v2-fold.paged", "v2-fold.paged-ps1-table", "sgl-kernel.transform-ragged.v2"))
