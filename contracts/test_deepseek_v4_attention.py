"""Contract suite: DeepSeek-V4 attention through the real DeepseekV4AttnBackend.forward, per role (GPU).

One target decode step, one target-verify step and the draft's multi-step decode (steps 0 and 1),
through FlashMLA's sparse FP8 decode, on the SWA-only, C4 and C128 layers; checked against
dsakit's float64 reference over keys derived from the placement, not from SGLang's metadata.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import dsakit
from dsakit.backends.batch_builder import BatchShape, PagedPlacement, build_forward_batch
from dsakit.backends.dsa_invariants import expected_seqlens_expanded
from dsakit.backends.dsv4_attention_reference import attended_positions, dsv4_sparse_attention_reference, indexer_topk
from dsakit.backends.dsv4_invariants import c4_index_topk, check_dsv4_core_metadata, check_dsv4_write_target, query_requests
from dsakit.backends.harness import SPECULATIVE_SERVER_ARGS, deepseek_v4_backend

# flash_mla_with_kvcache's sparse FP8 path: SM 9.0 or SM 10.x (SM 12.x runs SGLang's torch fallback)
pytestmark = [
    dsakit.gate("cuda", "sglang:deepseek-v4-backend", "module:sgl_kernel.flashmla_ops", "flashmla-sparse"),
    pytest.mark.dsakit_jit("triton-kernels"),
]

HEADS, HEAD_DIM = 64, 512  # FlashMLA's sparse decode takes 64 or 128 query heads (production pads to 64)
STEPS = SPECULATIVE_SERVER_ARGS["speculative_num_steps"]
# a 2101-token request has 525 C4 entries: the indexer's top-512 is a real selection there
SHAPES = {
    "decode": BatchShape("decode", (100, 128, 257, 2101)),
    "target_verify": BatchShape("target_verify", (97, 126, 252, 2097), draft_tokens=4),
    # a request shorter than one 64-token KV block: its SWA rows fit one block and it has no C128
    # entry, where FlashMLA's split-KV schedule hinges on each row's own lengths (an empty list
    # still takes a block), not on the top-k width
    "short_verify": BatchShape("target_verify", (37, 126, 252, 2097), draft_tokens=4),
    "draft_decode": BatchShape("decode", (100, 128, 255, 2101), draft_steps=STEPS),
}
# (layer id, compress ratio): the harness pool's layer 0 is C4, layer 1 C128; a ratio-0 forward
# reads only the SWA cache, as DeepSeek-V4's SWA-only and MTP (nextn) layers do
LAYERS = {"target": ((0, 0), (0, 4), (1, 128)), "draft": ((0, 0),)}
# DeepSeek-V4.1 (model_type deepseek_v41) runs 16 real heads in the 64-head padded q: on SM 10.x its
# decode, verify and draft decode of at most 8 query tokens take the swap-AB kernel
# (decode_attention_sm100.swapab_attention, deepseek_v4_backend._forward_attention), larger batches
# FlashMLA with the schedule precomputed by SM100's constants (_maybe_precompute_flashmla_sched_meta):
# the verify cell's 16 query tokens. Under a simulated SM 10.x that schedule is judged by SM100's rules
# (its shape for 148 SMs and FlashMLA's own rows for the call's lengths) and this GPU's FlashMLA
# schedules for itself (dsakit.simulation.decode_schedules).
MODEL_TYPES = {"v4": "deepseek_v4", "v41": "deepseek_v41"}
REAL_HEADS = {"v4": HEADS, "v41": 16}
CELLS = [
    pytest.param("v4", "target", "decode", 0, id="target-decode"),
    pytest.param("v4", "target", "target_verify", 0, id="target-target_verify"),
    *(pytest.param("v4", "draft", "draft_decode", step, id=f"draft-decode-step{step}") for step in range(STEPS - 1)),
    pytest.param("v41", "target", "decode", 0, id="v41-target-decode"),
    pytest.param("v41", "target", "short_verify", 0, id="v41-target-target_verify"),
    pytest.param("v41", "draft", "draft_decode", 0, id="v41-draft-decode-step0"),
]


_V4 = "sglang.srt.layers.attention.deepseek_v4_backend"
_DSV4_KERNELS = "sglang.kernels.ops.attention.dsv4"
# Where each release keeps them, probed in order: 0.5.17 re-exports both from the backend; from
# 0.5.21 the backend imports no quantizer (kernels' quant_k_cache), 0.5.23 keeps it only as a test
# reference and renames the dequantizer *_dsv4.
QUANTIZERS = ((_V4, "quant_to_nope_fp8_rope_bf16_pack_triton"),
              (f"{_DSV4_KERNELS}.quant_k_cache", "quant_to_nope_fp8_rope_bf16_pack_triton"),
              ("sglang.test.kernels.deepseek_v4.k_cache_reference", "quant_to_nope_fp8_rope_bf16_pack_triton"))
DEQUANTIZERS = ((_V4, "dequantize_k_cache_paged"), (_V4, "dequantize_k_cache_paged_dsv4"),
                (f"{_DSV4_KERNELS}.dequant_k_cache", "dequantize_k_cache_paged"),
                (f"{_DSV4_KERNELS}.dequant_k_cache", "dequantize_k_cache_paged_dsv4"))


def _first_defined(candidates: tuple[tuple[str, str], ...]) -> Any:
    import importlib
    import importlib.util

    for module, name in candidates:
        if importlib.util.find_spec(module) is None:
            continue
        found = getattr(importlib.import_module(module), name, None)
        if found is not None:
            return found
    return None


def sglang_kv_codec() -> tuple[Any, Any]:
    """SGLang's own FP8 pack (bf16 K -> NopeFp8RopeBf16Pack) and paged dequantizer (bytes -> bf16
    K), so the cache layout under test is SGLang's: found by name where this release defines them."""
    quantize, dequantize = _first_defined(QUANTIZERS), _first_defined(DEQUANTIZERS)
    if quantize is None or dequantize is None:
        where = "; ".join(f"{m}.{n}" for m, n in (QUANTIZERS if quantize is None else DEQUANTIZERS))
        pytest.fail(f"this SGLang defines none of {where}: dsakit cannot write the FP8 KV cache the way "
                    "SGLang does; add where this release keeps it to QUANTIZERS / DEQUANTIZERS")
    return quantize, dequantize


class KvFill:
    """Random bf16 K per (layer, position) and per compressed entry, written through SGLang's pool."""

    def __init__(self, runner: Any, placement: PagedPlacement, seed: int) -> None:
        import torch

        self.runner, self.placement = runner, placement
        self.pool = runner.token_to_kv_pool
        self.mapping = self.pool.full_to_swa_index_mapping
        self.quantize, self.dequantize = sglang_kv_codec()
        self.generator = torch.Generator(device=runner.device).manual_seed(seed)

    def random_k(self, rows: int) -> Any:
        import torch

        return torch.randn(rows, HEAD_DIM, generator=self.generator, device=self.runner.device).to(torch.bfloat16)

    def swa_slots(self, request: int, positions: list[int]) -> Any:
        import torch

        full = torch.tensor([self.placement.slot(request, p) for p in positions], dtype=torch.int64,
                            device=self.mapping.device)
        return self.mapping[full]

    def compressed_slots(self, request: int, ratio: int, entries: list[int]) -> Any:
        """Entry j of a C`ratio` layer lives at the full slot of its last token // ratio
        (metadata_kernel: c4_out_loc = raw_out_loc // 4; page_table[j // 64] * 64 + j % 64)."""
        import torch

        return torch.tensor([self.placement.slot(request, ratio * j + ratio - 1) // ratio for j in entries],
                            dtype=torch.int64, device=self.runner.device)

    def write_swa(self, layer_id: int, request: int, positions: list[int]) -> None:
        if positions:
            self.pool.set_swa_key_buffer_radix(layer_id, self.swa_slots(request, positions),
                                               self.quantize(self.random_k(len(positions))))

    def write_compressed(self, layer_id: int, ratio: int, request: int, count: int) -> None:
        if count:
            self.pool.set_extra_key_buffer(layer_id, self.compressed_slots(request, ratio, list(range(count))),
                                           self.quantize(self.random_k(count)))

    def swa_keys(self, layer_id: int, request: int, positions: list[int]) -> Any:
        import torch

        if not positions:
            return torch.zeros(0, HEAD_DIM, dtype=torch.float64)
        cache = self.pool.get_swa_key_buffer_radix(layer_id)
        slots = self.swa_slots(request, positions)
        page = getattr(self.pool, "swa_page_size", None)  # 0.5.21+; 0.5.17 names it swa_window_size
        page = self.pool.swa_window_size if page is None else page
        return self.dequantize(cache, slots, page).reshape(len(positions), -1).to("cpu", torch.float64)

    def compressed_keys(self, layer_id: int, ratio: int, request: int, entries: list[int]) -> Any:
        import torch

        if not entries:
            return torch.zeros(0, HEAD_DIM, dtype=torch.float64)
        cache = self.pool.get_extra_key_buffer(layer_id)
        slots = self.compressed_slots(request, ratio, entries)
        return (self.dequantize(cache, slots, self.pool.get_extra_key_page_size(layer_id))
                .reshape(len(entries), -1).to("cpu", torch.float64))


def _reference(fill: KvFill, shape: BatchShape, layer_id: int, ratio: int, q: Any, sink: Any,
               selections: list[list[int]], *, shift: int = 0) -> Any:
    """The float64 output, with the SWA window shifted by `shift` tokens (the discrimination check)."""
    import torch

    rows = []
    for row, (request, length) in enumerate(zip(query_requests(shape), expected_seqlens_expanded(shape))):
        swa, entries = attended_positions(length, ratio)
        swa = [p + shift for p in swa if p + shift >= 0]
        chosen = selections[row] if ratio == 4 else entries
        rows.append(torch.cat([fill.swa_keys(layer_id, request, swa),
                               fill.compressed_keys(layer_id, ratio, request, chosen)]))
    width = max(r.shape[0] for r in rows)
    keys = torch.zeros(len(rows), width, HEAD_DIM, dtype=torch.float64)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for t, r in enumerate(rows):
        keys[t, : r.shape[0]], valid[t, : r.shape[0]] = r, True
    return dsv4_sparse_attention_reference(q.cpu(), keys, valid, sink.cpu(), softmax_scale=HEAD_DIM ** -0.5)


def _seed_c4_selection(core: Any, fill: KvFill, shape: BatchShape, seed: int) -> list[list[int]]:
    """Stand in for the C4 indexer (forward_c4_indexer fills c4_sparse_page_indices before attention,
    as SGLang's own kit seeds it): per row, the top-512 of random logits over its len // 4 entries,
    written as C4 slots in shuffled order. Returns each row's selected entries."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    indices = torch.full(tuple(core.c4_sparse_page_indices.shape), -1, dtype=torch.int32)
    selections = []
    for row, (request, length) in enumerate(zip(query_requests(shape), expected_seqlens_expanded(shape))):
        count = length // 4
        chosen = indexer_topk(torch.randn(count, generator=generator), count, topk=c4_index_topk(core))
        chosen = [chosen[i] for i in torch.randperm(len(chosen), generator=generator).tolist()]
        indices[row, : len(chosen)] = fill.compressed_slots(request, 4, chosen).to("cpu", torch.int32)
        selections.append(sorted(chosen))
    core.c4_sparse_page_indices.copy_(indices.reshape(core.c4_sparse_page_indices.shape))
    return selections


def attention_sink(generator: Any, device: Any) -> Any:
    """Per-head sink logits in 4 .. 12: the range of log(sum_j exp(s_j)) for these q / K scales
    (logits of std 3 over 128 .. 640 keys), so a kernel that drops the sink, or adds it to the
    wrong head, is off by far more than the tolerance."""
    import torch

    return 4 + 8 * torch.rand(HEADS, generator=generator, device=device, dtype=torch.float32)


@pytest.mark.parametrize(("model", "role", "case", "step"), CELLS)
def test_forward_matches_the_sparse_reference(model: str, role: str, case: str, step: int) -> None:
    import torch

    shape = SHAPES[case]
    mode = shape.mode
    speculative = role == "draft" or mode == "target_verify"
    heads = REAL_HEADS[model]
    overrides = {"model_config.hf_config.model_type": MODEL_TYPES[model]}
    with deepseek_v4_backend(role, speculative=speculative, mode=mode, max_running_requests=8,
                             **overrides) as (backend, runner):
        batch, placement = build_forward_batch(runner, shape, seed=11)
        backend.init_forward_metadata(batch)
        step_backend = backend.attn_backends[step] if shape.draft_steps else backend
        core = step_backend.forward_metadata.core_attn_metadata
        mapping = runner.token_to_kv_pool.full_to_swa_index_mapping
        written_positions = [ps[step:step + 1] if shape.draft_steps else ps for ps in shape.write_positions()]
        written = [placement.slot(r, p) for r, ps in enumerate(written_positions) for p in ps]
        reasons = check_dsv4_core_metadata(core, shape, placement, runner.req_to_token_pool.req_to_token, mapping)
        reasons += check_dsv4_write_target(core, written, mapping, label=f"{role} {case} step {step}")
        assert reasons == [], "metadata is wrong before attention runs:\n" + "\n".join(map(str, reasons))
        if shape.draft_steps:  # eagle_worker_v2.draft_forward: step i's slice of the shared buffer
            batch.out_cache_loc = batch.out_cache_loc.view(shape.batch_size, shape.draft_steps)[:, step].contiguous()

        fill = KvFill(runner, placement, seed=12)
        for layer_id, ratio in LAYERS[role]:
            for r, n in enumerate(shape.slot_lens()):
                fill.write_swa(layer_id, r, [p for p in range(n) if p not in written_positions[r]])
                if ratio:
                    fill.write_compressed(layer_id, ratio, r, n // ratio)
        selections = _seed_c4_selection(core, fill, shape, seed=13) if role == "target" else []

        rows = len(expected_seqlens_expanded(shape))
        generator = torch.Generator(device=runner.device).manual_seed(14)
        sink = attention_sink(generator, runner.device)
        failures = []
        for layer_id, ratio in LAYERS[role]:
            q = (torch.randn(rows, HEADS, HEAD_DIM, generator=generator, device=runner.device) * 3).to(torch.bfloat16)
            q[:, heads:] = 0  # the model pads its real heads with zeros to FlashMLA's 64
            k_new = fill.random_k(len(written))
            layer = SimpleNamespace(layer_id=layer_id, v_head_dim=HEAD_DIM, tp_q_head_num=heads)
            out = step_backend.forward(q, k_new, k_new, layer, batch, compress_ratio=ratio, save_kv_cache=True,
                                       attn_sink=sink)
            stored = torch.cat([fill.swa_keys(layer_id, r, ps) for r, ps in enumerate(written_positions)])
            if not torch.allclose(stored, k_new.cpu().double(), rtol=2 ** -3, atol=2 ** -4 * k_new.abs().max().item()):
                failures.append(f"layer {layer_id} (C{ratio}): the new K is not in its SWA slots after forward")
            # the real heads: FlashMLA returns all 64, the swap-AB kernel the 16 it computes
            got = out.to("cpu", torch.float64).reshape(rows, -1, HEAD_DIM)[:, :heads]
            want = _reference(fill, shape, layer_id, ratio, q, sink, selections)[:, :heads]
            shifted = _reference(fill, shape, layer_id, ratio, q, sink, selections, shift=-1)[:, :heads]
            error, margin = (got - want).abs().max().item(), (shifted - want).abs().max().item()
            tolerance = 2 ** -7 * want.abs() + 2 ** -8 * want.abs().max()
            # the tolerance must tell apart a window shifted by one token: a bf16 output is within it
            if not bool(((got - want).abs() <= tolerance).all()) or bool(((shifted - want).abs() <= tolerance).all()):
                failures.append(f"layer {layer_id} (C{ratio}): max |out - reference| {error:.4g} (reference max "
                                f"{want.abs().max().item():.3g}; a window shifted by one token differs by {margin:.4g})")
    assert failures == [], f"{model} {role} {case} step {step}:\n" + "\n".join(failures)
