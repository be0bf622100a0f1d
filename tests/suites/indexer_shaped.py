"""A suite shaped like SGLang's DSA indexer test at the role-split PR (not collected: tests copy it
into a pytester folder). A hand-written runner on device="cuda" that sets is_draft_worker (the split
reads it) but not max_running_requests (read on SM >= 10 only); a class-level CUDA skip."""

import unittest

import torch

from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler


class MockModelRunner:
    def __init__(self):
        self.device = "cuda"
        self.dtype = torch.bfloat16
        self.kv_cache_dtype = torch.float8_e4m3fn
        self.is_draft_worker = False
        self.page_size = 64
        self.sliding_window_size = None
        self.is_hybrid_swa = False
        hf = type("Hf", (), {"architectures": ["DeepseekV3ForCausalLM"], "index_topk": 64,
                             "index_head_dim": 128, "index_n_heads": 32})()
        self.model_config = type("Mc", (), {"context_len": 512, "is_multimodal": False,
                                            "num_attention_heads": 128, "kv_lora_rank": 512,
                                            "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                                            "hf_config": hf})()
        self.req_to_token_pool = type("Pool", (), {"size": 4, "req_to_token": torch.zeros(
            4, 512, dtype=torch.int32, device=self.device)})()
        self.token_to_kv_pool = DSATokenToKVPool(
            size=4 * 512, page_size=64, dtype=torch.float8_e4m3fn, kv_lora_rank=512,
            qk_rope_head_dim=64, layer_num=1, device=self.device, index_head_dim=128,
            enable_memory_saver=False, kv_cache_dim=576)
        self.server_args = type("Sa", (), {"kv_cache_dtype": "auto", "speculative_eagle_topk": None,
                                           "speculative_num_draft_tokens": 0,
                                           "enable_deterministic_inference": False,
                                           "dsa_prefill_backend": "flashmla_sparse",
                                           "dsa_decode_backend": "fa3", "dsa_topk_backend": "sgl-kernel",
                                           "disaggregation_mode": "null",
                                           "enable_two_batch_overlap": False})()
        self.hisparse_coordinator = None


@unittest.skipIf(not torch.cuda.is_available(), "Test requires CUDA")
class TestBackendFromAHandWrittenRunner(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        args = ServerArgs(model_path="dummy")
        args.dsa_prefill_backend = "flashmla_sparse"
        args.dsa_decode_backend = "flashmla_sparse"
        set_global_server_args_for_scheduler(args)

    def test_backend_builds(self):
        DeepseekSparseAttnBackend(MockModelRunner())

    def test_pools_build(self):
        self.assertEqual(MockModelRunner().req_to_token_pool.req_to_token.shape, (4, 512))
