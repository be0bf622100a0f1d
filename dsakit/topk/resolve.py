"""Asking the real SGLang which top-k backend a role gets, and checking that backend's selection.

Owns: the real resolution of a role inside an applied cell scope (`DSATopKBackend.resolve`, or
the pre-split rule on 0.5.17), its comparison with the oracle as `Reason`s, and one selection
through the resolved backend's launch path against the reference. Must not decide the
expectation; imports torch and SGLang lazily (inside a test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dsakit.reasons import Reason
from dsakit.topk.rules import PRE_SPLIT, ROLE_SPLIT

if TYPE_CHECKING:
    import torch

    from dsakit.topk.matrix import TopkCell

# Tie-free (`distinct`) cases at k=2048 (sgl_kernel.fast_topk_v2 asserts k == 2048): row lengths
# 0, 1, k-1, k, k+1 and decode-like rows up to 8192.
SELECTION_CASES = ("short-rows-k2048", "decode-ps64-k2048")


@dataclass(frozen=True)
class Resolved:
    """What SGLang resolved for one role: the enum member and the rule that produced it."""

    backend: Any  # DSATopKBackend member
    rule: str

    @property
    def value(self) -> str:
        return str(self.backend.value)


def resolve(role: str) -> Resolved:
    """The real resolution for `role` under the currently applied configuration."""
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend

    from dsakit.stack.sglang_release import installed_release

    if installed_release().has("topk-role-split"):
        from dsakit.mocks.model_runner import MockModelRunner

        return Resolved(DSATopKBackend.resolve(MockModelRunner(role)), ROLE_SPLIT)
    from sglang.srt.runtime_context import get_server_args

    # 0.5.17: DeepseekSparseAttnBackend.__init__ builds DSATopKBackend(server_args.dsa_topk_backend)
    # for every worker, target or draft.
    return Resolved(DSATopKBackend(get_server_args().dsa_topk_backend), PRE_SPLIT)


def published_flags() -> dict[str, str]:
    """The top-k flags as the resolution code reads them now: the resolved config bags on a
    split release (0.5.23's `get_server_args()` keeps the *raw* input, which an override does
    not change), the ServerArgs attribute before the split (what 0.5.17's backend reads)."""
    from dsakit.stack.sglang_release import installed_release

    if installed_release().has("topk-role-split"):
        from sglang.srt.runtime_context import get_exec, get_spec

        return {"target": get_exec().kernel.dsa_topk_backend,
                "draft": get_spec().speculative_dsa_topk_backend}
    from sglang.srt.runtime_context import get_server_args

    backend = get_server_args().dsa_topk_backend
    return {"target": backend, "draft": backend}


def resolution_problems(cell: TopkCell) -> tuple[Resolved | None, list[Reason]]:
    """The real resolution and where it disagrees with the oracle for this cell (empty: agrees).
    Call inside `cell.scope()`."""
    exp = cell.expectation
    published = published_flags()
    wanted = {"target": cell.target, "draft": cell.draft if cell.flags.has_split else cell.target}
    if published != wanted:
        return None, [Reason("scope-not-applied", f"{cell.id}: the published top-k flags are "
                             f"{published}, not {wanted}; call inside `with cell.scope():`")]
    got = resolve(cell.role)
    problems: list[Reason] = []
    if got.rule != exp.rule:
        problems.append(Reason("rule-mismatch", f"{cell.id}: dsakit's flags say {exp.rule!r} "
                               f"but the release probe says {got.rule!r}"))
    if got.value != exp.backend:
        problems.append(Reason(
            "resolution-mismatch",
            f"{cell.id}: SGLang resolved the {cell.role} to {got.value} ({got.rule}), dsakit's "
            f"rule table expects {exp.backend} (reads {exp.reads})"))
    if bool(got.backend.should_use_topk_v2()) != exp.uses_v2:
        problems.append(Reason(
            "v2-mismatch",
            f"{cell.id}: should_use_topk_v2() is {got.backend.should_use_topk_v2()}, dsakit "
            f"expects {exp.uses_v2} (sgl-kernel and SGLANG_OPT_USE_TOPK_V2)"))
    return got, problems


def assert_resolution(cell: TopkCell) -> Resolved:
    """Raise AssertionError naming each disagreement; returns the real resolution."""
    __tracebackhide__ = True
    got, problems = resolution_problems(cell)
    if problems or got is None:
        raise AssertionError("\n".join(str(p) for p in problems))
    return got


def selection_device(backend: str) -> str:
    """A backend that runs on CPU (torch) runs where CUDA is (the realistic place) and on CPU
    otherwise; kernels need CUDA (its `TopkBackend` record says which)."""
    import torch

    from dsakit.topk.backends import topk_backend

    if topk_backend(backend).runs_on_cpu:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda"


def assert_selection(cell: TopkCell, case_id: str = SELECTION_CASES[0]) -> dict[str, Any]:
    """Run the resolved backend's `topk_func` path (`dsakit.topk.launch.TOPK_PATHS`) on a
    tie-free case (inside `cell.scope()`), check validity and equality with the reference; returns a record (device, case, backend)."""
    __tracebackhide__ = True
    import pytest

    from dsakit.errors import UsageError
    from dsakit.topk.cases import get_case
    from dsakit.topk.checks import assert_topk_equal, assert_topk_valid
    from dsakit.topk.launch import TOPK_PATHS, topk_func_path
    from dsakit.topk.reference import reference_topk

    case = get_case(case_id)
    if case.recipe != "distinct" or case.ragged:
        raise UsageError(f"{case_id} is not a tie-free paged case; use one of {', '.join(SELECTION_CASES)}")
    resolved = assert_resolution(cell)
    try:
        path = topk_func_path(resolved.value)
    except UsageError as error:  # no record: say which backend SGLang resolved
        raise AssertionError(f"{cell.id}: SGLang resolved the {cell.role} to {resolved.value}: {error}") from None
    if path is None:
        raise AssertionError(f"{cell.id}: SGLang resolved the {cell.role} to {resolved.value}, "
                             f"which dsakit has no launch path for ({', '.join(TOPK_PATHS)})")
    device = selection_device(resolved.value)
    with pytest.MonkeyPatch.context() as monkeypatch:
        actual = path.run(case, device, monkeypatch)
    scores = case.scores("cpu")
    assert_topk_valid(actual, scores, case.lengths, case.k)
    assert_topk_equal(actual, reference_topk(scores, case.lengths, case.k), scores, case.lengths,
                      topk=case.k)
    return {"case": case_id, "device": device, "backend": resolved.value, "rule": resolved.rule}
