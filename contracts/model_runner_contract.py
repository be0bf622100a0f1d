"""THE role contract: what a DSA / DeepSeek-V4 attention backend may read from `model_runner`.

One declared table, the single source for the strict MockModelRunner (mocks/), the static drift
check (`dsakit contract check`) and the report. Each entry says its type, its per-role default
and which backend / phase reads it (with the condition when the read is conditional). Covers the
union of SGLang 0.5.17 and 0.5.23 (0.5.17 reads `server_args.*` where 0.5.23 reads the runtime
context). Defaults describe a DeepSeek-V3.2 target on one GPU (TP 1, page size 64, bf16 KV).
"""

from __future__ import annotations

from typing import Any

from dsakit.contracts.schema import NAMESPACE, Contract, ContractEntry, Factory, per_role

DSA_INIT = "DeepseekSparseAttnBackend.__init__"
DSV4_INIT = "DeepseekV4AttnBackend.__init__"
DSA = "DeepseekSparseAttnBackend"
HIP_RADIX = "DeepseekV4HipRadixBackend"
TOPK_RESOLVE = "DSATopKBackend.resolve"


def _torch() -> Any:
    import torch

    return torch


def _device(runner: Any) -> str:
    return "cuda" if _torch().cuda.is_available() else "cpu"


def _bf16(runner: Any) -> Any:
    return _torch().bfloat16


def _req_to_token(runner: Any) -> Any:
    torch = _torch()
    pool = runner.req_to_token_pool
    return torch.zeros(
        (pool.size, runner.model_config.context_len), dtype=torch.int32, device=runner.device
    )


def _published(name: str, fallback: Any) -> Factory:
    """The published ServerArgs' field when an SGLang config scope is active, else `fallback`:
    the real runner's `server_args` is the process-wide ServerArgs, so the mock mirrors it."""

    def build(runner: Any) -> Any:
        try:
            from sglang.srt.runtime_context import get_context

            published = get_context().server_args
        except (ImportError, ValueError):
            return fallback
        return getattr(published, name, fallback)

    return Factory(build, f"published ServerArgs.{name}, else {fallback!r}")


def _spec_algorithm(name: str | None) -> Factory:
    def build(runner: Any) -> Any:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        return SpeculativeAlgorithm.from_string(name)

    return Factory(build, f"SpeculativeAlgorithm.from_string({name!r})")


MODEL_RUNNER_CONTRACT = Contract(
    "model_runner",
    [
        # ------------------------------------------------------------------ role
        ContractEntry(
            "is_draft_worker", "bool", **per_role(False, True),
            readers=(TOPK_RESOLVE + " (0.5.23: picks the role's top-k flag)",
                     DSA_INIT + " (draft: no decode context parallel)", DSV4_INIT),
            note="set by ModelRunner.__init__ from the worker's role",
        ),
        ContractEntry(
            "spec_algorithm", "object", **per_role(_spec_algorithm(None), _spec_algorithm("EAGLE")),
            readers=(DSV4_INIT + " (.is_dspark())",),
            note="a real SpeculativeAlgorithm; EAGLE/MTP for the draft worker",
        ),
        # ------------------------------------------------------------------ sizing
        ContractEntry(
            "max_running_requests", "int", 64,
            readers=(DSA_INIT + " only on CUDA with SM major >= 10 or dsa_decode_backend == 'trtllm' "
                     "(TRT-LLM multi-CTA KV counter buffer)",),
            note="set by ModelRunner after the memory pool is sized; the B300-only read that broke "
                 "hand-written mocks",
            device_reads=((DSA, ("sm>=10.0",)),),
        ),
        ContractEntry(
            "device", "str", Factory(_device, "'cuda' if torch.cuda.is_available() else 'cpu'"),
            readers=(DSA_INIT, DSV4_INIT),
        ),
        ContractEntry("page_size", "int", 64, readers=(DSA_INIT + " (asserted int)", DSV4_INIT)),
        ContractEntry(
            "kv_cache_dtype", "torch.dtype", Factory(_bf16, "torch.bfloat16"),
            readers=(DSA_INIT + " (fp8 paths; AITER metadata on HIP)",),
        ),
        ContractEntry(
            "hisparse_coordinator", "object", None, optional=True,
            readers=(DSA_INIT, DSV4_INIT),
            note="None unless hierarchical sparse attention is enabled",
        ),
        ContractEntry(
            "model", "object", Factory(lambda r: _torch().nn.Module(), "torch.nn.Module()"),
            readers=(HIP_RADIX + ".__init__ (0.5.23: scans model.modules(); attention_registry picks "
                     "this class on AMD)",),
            note="the loaded model (an nn.Module); a mock needs an empty one",
            device_reads=((HIP_RADIX, ("rocm", "sglang:hip-radix-reads-model")),),
        ),
        # ------------------------------------------------------------------ model config
        ContractEntry("model_config", NAMESPACE, readers=(DSA_INIT, DSV4_INIT)),
        ContractEntry("model_config.context_len", "int", 163840, readers=(DSA_INIT, DSV4_INIT)),
        ContractEntry("model_config.num_attention_heads", "int", 128, readers=(DSA_INIT,)),
        ContractEntry("model_config.qk_nope_head_dim", "int", 128, readers=(DSA_INIT,)),
        ContractEntry("model_config.qk_rope_head_dim", "int", 64, readers=(DSA_INIT,)),
        ContractEntry("model_config.kv_lora_rank", "int", 512, readers=(DSA_INIT,)),
        ContractEntry("model_config.head_dim", "int", 512, readers=(DSV4_INIT + " (asserts 512 = 448 nope + 64 rope)",)),
        ContractEntry("model_config.v_head_dim", "int", 512, readers=(DSV4_INIT,)),
        ContractEntry("model_config.hf_config", NAMESPACE,
                      readers=(DSA_INIT + " (is_deepseek_dsa, get_dsa_index_topk, architectures[0])",)),
        ContractEntry("model_config.hf_config.architectures", "list[str]", ["DeepseekV32ForCausalLM"],
                      readers=("is_deepseek_dsa", DSA_INIT + " (flashinfer sparse MLA check)")),
        ContractEntry("model_config.hf_config.model_type", "str", "deepseek_v32"),
        ContractEntry("model_config.hf_config.index_topk", "int", 2048, readers=("get_dsa_index_topk",)),
        ContractEntry("model_config.hf_config.index_head_dim", "int", 128, readers=("get_dsa_index_head_dim",)),
        ContractEntry("model_config.hf_config.index_n_heads", "int", 64, readers=("get_dsa_index_n_heads",)),
        ContractEntry("model_config.hf_config.num_attention_heads", "int", 128),
        ContractEntry("model_config.hf_config.num_hidden_layers", "int", 61),
        ContractEntry("model_config.hf_config.qk_nope_head_dim", "int", 128),
        ContractEntry("model_config.hf_config.qk_rope_head_dim", "int", 64),
        ContractEntry("model_config.hf_config.kv_lora_rank", "int", 512),
        ContractEntry("model_config.hf_config.v_head_dim", "int", 128),
        ContractEntry("model_config.hf_text_config", "object",
                      Factory(lambda r: r.model_config.hf_config, "model_config.hf_config"),
                      readers=(DSV4_INIT,), note="the text config; the same object for text-only models"),
        # ------------------------------------------------------------------ pools
        ContractEntry("req_to_token_pool", NAMESPACE, readers=(DSA_INIT + " (asserted not None)", DSV4_INIT)),
        ContractEntry("req_to_token_pool.size", "int",
                      Factory(lambda r: r.max_running_requests, "max_running_requests"),
                      readers=(DSA_INIT + " (HIP only)", DSV4_INIT), device_reads=((DSA, ("rocm",)),)),
        ContractEntry("req_to_token_pool.req_to_token", "torch.Tensor",
                      Factory(_req_to_token, "int32 zeros [size, context_len] on device"),
                      readers=(DSA_INIT, DSV4_INIT)),
        ContractEntry("token_to_kv_pool", NAMESPACE, readers=(DSA_INIT, DSV4_INIT)),
        ContractEntry("token_to_kv_pool.dsa_kv_cache_store_fp8", "bool", False, readers=(DSA_INIT,)),
        ContractEntry("token_to_kv_pool.kv_cache_dim", "int", 576, readers=(DSA_INIT,),
                      note="kv_lora_rank + qk_rope_head_dim for bf16 KV"),
        ContractEntry("token_to_kv_pool.dtype", "torch.dtype", Factory(_bf16, "torch.bfloat16"),
                      readers=(DSA_INIT + " (fp8 + tilelang check)",)),
        ContractEntry("token_to_kv_pool.page_size", "int", Factory(lambda r: r.page_size, "page_size")),
        # ------------------------------------------------------------------ server args
        # 0.5.17 reads these from model_runner.server_args; 0.5.23 reads the runtime context
        # (get_exec()/get_spec()) instead, except DeepseekV4AttnBackend's max_running_requests.
        ContractEntry("server_args", NAMESPACE, readers=(DSA_INIT + " (0.5.17)", DSV4_INIT)),
        ContractEntry("server_args.max_running_requests", "int",
                      Factory(lambda r: r.max_running_requests, "max_running_requests"), optional=True,
                      readers=(DSV4_INIT,)),
        ContractEntry("server_args.dsa_prefill_backend", "str", _published("dsa_prefill_backend", "flashmla_sparse"), optional=True,
                      readers=(DSA_INIT + " (0.5.17)",)),
        ContractEntry("server_args.dsa_decode_backend", "str", _published("dsa_decode_backend", "flashmla_sparse"), optional=True,
                      readers=(DSA_INIT + " (0.5.17; 'trtllm' triggers the max_running_requests read)",)),
        ContractEntry("server_args.dsa_topk_backend", "str", _published("dsa_topk_backend", "sgl-kernel"),
                      readers=(DSA_INIT + " (0.5.17: one flag for both roles)",)),
        ContractEntry("server_args.speculative_dsa_topk_backend", "str",
                      _published("speculative_dsa_topk_backend", "sgl-kernel"),
                      note="0.5.23 draft-role top-k flag (read through get_spec())"),
        ContractEntry("server_args.enable_deterministic_inference", "bool",
                      _published("enable_deterministic_inference", False),
                      readers=(DSA_INIT + " (0.5.17)",)),
        ContractEntry("server_args.enable_two_batch_overlap", "bool", _published("enable_two_batch_overlap", False), readers=(DSA_INIT + " (0.5.17)",)),
        ContractEntry("server_args.speculative_eagle_topk", "int",
                      **per_role(_published("speculative_eagle_topk", None), _published("speculative_eagle_topk", 1)), optional=True,
                      readers=(DSA_INIT + " (0.5.17)",)),
        ContractEntry("server_args.disaggregation_mode", "str", _published("disaggregation_mode", "null"),
                      readers=("should_use_dsa_fused_topk (0.5.17)",)),
        ContractEntry("server_args.enable_deepseek_v4_fp4_indexer", "bool",
                      _published("enable_deepseek_v4_fp4_indexer", False),
                      readers=(DSV4_INIT + " (0.5.17)",),
                      note="0.5.17 ServerArgs flag (FP4 indexer for DeepSeek-V4); found by `dsakit contract check`"),
    ],
)
