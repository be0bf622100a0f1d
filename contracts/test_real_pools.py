"""Contract suite: the public real-pool builders a downstream suite gives a strict runner by hand.

`dsakit.req_to_token_pool` / `dsa_kv_pool` / `deepseek_v4_kv_pool` build SGLang's own pool classes
sized from the runner; CPU builds them, and the DSA and DeepSeek-V4 KV writes land where read.
"""

from __future__ import annotations

import pytest

import dsakit
from dsakit.backends.batch_builder import slot_capacity
from dsakit.backends.harness import DEEPSEEK_V4_RUNNER_OVERRIDES, DSA_SERVER_ARGS


def _small(role: str, **overrides: object) -> dsakit.MockModelRunner:
    return dsakit.MockModelRunner(role, max_running_requests=3, model_config__context_len=256, **overrides)


@pytest.mark.parametrize("role", ["target", "draft"])
def test_req_to_token_pool_is_sglangs_sized_from_the_runner(role: str) -> None:
    import torch
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    runner = _small(role)
    with dsakit.SGLangScope(server_args=DSA_SERVER_ARGS):
        pool = dsakit.req_to_token_pool(runner)
    assert type(pool) is ReqToTokenPool
    assert pool.size == 3 and pool.available_size() == 3  # 0.5.23 pads one row 0 on top
    assert pool.req_to_token.shape[1] == 256 and pool.req_to_token.shape[0] >= 3
    # where a tensor made on the runner's device lives (under a whole-run simulation on a machine
    # without that GPU, "cuda" tensors live on the CPU)
    assert pool.req_to_token.device == torch.empty(0, device=runner.device).device


def _cuda_page_layout() -> None:
    """These cases build the DSA pool with 64-token pages, CUDA's layout. SGLang's HIP DSA path takes
    page_size 1 (memory_pool.py asserts it, unless AITER's preshuffle is on): on an AMD device
    (real or simulated) they skip with that reason."""
    import torch

    if torch.version.hip:
        pytest.skip(str(dsakit.Reason(
            "hip-dsa-page-size", "SGLang's HIP DSA pool takes page_size 1 (AITER preshuffle: a multiple of 16); "
            "these cases use CUDA's 64-token pages and run on NVIDIA devices and CPU")))


def test_dsa_kv_pool_stores_a_token_where_it_is_read() -> None:
    import torch
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

    _cuda_page_layout()
    runner = _small("target")
    if torch.device(runner.device).type == "cpu":
        dsakit.require("sglang:mla-kv-write-without-triton")
    with dsakit.SGLangScope(server_args=DSA_SERVER_ARGS):
        runner.req_to_token_pool = dsakit.req_to_token_pool(runner)
        pool = dsakit.dsa_kv_pool(runner)
        assert type(pool) is DSATokenToKVPool and pool.size == slot_capacity(runner)
        latent = torch.randn(1, 1, 512, dtype=torch.bfloat16, device=runner.device)
        rope = torch.randn(1, 1, 64, dtype=torch.bfloat16, device=runner.device)
        slot = torch.tensor([pool.size - 1], device=runner.device)
        pool.set_mla_kv_buffer(_layer(0), slot, latent, rope)
        stored = pool.get_key_buffer(0)[slot]
    assert torch.equal(stored[..., :512], latent) and torch.equal(stored[..., 512:], rope)


def test_deepseek_v4_kv_pool_is_sglangs_with_the_runners_sizes() -> None:
    import torch
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

    runner = dsakit.MockModelRunner("target", max_running_requests=3, overrides={
        **DEEPSEEK_V4_RUNNER_OVERRIDES, "model_config.context_len": 256, "kv_cache_dtype": torch.float8_e4m3fn})
    with dsakit.SGLangScope(server_args=DSA_SERVER_ARGS):
        runner.req_to_token_pool = dsakit.req_to_token_pool(runner)
        pool = dsakit.deepseek_v4_kv_pool(runner, compression_ratios=(4,))
    assert type(pool) is DeepSeekV4TokenToKVPool
    assert pool.page_size == runner.page_size == 256


def _layer(layer_id: int) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(layer_id=layer_id)


def _dsa_runner(role: str, *, batch_size: int, context_len: int, page_size: int = 64) -> dsakit.MockModelRunner:
    """The README's by-hand DSA runner: what the kit's DSAMockModelRunner builds, on the strict
    runner (SGLang's runtime context must be open)."""
    runner = dsakit.MockModelRunner(role, max_running_requests=batch_size, page_size=page_size,
                                    model_config__context_len=context_len,
                                    model_config__num_attention_heads=4)
    runner.req_to_token_pool = dsakit.req_to_token_pool(runner)
    runner.token_to_kv_pool = dsakit.dsa_kv_pool(runner)
    return runner


@pytest.mark.parametrize("role", ["target", "draft"])
def test_the_readme_hand_built_runner_translates_through_its_real_pools(role: str) -> None:
    dsakit.require("sglang:kv-index-translator")
    _cuda_page_layout()
    with dsakit.SGLangScope(server_args=DSA_SERVER_ARGS):
        runner = _dsa_runner(role, batch_size=2, context_len=256)
        translator = runner.kv_index_translator  # the contract default, built from the real pools
    assert translator.req_to_token is runner.req_to_token_pool.req_to_token
    assert translator.page_size == 64 and translator.is_translating is False
    assert runner.is_draft_worker is (role == "draft")
