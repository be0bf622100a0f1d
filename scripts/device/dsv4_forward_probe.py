"""H200 probe for issue 17: DeepSeek-V4 metadata and one forward per role, step by step.

Prints, for each cell of contracts/test_deepseek_v4_attention.py, the shapes / dtypes / errors at
every step (backend, batch, metadata, invariants, KV fill, C4 seeding, forward, reference), so a
first-run failure names its step. Run from the repo root: `python scripts/device/dsv4_forward_probe.py`.
"""

from __future__ import annotations

import time
import traceback
from types import SimpleNamespace
from typing import Any

import torch

import dsakit
from dsakit.backends.batch_builder import build_forward_batch
from dsakit.backends.dsa_invariants import expected_seqlens_expanded
from dsakit.backends.dsv4_invariants import check_dsv4_core_metadata, check_dsv4_write_target
from dsakit.backends.harness import compress_state_ring_size, deepseek_v4_backend
from dsakit.contracts import test_deepseek_v4_attention as attention

T0 = time.time()


def say(*parts: Any) -> None:
    print(f"[{time.time() - T0:7.1f}s]", *parts, flush=True)


def describe(name: str, value: Any) -> str:
    if isinstance(value, torch.Tensor):
        head = value.reshape(-1)[:6].tolist() if value.numel() else []
        return f"{name}: {tuple(value.shape)} {value.dtype} {value.device} head={head}"
    return f"{name}: {type(value).__name__} {value!r:.80}"


def probe(role: str, case: str, step: int) -> None:
    shape = attention.SHAPES[case]
    mode = "decode" if case == "draft_decode" else case
    speculative = role == "draft" or mode == "target_verify"
    say(f"=== {role} {case} step {step}: {shape}")
    with deepseek_v4_backend(role, speculative=speculative, mode=mode, max_running_requests=8) as (backend, runner):
        pool = runner.token_to_kv_pool
        say("backend", type(backend).__name__, "pool swa_page_size", pool.swa_window_size, "page", pool.page_size,
            "rings", {r: compress_state_ring_size(r) for r in (4, 128)}, "swa_size", getattr(pool, "swa_size", "?"))
        batch, placement = build_forward_batch(runner, shape, seed=11)
        for name in ("seq_lens", "out_cache_loc", "positions", "req_pool_indices"):
            say(describe(name, getattr(batch, name)))
        backend.init_forward_metadata(batch)
        step_backend = backend.attn_backends[step] if shape.draft_steps else backend
        core = step_backend.forward_metadata.core_attn_metadata
        for name in ("seq_lens_casual", "positions_casual", "page_table", "swa_page_indices", "swa_topk_lengths",
                     "swa_out_cache_loc", "c4_sparse_page_indices", "c4_sparse_topk_lengths", "c128_page_indices",
                     "c128_topk_lengths_clamp1"):
            say(describe(name, getattr(core, name, None)))
        mapping = pool.full_to_swa_index_mapping
        written_positions = [ps[step:step + 1] if shape.draft_steps else ps for ps in shape.write_positions()]
        written = [placement.slot(r, p) for r, ps in enumerate(written_positions) for p in ps]
        reasons = check_dsv4_core_metadata(core, shape, placement, runner.req_to_token_pool.req_to_token, mapping)
        reasons += check_dsv4_write_target(core, written, mapping)
        say("invariants:", "ok" if not reasons else "\n  ".join(map(str, reasons)))
        if shape.draft_steps:
            batch.out_cache_loc = batch.out_cache_loc.view(shape.batch_size, shape.draft_steps)[:, step].contiguous()
        fill = attention.KvFill(runner, placement, seed=12)
        say("codec", fill.quantize.__name__, fill.dequantize.__name__)
        for layer_id, ratio in attention.LAYERS[role]:
            for r, n in enumerate(shape.slot_lens()):
                fill.write_swa(layer_id, r, [p for p in range(n) if p not in written_positions[r]])
                if ratio:
                    fill.write_compressed(layer_id, ratio, r, n // ratio)
            say(describe(f"layer {layer_id} swa cache", pool.get_swa_key_buffer_radix(layer_id)))
            if ratio:
                say(describe(f"layer {layer_id} extra cache", pool.get_extra_key_buffer(layer_id)),
                    "page", pool.get_extra_key_page_size(layer_id))
        selections = attention._seed_c4_selection(core, fill, shape, seed=13) if role == "target" else []
        say("c4 selections per row:", [len(s) for s in selections][:16])
        rows = len(expected_seqlens_expanded(shape))
        generator = torch.Generator(device=runner.device).manual_seed(14)
        sink = attention.attention_sink(generator, runner.device)
        for layer_id, ratio in attention.LAYERS[role]:
            try:
                q = (torch.randn(rows, attention.HEADS, attention.HEAD_DIM, generator=generator,
                                 device=runner.device) * 3).to(torch.bfloat16)
                k_new = fill.random_k(len(written))
                say(f"forward layer {layer_id} C{ratio}:", describe("q", q), describe("k", k_new))
                out = step_backend.forward(q, k_new, k_new,
                                           SimpleNamespace(layer_id=layer_id, v_head_dim=attention.HEAD_DIM), batch,
                                           compress_ratio=ratio, save_kv_cache=True, attn_sink=sink)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                say(describe("out", out), "finite", bool(torch.isfinite(out).all()))
                stored = torch.cat([fill.swa_keys(layer_id, r, ps) for r, ps in enumerate(written_positions)])
                say("stored K vs new K: max abs", (stored - k_new.cpu().double()).abs().max().item())
                got = out.to("cpu", torch.float64).reshape(rows, attention.HEADS, attention.HEAD_DIM)
                want = attention._reference(fill, shape, layer_id, ratio, q, sink, selections)
                shifted = attention._reference(fill, shape, layer_id, ratio, q, sink, selections, shift=-1)
                error = (got - want).abs()
                say(f"max |out-ref| {error.max().item():.4g} at {tuple(int(i) for i in torch.nonzero(error == error.max())[0])}, "
                    f"mean {error.mean().item():.3g}, ref max {want.abs().max().item():.3g}, "
                    f"shift-by-one margin {(shifted - want).abs().max().item():.4g}; per-row max err "
                    f"{[round(v, 4) for v in error.amax((1, 2)).tolist()[:16]]}")
            except Exception:  # noqa: BLE001 - a probe reports every step's failure and goes on
                traceback.print_exc()


def main() -> None:
    say("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_capability() if torch.cuda.is_available() else "no GPU")
    say(dsakit.installed_release().describe())
    for param in attention.CELLS:
        role, case, step = param.values
        try:
            probe(str(role), str(case), int(step))  # type: ignore[call-overload]
        except Exception:  # noqa: BLE001
            traceback.print_exc()


if __name__ == "__main__":
    main()
