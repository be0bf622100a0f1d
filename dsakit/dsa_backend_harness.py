"""Build the real `DeepseekSparseAttnBackend` from a strict mock runner, inside an SGLang scope.

Owns: the server args a DSA backend is built with (per role, with or without speculative
decoding) and keeping the SGLangScope open while a test drives the backend (its metadata code
reads the runtime context too). Imports SGLang lazily.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dsakit.sglang_scope import SGLangScope

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
    **backend_kwargs: Any,
) -> Iterator[Any]:
    """`with dsa_backend(runner, speculative=True) as backend:` — scope stays open in the body."""
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    args = _scope_server_args(speculative, server_args)
    with SGLangScope(server_args=args, env=env):
        yield DeepseekSparseAttnBackend(runner, **{**_step_kwargs(speculative, args), **backend_kwargs})


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


def deepseek_v4_kv_pool(runner: Any, *, compression_ratios: tuple[int, ...] = (4, 128)) -> Any:
    """A small real DeepSeekV4TokenToKVPool sized for the runner's requests and context."""
    import torch
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

    slots = runner.req_to_token_pool.size
    tokens = slots * runner.model_config.context_len
    return DeepSeekV4TokenToKVPool(
        max_num_reqs=runner.max_running_requests,
        num_req_slots=slots,
        swa_size=slots * 128 + runner.page_size,
        c4_size=tokens // 4,
        c128_size=tokens // 128,
        c4_state_pool_size=slots * 8,
        c128_state_pool_size=slots,
        page_size=runner.page_size,
        swa_page_size=128,
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
    )


@contextmanager
def deepseek_v4_backend(
    role: str,
    *,
    speculative: bool = False,
    server_args: Mapping[str, Any] | None = None,
    env: Mapping[str, str | bool | int] | None = None,
    **runner_overrides: Any,
) -> Iterator[tuple[Any, Any]]:
    """`with deepseek_v4_backend("draft") as (backend, runner):` — a real DeepseekV4AttnBackend."""
    from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend

    from dsakit.mocks.model_runner import MockModelRunner

    args = _scope_server_args(speculative, server_args)
    import torch

    # DeepSeek-V4 stores its KV as fp8 (the pool asserts a uint8 store dtype).
    overrides = {**DEEPSEEK_V4_RUNNER_OVERRIDES, "kv_cache_dtype": torch.float8_e4m3fn, **runner_overrides}
    with SGLangScope(server_args=args, env=env):
        runner = MockModelRunner(role, overrides=overrides)
        runner.token_to_kv_pool = deepseek_v4_kv_pool(runner)
        yield DeepseekV4AttnBackend(runner, **_step_kwargs(speculative, args)), runner
