"""Contract suite: SGLang's own attention unit-test kit run on dsakit's strict runner, per role.

The kit's builders and case runners run unchanged (dsakit.backends.sglang_kit swaps its runner
classes). CPU: the DeepSeek-V4 fixture and the EAGLE draft-runner setup; GPU: the kit's DSA and
DeepSeek-V4 decode, extend and verify cases through the real backends. Every contract read the
kit triggers is declared or listed in KIT_FINDINGS with its file:line.
"""

from __future__ import annotations

import dataclasses
import unittest
from collections.abc import Iterator
from typing import Any

import pytest

import dsakit
from dsakit.backends.sglang_kit import kit_module, kit_on_strict_runner
from dsakit.mocks import read_log
from dsakit.sglang_facts.scope import sglang_state

pytestmark = dsakit.gate("sglang:attention-unittest-kit")

# Reads of undeclared attributes the kit's paths make, all soft (getattr with a default): the
# kit's own tiny configs lack these HF fields too, so both runners give the reader's default.
# Sites of SGLang 0.5.23.
KIT_FINDINGS: dict[str, str] = {
    "model_config.hf_config.candidate_topk_blocks": "sglang/srt/layers/attention/deepseek_v4_backend.py:1290",
    "model_config.hf_config.candidate_block_size": "sglang/srt/layers/attention/deepseek_v4_backend.py:1291",
    "model_config.hf_config.index_kpool": "sglang/srt/configs/model_config.py:531 get_dsa_index_kpool",
    "model_config.hf_config.index_share_for_mtp_iteration": "sglang/srt/speculative/eagle_worker_v2.py:308",
}

ROLES = ["target", "draft"]
CUDA = dsakit.gate("cuda")
# `dsakit warm` runs the GPU cases once before the suite: the draft decode's replay path JIT-builds
# SGLang's fused_metadata_copy module (10.4 s of its 12.6 s on the H200, in every fresh run before)
WARMED = pytest.mark.dsakit_jit("triton-kernels")
# The kit's DSA builders construct DeepseekSparseAttnBackend, which asks
# torch.cuda.get_device_capability() (dsa_backend.py:675): CUDA only.
DSA_NEEDS_CUDA = CUDA
DRAFT_RUNNER_MODES = dsakit.gate("module:sglang.test.test_utils")


def _testcase() -> unittest.TestCase:
    return unittest.TestCase()  # the kit's skipTest(...) becomes a pytest skip


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _dsv4_on_this_host() -> None:
    """On a host without a GPU, the kit's DeepSeek-V4 fixture builds only where SGLang's backend
    does not ask the device capability unguarded (not 0.5.21)."""
    if _device() == "cpu":
        dsakit.require("sglang:dsv4-builds-without-gpu")


@pytest.fixture
def kit_reads() -> Iterator[list[read_log.ContractRead]]:
    """The contract reads this test triggered; checked after it: no hard violation, every soft
    read a listed finding, SGLang's runtime state as before (taken after importing the kit: SGLang's
    imports set their own defaults)."""
    # kit modules set SGLang defaults when first imported (dense_attention: a parallel override that
    # stays entered); a family whose test skips elsewhere may be the first to import them
    for module in (*(kit.module for kit in KIT_FAMILIES.values()), "attention_methods.dense_attention"):
        kit_module(module)
    before_state = sglang_state()
    start = len(read_log.contract_reads())
    reads: list[read_log.ContractRead] = []
    yield reads
    reads.extend(read_log.contract_reads()[start:])
    hard = [r for r in reads if r.kind != read_log.SOFT]
    assert hard == [], f"strict-mode violations in the kit: {hard}"
    unlisted = sorted({r.path for r in reads} - set(KIT_FINDINGS))
    assert unlisted == [], f"undeclared soft reads not in KIT_FINDINGS: {unlisted}"
    assert sglang_state() == before_state


def _case(cases: tuple[Any, ...], name: str) -> Any:
    return next(case for case in cases if case.name == name)


def _verify(case: Any, draft_tokens: int) -> Any:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return dataclasses.replace(case, name=case.name + "_verify", forward_mode=ForwardMode.TARGET_VERIFY,
                               extend_lens=(draft_tokens,) * len(case.prefix_lens))


# ---------------------------------------------------------------- fixtures, per role (CPU and GPU)


@dataclasses.dataclass(frozen=True)
class KitFamily:
    """One family of the kit: its module, the cases it is run on and its case runners."""

    module: str
    build_fixture: str
    make_cases: str
    backend: str
    decode: str
    extend: str
    draft_tokens: int
    run_case: str
    run_verify: str
    run_draft: str

    def case(self, mode: str) -> Any:
        cases = getattr(kit_module(self.module), self.make_cases)(self.backend)
        decode = _case(cases, self.decode)
        return {"decode": decode, "extend": _case(cases, self.extend),
                "verify": _verify(decode, self.draft_tokens)}[mode]

    def runner_of(self, mode: str) -> Any:
        return getattr(kit_module(self.module), self.run_verify if mode == "verify" else self.run_case)


KIT_FAMILIES = {
    "dsa": KitFamily("attention_methods.dsa_attention", "build_dsa_sparse_attention_fixture", "make_dsa_sparse_cases", "dsa",
                     "dsa_sparse_decode_flashmla_kv_topk", "dsa_sparse_prefill_multi_request", 2,
                     "run_dsa_sparse_attention_case", "run_dsa_sparse_speculative_forward_mode_case",
                     "run_dsa_eagle_draft_cuda_graph_runner_case"),
    "dsv4": KitFamily("attention_methods.dsv4_attention", "build_dsv4_attention_fixture", "make_dsv4_cases", "dsv4",
                      "dsv4_swa_decode_multi_request_within_window", "dsv4_swa_extend_prefix_within_window", 3,
                      "run_dsv4_attention_case", "run_dsv4_target_verify_attention_case",
                      "run_dsv4_eagle_draft_cuda_graph_runner_case"),
}



@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("family", [pytest.param("dsa", marks=DSA_NEEDS_CUDA), "dsv4"])
def test_kit_fixture_builds_on_the_strict_runner(family: str, role: str, kit_reads: list[Any]) -> None:
    kit = KIT_FAMILIES[family]
    if family == "dsv4":
        _dsv4_on_this_host()
    case = kit.case("decode")
    with kit_on_strict_runner(role) as swap:
        fixture = getattr(kit_module(kit.module), kit.build_fixture)(_testcase(), case, device=_device())
        runner = fixture.runner
        assert isinstance(runner, dsakit.MockModelRunner) and swap.runners == [runner]
        assert runner.is_draft_worker is (role == "draft")
        if family == "dsv4":  # the registry's class: DeepseekV4AttnBackend, or HipRadix on AMD
            role_of = getattr(fixture.backend, "is_draft_runner", None)
            if role_of is None:
                role_of = fixture.backend.is_draft_worker
            assert role_of is (role == "draft")
        # the backend reads the kit's real pools; the kit bound its batch through the contract's
        # kv_index_translator (0.5.23), built from them
        assert fixture.backend.req_to_token is swap.kit_runners[0].req_to_token_pool.req_to_token
        assert fixture.forward_batch.batch_size == case.batch_size


# ---------------------------------------------------------------- the EAGLE draft-runner setup


def _dsv4_draft_adapter(sdr: Any, dsv4: Any) -> Any:
    return sdr.EagleDraftCudaGraphRunnerAdapter(  # as run_dsv4_eagle_draft_cuda_graph_runner_case
        build_fixture=dsv4.build_dsv4_attention_fixture, make_model_forward=sdr._make_dsv4_model_forward,
        make_draft_inputs=sdr._make_dsv4_draft_inputs, prepare_replay_state=sdr._prepare_dsv4_draft_replay_state,
        make_forward_batch=sdr._make_dsv4_eagle_draft_forward_batch, check_case=sdr._check_dsv4_draft_cache_layout,
        init_eager_metadata=sdr._init_dsv4_eager_metadata,
    )


@DRAFT_RUNNER_MODES
def test_eagle_draft_setup_turns_the_target_runner_into_a_draft(kit_reads: list[Any]) -> None:
    """The kit's _build_eagle_draft_fixture on a strict target runner: MockModelRunner.draft_from
    turns it, then every write of the kit's setup is a declared, type-checked one."""
    import torch

    _dsv4_on_this_host()
    dsv4 = kit_module("attention_methods.dsv4_attention")
    sdr = kit_module("runner_modes.speculative_draft_runner")
    case = KIT_FAMILIES["dsv4"].case("decode")
    settings = sdr.EagleDraftRunnerSettings(
        topk=1, speculative_num_steps=2, speculative_num_draft_tokens=3, capture_batch_size=2,
        hidden_size=dsv4.DSV4_HEAD_DIM, vocab_size=64, max_context_len=256, dtype=torch.bfloat16,
        device=_device(), atol=dsv4.DSV4_ATOL, rtol=dsv4.DSV4_RTOL,
    )
    with kit_on_strict_runner("target", draft_setup=True) as swap:
        fixture, _, draft_backend = sdr._build_eagle_draft_fixture(
            _testcase(), case, adapter=_dsv4_draft_adapter(sdr, dsv4),
            build_kwargs={"max_context_len": 256, "dtype": torch.bfloat16, "device": _device()}, settings=settings,
        )
        runner = fixture.runner
        assert swap.drafts == [runner]
        assert runner.is_draft_worker is True and runner._dsakit_role is dsakit.Role.DRAFT
        assert runner.draft_attn_backend is draft_backend
        assert runner.model_config.vocab_size == 64 == runner.model_config.hf_config.vocab_size
        assert runner.model_config.spec_hidden_size == dsv4.DSV4_HEAD_DIM
        assert runner.spec_algorithm.is_eagle()


# ---------------------------------------------------------------- GPU: the kit's cases, per role
# A target runs decode, extend and verify; a draft runs the kit's EAGLE draft decode.


@CUDA
@WARMED
@pytest.mark.parametrize("mode", ["decode", "extend", "verify"])
@pytest.mark.parametrize("family", sorted(KIT_FAMILIES))
def test_kit_case_on_the_target_runner(family: str, mode: str, kit_reads: list[Any]) -> None:
    kit = KIT_FAMILIES[family]
    with kit_on_strict_runner("target") as swap:
        kit.runner_of(mode)(_testcase(), kit.case(mode))
        assert swap.runners, "the kit built no runner"


@CUDA
@WARMED
@DRAFT_RUNNER_MODES
@pytest.mark.parametrize("family", sorted(KIT_FAMILIES))
def test_kit_eagle_draft_decode_on_the_draft_runner(family: str, kit_reads: list[Any]) -> None:
    kit = KIT_FAMILIES[family]
    run = getattr(kit_module("runner_modes.speculative_draft_runner"), kit.run_draft)
    with kit_on_strict_runner("target", draft_setup=True) as swap:
        run(_testcase(), kit.case("decode"))
        assert swap.drafts, "the kit's draft-runner setup did not run on the strict runner"
