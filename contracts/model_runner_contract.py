"""THE role contract: what a DSA / DeepSeek-V4 attention backend may read from `model_runner`.

One declared table feeding the strict MockModelRunner, `dsakit contract check` and the report:
each entry's type, per-role default and readers (with the condition of a conditional read).
Covers SGLang 0.5.17 and 0.5.23; defaults describe a DeepSeek-V3.2 target on one GPU.
"""

from __future__ import annotations

from typing import Any

from dsakit.contracts.schema import NAMESPACE, Contract, ContractEntry, Factory, per_role

DSA_INIT = "DeepseekSparseAttnBackend.__init__"
DSV4_INIT = "DeepseekV4AttnBackend.__init__"
DSA = "DeepseekSparseAttnBackend"
HIP_RADIX = "DeepseekV4HipRadixBackend"
TOPK_RESOLVE = "DSATopKBackend.resolve"
# SGLang's attention unit-test kit (sglang/test/kits/attention_unittest), sites of 0.5.23
KIT = "kit "
DRAFT_SETUP = KIT + "speculative_draft_runner.py:{} _configure_runner_for_eagle_draft"


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


def _import_of_feature(module: str, name: str, feature: str) -> Any:
    """`module.name` of an SGLang release with `feature`; UsageError naming it on another release."""
    import importlib

    from dsakit.errors import UsageError

    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"{module}.{name} exists only in SGLang releases with feature {feature!r} "
                         f"(see `dsakit capabilities`); the installed SGLang lacks it: {error}") from None


def _kv_index_translator(runner: Any) -> Any:
    """What ModelRunner.init_kv_index_translator builds (model_runner.py:954), from this runner's
    pools: no unified/fused-draft allocator, so reads use the req-to-token table as is."""
    KVIndexTranslator = _import_of_feature(
        "sglang.srt.mem_cache.kv_index_translator", "KVIndexTranslator", "kv-index-translator")

    import inspect

    role: dict[str, Any] = {}
    # 0.5.22 added the role to the translator (draft workers skip its NPU context-parallel remap); 0.5.19-0.5.21
    # take no such keyword: probe the constructor, not the release number.
    if "is_draft_worker" in inspect.signature(KVIndexTranslator.__init__).parameters:
        role["is_draft_worker"] = runner.is_draft_worker
    return KVIndexTranslator(
        req_to_token=runner.req_to_token_pool.req_to_token, token_to_kv_pool_allocator=None,
        token_to_kv_pool=runner.token_to_kv_pool, page_size=runner.page_size, device=runner.device,
        **role,
    )


def _no_capture_hooks(runner: Any) -> list[Any]:
    return []


def _no_model_forward(runner: Any) -> Any:
    def forward(*args: Any, **kwargs: Any) -> Any:
        from dsakit.errors import UsageError

        raise UsageError("MockModelRunner has no model to run: assign runner.forward (a callable), as "
                         "the kit's draft harness does (speculative_draft_runner.py:183)")

    return forward


def _trivial_parallel_state(runner: Any) -> Any:
    return _import_of_feature(
        "sglang.srt.distributed.parallel_state_wrapper", "ParallelState", "runner-parallel-state").trivial()


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
        # ------------------------------------------------------------------ attention unit-test kit
        # What SGLang's own kit (sglang/test/kits/attention_unittest, "kit" below) and the code it
        # drives read or write on its runner: the DSA / DeepSeek-V4 fixtures, their ForwardBatch
        # construction and the EAGLE draft-runner setup (dsakit.backends.sglang_kit runs them).
        ContractEntry(
            "kv_index_translator", "object", Factory(_kv_index_translator, "KVIndexTranslator of the runner's pools"),
            readers=(KIT + "dense_attention.py:765 _make_forward_batch (DSA fixtures)",
                     KIT + "dsv4_attention.py:675 _make_forward_batch",
                     KIT + "speculative_draft_runner.py:518, :535, :575, :587",
                     "eagle_draft_cuda_graph_runner.py:501 (CUDA graph capture)",
                     "forward_batch_info.py:1139 ForwardBatch.init_new"),
            feature="kv-index-translator",
            note="ModelRunner.init_kv_index_translator (model_runner.py:954, 0.5.23); absent in 0.5.17",
        ),
        ContractEntry("use_mla_backend", "bool", True,
                      readers=(DRAFT_SETUP.format(332), "draft_utils.py:227, :359, :379, :437, :513",
                               "attention_registry.py:120, :243, :279, :288"),
                      note="attention_arch == MLA: True for DeepSeek V3.2 / V4 (model_runner.py:406)"),
        ContractEntry("dtype", "torch.dtype", Factory(_bf16, "torch.bfloat16"),
                      readers=(DRAFT_SETUP.format(345) + " (copied to model_config.dtype)",),
                      note="the model's dtype (model_runner.py:1362, load_model)"),
        ContractEntry("draft_attention_backend", "str", None, optional=True,
                      readers=("draft_utils.py:45 DraftBackendFactory.__init__",),
                      feature="runner-draft-attention-backend",
                      note="the draft runner's own backend name; None: the process-wide config "
                           "(model_runner.py:379, 0.5.23)"),
        ContractEntry("canary_manager", "object", None, optional=True,
                      readers=("eagle_worker_v2.py:298, :835 EagleDraftWorker",),
                      note="None unless the KV canary is enabled (model_runner.py:1007)"),
        ContractEntry(
            "model", "object", Factory(lambda r: _torch().nn.Module(), "torch.nn.Module()"),
            readers=(HIP_RADIX + ".__init__ (deepseek_v4_backend_hip_radix.py:1024, :1782; 0.5.23 scans "
                     "model.modules(); attention_registry picks this class on AMD)",
                     "eagle_worker_v2.py:341-358 (lm_head sharing)"),
            writers=(DRAFT_SETUP.format(342) + " (a tiny draft model)",),
            note="the loaded model (model_runner.py:1321); a mock holds an empty nn.Module",
            device_reads=((HIP_RADIX, ("rocm", "sglang:hip-radix-reads-model")),),
        ),
        ContractEntry("device_timer", "object", None, optional=True,
                      readers=("eagle_draft_cuda_graph_runner.py:748",),
                      writers=(DRAFT_SETUP.format(343),),
                      note="None unless profiling (model_runner.py:388)"),
        ContractEntry("forward", "object", Factory(_no_model_forward, "raises UsageError: no model"),
                      readers=("eagle_worker_v2.py:847 EagleDraftWorker.draft_forward",),
                      writers=(KIT + "speculative_draft_runner.py:183 _EagleDraftWorkerHarness, :234 "
                               "_FrozenKVMTPWorkerHarness (the draft model's forward)",),
                      note="ModelRunner.forward (a method, model_runner.py:1813); a mock runs no model"),
        ContractEntry("attn_backend", "object", None, optional=True,
                      readers=("eagle_worker_v2.py:1379 (target runner's backend)",),
                      writers=(KIT + "speculative_draft_runner.py:406 _build_frozen_kv_mtp_fixture",
                               KIT + "speculative_draft_extend_runner.py:507", "eagle_worker_v2.py:414"),
                      note="the runner's attention backend (model_runner.py:1123 init_attention_backends)"),
        ContractEntry("draft_attn_backend", "object", None, optional=True,
                      readers=("eagle_draft_cuda_graph_runner.py:136 (when no backend is passed)",),
                      writers=(KIT + "speculative_draft_runner.py:371 _build_eagle_draft_fixture, :405",),
                      set_outside_runner="EagleDraftWorker.__init__ (eagle_worker_v2.py:412)",
                      note="the draft worker's multi-step backend, stored on its runner"),
        ContractEntry("gpu_id", "int", 0,
                      readers=("0.5.17 runner/decode_cuda_graph_runner.py:882 DecodeCudaGraphRunner._capture_one_stream "
                               "(get_available_gpu_memory)",),
                      note="the worker's GPU index (model_runner.py:286); one GPU: 0"),
        ContractEntry("capture_tail_hooks", "object", Factory(_no_capture_hooks, "[]: no hooks"),
                      readers=("0.5.17 runner/decode_cuda_graph_runner.py:994 capture_one_shape.run_once",),
                      feature="runner-capture-tail-hooks",
                      note="hooks run after each captured forward (model_runner.py:303 sets []; DFlash / DSpark "
                           "draft workers append)"),
        ContractEntry("_flashinfer_spec_draft_autotuned_phases", "object", None, optional=True,
                      readers=("runner/flashinfer_autotune.py maybe_flashinfer_autotune_speculative_draft (getattr, "
                               "default None)",),
                      writers=("runner/flashinfer_autotune.py maybe_flashinfer_autotune_speculative_draft (a set of "
                               "the graph runners already tuned)",),
                      set_outside_runner="maybe_flashinfer_autotune_speculative_draft (model_executor/runner/"
                                         "flashinfer_autotune.py)",
                      note="the draft's run-once flashinfer autotune record, kept on the model runner; None until "
                           "the first draft graph runner tunes"),
        ContractEntry("_kernel_warmed_up", "bool", False,
                      readers=("runner/base_runner.py BaseRunner.warmup (getattr, default False)",),
                      writers=("runner/base_runner.py BaseRunner.warmup (run-once flag)",
                               KIT + "attention_methods/*_attention.py (the kit's own mock runners set True)"),
                      set_outside_runner="BaseRunner.warmup (model_executor/runner/base_runner.py)",
                      note="the CUDA-graph / eager runner's run-once kernel warm-up flag, kept on the model "
                           "runner; a fresh runner has not warmed up"),
        ContractEntry("tp_group", "object", None, optional=True,
                      writers=("0.5.17 " + DRAFT_SETUP.format(338) + " (a dummy group)",),
                      feature="runner-tp-group",
                      note="ModelRunner's TP group (0.5.17 model_runner.py:998); 0.5.23 no longer sets it"),
        ContractEntry("tp_size", "int", 1,
                      readers=("0.5.21 eagle_draft_cuda_graph_runner.py:118 EAGLEDraftCudaGraphRunner.__init__",),
                      feature="runner-tp-size",
                      note="this worker's tensor-parallel size (0.5.21 model_runner.py:1172); 0.5.23 has none"),
        ContractEntry("ps", "object", Factory(_trivial_parallel_state, "ParallelState.trivial(): one GPU"),
                      readers=("0.5.17 eagle_draft_cuda_graph_runner.py:110-111 (.tp_size, .attn_dp_size)",),
                      feature="runner-parallel-state",
                      note="this worker's parallel state (0.5.17 model_runner.py:289); 0.5.23 has none"),
        # ------------------------------------------------------------------ model config
        ContractEntry("model_config", NAMESPACE, readers=(DSA_INIT, DSV4_INIT)),
        ContractEntry("model_config.context_len", "int", 163840, readers=(DSA_INIT, DSV4_INIT)),
        ContractEntry("model_config.num_attention_heads", "int", 128, readers=(DSA_INIT,)),
        ContractEntry("model_config.qk_nope_head_dim", "int", 128, readers=(DSA_INIT,)),
        ContractEntry("model_config.qk_rope_head_dim", "int", 64, readers=(DSA_INIT,)),
        ContractEntry("model_config.kv_lora_rank", "int", 512, readers=(DSA_INIT,)),
        ContractEntry("model_config.head_dim", "int", 512, readers=(DSV4_INIT + " (asserts 512 = 448 nope + 64 rope)",)),
        ContractEntry("model_config.v_head_dim", "int", 512, readers=(DSV4_INIT,)),
        ContractEntry("model_config.model_is_mrope", "bool", False,
                      readers=("eagle_worker_v2.py:889 draft_forward", "eagle_draft_cuda_graph_runner.py:643",
                               "forward_batch_info.py:1178, :1264 ForwardBatch.init_new"),
                      note="multimodal rotary positions; False for DeepSeek (model_config.py:677)"),
        ContractEntry("model_config.quantization", "str", None, optional=True,
                      readers=("runner/flashinfer_autotune.py should_run_flashinfer_autotune (the draft's autotune "
                               "check before CUDA-graph capture)",),
                      note="the checkpoint's quantization method (model_config.py); None: an unquantized mock "
                           "model, so no flashinfer GEMM autotune runs"),
        ContractEntry("model_config.dtype", "torch.dtype", Factory(_bf16, "torch.bfloat16"),
                      writers=(DRAFT_SETUP.format(345),), note="ModelConfig.dtype (model_config.py:881)"),
        ContractEntry("model_config.spec_hidden_size", "int", 7168,
                      writers=(DRAFT_SETUP.format(344),),
                      note="hidden size the draft model takes from the target (model_config.py:1576); "
                           "DeepSeek V3.2's 7168"),
        ContractEntry("model_config.vocab_size", "int", 129280,
                      readers=("eagle_draft_cuda_graph_runner.py:201, :466, :618, :620",),
                      writers=(DRAFT_SETUP.format(346),), note="DeepSeek V3.2's vocabulary (model_config.py:1605)"),
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
        ContractEntry("model_config.hf_config.vocab_size", "int", 129280, writers=(DRAFT_SETUP.format(347),)),
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
