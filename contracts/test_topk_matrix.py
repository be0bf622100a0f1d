"""Contract suite: the target/draft DSA top-k backend matrix, driven through real SGLang config.

Every cell is applied through SGLang's runtime context; the backend the real code resolves for the
role must equal dsakit's rule table (`dsakit.topk.rules`). Resolution runs everywhere; the
resolved backend's selection runs where its gates open, through `dsakit.topk.launch`.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dsakit
from dsakit.topk.matrix import InvalidTopkCell, TopkCell
from dsakit.topk.resolve import SELECTION_CASES, assert_resolution, assert_selection
from dsakit.topk.rules import NO_ROLE_SPLIT, TORCH_NEEDS_UNFUSED


@dsakit.topk_matrix(subset="full", invalid="keep", gated=False)
def test_resolution_matches_the_oracle(topk_cell: TopkCell, record_property: pytest.RecordProperty) -> None:
    """The role resolves to the rule table's backend (and v2 choice) under the applied config.
    Invalid cells are refused before anything is applied, with the table's reason codes; their
    resolution is still checked with the refusal overridden (resolution never runs a kernel)."""
    exp = topk_cell.expectation
    record_property("dsakit_topk_rule", exp.rule)
    record_property("dsakit_topk_expected", exp.backend)
    if not exp.valid:
        before = dsakit.sglang_state()
        with pytest.raises(InvalidTopkCell) as refused:
            topk_cell.scope().__enter__()
        assert [r.code for r in refused.value.reasons] == [r.code for r in exp.invalid]
        assert dsakit.sglang_state() == before, "a refused cell must apply nothing"
    with topk_cell.scope(allow_invalid=True):
        resolved = assert_resolution(topk_cell)
    assert resolved.rule == exp.rule


@dsakit.topk_matrix(subset="full", invalid="skip", gated=True)
@pytest.mark.parametrize("case_id", SELECTION_CASES)
def test_resolved_backend_selects_the_topk(topk_scope: TopkCell, case_id: str,
                                           record_property: pytest.RecordProperty) -> None:
    """The resolved backend's `topk_func` on a tie-free case: valid, and equal to torch.topk."""
    record = assert_selection(topk_scope, case_id)
    for key, value in record.items():
        record_property(f"dsakit_topk_{key}", value)


def test_release_flags_agree_with_the_release_probe() -> None:
    """dsakit's source read of the flags agrees with the feature probe and with the enum."""
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend

    flags = dsakit.release_topk_flags()
    assert flags.has_split == dsakit.installed_release().has("topk-role-split")
    assert set(flags.all_choices) <= {member.value for member in DSATopKBackend}
    assert set(flags.enum_values) == {member.value for member in DSATopKBackend}


def test_unknown_backend_names_the_release_choices() -> None:
    flags = dsakit.release_topk_flags()
    with pytest.raises(dsakit.UsageError) as error:
        dsakit.topk_cell("target", "flashinfer-gvr")
    assert str(error.value).startswith(
        f"flashinfer-gvr is not a top-k backend of SGLang {flags.version}; choices: "
        + ", ".join(flags.target.choices))


def test_torch_with_fusion_is_refused_before_any_kernel() -> None:
    """The kit refuses torch + SGLANG_DSA_FUSE_TOPK=true up front, with its reason; SGLang itself
    only fails later, inside topk_transform (shown here with the refusal overridden)."""
    cell = dsakit.topk_cell("target", "torch", "torch", fused=True)
    assert [r.code for r in cell.reasons] == [TORCH_NEEDS_UNFUSED]
    before = dsakit.sglang_state()
    with pytest.raises(InvalidTopkCell, match=TORCH_NEEDS_UNFUSED):
        with cell.scope():
            pytest.fail("the body of a refused scope must not run")
    assert dsakit.sglang_state() == before

    import torch

    with cell.scope(allow_invalid=True):
        resolved = assert_resolution(cell)
        scores = torch.arange(16, dtype=torch.float32).reshape(2, 8)
        metadata = SimpleNamespace(page_table_1=torch.zeros((2, 8), dtype=torch.int32),
                                   token_to_batch_idx=None)
        from sglang.srt.layers.attention.dsa.dsa_topk_backend import TopkTransformMethod

        with pytest.raises(RuntimeError, match="SGLANG_DSA_FUSE_TOPK"):
            resolved.backend.topk_transform(scores, torch.tensor([8, 8], dtype=torch.int32), 4,
                                            TopkTransformMethod.PAGED, metadata)


def test_draft_only_flag_follows_the_release() -> None:
    """A draft backend different from the target's: served by the split, refused before it."""
    cell = dsakit.topk_cell("draft", "sgl-kernel", "torch", fused=False)
    if dsakit.release_topk_flags().has_split:
        assert cell.valid and cell.expected_backend == "torch"
        with cell.scope():
            assert assert_resolution(cell).value == "torch"
    else:
        assert [r.code for r in cell.reasons] == [NO_ROLE_SPLIT]
        assert cell.expected_backend == "sgl-kernel"  # the pre-split rule: draft reads the target flag
        with cell.scope(allow_invalid=True):
            assert assert_resolution(cell).value == "sgl-kernel"
