"""Contract suite: the real DeepseekV4AttnBackend built from the strict mock, per role (GPU).

DeepSeek-V4 needs a real DeepSeekV4TokenToKVPool (the backend asserts its type) and sgl_kernel's
FlashMLA bindings for its metadata; a node without them skips through the module gates.
"""

from __future__ import annotations

import pytest

import dsakit
from dsakit.backends.dsv4_invariants import c4_index_topk
from dsakit.backends.harness import deepseek_v4_backend
from dsakit.mocks import read_log

pytestmark = dsakit.gate("cuda", "sglang:deepseek-v4-backend", "module:sgl_kernel")



@pytest.mark.parametrize("speculative", [False, True], ids=["no-spec", "mtp"])
def test_constructs_for_role(model_runner_role: str, speculative: bool) -> None:
    before = len(read_log.contract_reads())
    with deepseek_v4_backend(model_runner_role, speculative=speculative) as (backend, runner):
        assert backend.page_size == 256
        assert backend.req_to_token is runner.req_to_token_pool.req_to_token
        assert backend.is_draft_runner is (model_runner_role == "draft")
        assert c4_index_topk(backend) == 512
        assert backend.mtp_enabled is speculative
    hard = [r for r in read_log.contract_reads()[before:] if r.kind != read_log.SOFT]
    assert hard == [], f"contract violations during construction: {hard}"


def test_page_size_other_than_256_is_refused_by_the_backend(model_runner_role: str) -> None:
    with pytest.raises(AssertionError, match="page_size=256"):
        with deepseek_v4_backend(model_runner_role, page_size=512):
            pass
