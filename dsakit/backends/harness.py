"""Build the real DSA / DeepSeek-V4 backends from a strict mock runner, inside an SGLang scope.

Owns: the server args a backend is built with (per role, with or without speculative decoding),
the real SGLang pools a strict runner is given (req-to-token, DSA KV, DeepSeek-V4 KV, laid out as
SGLang lays them out), the backend object SGLang's worker runs per mode, and keeping the
SGLangScope open while a test drives the backend. Imports SGLang lazily.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from dsakit.errors import UsageError
from dsakit.sglang_facts.scope import SGLangScope

# flashmla_sparse is SGLang's DSA default on SM 9.0 and allocates no kernel state at __init__.
DSA_SERVER_ARGS: dict[str, Any] = {
    "model_path": "dsakit/mock-deepseek-v32",
    "dsa_prefill_backend": "flashmla_sparse",
    "dsa_decode_backend": "flashmla_sparse",
}

# EAGLE/MTP with a chain of 3 steps and 4 draft tokens: what DeepSeek MTP runs.
SPECULATIVE_SERVER_ARGS: dict[str, Any] = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}


def _scope_server_args(speculative: bool, server_args: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**DSA_SERVER_ARGS, **(SPECULATIVE_SERVER_ARGS if speculative else {}), **(server_args or {})}


def _step_kwargs(speculative: bool, args: Mapping[str, Any]) -> dict[str, Any]:
    """A speculative backend is told its number of draft steps, as SGLang's workers do."""
    return {"speculative_num_steps": args["speculative_num_steps"]} if speculative else {}


@contextmanager
def dsa_backend(
    runner: Any,
    *,
    speculative: bool = False,
    server_args: Mapping[str, Any] | None = None,
    env: Mapping[str, str | bool | int] | None = None,
    kv_pool: bool = False,
    **backend_kwargs: Any,
) -> Iterator[Any]:
    """`with dsa_backend(runner, speculative=True) as backend:` — scope stays open in the body.
    `kv_pool=True` first gives the runner a real DSATokenToKVPool (one layer), for forward passes."""
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    args = _scope_server_args(speculative, server_args)
    with SGLangScope(server_args=args, env=env):
        if kv_pool:
            runner.token_to_kv_pool = dsa_kv_pool(runner)
        yield DeepseekSparseAttnBackend(runner, **{**_step_kwargs(speculative, args), **backend_kwargs})


def req_to_token_pool(runner: Any) -> Any:
    """A real ReqToTokenPool for the runner: one row per running request (`max_running_requests`),
    `model_config.context_len` slots per row, on the runner's device (as ModelRunner builds it).
    Assign it to `runner.req_to_token_pool` before building the KV pool (which is sized from it)."""
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    return ReqToTokenPool(
        size=runner.max_running_requests,
        max_context_len=runner.model_config.context_len,
        device=runner.device,
        enable_memory_saver=False,
    )


def dsa_kv_pool(runner: Any, *, layer_num: int = 1) -> Any:
    """A real DSATokenToKVPool (latent 512 + rope 64 per token, the runner's KV dtype) with a slot
    for every token dsakit's placement can hand out (SGLang's runtime context must be open)."""
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

    from dsakit.backends.batch_builder import slot_capacity

    config = runner.model_config
    return DSATokenToKVPool(
        size=slot_capacity(runner),
        page_size=runner.page_size,
        kv_lora_rank=config.kv_lora_rank,
        dtype=runner.kv_cache_dtype,
        qk_rope_head_dim=config.qk_rope_head_dim,
        layer_num=layer_num,
        device=runner.device,
        index_head_dim=config.hf_config.index_head_dim,
        enable_memory_saver=False,
        kv_cache_dim=config.kv_lora_rank + config.qk_rope_head_dim,
    )


# DeepSeek-V4: 448 + 64 head dims (asserted 512), page size hard-coded to 256, C4/C128 compressed
# layers; the backend insists on a real DeepSeekV4TokenToKVPool, so the harness builds a small one.
DEEPSEEK_V4_RUNNER_OVERRIDES: dict[str, Any] = {
    "page_size": 256,
    "model_config.context_len": 8192,
    "model_config.head_dim": 512,
    "model_config.v_head_dim": 512,
    "model_config.qk_nope_head_dim": 448,
    "model_config.qk_rope_head_dim": 64,
    "model_config.hf_config.architectures": ["DeepseekV4ForCausalLM"],
    "model_config.hf_config.model_type": "deepseek_v4",
    "model_config.hf_config.index_topk": 512,
}


def compress_state_ring_size(compress_ratio: int) -> int:
    """Rows of SGLang's C4 / C128 compress-state ring under the published (scope's) spec config:
    8 / 128 without speculative decoding, 16 / 256 with it (deepseek_v4_memory_pool.py:34-48 in
    0.5.17, :60-91 in 0.5.23). SGLang's runtime context must be open."""
    from sglang.srt.mem_cache import deepseek_v4_memory_pool as pool_module

    resolve = getattr(pool_module, "resolve_compress_state_ring_size", None)  # 0.5.23
    if resolve is not None:
        return int(resolve(compress_ratio))
    from sglang.srt.runtime_context import get_spec  # 0.5.17: DeepSeekV4TokenToKVPool.get_ring_size

    return int(pool_module.get_compress_state_ring_size(compress_ratio, get_spec().speculative_algorithm is not None))


def deepseek_v4_kv_pool(runner: Any, *, compression_ratios: tuple[int, ...] = (4, 128)) -> Any:
    """A small real DeepSeekV4TokenToKVPool sized for the runner's requests and context, laid out
    the way SGLang's KV-cache configurator builds it (`_build_dsv4_kv_pool`, kv_cache_configurator.py
    :946-1038 in 0.5.17, :2068-2120 in 0.5.23): the SWA pool is paged with the full page size (256,
    asserted there: "In paged swa mode, page_size must be 256"), the model's 128-token window is
    `sliding_window`, and the C4 state pool holds one ring per SWA page (pool_configurator.py:759).

    A 128-token SWA page breaks the compress planner under speculative decoding: c_plan.cuh
    (0.5.17:509, 0.5.23:501) requires `swa_page_size % ring_size == 0`, and the C128 ring is 256
    with MTP. Checked here so a bad geometry is a UsageError, not a kernel RuntimeError.

    DeepSeek-V4.1 ratio-1 / ratio-2 layers (0.5.21+): each is made its own kv_source layer, so it
    owns its latent pool (full_size // ratio slots) and its fp4 index-K pool ((full_size +
    page_size) // ratio slots, pages of DSV41_INDEX_PAGE_SIZE) and, at ratio 2, its pair-state
    ring (collect_sources_by_ratio, _init_compressed_pools, _init_paged_compress_states:
    deepseek_v4_memory_pool.py:80-101, :1386-1476, :1598-1629 in 0.5.21); full_size is the slot
    capacity, so raw slot // ratio is a valid slot for every slot the placement hands out. Those
    two arguments are passed only when a low ratio is asked for (0.5.17 has neither)."""
    import torch
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

    from dsakit.backends.batch_builder import slot_capacity

    slots = runner.req_to_token_pool.size
    page_size = int(runner.page_size)
    # compressed slots are full slots // ratio (metadata_kernel: c4_out_loc = raw_out_loc // 4), so the
    # C4 / C128 pools must cover every full slot place_requests can hand out, like the SWA map does
    tokens = slot_capacity(runner)
    swa_page_size = page_size
    swa_size = tokens  # one SWA page per full page: full_to_swa_mapping is a page permutation
    rings = {ratio: compress_state_ring_size(ratio) for ratio in (4, 128)}
    bad = {r: n for r, n in rings.items() if swa_page_size % n or n % r}
    if bad:
        raise UsageError(f"SWA page size {swa_page_size} does not hold whole compress-state rings {bad} "
                         "(c_plan.cuh: swa_page_size % ring_size == 0 && ring_size % compress_ratio == 0)")
    low_layers = [layer for layer, ratio in enumerate(compression_ratios) if ratio in (1, 2)]
    low_ratio_sources: dict[str, Any] = {"kv_source_layers": low_layers, "full_size": tokens} if low_layers else {}
    return DeepSeekV4TokenToKVPool(
        max_num_reqs=runner.max_running_requests,
        num_req_slots=slots,
        swa_size=swa_size,
        c4_size=tokens // 4,
        c128_size=tokens // 128,
        c4_state_pool_size=swa_size // swa_page_size * rings[4],
        c128_state_pool_size=slots * rings[128],
        page_size=page_size,
        swa_page_size=swa_page_size,
        sliding_window=128,
        dtype=runner.kv_cache_dtype,
        c4_state_dtype=torch.float32,
        c128_state_dtype=torch.float32,
        qk_nope_head_dim=runner.model_config.qk_nope_head_dim,
        qk_rope_head_dim=runner.model_config.qk_rope_head_dim,
        indexer_head_dim=runner.model_config.hf_config.index_head_dim,
        layer_num=len(compression_ratios),
        device=runner.device,
        enable_memory_saver=False,
        compression_ratios=list(compression_ratios),
        **low_ratio_sources,
    )


@contextmanager
def deepseek_v4_backend(
    role: str,
    *,
    speculative: bool = False,
    mode: str | None = None,
    server_args: Mapping[str, Any] | None = None,
    env: Mapping[str, str | bool | int] | None = None,
    compression_ratios: tuple[int, ...] = (4, 128),
    **runner_overrides: Any,
) -> Iterator[tuple[Any, Any]]:
    """`with deepseek_v4_backend("draft", speculative=True, mode="decode") as (backend, runner):`

    `compression_ratios` are the pool's layers, one ratio per layer id (`deepseek_v4_kv_pool`):
    C4 / C128 by default, (1, 2) for DeepSeek-V4.1's ratio-1 / ratio-2 source layers.

    The backend object SGLang's worker would run `mode` with:
    - the speculative draft decode: a `DeepseekV4MultiStepBackend(runner, topk, num_steps)`
      (DraftBackendFactory._create_dsv4_decode_backend, draft_utils.py:304-326 in 0.5.17), whose
      `attn_backends[i]` (speculative_step_id=i) each slice step i out of the shared
      bs * topk * num_steps out_cache_loc; `init_forward_metadata` inits steps 0 .. num_steps - 2;
    - everything else: a plain `DeepseekV4AttnBackend(runner)` with no step arguments — the target's
      (attention_registry.py:174) and the draft's extend / draft-extend backend
      (draft_utils.py:414-435; eagle_worker_v2.py:330-336 makes it the draft runner's attn_backend)."""
    from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend, DeepseekV4MultiStepBackend

    from dsakit.mocks.model_runner import MockModelRunner

    args = _scope_server_args(speculative, server_args)
    import torch

    # DeepSeek-V4 stores its KV as fp8 (the pool asserts a uint8 store dtype).
    overrides = {**DEEPSEEK_V4_RUNNER_OVERRIDES, "kv_cache_dtype": torch.float8_e4m3fn, **runner_overrides}
    with SGLangScope(server_args=args, env=env):
        runner = MockModelRunner(role, overrides=overrides)
        runner.token_to_kv_pool = deepseek_v4_kv_pool(runner, compression_ratios=compression_ratios)
        runner.token_to_kv_pool.register_mapping(full_to_swa_mapping(runner))
        if speculative and role == "draft" and mode == "decode":
            backend = DeepseekV4MultiStepBackend(runner, int(args["speculative_eagle_topk"]),
                                                 int(args["speculative_num_steps"]))
        else:
            backend = DeepseekV4AttnBackend(runner)
        yield backend, runner


def full_to_swa_mapping(runner: Any, *, seed: int = 0) -> Any:
    """A full-slot -> SWA-slot map laid out the way SGLang's paged SWA allocator lays it out
    (allocator/swa.py: SWA pages of the full page size, so a slot keeps its in-page offset, which the
    C4 state ring addressing relies on, c_plan.cuh): a seeded permutation of the pages 1 .. N-1
    (page 0 stays the padding page), one-to-one, so a kernel that reads the wrong token reads a
    different one. One entry per full slot dsakit's placement can hand out (`slot_capacity`), plus a
    final -1 so slot -1 maps to -1; the SWA pool needs `slot_capacity(runner)` slots."""
    import torch

    from dsakit.backends.batch_builder import slot_capacity

    page_size = int(runner.page_size)
    pages = slot_capacity(runner) // page_size
    generator = torch.Generator().manual_seed(seed)
    page_map = torch.cat([torch.zeros(1, dtype=torch.int64), 1 + torch.randperm(pages - 1, generator=generator)])
    mapping = (page_map[:, None] * page_size + torch.arange(page_size, dtype=torch.int64)).reshape(-1)
    return torch.cat([mapping, torch.tensor([-1], dtype=torch.int64)]).to(runner.device)


def deepseek_v4_page_metadata(runner: Any, shape: Any, placement: Any, swa_mapping: Any, *, compression: bool) -> Any:
    """The page-table, position and SWA parts of DeepSeek-V4 core metadata for `shape`, built by
    the kernels SGLang's DeepseekV4AttnBackend itself calls (BuildPageTablePositions,
    BuildCausalSwaPageIndices: torch reference on CPU tensors, Triton on CUDA ones) and, with
    `compression`, its C4/C128 compression-metadata Triton kernel (CUDA only). This is the part of
    `init_forward_metadata` that needs no FlashMLA scheduler object."""
    import torch
    from sglang.srt.layers.attention import deepseek_v4_backend as v4

    from dsakit.backends.dsa_invariants import expected_seqlens_expanded
    from dsakit.backends.dsv4_invariants import query_requests

    device = runner.req_to_token_pool.req_to_token.device
    lengths = torch.tensor(expected_seqlens_expanded(shape), dtype=torch.int32, device=device)
    pool_rows = torch.tensor([placement.req_pool_indices[r] for r in query_requests(shape)], dtype=torch.int64, device=device)
    prep = v4.BuildPageTablePositions.execute(
        req_to_token=runner.req_to_token_pool.req_to_token, req_pool_indices_repeated=pool_rows,
        seq_lens_casual=lengths, max_seq_len=max(shape.kv_lens()), page_size=runner.page_size,
        swa_window=v4.SWA_WINDOW,
    )
    swa = v4.BuildCausalSwaPageIndices.execute(
        req_to_token=runner.req_to_token_pool.req_to_token, full_to_swa_mapping=swa_mapping,
        req_pool_indices_repeated=pool_rows, seq_lens_casual=prep.seq_lens_casual, swa_window=v4.SWA_WINDOW,
        page_index_aligned_size=v4.PAGE_INDEX_ALIGNED_SIZE,
    )
    core = SimpleNamespace(seq_lens_casual=prep.seq_lens_casual, positions_casual=prep.positions_casual,
                           page_table=prep.page_table, swa_topk_lengths=prep.swa_topk_lengths, swa_page_indices=swa)
    if compression:
        out_loc = torch.zeros(lengths.numel(), dtype=torch.int64, device=device)
        (_, _, core.c4_topk_lengths_raw, core.c4_topk_lengths_clamp1, _, _, _, core.c128_topk_lengths_clamp1,
         _) = v4._init_compression_metadata_triton(core.seq_lens_casual, core.positions_casual, out_loc,
                                                    core.page_table, runner.page_size, compute_page_indices=True)
    return core
