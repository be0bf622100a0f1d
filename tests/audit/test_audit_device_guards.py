"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/device_guards.py`, every spelling
of an SGLang device probe the audit recognises (written out here, independently of the table) and the
question of the device table it asks; the probe table as JSON."""

from __future__ import annotations

import ast

import pytest

from dsakit.audit.device_guards import SPELLINGS, probe_table, spelling, spelling_for
from dsakit.gates.device_model import SIMULATED

OTHER = "other_platform"
PROBES = [
    ("_is_cuda", "is_cuda"), ("is_cuda()", "is_cuda"), ("get_platform().is_cuda", "is_cuda"),
    ("_is_hip", "is_hip"), ("utils.is_hip()", "is_hip"), ("get_platform().is_hip", "is_hip"),
    ("_is_cuda_alike", "is_cuda_alike"), ("is_cuda_alike()", "is_cuda_alike"),
    ("_is_npu", OTHER), ("is_npu()", OTHER), ("_is_xpu", OTHER), ("is_xpu()", OTHER), ("_is_musa", OTHER),
    ("is_musa()", OTHER), ("_is_hpu", OTHER), ("is_hpu()", OTHER), ("_is_cpu", OTHER), ("is_cpu()", OTHER),
    ("get_platform().is_npu", OTHER), ("get_platform().is_xpu", OTHER), ("sglang.get_platform().is_cpu", OTHER),
    ("self.device_capability", "device_capability"), ("get_device_capability()", "sglang_device_capability"),
    ("self.device_sm_major", "sm_major"), ("sm_major", "sm_major"),
    ("cls.device_sm", "device_sm"), ("get_device_sm()", "device_sm"),
    ("is_sm90_supported()", "is_sm90_supported"), ("_is_sm90_supported", "is_sm90_supported"),
    ("is_hopper_with_cuda_12_3()", "is_sm90_supported"), ("get_platform().is_sm90", "is_sm90_supported"),
    ("is_sm100_supported()", "is_sm100_supported"), ("_is_sm100_supported", "is_sm100_supported"),
    ("get_platform().is_sm100", "is_sm100_supported"),
    ("is_sm100_or_sm110_supported()", "is_sm100_or_sm110_supported"),
    ("get_platform().is_sm100_or_sm110", "is_sm100_or_sm110_supported"),
    ("is_sm100_or_newer()", "sm100_or_newer"),  # DeepSeek-V4.1's indexer (dsv4/v41_indexer, 0.5.21 on)
    ("is_sm120_supported()", "is_sm120_supported"), ("_is_sm120_supported", "is_sm120_supported"),
    ("get_platform().is_sm120", "is_sm120_supported"), ("_is_sm120", "is_sm120_supported"),
    ("_IS_SM120", "is_sm120_supported"),
    ("is_blackwell()", "is_blackwell"), ("is_blackwell_supported()", "is_blackwell"), ("_is_blackwell", "is_blackwell"),
    ("get_platform().is_blackwell", "is_blackwell"), ("is_sm120()", "is_sm120"),
    ("is_gfx95_supported()", "is_gfx95"), ("_is_gfx95_supported", "is_gfx95"), ("_IS_GFX95", "is_gfx95"),
    ("is_gfx942_supported()", "is_gfx942"), ("_is_gfx942_supported", "is_gfx942"),
    ("is_gfx1250_supported()", "is_gfx1250"), ("_is_gfx1250_supported", "is_gfx1250"),
    ("is_fp8_fnuz()", "is_fp8_fnuz"), ("_is_fp8_fnuz", "is_fp8_fnuz"),
]


@pytest.mark.parametrize(("expression", "answer"), PROBES)
def test_each_spelling_asks_its_question(expression: str, answer: str) -> None:
    found = spelling_for(ast.parse(expression, mode="eval").body)
    assert found is not None and found.answer == answer


def test_the_table_has_no_spelling_beyond_those_listed() -> None:
    assert sum(len(s.spellings) for s in SPELLINGS) == len(PROBES)


@pytest.mark.parametrize("expression", ["other._is_cuda", "is_cuda(0)", "is_cuda(x=1)", "a[0]()", "get_platform.is_cuda",
                                        "make().is_cuda", "not _is_cuda", "_is_cuda_x", "lambda: 1"])
def test_what_is_no_probe(expression: str) -> None:
    assert spelling_for(ast.parse(expression, mode="eval").body) is None


def test_spelling_keys() -> None:
    def key(text: str) -> str | None:
        return spelling(ast.parse(text, mode="eval").body)

    assert [key(t) for t in ("x", "self.x", "cls.x", "obj.x", "f()", "torch.cuda.f()", "get_platform().x",
                             "m.get_platform().x", "a[0]()", "f(1)")] == [
        "x", "x", "x", None, "f()", "f()", "platform.x", "platform.x", None, None]


def test_the_probe_table_as_json() -> None:
    table = probe_table()
    assert [row["spellings"] for row in table] == [list(s.spellings) for s in SPELLINGS]
    assert [row["meaning"] for row in table] == [s.meaning for s in SPELLINGS] and all(row["meaning"] for row in table)
    by_answer = {s.answer: row for s, row in zip(SPELLINGS, table)}
    assert by_answer["is_cuda"]["values"] == {k: d.vendor == "nvidia" for k, d in SIMULATED.items()}
    assert by_answer["device_capability"]["values"]["sm90"] == [9, 0]  # a pair becomes a list
    assert by_answer["device_capability"]["values"]["cpu"] is None
