"""The metadata-kernel postconditions and the torch reference catch what they claim to, on outputs
built here from the reference itself (CPU, no kernel, no SGLang)."""

from __future__ import annotations

from typing import Any

import pytest

from dsakit.backends.dsa_invariants import metadata_kernel_reasons
from dsakit.backends.dsa_metadata_kernels import MetadataCase, build_inputs, call_arguments
from dsakit.backends.dsa_metadata_reference import expected_outputs, mismatches
from dsakit.errors import UsageError

torch = pytest.importorskip("torch")
CASE = MetadataCase("draft_extend", (37, 130), padded_rows=2, width=256, index_topk=64)


def _correct(case: MetadataCase = CASE) -> tuple[dict[str, Any], dict[str, Any]]:
    inputs = build_inputs(case, "cpu", seed=3)
    return inputs, {k: v.to(torch.int32) for k, v in expected_outputs(case, inputs).items()}


def _judged(case: MetadataCase, inputs: dict[str, Any], outputs: dict[str, Any], **changes: Any) -> list[str]:
    """The postconditions' verdict on a call that wrote `outputs` (kernel_contracts' `writes`)."""
    arguments = {**call_arguments(case, {**inputs, **outputs}), **changes}
    return [r.message for r in metadata_kernel_reasons(case.mode, arguments)]


@pytest.mark.parametrize("mode", ["decode", "target_verify", "draft_extend"])
def test_the_reference_meets_the_postconditions_and_itself(mode: str) -> None:
    case = MetadataCase(mode, (37, 130), padded_rows=2, width=256, index_topk=64)  # type: ignore[arg-type]
    inputs, outputs = _correct(case)
    assert _judged(case, inputs, outputs) == []
    assert mismatches(case, inputs, outputs) == []


def test_the_reference_clamps_padded_draft_rows_and_the_dsa_lengths() -> None:
    _, outputs = _correct()
    assert outputs["seqlens_expanded"].tolist() == [34, 35, 36, 37, 127, 128, 129, 130] + [0, 0, 0, 1] * 2
    assert outputs["dsa_cache_seqlens"].tolist()[4:8] == [64] * 4
    assert outputs["cu_seqlens_k"].tolist() == [0, 37, 167, 168, 169]


def test_padded_rows_sit_at_the_reserved_req_to_token_row() -> None:
    inputs = build_inputs(CASE, "cpu", seed=3)
    assert inputs["req_pool_indices"].tolist()[2:] == [0, 0]
    assert sorted(inputs["req_pool_indices"].tolist()[:2]) == [1, 2]
    assert int(inputs["req_to_token"][0].abs().sum()) == 0
    assert int((inputs["seqlens_expanded"] == -7).sum()) == CASE.rows  # poisoned before any launch


@pytest.mark.parametrize(("name", "row", "value", "says"), [
    ("seqlens_expanded", 9, -1, "seqlens_expanded[9] = -1: the kernel wrote a negative length"),
    ("cache_seqlens", 1, 300, "cache_seqlens[1] = 300: the kernel wrote a length past the page table's width"),
    ("dsa_cache_seqlens", 5, 65, "dsa_cache_seqlens[5] = 65: a DSA length must lie in [0, min(seqlens_expanded[row], "
                                 "dsa_index_topk = 64)]"),
    ("cu_seqlens_k", 2, 30, "cu_seqlens_k[2] = 30: must not decrease from one row to the next"),
    ("dsa_cu_seqlens_k", 0, 1, "dsa_cu_seqlens_k[0] = 1: must start at 0"),
])
def test_each_postcondition_names_the_output_and_the_row(name: str, row: int, value: int, says: str) -> None:
    inputs, outputs = _correct()
    outputs[name][row] = value
    found = _judged(CASE, inputs, outputs)
    assert any(message.startswith(says) for message in found), found


@pytest.mark.parametrize(("name", "code"), [("page_table_1", "reference-page-table-1"),
                                            ("real_page_table", "reference-real-page-table"),
                                            ("seqlens_expanded", "reference-lengths")])
def test_the_reference_names_a_wrong_entry_inside_the_live_prefix(name: str, code: str) -> None:
    inputs, outputs = _correct()
    if outputs[name].dim() == 2:
        outputs[name][5, 1] = 12345  # row 5: request 1 (130 live slots, 3 pages)
    else:
        outputs[name][5] = 99
    assert [r.code for r in mismatches(CASE, inputs, outputs)][:1] == [code]


def test_entries_past_the_live_prefix_are_not_the_reference_s_business() -> None:
    inputs, outputs = _correct()
    outputs["page_table_1"][0, 200:] = 4242  # row 0 is request 0's first draft row: 37 live slots
    outputs["real_page_table"][0, 1:] = 4242
    assert mismatches(CASE, inputs, outputs) == []


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"kv_lens": ()}, "at least one live request"),
    ({"kv_lens": (300,)}, "more than the page-table width 256"),
    ({"width": 250}, "multiple of page_size 64"),
])
def test_a_case_that_cannot_exist_is_refused_with_what_is_wrong(kwargs: dict[str, Any], says: str) -> None:
    arguments: dict[str, Any] = {"kv_lens": (37,), "width": 256, **kwargs}
    with pytest.raises(UsageError, match=says):
        MetadataCase("target_verify", arguments.pop("kv_lens"), **arguments)


def test_kpool_dsa_lengths_clamp_whole_pools_and_keep_the_tail() -> None:
    case = MetadataCase("draft_extend", (37, 130), padded_rows=2, width=256, index_topk=64, index_kpool=4)
    inputs, outputs = _correct(case)
    # expanded 127..130: whole pools 124..128 clamped at 64, tails 3, 0, 1, 2 kept
    assert outputs["dsa_cache_seqlens"].tolist()[4:8] == [67, 64, 65, 66]
    assert _judged(case, inputs, outputs) == []
    unpooled = _judged(case, inputs, outputs, index_kpool=1)  # the tail past index_topk is the pool's alone
    assert [m.split(":")[0] for m in unpooled] == ["dsa_cache_seqlens[4] = 67", "dsa_cache_seqlens[6] = 65",
                                                   "dsa_cache_seqlens[7] = 66"]
    outputs["dsa_cache_seqlens"][4] = 68
    assert _judged(case, inputs, outputs) == [  # and dsa_cu_seqlens_k no longer steps by it
        "dsa_cache_seqlens[4] = 68: a DSA length must lie in [0, min(seqlens_expanded[row], dsa_index_topk = 64 + "
        "index_kpool 4 - 1)]",
        "dsa_cu_seqlens_k[5] = '209 != 142 + dsa_cache_seqlens[4] = 210': must step by dsa_cache_seqlens (ending at "
        "their total, 407)"]


def test_a_kpool_geometry_sglang_would_not_fuse_is_refused() -> None:
    with pytest.raises(UsageError, match="index_kpool 4 needs page_size 64 and index_topk a multiple of it"):
        MetadataCase("decode", (37,), width=256, index_topk=66, index_kpool=4)
