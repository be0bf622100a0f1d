"""The DeepSeek-V4.1 swap-AB decode's stand-in, in-process on CPU (issue 42, item 2): the V4 page
layout it reads, checked against SGLang's own pure-torch writer and dequantizer
(`sglang.test.kernels.deepseek_v4.k_cache_reference`, shipped in SGLang's wheel); its attention
against a token-by-token loop, with unused (-1) slots, per-row lengths, a second (extra) cache, a
row with no key and the sink; what it does not model; and its simulated-arch rules, rule by rule."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="[module:torch] the stand-ins compute with torch")

from dsakit.simulation import arch_rules  # noqa: E402
from dsakit.simulation import reference_kernels as rk  # noqa: E402

PAGES, PAGE = 3, 8
SWAPAB = "sglang.kernels.ops.attention.dsv4.decode_attention_sm100:swapab_attention"


def _v4_cache(seed: int) -> tuple[Any, Any, Any]:
    """(the (pages, page bytes) buffer written by SGLang's torch writer, its (pages, page, 1, 584)
    view as the pool hands it to the decode kernels, SGLang's torch dequantizer)."""
    import torch

    reference = pytest.importorskip("sglang.test.kernels.deepseek_v4.k_cache_reference",
                                    reason="[sglang:kit] SGLang's DeepSeek-V4 K-cache torch reference")
    page_bytes = -(-PAGE * rk.V4_BYTES_PER_TOKEN // rk.V4_DATA_BYTES) * rk.V4_DATA_BYTES
    buf = torch.zeros(PAGES, page_bytes, dtype=torch.uint8)
    g = torch.Generator().manual_seed(seed)
    tokens = PAGES * PAGE
    pack = reference.NopeFp8RopeBf16Pack(
        k_nope_fp8=torch.randn(tokens, rk.V4_NOPE, generator=g).to(torch.float8_e4m3fn),
        k_rope_bf16=torch.randn(tokens, rk.V4_ROPE, generator=g).to(torch.bfloat16),
        scale_k_nope_ue8m0=torch.randint(120, 134, (tokens, rk.V4_NOPE // rk.V4_TILE), generator=g,
                                         dtype=torch.uint8),
    )
    reference.set_k_and_s_torch(buf, torch.arange(tokens), pack, PAGE)
    view = torch.as_strided(buf, (PAGES, PAGE, 1, rk.V4_BYTES_PER_TOKEN), (page_bytes, rk.V4_BYTES_PER_TOKEN,
                                                                          rk.V4_BYTES_PER_TOKEN, 1))
    return buf, view, reference.dequantize_k_cache_paged_ref


def test_the_v4_keys_are_sglangs_dequantized_keys() -> None:
    import torch

    buf, view, dequantize = _v4_cache(seed=0)
    slots = torch.tensor([0, 7, 8, 23, 12, 5])  # both ends of a page, three pages, out of order
    want = dequantize(buf, slots, PAGE).reshape(len(slots), -1).float()
    got = rk.dequantize_v4_keys(view, slots)
    assert got.shape == (len(slots), 512)
    assert torch.equal(got, want)


def _decode_loop(q: Any, parts: list[tuple[Any, Any, Any]], sink: Any, scale: float) -> Any:
    import torch

    batch, heads = q.shape[0], q.shape[-2]
    out = torch.zeros(batch, heads, 512)
    for b in range(batch):
        keys = [rk.dequantize_v4_keys(cache, torch.tensor([int(s)]))[0]
                for cache, chosen, counts in parts
                for i, s in enumerate(chosen.reshape(batch, -1)[b]) if i < int(counts.reshape(-1)[b]) and int(s) >= 0]
        if not keys:
            continue
        k = torch.stack(keys)
        for h in range(heads):
            logits = scale * (k @ q.reshape(batch, heads, -1)[b, h].float())
            weights = torch.exp(logits - logits.max())
            denominator = weights.sum() + math.exp(float(sink[h]) - float(logits.max()))
            out[b, h] = (weights[:, None] * k).sum(0) / denominator
    return out


def _decode_inputs() -> dict[str, Any]:
    import torch

    _, kv, _ = _v4_cache(seed=1)
    _, extra_kv, _ = _v4_cache(seed=2)
    g = torch.Generator().manual_seed(3)
    q = (torch.randn(3, 1, 16, 512, generator=g) / 8).to(torch.bfloat16)
    indices = torch.randint(0, PAGES * PAGE, (3, 1, 6), generator=g, dtype=torch.int32)
    indices[0, 0, 1] = -1  # an unused slot inside the row's length
    lengths = torch.tensor([5, 6, 0], dtype=torch.int32)
    extra_indices = torch.randint(0, PAGES * PAGE, (3, 1, 4), generator=g, dtype=torch.int32)
    extra_lengths = torch.tensor([4, 2, 0], dtype=torch.int32)  # row 2 sees no key at all: zeros
    sink = 2 * torch.randn(16, generator=g)
    return {"q": q, "kv": kv, "indices": indices, "lengths": lengths, "sink": sink, "extra_kv": extra_kv,
            "extra_indices": extra_indices, "extra_lengths": extra_lengths}


def test_the_swapab_stand_in_equals_a_token_by_token_loop() -> None:
    import torch

    a = _decode_inputs()
    got = rk.REFERENCES[SWAPAB].run(a)
    assert got.dtype == torch.bfloat16 and got.shape == (3, 16, 512)
    parts = [(a["kv"], a["indices"], a["lengths"]), (a["extra_kv"], a["extra_indices"], a["extra_lengths"])]
    want = _decode_loop(a["q"], parts, a["sink"], rk.SWAPAB_SCALE)
    assert torch.allclose(got.float(), want, rtol=2 ** -7, atol=2 ** -7 * want.abs().max().item())
    assert torch.equal(got[2].float(), torch.zeros(16, 512))
    # without the extra cache: the main cache's keys only
    alone = rk.REFERENCES[SWAPAB].run({**a, "extra_kv": None, "extra_indices": None, "extra_lengths": None})
    want_alone = _decode_loop(a["q"], parts[:1], a["sink"], rk.SWAPAB_SCALE)
    assert torch.allclose(alone.float(), want_alone, rtol=2 ** -7, atol=2 ** -7 * want_alone.abs().max().item())
    assert not torch.allclose(alone[:2].float(), want[:2], rtol=2 ** -7, atol=2 ** -7 * want.abs().max().item())


def test_the_swapab_stand_in_models_sm100s_call_only() -> None:
    unmodeled = rk.REFERENCES[SWAPAB].unmodeled
    assert unmodeled({"inv_rope": None, "partial_gluon": None}) is None
    assert "inverse RoPE" in unmodeled({"inv_rope": ("freqs", "positions")})
    assert "gfx950" in unmodeled({"partial_gluon": object()})


def _breached(arguments: dict[str, Any], simulated: str = "sm103") -> list[str]:
    entry = arch_rules.entry_of(SWAPAB)
    assert entry is not None
    return [b.rule.argument for b in arch_rules.breaches(entry, arguments, simulated, "sm90")]


def test_a_well_formed_swapab_call_breaks_no_rule() -> None:
    a = _decode_inputs()
    assert _breached(a) == []
    assert _breached({**a, "extra_kv": None, "extra_indices": None, "extra_lengths": None}) == []


@pytest.mark.parametrize(("change", "argument"), [
    (lambda a: {**a, "q": a["q"][..., :8, :]}, "q.shape[-2] (heads)"),
    (lambda a: {**a, "q": a["q"][:1].expand(9, 1, 16, 512)}, "q.shape[0] (batch)"),
    (lambda a: {**a, "q": a["q"].float()}, "q.dtype"),
    (lambda a: {**a, "q": a["q"][..., ::2]}, "q.shape[-1] (head_dim)"),
    (lambda a: {**a, "lengths": a["lengths"].repeat(2)[::2]}, "lengths"),
    (lambda a: {**a, "extra_lengths": None}, "(extra_kv, extra_indices, extra_lengths)"),
    (lambda a: {**a, "sink": a["sink"][:8]}, "sink (heads)"),
    (lambda a: {**a, "sink": None}, "sink"),
    (lambda a: {**a, "kv": a["kv"][..., :576]}, "kv.shape[-1] (bytes per token)"),
    (lambda a: {**a, "extra_kv": a["extra_kv"].view(__import__("torch").int8)}, "extra_kv.dtype"),
    (lambda a: {**a, "indices": a["indices"].transpose(0, 2)}, "indices.stride(-1)"),
], ids=["heads", "batch", "q-dtype", "head-dim", "lengths-view", "half-extra", "short-sink", "no-sink", "kv-bytes",
        "extra-dtype", "indices-stride"])
def test_each_swapab_rule_names_its_argument(change: Any, argument: str) -> None:
    assert argument in _breached(change(_decode_inputs()))


def test_the_swapab_rules_are_sm10x_only() -> None:
    a = _decode_inputs()
    assert _breached({**a, "q": a["q"][..., :8, :]}, simulated="sm90") == []
