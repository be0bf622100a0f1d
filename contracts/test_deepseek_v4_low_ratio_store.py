"""Contract suite: DeepSeek-V4.1's ratio-1 / ratio-2 compressor store through the real
DeepseekV4AttnBackend.forward_low_ratio_sources, one decode step (GPU).

What is driven (SGLang 0.5.21, srt/layers/attention/deepseek_v4_backend.py): a decode step's
`forward_low_ratio_sources(run_compressor=True, run_indexer=False)` (:2692-2749, as the model's
compressor-only call, models/deepseek_v4.py:1500-1507) -> `_low_ratio_compress_decode` (:2825) ->
`_low_ratio_write_group` (:3019-3072), which writes one index key per completed group into the
layer's fp4 index-K cache and its latent into the extra-key (compressed KV) cache. Which index-key
store runs is a device decision:
- ratio 1 (:2841-2843): `fuse_index_store=(x.is_cuda and torch.version.cuda is not None and
  is_sm100_or_newer())`; ratio 2 (:2868-2874, through c2_decode_pool): `fuse_index_store=
  is_sm100_or_newer()`;
- fused (SM 10.x, :3034-3053): `k = indexer.k_norm(indexer.forward_wk(latent))`, then
  `fp4_indexer.index_k_rope_pack(k, freqs, indexer.rope_head_dim, cache=..., loc=slots)`, a
  portable Triton kernel (RoPE, fake fp4, pack and paged store in one launch);
- unfused (SM 9.0, :3054-3059): `pool.set_index_k_fp4(loc=slots, cache_k=indexer.index_keys(
  latent, freqs))` (torch-rounded key, then fp4_indexer.store_fp4_index_k_cache).
So this file runs as it is on an H200 for the unfused store and under `--dsakit-device sm100`
(`is_sm100_or_newer()` answers True, portable kernels run on the H200) for the fused one. The
failure message names the branch SGLang's probe chose.

The outcome is judged, not the branch: after the call, dsakit reads the index-K cache at the slots
dsakit derives from its own placement (ratio 1: the token's full slot, c1_out_loc = raw_out_loc;
ratio 2: full slot // 2 for the token that completes a pair, deepseek_v4_backend.py:313-322),
decodes it with its own reader of the documented page layout (deepseek_v4_memory_pool.py:680-723:
[page_size x 64 e2m1 bytes | page_size x 4 ue8m0 bytes], low nibble = even element) and compares it
with a float64 torch reference computed by dsakit from the weights and the input alone: the
compressor's projection (and, at ratio 2, the softmax pair pooling with a partner dsakit wrote into
SGLang's pair-state ring) and RMSNorm, the indexer's wk and k_norm, RoPE (interleaved pairs) on the
key's last rope_head_dim dims with the group position's freqs_cis row. No SGLang store, quantizer
or RoPE kernel computes the expectation. The extra-key cache (the V4 layout: 448 e4m3 + 64 bf16 +
ue8m0 per 64, kernels/ops/attention/dsv4/kv_layout.py) is read back the same way, against the
RoPE'd latent. Every byte of both caches outside the written slots must be unchanged (both are
filled with seeded random bytes first, so a missing write is visible too), except slot 0: SGLang's
padding slot, where a ratio-2 row that completes no pair writes by design (c2_decode_pool: slots =
where(out_loc >= 0, out_loc, 0)).

Tolerance (index key): per element, one e2m1 grid step at the reference block's ue8m0 scale
s = 2^ceil(log2(amax_32 / 6)): the grid step is 0.5 s below 2 s, s below 4 s, 2 s above. Correct
rounding is within half a step; the other half covers a code that flips from bf16 rounding of the
intermediates SGLang keeps (bf16 projections, the bf16-rounded rotated tail) and a block whose
amax / 6 lies within that rounding of a power of two, where SGLang's scale is 2 s (its half step is
at most one step at s). Extra key: one e2m1 step at the reference per-16 scale amax_16 / 6 (its
e4m3 rounding: x 1.125), plus the e4m3 requantization of the V4 layout (2^-4 relative) and a 2^-10
floor of the row's largest value. Each check also proves it can fail: the same tolerance must reject,
by more than twice its width, the key a planted bug would store.

Planted bugs in SGLang that this catches (index-K, both branches where the code is shared):
- slots (:3041-3053 `loc=slots`, :2836-2838 / c2_decode_pool slots): any other loc writes bytes
  outside the expected slots and leaves the expected ones random;
- freqs (`layer.freqs_cis[group_pos]` at :3030, `freqs` at :3048): the next position's row, or at
  ratio 2 the odd token's `pos` instead of `group_pos`;
- the rope dim (`indexer.rope_head_dim` at :3049): RoPE on the head's first dims, or none;
- the input latent (`latent` into forward_wk at :3046): the compressor's pooled output before its
  RMSNorm (norm weights are random, so the RMSNorm is not a per-row scale that k_norm undoes), or
  the RoPE'd latent;
- `fuse_index_store=` at :2842 / :2872: the unfused branch stores the same key, so a flipped flag
  is invisible here by design (the outcome is the contract); it shows as the branch named in the
  message and in dsakit's branch coverage, not as a failure.
Not caught: a wrong `rope_head_dim` that happens to equal 64 elsewhere, and anything in the
compressor-fused decode (`use_fused_compress`, :2827-2829): the compressor is built with
`fused_compress=False` (dsv41_sparse.py:106-120, the two-GEMM weight layout), since its default on a
(simulated) SM 10.x takes `_low_ratio_compress_fused`, whose kernels are SM 10.x only.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import dsakit
from dsakit.backends.batch_builder import BatchShape, PagedPlacement, build_forward_batch
from dsakit.backends.harness import deepseek_v4_backend

# the backend's decode metadata builds FlashMLA schedules (sgl_kernel.flashmla_ops) and the ratio-1/2
# indexer metadata (DeepGEMM's paged MQA logits schedule), although the indexer does not run here
pytestmark = [
    dsakit.gate("cuda", "sglang:deepseek-v4-backend", "sglang:dsv41-low-ratio-sources",
                "module:sgl_kernel.flashmla_ops", "module:deep_gemm"),
    pytest.mark.dsakit_jit("triton-kernels"),
]

HIDDEN, HEAD_DIM, INDEX_HEAD_DIM, ROPE_DIM, EPS = 256, 512, 128, 64, 1e-6
# the pool's layers (harness.deepseek_v4_kv_pool): layer 0 is ratio 1, layer 1 ratio 2, each its own
# kv_source layer (owns its latent and index-K pools)
LAYER_RATIOS = (1, 2)
# seq_lens (the decoded token is at seq_len - 1): even lengths complete a ratio-2 pair (odd position),
# odd ones do not (one request at position 0); every row completes a ratio-1 group. Lengths straddle
# the 128-token window and the 256-token page.
SHAPE = BatchShape("decode", (257, 130, 1, 600, 77, 1002))
INDEX_K_PAYLOAD, INDEX_K_SCALE = 64, 4  # bytes per index-K slot (fp4_indexer.INDEX_K_SLOT_BYTES)
V4_DATA, V4_SCALE, V4_NOPE = 576, 8, 448  # bytes per V4-layout token (kv_layout.KVLayout.V4)
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# RoPE of the compressed layers: the same table for both branches (the model's is YaRN-scaled,
# models/deepseek_v4.py:916-946; plain RoPE at base 10000 keeps pair 0 at one radian per position)
ROPE_ARGS = {"dim": ROPE_DIM, "original_seq_len": 0, "base": 10000.0, "factor": 1.0, "beta_fast": 32, "beta_slow": 1}
CASES = [pytest.param(ratio, id=f"ratio{ratio}") for ratio in LAYER_RATIOS]


class LowRatioSourceLayer:
    """The layer object forward_low_ratio_sources is handed, exposing exactly what it reads (a read of
    anything else raises AttributeError: `__slots__`). SGLang's own MQALayer (models/deepseek_v4.py:
    1042-1200) needs the parallel state, RadixAttention and its attention weights for nothing this
    path reads; its compressor and indexer here are SGLang's real modules (dsv41_sparse.py).

    layer_id       get_attention_compress_states / get_index_k_with_scale_buffer / get_extra_key_*
                   (deepseek_v4_backend.py:2849, :3052, :3059, :3061)
    compress_ratio :2830 (ratio 1 or the c2_decode_pool path)
    compressor     DeepseekV41Compressor: use_fused_compress :2827, project :2832 / :2852, finish :3029
    indexer        DeepseekV41Indexer: owns_k / index_head_dim :3033-3040, k_norm / forward_wk :3046,
                   rope_head_dim :3049, index_keys :3057
    freqs_cis      the complex RoPE table indexed by group position :3030 (MqaAttentionBase.freqs_cis)
    rope_head_dim  the latent's RoPE dims for the fp8 extra cache :3066
    """

    __slots__ = ("layer_id", "compress_ratio", "compressor", "indexer", "freqs_cis", "rope_head_dim")

    def __init__(self, layer_id: int, compress_ratio: int, compressor: Any, indexer: Any, freqs_cis: Any) -> None:
        self.layer_id, self.compress_ratio = layer_id, compress_ratio
        self.compressor, self.indexer, self.freqs_cis, self.rope_head_dim = compressor, indexer, freqs_cis, ROPE_DIM


def indexer_config() -> SimpleNamespace:
    """The config fields DeepseekV41Indexer.__init__ reads (dsv41_sparse.py:170-226), V4.1's index
    geometry (128-dim keys, 64 RoPE dims) with small projections; both layers own their keys."""
    return SimpleNamespace(index_n_heads=8, index_head_dim=INDEX_HEAD_DIM, qk_rope_head_dim=ROPE_DIM, index_topk=512,
                           kv_source_layer_ids=list(range(len(LAYER_RATIOS))), candidate_source_layer_id=-1,
                           candidate_topk_blocks=0, candidate_block_size=0, q_lora_rank=64, hidden_size=HIDDEN,
                           rms_norm_eps=EPS)


def build_layer(layer_id: int, ratio: int, device: Any, seed: int) -> LowRatioSourceLayer:
    """SGLang's compressor and indexer for `layer_id`, with seeded random weights: projections of
    unit-variance outputs, RMSNorm weights in 0.5 .. 1.5 (not a per-row scale)."""
    import torch
    from sglang.kernels.ops.attention.deepseek_v4_rope import precompute_freqs_cis
    from sglang.srt.layers.attention.dsv4.dsv41_sparse import DeepseekV41Compressor, DeepseekV41Indexer

    compressor = DeepseekV41Compressor(HIDDEN, HEAD_DIM, ratio, EPS, fused_compress=False)
    indexer = DeepseekV41Indexer(indexer_config(), layer_id=layer_id, head_dim=HEAD_DIM, quant_config=None,
                                 prefix=f"layers.{layer_id}.indexer")
    generator = torch.Generator().manual_seed(seed)
    linears = [compressor.wkv, *([compressor.wgate] if ratio > 1 else []), indexer.wk]
    with torch.no_grad():
        for linear in linears:
            fan_in = linear.weight.shape[1]
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * fan_in ** -0.5)
        for norm in (compressor.norm, indexer.k_norm):
            norm.weight.copy_(0.5 + torch.rand(norm.weight.shape, generator=generator))
    freqs = precompute_freqs_cis(seqlen=max(SHAPE.seq_lens) + 2, **ROPE_ARGS)
    return LowRatioSourceLayer(layer_id, ratio, compressor.to(device), indexer.to(device), freqs.to(device))


# ---------------------------------------------------------------- dsakit's float64 reference


def rms_norm(x: Any, weight: Any) -> Any:
    return x * (x.square().mean(-1, keepdim=True) + EPS).rsqrt() * weight


def rope(x: Any, freqs: Any, dims: slice) -> Any:
    """x with its `dims` rotated as interleaved (real, imag) pairs by complex `freqs` [n, pairs]."""
    import torch

    out = x.clone()
    part = x[:, dims]
    pairs = torch.complex(part[:, 0::2], part[:, 1::2]) * freqs[:, : part.shape[1] // 2]
    out[:, dims] = torch.stack([pairs.real, pairs.imag], dim=-1).flatten(1)
    return out


def tail(width: int, rope_dim: int = ROPE_DIM) -> slice:
    return slice(width - rope_dim, width)


def index_keys(latent: Any, layer: LowRatioSourceLayer, freqs: Any) -> Any:
    """The rotated, unquantized index key: k_norm(wk(latent)), RoPE on its last rope_head_dim dims."""
    k = rms_norm(latent @ _cpu(layer.indexer.wk.weight).T, _cpu(layer.indexer.k_norm.weight))
    return rope(k, freqs, tail(INDEX_HEAD_DIM))


def _cpu(tensor: Any) -> Any:
    import torch

    return tensor.detach().to("cpu", torch.float64)


def fp4_step(ref: Any, block: int, scale: Any) -> Any:
    """One e2m1 grid step at each element's magnitude, for per-`block` scales `scale` [n, blocks]."""
    import torch

    scale = scale.repeat_interleave(block, dim=-1)
    magnitude = ref.abs() / scale
    return torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0)) * scale


def index_key_tolerance(ref: Any) -> Any:
    """One e2m1 step at the ue8m0 scale of each 32-value block (module docstring)."""
    import torch

    amax = ref.unflatten(-1, (-1, 32)).abs().amax(-1).clamp_min(1e-30)
    return fp4_step(ref, 32, torch.exp2(torch.ceil(torch.log2(amax / 6))))


def extra_key_tolerance(ref: Any) -> Any:
    """One e2m1 step at each 16-value block's e4m3 scale, the V4 layout's e4m3 requantization and a
    floor (module docstring)."""
    amax = ref.unflatten(-1, (-1, 16)).abs().amax(-1)
    return 1.125 * fp4_step(ref, 16, amax / 6) + 2 ** -4 * ref.abs() + 2 ** -10 * ref.abs().amax(-1, keepdim=True)


# ---------------------------------------------------------------- dsakit's readers of SGLang's page layouts


def slot_columns(slots: Any, page_size: int, data_bytes: int, scale_bytes: int) -> tuple[Any, Any, Any]:
    """(page [n, 1], data columns [n, data_bytes], scale columns [n, scale_bytes]) of each slot in a
    page of `page_size` data rows followed by `page_size` scale rows."""
    import torch

    page, offset = (slots // page_size)[:, None], (slots % page_size)[:, None]
    data = offset * data_bytes + torch.arange(data_bytes, device=slots.device)
    scale = page_size * data_bytes + offset * scale_bytes + torch.arange(scale_bytes, device=slots.device)
    return page, data, scale


def read_index_k(cache: Any, slots: Any, page_size: int) -> Any:
    """Index-K rows at `slots` as float64 [n, 128]: e2m1 codes (low nibble the even element, bit 3
    the sign) times 2^(e - 127) per 32 values."""
    import torch

    page, data, scale = slot_columns(slots.to(cache.device, torch.int64), page_size, INDEX_K_PAYLOAD, INDEX_K_SCALE)
    payload, exponents = cache[page, data].to("cpu", torch.int64), cache[page, scale].to("cpu", torch.int64)
    codes = torch.stack([payload & 0xF, payload >> 4], dim=-1).flatten(1)
    values = torch.tensor(E2M1, dtype=torch.float64)[codes & 7] * torch.where(codes & 8 > 0, -1.0, 1.0)
    return values * torch.exp2(exponents.double() - 127).repeat_interleave(32, dim=-1)


def read_extra_key_v4(cache: Any, slots: Any, page_size: int) -> Any:
    """V4-layout rows at `slots` as float64 [n, 512]: 448 e4m3 times 2^(e - 127) per 64 values, then
    64 bf16."""
    import torch

    cache = cache.view(torch.uint8)
    page, data, scale = slot_columns(slots.to(cache.device, torch.int64), page_size, V4_DATA, V4_SCALE)
    rows, exponents = cache[page, data], cache[page, scale][:, : V4_NOPE // 64].to("cpu", torch.int64)
    nope = rows[:, :V4_NOPE].contiguous().view(torch.float8_e4m3fn).to("cpu", torch.float64)
    nope = nope * torch.exp2(exponents.double() - 127).repeat_interleave(64, dim=-1)
    rope_part = rows[:, V4_NOPE:].contiguous().view(torch.bfloat16).to("cpu", torch.float64)
    return torch.cat([nope, rope_part], dim=-1)


def changed_slots(before: Any, after: Any, expected: Any, page_size: int, data_bytes: int, scale_bytes: int) -> list[int]:
    """Slots (other than `expected` and the padding slot 0) with a byte that differs."""
    import torch

    keep = torch.ones_like(before, dtype=torch.bool)
    slots = torch.cat([expected.to(before.device, torch.int64), torch.zeros(1, dtype=torch.int64, device=before.device)])
    page, data, scale = slot_columns(slots, page_size, data_bytes, scale_bytes)
    keep[page, data] = False
    keep[page, scale] = False
    pages, columns = torch.nonzero((before != after) & keep, as_tuple=True)
    in_scales = columns >= page_size * data_bytes
    offsets = torch.where(in_scales, (columns - page_size * data_bytes) // scale_bytes, columns // data_bytes)
    return sorted(set((pages * page_size + offsets).tolist()))


# ---------------------------------------------------------------- the step


def seed_bytes(buffer: Any, generator: Any) -> Any:
    """Fill a cache with random bytes (so a slot left unwritten reads as noise); returns a copy."""
    import torch

    raw = buffer.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, generator=generator, dtype=torch.uint8).to(raw.device))
    return raw.clone()


def group_rows(ratio: int, placement: PagedPlacement) -> list[tuple[int, int, int]]:
    """(request, position, slot) of each decoded token that completes a group, its slot by dsakit's
    placement (c1: the full slot; c2: the completing (odd) token's full slot // 2)."""
    rows = []
    for request, (position,) in enumerate(SHAPE.write_positions()):
        if (position + 1) % ratio == 0:
            rows.append((request, position, placement.slot(request, position) // ratio))
    return rows


def write_pair_partners(runner: Any, layer: LowRatioSourceLayer, placement: PagedPlacement, generator: Any) -> tuple[Any, Any]:
    """Ratio 2: the fp32 (kv, score) of each request's previous token (position - 1), written into
    SGLang's pair-state ring through its own addressing (CompressStatePool.set_state_by_state_loc,
    deepseek_v4_compress_state.py:269-281) as the previous decode step would have left it."""
    import torch
    from sglang.srt.mem_cache.deepseek_v4_compress_state import KVAndScore

    state = runner.token_to_kv_pool.get_attention_compress_states(layer.layer_id)
    count = SHAPE.batch_size
    kv = torch.randn(count, HEAD_DIM, generator=generator)
    score = torch.randn(count, HEAD_DIM, generator=generator)
    requests = torch.tensor(placement.req_pool_indices, dtype=torch.int64, device=runner.device)
    previous = torch.tensor([max(n - 2, 0) for n in SHAPE.seq_lens], dtype=torch.int64, device=runner.device)
    state.set_state_by_state_loc(state.translate_from_req_position_to_state_loc(requests, previous),
                                 KVAndScore.from_kv_score(kv=kv.to(runner.device), score=score.to(runner.device)))
    return kv.double(), score.double()


def reference_latents(layer: LowRatioSourceLayer, x: Any, partners: tuple[Any, Any] | None) -> tuple[Any, Any]:
    """(pooled, latent) per decode row, float64: wkv(x) at ratio 1; at ratio 2 the softmax-weighted
    pair (partner, this token) of wkv(x) by wgate(x) (DeepseekV41Compressor.pool_pairs); latent =
    RMSNorm(pooled) (finish)."""
    import torch

    compressor = layer.compressor
    kv = _cpu(x) @ _cpu(compressor.wkv.weight).T
    if partners is not None:
        score = _cpu(x) @ _cpu(compressor.wgate.weight).T
        weights = torch.stack([partners[1], score], dim=1).softmax(dim=1)
        kv = (torch.stack([partners[0], kv], dim=1) * weights).sum(dim=1)
    return kv, rms_norm(kv, _cpu(compressor.norm.weight))


def judge(name: str, got: Any, want: Any, tolerance: Any, wrong: dict[str, Any]) -> list[str]:
    """Reasons `got` is not `want` within `tolerance`, plus any planted-bug alternative the
    tolerance fails to reject by more than twice its width (the check could not fail)."""
    import torch

    reasons = []
    excess = ((got - want).abs() / tolerance).nan_to_num(nan=float("inf"))
    if not bool((excess <= 1).all()):
        row, col = divmod(int(excess.argmax()), excess.shape[1])
        reasons.append(f"{name}: {int((excess > 1).sum())} of {excess.numel()} values off by more than the "
                       f"tolerance (worst row {row} dim {col}: stored {got[row, col].item():.4g}, expected "
                       f"{want[row, col].item():.4g}, tolerance {tolerance[row, col].item():.3g})")
    for bug, alternative in wrong.items():
        margin = ((alternative - want).abs() / tolerance).max().item()
        if margin <= 2:
            reasons.append(f"{name}: the tolerance cannot tell the key of a planted bug ({bug}) apart "
                           f"(at most {margin:.2f} tolerances away): the check could not fail")
    return reasons


@pytest.mark.parametrize("ratio", CASES)
def test_low_ratio_decode_stores_the_index_key_and_latent_in_their_slots(ratio: int) -> None:
    import torch
    from sglang.srt.layers.attention.dsv4.v41_indexer import is_sm100_or_newer

    layer_id = LAYER_RATIOS.index(ratio)
    with deepseek_v4_backend("target", mode="decode", max_running_requests=8, compression_ratios=LAYER_RATIOS,
                             **{"model_config.hf_config.model_type": "deepseek_v41"}) as (backend, runner):
        pool = runner.token_to_kv_pool
        batch, placement = build_forward_batch(runner, SHAPE, seed=21)
        backend.init_forward_metadata(batch)
        layer = build_layer(layer_id, ratio, runner.device, seed=22)
        generator = torch.Generator().manual_seed(23)
        index_cache, extra_cache = pool.get_index_k_with_scale_buffer(layer_id), pool.get_extra_key_buffer(layer_id)
        index_before, extra_before = seed_bytes(index_cache, generator), seed_bytes(extra_cache, generator)
        partners = write_pair_partners(runner, layer, placement, generator) if ratio == 2 else None
        x = torch.randn(SHAPE.batch_size, HIDDEN, generator=generator).to(runner.device, torch.bfloat16)

        backend.forward_low_ratio_sources(layer=layer, x=x, q_lora=None, positions=batch.positions,
                                          forward_batch=batch, run_compressor=True, run_indexer=False)
        torch.cuda.synchronize()
        fused = bool(x.is_cuda and torch.version.cuda is not None and is_sm100_or_newer())

        rows = group_rows(ratio, placement)
        assert rows, "the batch completes no group: nothing would be checked"
        picked = [request for request, _, _ in rows]
        slots = torch.tensor([slot for _, _, slot in rows], dtype=torch.int64)
        # the group's position: the first token of the pair at ratio 2 (c2_decode_pool's group_pos)
        group_pos = torch.tensor([position + 1 - ratio for _, position, _ in rows], dtype=torch.int64)
        freqs = layer.freqs_cis.to("cpu", torch.complex128)
        pooled, latent = reference_latents(layer, x[picked], None if partners is None else
                                           (partners[0][picked], partners[1][picked]))
        want = index_keys(latent, layer, freqs[group_pos])
        k_plain = rms_norm(latent @ _cpu(layer.indexer.wk.weight).T, _cpu(layer.indexer.k_norm.weight))
        planted = {
            "freqs of the next position": index_keys(latent, layer, freqs[group_pos + 1]),
            "RoPE on the key's first rope_head_dim dims": rope(k_plain, freqs[group_pos], slice(0, ROPE_DIM)),
            "no RoPE": k_plain,
            "key from the compressor output before its RMSNorm": index_keys(pooled, layer, freqs[group_pos]),
            "key from the RoPE'd latent": index_keys(rope(latent, freqs[group_pos], tail(HEAD_DIM)), layer,
                                                     freqs[group_pos]),
        }
        index_page = pool.get_index_k_page_size(ratio)
        got = read_index_k(index_cache, slots, index_page)
        label = (f"ratio {ratio}, {'fused index_k_rope_pack' if fused else 'unfused set_index_k_fp4'} store "
                 f"(is_sm100_or_newer() = {is_sm100_or_newer()})")
        reasons = judge(f"{label}: index key", got, want, index_key_tolerance(want), planted)

        extra_page = pool.get_extra_key_page_size(layer_id)
        assert str(pool.get_extra_key_layout(layer_id).value) == "v4", "the harness pool keeps the V4 extra layout"
        extra_want = rope(latent, freqs[group_pos], tail(HEAD_DIM))
        reasons += judge(f"{label}: extra key", read_extra_key_v4(extra_cache, slots, extra_page), extra_want,
                         extra_key_tolerance(extra_want),
                         {"freqs of the next position": rope(latent, freqs[group_pos + 1], tail(HEAD_DIM))})

        for name, before, after, page, data_bytes, scale_bytes in (
            ("index-K", index_before, index_cache, index_page, INDEX_K_PAYLOAD, INDEX_K_SCALE),
            ("extra-key", extra_before, extra_cache.view(torch.uint8), extra_page, V4_DATA, V4_SCALE),
        ):
            stray = changed_slots(before, after, slots, page, data_bytes, scale_bytes)
            if stray:
                reasons.append(f"{label}: the {name} cache changed at slots {stray[:8]} (expected only "
                               f"{slots.tolist()} and the padding slot 0)")
    assert reasons == [], "\n".join(reasons)
