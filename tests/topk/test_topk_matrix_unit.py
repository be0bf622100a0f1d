"""The top-k matrix, its rule table and its parametrization, without torch or SGLang.

Release-specific rules run against two minimal fake SGLang trees (a split release like 0.5.23
and a pre-split one like 0.5.17), so they hold on any machine; the pytest wiring runs through
pytester against the installed release (collection only: nothing heavy is imported).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

import dsakit
from dsakit.stack.sglang_release import SGLangRelease, release_from_tree
from dsakit.topk.matrix import _pairs, topk_cell, topk_cells
from dsakit.topk.rules import NO_ROLE_SPLIT, PRE_SPLIT, ROLE_SPLIT, TORCH_NEEDS_UNFUSED


def _plugin_args() -> tuple[str, ...]:
    from dsakit.node.pytest_invocation import plugin_args

    return tuple(plugin_args())

ENUM = '''
from enum import Enum
class DSATopKBackend(Enum):
    SGL_KERNEL = "sgl-kernel"
    TORCH = "torch"
    FLASHINFER = "flashinfer"
'''
RESOLVE = '''
    @classmethod
    def resolve(cls, model_runner):
        return cls("torch")
'''
ENVIRON = '''
class Envs:
    SGLANG_DSA_FUSE_TOPK = EnvBool(True)
    SGLANG_OPT_USE_TOPK_V2 = EnvBool(True)
'''
PRE_SPLIT_ARGS = '''
DSA_TOPK_BACKEND_CHOICES = ["sgl-kernel", "torch", "flashinfer"]
class ServerArgs:
    dsa_topk_backend: A[str, Arg(help="x", choices=DSA_TOPK_BACKEND_CHOICES), NS("exec.kernel")] = "sgl-kernel"
'''
EXEC_FIELDS = '''
class Exec:
    dsa_topk_backend: A[str, Arg(help="x", choices=["sgl-kernel", "torch", "flashinfer"])] = "sgl-kernel"
'''
SPEC_FIELDS = '''
class Spec:
    speculative_dsa_topk_backend: A[str, Arg(help="x", choices=["sgl-kernel", "torch", "flashinfer"])] = "sgl-kernel"
'''


def _tree(root: Path, version: str, *, split: bool) -> SGLangRelease:
    pkg = root / "sglang"
    files = {
        "srt/model_executor/model_runner.py": "class ModelRunner: pass\n",
        "version.py": f'__version__ = "{version}"\n',
        "srt/environ.py": ENVIRON,
        "srt/layers/attention/dsa/dsa_topk_backend.py": ENUM + (RESOLVE if split else ""),
    }
    if split:
        files["srt/server_args.py"] = "class ServerArgs: pass\n"
        files["srt/arg_groups/fields/exec_.py"] = EXEC_FIELDS
        files["srt/arg_groups/fields/spec.py"] = SPEC_FIELDS
    else:
        files["srt/server_args.py"] = PRE_SPLIT_ARGS
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return release_from_tree(root)


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> SGLangRelease:
    return _tree(tmp_path_factory.mktemp("split"), "0.5.23", split=True)


@pytest.fixture(scope="module")
def pre_split(tmp_path_factory: pytest.TempPathFactory) -> SGLangRelease:
    return _tree(tmp_path_factory.mktemp("pre"), "0.5.17", split=False)


def test_flags_are_read_from_source(split: SGLangRelease, pre_split: SGLangRelease) -> None:
    new, old = dsakit.release_topk_flags(split), dsakit.release_topk_flags(pre_split)
    assert new.has_split and not old.has_split
    assert new.target.choices == old.target.choices == ("sgl-kernel", "torch", "flashinfer")
    assert old.target.declared_in == "srt/server_args.py"
    assert new.draft is not None and new.draft.declared_in == "srt/arg_groups/fields/spec.py"
    assert old.env_defaults == {"SGLANG_DSA_FUSE_TOPK": True, "SGLANG_OPT_USE_TOPK_V2": True}


def test_readable_ids(split: SGLangRelease) -> None:
    cell = topk_cell("target", "flashinfer", "sgl-kernel", fused=True, v2=True, release=split)
    assert cell.id == "target@target-flashinfer/draft-sgl_kernel-fused-v2"
    assert topk_cell("draft", "torch", "sgl_kernel", fused=False, v2=False, release=split).id == (
        "draft@target-torch/draft-sgl_kernel-unfused-nov2")


def test_unknown_backend_lists_the_release_choices(pre_split: SGLangRelease) -> None:
    with pytest.raises(dsakit.UsageError) as error:
        topk_cell("target", "flashinfer-gvr", release=pre_split)
    assert str(error.value) == (
        "flashinfer-gvr is not a top-k backend of SGLang 0.5.17; choices: sgl-kernel, torch, flashinfer")
    with pytest.raises(dsakit.UsageError, match="unknown role 'verifier'"):
        topk_cell("verifier", release=pre_split)


@pytest.mark.parametrize(
    "release_name, role, target, draft, fused, backend, rule, codes",
    [
        ("split", "target", "flashinfer", "torch", False, "flashinfer", ROLE_SPLIT, []),
        ("split", "draft", "flashinfer", "torch", False, "torch", ROLE_SPLIT, []),
        ("split", "target", "sgl-kernel", "torch", True, "sgl-kernel", ROLE_SPLIT, [TORCH_NEEDS_UNFUSED]),
        ("split", "draft", "torch", "torch", True, "torch", ROLE_SPLIT, [TORCH_NEEDS_UNFUSED]),
        ("pre_split", "draft", "flashinfer", "flashinfer", True, "flashinfer", PRE_SPLIT, []),
        ("pre_split", "draft", "sgl-kernel", "torch", False, "sgl-kernel", PRE_SPLIT, [NO_ROLE_SPLIT]),
        ("pre_split", "target", "torch", "sgl-kernel", True, "torch", PRE_SPLIT,
         [NO_ROLE_SPLIT, TORCH_NEEDS_UNFUSED]),
    ],
)
def test_rule_table(request: pytest.FixtureRequest, release_name: str, role: str, target: str,
                    draft: str, fused: bool, backend: str, rule: str, codes: list[str]) -> None:
    release = request.getfixturevalue(release_name)
    cell = topk_cell(role, target, draft, fused=fused, release=release)
    exp = cell.expectation
    assert (exp.backend, exp.rule, [r.code for r in exp.invalid]) == (backend, rule, codes)
    with pytest.raises(dsakit.InvalidTopkCell) if codes else _nothing():
        cell.check()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_fusion_off_is_noted_for_the_other_role(split: SGLangRelease) -> None:
    cell = topk_cell("target", "sgl-kernel", "torch", fused=False, v2=True, release=split)
    assert {n.code for n in cell.expectation.notes} == {"fusion-off-for-both-roles", "v2-unused-when-unfused"}
    assert cell.expectation.uses_v2 and cell.expectation.transform == "unfused:sgl-kernel.topk_func"


@pytest.mark.parametrize("release_name, total, valid", [("split", 72, 52), ("pre_split", 72, 20)])
def test_full_matrix(request: pytest.FixtureRequest, release_name: str, total: int, valid: int) -> None:
    cells = topk_cells("full", release=request.getfixturevalue(release_name))
    assert len(cells) == len(set(c.id for c in cells)) == total
    assert sum(c.valid for c in cells) == valid
    assert len(topk_cells("full", invalid="drop", release=request.getfixturevalue(release_name))) == valid


@pytest.mark.parametrize("release_name", ["split", "pre_split"])
def test_pairwise_covers_every_valid_pair_deterministically(request: pytest.FixtureRequest,
                                                            release_name: str) -> None:
    release = request.getfixturevalue(release_name)
    full = topk_cells("full", release=release)
    pairwise = topk_cells("pairwise", release=release)
    assert [c.id for c in pairwise] == [c.id for c in topk_cells("pairwise", release=release)]
    needed = set(itertools.chain.from_iterable(_pairs(c) for c in full if c.valid))
    covered = set(itertools.chain.from_iterable(_pairs(c) for c in pairwise if c.valid))
    assert needed == covered
    assert len(pairwise) < len(full) // 4
    # every invalid rule is exercised once per role unless invalid cells are dropped
    codes = {(r.code, c.role) for c in full for r in c.reasons}
    assert codes == {(r.code, c.role) for c in pairwise for r in c.reasons}
    assert all(c.valid for c in topk_cells("pairwise", invalid="drop", release=release))


def test_per_role_keeps_the_other_flag_at_its_default(split: SGLangRelease, pre_split: SGLangRelease) -> None:
    cells = topk_cells("per-role", release=split)
    assert len(cells) == 24
    assert {c.draft for c in cells if c.role == "target"} == {"sgl-kernel"}
    assert {c.target for c in cells if c.role == "draft"} == {"sgl-kernel"}
    old = topk_cells("per-role", roles=["draft"], release=pre_split)
    assert {c.draft for c in old if not c.valid} == {"torch", "flashinfer"}  # no-role-split


def test_params_carry_gates_and_skips(split: SGLangRelease) -> None:
    from dsakit.gates.marks import MARKER

    def marks(cell: dsakit.TopkCell, **kw: object) -> list[tuple[str, tuple[object, ...]]]:
        return [(m.name, m.args) for m in cell.param(**kw).marks]

    sgl = topk_cell("target", "sgl-kernel", release=split)
    assert marks(sgl) == [(MARKER, ("cuda", "module:sgl_kernel"))]
    assert marks(sgl, gated=False) == []
    assert marks(topk_cell("draft", "sgl-kernel", "flashinfer", release=split)) == [
        (MARKER, ("cuda", "module:flashinfer"))]
    assert marks(topk_cell("target", "torch", "torch", fused=False, release=split)) == []
    bad = topk_cell("target", "torch", "torch", fused=True, release=split)
    assert [name for name, _ in marks(bad)] == ["skip"]
    assert marks(bad, invalid="keep") == []


def test_bad_marker_arguments() -> None:
    with pytest.raises(dsakit.UsageError, match="subset 'most'; choose one of: full, per-role, pairwise"):
        dsakit.topk_matrix(subset="most")
    with pytest.raises(dsakit.UsageError, match="invalid-cell mode"):
        dsakit.topk_matrix(invalid="xfail")


PLUGIN_TESTS = """
import sys
import dsakit

@dsakit.topk_matrix(subset="per-role", roles=["draft"], invalid="drop", gated=False)
def test_cells(topk_cell):
    assert topk_cell.role == "draft"

def test_default_subset(topk_cell):
    assert topk_cell.id

def test_nothing_heavy_loaded():
    assert not {"torch", "sglang"} & set(sys.modules), sorted({"torch", "sglang"} & set(sys.modules))
"""


def test_plugin_parametrizes_topk_cell_without_heavy_imports(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLUGIN_TESTS)
    expected_draft = len(topk_cells("per-role", roles=["draft"], invalid="drop"))
    expected_default = len(topk_cells("pairwise"))
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert len([i for i in ids if "test_cells[" in i]) == expected_draft
    assert len([i for i in ids if "test_default_subset[" in i]) == expected_default
    assert any("test_default_subset[target@target-sgl_kernel/draft-" in i for i in ids)
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "-q", "-k", "nothing_heavy or cells")
    result.assert_outcomes(passed=expected_draft + 1)
    full = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "--collect-only", "-q",
                                         "--dsakit-topk-subset=full", "-k", "default_subset")
    assert len([line for line in full.outlines if "test_default_subset[" in line]) == 72
    bad = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "--dsakit-topk-subset=most")
    assert bad.ret == 4 and "invalid choice: 'most'" in bad.stderr.str()


def test_a_backend_sglang_offers_without_a_record_is_an_error_naming_it_and_the_known_ones(
        tmp_path: Path) -> None:
    """A newer SGLang's backend dsakit has no TopkBackend record for: its cells, their gates and
    their expectation are refused by name (before, its gates were silently ("cuda",))."""
    release = _tree(tmp_path, "0.5.24", split=True)
    exec_fields = release.file("srt/arg_groups/fields/exec_.py")
    exec_fields.write_text(EXEC_FIELDS.replace('"flashinfer"]', '"flashinfer", "flashinfer-gvr"]'))
    message = (r"SGLang top-k backend 'flashinfer-gvr' has no dsakit TopkBackend record \(dsakit/topk/backends.py\), "
               r"so its gates, launch paths and rules are unknown; known: torch, sgl-kernel, flashinfer")
    cell = topk_cell("target", "flashinfer-gvr", "torch", fused=False, release=release)
    with pytest.raises(dsakit.UsageError, match=message):
        cell.gates
    with pytest.raises(dsakit.UsageError, match=message):
        cell.expectation
    with pytest.raises(dsakit.UsageError, match=message):
        topk_cells("pairwise", release=release)  # the default subset weighs every cell's rules
