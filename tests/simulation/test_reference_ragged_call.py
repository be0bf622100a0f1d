"""The ragged stand-in as the guard calls it (issue 45 item 4: the mutation run's core): which
calls it models (the rest stay refused, named), and that it writes flashinfer's output: into the
caller's `out`, else a new tensor of flashinfer's dtype (bfloat16 for FP8 inputs)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from dsakit.simulation.reference_kernels import REFERENCES

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="[module:torch] the reference computes in torch")
RAGGED = REFERENCES["flashinfer.prefill:trtllm_ragged_attention_deepseek"]


@pytest.mark.parametrize(("call", "why"), [
    ({}, None),
    ({"backend": "trtllm-gen", "return_lse": False, "uses_spcompress": False, "num_elts_per_sage_attn_blk": [0, 0]}, None),
    ({"return_lse": True}, "return_lse=True: the stand-in does not produce TRT-LLM's lse"),
    ({"backend": "cutlass"}, "backend='cutlass': the stand-in models the trtllm-gen backend"),
    ({"uses_spcompress": True}, "uses_spcompress=True: the stand-in does not model it"),
    ({"num_elts_per_sage_attn_blk": [0, 64]}, "sage attention scale factors: the stand-in does not model them"),
])
def test_what_the_ragged_stand_in_models(call: dict[str, Any], why: str | None) -> None:
    assert RAGGED.unmodeled(call) == why


def _call(dtype: Any, out: Any = None) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(5)
    q, kv = torch.randn(5, 2, 8, generator=generator), torch.randn(7, 2, 8, generator=generator)
    return {"query": q.to(dtype), "key": kv.to(dtype), "value": torch.randn(7, 2, 4, generator=generator).to(dtype),
            "cum_seq_lens_q": torch.tensor([0, 2, 5]), "cum_seq_lens_kv": torch.tensor([0, 3, 7]),
            "bmm1_scale": torch.tensor(0.5), "bmm2_scale": 2.0, "is_causal": True, "window_left": -1,
            "attention_sinks": None, "out": out}


def test_the_stand_in_writes_the_callers_out_or_flashinfers_own_allocation() -> None:
    import torch

    from dsakit.simulation.reference_kernels import causal_varlen_attention

    call = _call(torch.float32)
    expected = causal_varlen_attention(call["query"], call["key"], call["value"], call["cum_seq_lens_q"],
                                       call["cum_seq_lens_kv"], scale=0.5, v_scale=2.0)
    out = torch.zeros(5, 2, 4, dtype=torch.float16)
    assert RAGGED.run({**call, "out": out}) is out
    torch.testing.assert_close(out, expected.half())
    allocated = RAGGED.run(call)
    assert allocated.dtype == torch.float32
    torch.testing.assert_close(allocated, expected)
    fp8 = RAGGED.run(_call(torch.float8_e4m3fn))
    assert fp8.dtype == torch.bfloat16 and fp8.shape == (5, 2, 4)
