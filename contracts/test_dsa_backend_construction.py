"""Contract suite: the real DeepseekSparseAttnBackend built from the strict mock, per role (GPU).

The B300 story: `__init__` reads `model_runner.max_running_requests` only on CUDA with SM >= 10
or `dsa_decode_backend == "trtllm"`. With the trtllm decode choice the read happens on any CUDA
GPU, so an H200 exercises it: a mock lacking the attribute must fail with ContractViolation
naming it, not with a bare AttributeError.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import dsakit
from dsakit.mocks import read_log

pytestmark = dsakit.gate("cuda", "sglang:dsa-backend")

# flashmla_sparse is SGLang's default DSA choice on SM 9.0 and allocates no kernel state at init.
BASE_SERVER_ARGS: dict[str, Any] = {
    "model_path": "dsakit/mock-deepseek-v32",
    "dsa_prefill_backend": "flashmla_sparse",
    "dsa_decode_backend": "flashmla_sparse",
}


def _construct(runner: dsakit.MockModelRunner, **server_args: Any) -> Any:
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    from dsakit.sglang_facts.scope import SGLangScope

    with SGLangScope(server_args={**BASE_SERVER_ARGS, **server_args}):
        return DeepseekSparseAttnBackend(runner)


@pytest.fixture
def no_new_violations() -> Iterator[None]:
    before = len(read_log.contract_reads())
    yield
    new = [r for r in read_log.contract_reads()[before:] if r.kind != read_log.SOFT]
    assert new == [], f"contract violations during construction: {new}"


def test_constructs_for_role(model_runner: dsakit.MockModelRunner, no_new_violations: None) -> None:
    backend = _construct(model_runner)
    assert backend.dsa_index_topk == model_runner.model_config.hf_config.index_topk
    assert backend.req_to_token is model_runner.req_to_token_pool.req_to_token
    assert backend.num_q_heads == model_runner.model_config.num_attention_heads
    if model_runner.is_draft_worker and hasattr(backend, "dcp_size"):  # decode CP exists from 0.5.23 on
        assert (backend.dcp_size, backend.dcp_rank) == (1, 0)


def test_trtllm_decode_reads_max_running_requests(model_runner: dsakit.MockModelRunner, no_new_violations: None) -> None:
    backend = _construct(model_runner, dsa_decode_backend="trtllm")
    assert backend.dsa_decode_impl == "trtllm"
    assert backend._multi_ctas_kv_counter_buffer is not None  # the branch that reads it ran


def test_mock_without_max_running_requests_fails_with_contract_violation(model_runner_role: str) -> None:
    drifted = dsakit.MockModelRunner(model_runner_role, omit=["max_running_requests"])
    with pytest.raises(dsakit.ContractViolation) as raised:
        _construct(drifted, dsa_decode_backend="trtllm")
    message = str(raised.value)
    assert raised.value.attribute == "max_running_requests"
    assert "dsa_backend.py:" in message and "DeepseekSparseAttnBackend.__init__" in message
    assert "model_runner.py:" in message  # where the real ModelRunner sets it
