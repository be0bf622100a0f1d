"""The reference stand-ins' arithmetic against a token-by-token loop, in-process on CPU (issue 45,
item 4: the survivors of the mutation run over `dsakit/simulation/reference_kernels.py`): the sparse
MLA decode over more than one 16-token chunk, with slot 0, unused (-1) slots and per-row top-k
lengths; the ragged attention's window of 0 and its value scale; what the MLA decode stand-in does
not model, reason by reason; and the arguments each modelled call hands on."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="[module:torch] the stand-ins compute with torch")

from dsakit.simulation import reference_kernels as rk  # noqa: E402

BATCH, Q_LEN, HEADS, DIM, RANK, PAGES, PAGE = 2, 17, 2, 8, 4, 3, 4  # 34 query tokens: three chunks of 16


def _mla_inputs(seed: int = 0) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    query = torch.randn(BATCH, Q_LEN, HEADS, DIM, generator=g)
    kv_cache = torch.randn(PAGES, PAGE, DIM, generator=g)
    top_k = 5
    indices = torch.randint(0, PAGES * PAGE, (BATCH, Q_LEN, top_k), generator=g, dtype=torch.int32)
    indices[0, 0] = torch.tensor([0, -1, 3, -1, 0], dtype=torch.int32)  # slot 0 twice, two unused slots
    indices[1, 16, 2] = -1  # an unused slot inside the row's top-k length
    lens = torch.full((BATCH, Q_LEN), top_k, dtype=torch.int32)
    lens[1, 16] = 4
    lens[0, 3] = 0  # a row with no index: zeros
    return {"query": query, "kv_cache": kv_cache, "indices": indices, "top_k_lens": lens}


def _mla_loop(query: Any, kv_cache: Any, indices: Any, *, scale: float, v_scale: float, top_k_lens: Any) -> Any:
    import torch

    flat = kv_cache.reshape(-1, kv_cache.shape[-1])
    out = torch.zeros(BATCH, Q_LEN, HEADS, RANK)
    for b in range(BATCH):
        for t in range(Q_LEN):
            slots = [int(s) for i, s in enumerate(indices[b, t]) if int(s) >= 0 and i < int(top_k_lens[b, t])]
            if not slots:
                continue
            kv = flat[slots]
            for h in range(HEADS):
                weights = torch.softmax(scale * (kv @ query[b, t, h]), dim=0)
                out[b, t, h] = (weights[:, None] * kv[:, :RANK]).sum(0) * v_scale
    return out


def test_the_sparse_mla_decode_equals_a_token_by_token_loop() -> None:
    import torch

    a = _mla_inputs()
    got = rk.sparse_mla_decode(a["query"], a["kv_cache"], a["indices"], kv_lora_rank=RANK, scale=0.7, v_scale=1.5,
                               top_k_lens=a["top_k_lens"])
    want = _mla_loop(a["query"], a["kv_cache"], a["indices"], scale=0.7, v_scale=1.5, top_k_lens=a["top_k_lens"])
    assert got.shape == (BATCH, Q_LEN, HEADS, RANK)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch.count_nonzero(got[0, 3]) == 0


def test_without_top_k_lengths_every_used_slot_counts() -> None:
    import torch

    a = _mla_inputs(1)
    full = torch.full((BATCH, Q_LEN), a["indices"].shape[-1], dtype=torch.int32)
    got = rk.sparse_mla_decode(a["query"], a["kv_cache"], a["indices"], kv_lora_rank=RANK, scale=1.0)
    torch.testing.assert_close(got, _mla_loop(a["query"], a["kv_cache"], a["indices"], scale=1.0, v_scale=1.0,
                                              top_k_lens=full), atol=1e-5, rtol=1e-5)


def _ragged_loop(query: Any, key: Any, value: Any, lengths: list[tuple[int, int]], *, scale: float,
                 v_scale: float, causal: bool, window_left: int) -> Any:
    import torch

    out = torch.zeros(query.shape[0], query.shape[1], value.shape[2])
    q0 = k0 = 0
    for lq, lkv in lengths:
        for i in range(lq):
            last = i + lkv - lq
            seen = [j for j in range(lkv) if (not causal or j <= last) and (window_left < 0 or j >= last - window_left)]
            for h in range(query.shape[1]):
                if not seen:
                    continue
                logits = torch.stack([scale * (query[q0 + i, h] @ key[k0 + j, h]) for j in seen])
                weights = torch.softmax(logits, dim=0)
                out[q0 + i, h] = sum(w * value[k0 + j, h] for w, j in zip(weights, seen)) * v_scale
        q0, k0 = q0 + lq, k0 + lkv
    return out


@pytest.mark.parametrize("causal, window_left", [(True, 0), (True, 1), (False, -1), (True, -1)])
def test_the_ragged_attention_equals_a_query_by_query_loop(causal: bool, window_left: int) -> None:
    import torch

    g = torch.Generator().manual_seed(2)
    lengths = [(3, 5), (0, 2), (2, 2)]
    tq, tk = sum(q for q, _ in lengths), sum(k for _, k in lengths)
    query, key, value = (torch.randn(n, 2, 4, generator=g) for n in (tq, tk, tk))
    cu_q = torch.tensor([0, 3, 3, 5], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 7, 9], dtype=torch.int32)
    got = rk.causal_varlen_attention(query, key, value, cu_q, cu_k, scale=0.5, v_scale=2.0, causal=causal,
                                     window_left=window_left)
    want = _ragged_loop(query, key, value, lengths, scale=0.5, v_scale=2.0, causal=causal, window_left=window_left)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_scalar_is_read_through_item_where_it_has_one() -> None:
    class Held:
        def item(self) -> float:
            return 0.25

    assert rk._scalar(Held()) == 0.25 and rk._scalar(3) == 3.0


def test_the_ragged_call_hands_on_causality_the_window_and_the_sinks() -> None:
    import torch

    g = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(4, 2, 4, generator=g) for _ in range(3))
    cu = torch.tensor([0, 4], dtype=torch.int32)
    sinks = torch.tensor([0.5, -1.0])
    base = {"query": query, "key": key, "value": value, "cum_seq_lens_q": cu, "cum_seq_lens_kv": cu,
            "bmm1_scale": 0.5, "bmm2_scale": 1.0, "is_causal": True, "window_left": -1, "out": None}
    for change in ({"is_causal": False}, {"window_left": 0}, {"attention_sinks": sinks}):
        a = {**base, **change}
        want = rk.causal_varlen_attention(query, key, value, cu, cu, scale=0.5, causal=bool(a["is_causal"]),
                                          window_left=int(a["window_left"]), sinks=a.get("attention_sinks"))
        torch.testing.assert_close(rk._ragged_run(a), want)
        assert not torch.allclose(rk._ragged_run(a), rk._ragged_run(base))


# ---------------------------------------------------------------- the MLA decode stand-in's calls


def _mla_call(**change: Any) -> dict[str, Any]:
    import torch

    a = _mla_inputs()
    call = {"query": a["query"], "kv_cache": a["kv_cache"].unsqueeze(1), "block_tables": a["indices"],
            "kv_lora_rank": RANK, "sparse_mla_top_k": 5, "sparse_mla_top_k_lens": a["top_k_lens"],
            "bmm1_scale": torch.tensor(0.7), "bmm2_scale": 1.5, "out": None}
    call.update(change)
    return call


def _two_d_block_tables() -> dict[str, Any]:
    import torch

    return {"block_tables": torch.zeros(2, 5, dtype=torch.int32)}


def _fp8_cache() -> dict[str, Any]:
    import torch

    return {"query": _mla_inputs()["query"].bfloat16(), "kv_cache": torch.zeros(2, 2, dtype=torch.float8_e4m3fn)}


@pytest.mark.parametrize("change, reason", [
    ({"sparse_mla_top_k": 0}, "dense MLA decode (sparse_mla_top_k=0)"),
    ({"return_lse": True}, "the lse: the stand-in does not produce TRT-LLM's lse"),
    ({"lse": "a buffer"}, "the lse: the stand-in does not produce TRT-LLM's lse"),
    ({"sinks": "given"}, "sinks: the stand-in does not model it"),
    ({"cum_seq_lens_q": "given"}, "cum_seq_lens_q: the stand-in does not model it"),
    ({"causal_seqlens_kv_global": "given"}, "causal_seqlens_kv_global: the stand-in does not model it"),
    ({"enable_dcp": True}, "decode context parallelism: the stand-in does not model it"),
    ({"backend": "xqa"}, "backend='xqa': the stand-in models trtllm-gen"),
    ({"block_tables": None}, "block_tables must be the (batch, q_len, top_k) sparse indices"),
    (_two_d_block_tables, "block_tables must be the (batch, q_len, top_k) sparse indices"),
    (_fp8_cache, "dtypes ['torch.bfloat16', 'torch.float8_e4m3fn']: the stand-in models unquantized caches"),
])
def test_what_the_mla_decode_stand_in_does_not_model_is_named(change: Any, reason: str) -> None:
    got = rk._mla_unmodeled(_mla_call(**(change() if callable(change) else change)))
    assert got is not None and got.startswith(reason)


@pytest.mark.parametrize("backend", [None, "auto", "trtllm-gen"])
def test_the_mla_decode_stand_in_models_the_trtllm_gen_backend(backend: str | None) -> None:
    call = _mla_call(**({} if backend is None else {"backend": backend}))
    assert rk._mla_unmodeled(call) is None


def test_the_mla_decode_call_hands_on_its_scales_and_lengths_and_fills_out() -> None:
    import torch

    call = _mla_call()
    want = _mla_loop(call["query"], call["kv_cache"], call["block_tables"], scale=0.7, v_scale=1.5,
                     top_k_lens=call["sparse_mla_top_k_lens"])
    got = rk._mla_run(call)
    assert got.dtype == torch.bfloat16  # flashinfer's own allocation
    torch.testing.assert_close(got, want.bfloat16(), atol=2e-2, rtol=2e-2)
    out = torch.full(want.shape, math.nan)
    assert rk._mla_run({**call, "out": out}) is out
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    defaults = {k: v for k, v in call.items() if k not in ("bmm1_scale", "bmm2_scale")}
    plain = _mla_loop(call["query"], call["kv_cache"], call["block_tables"], scale=1.0, v_scale=1.0,
                      top_k_lens=call["sparse_mla_top_k_lens"])
    torch.testing.assert_close(rk._mla_run({**defaults, "out": torch.empty(plain.shape)}), plain, atol=1e-5, rtol=1e-5)
