"""One-off H200 probe (kept for reproducibility): real DeepseekSparseAttnBackend from the strict mock."""
import sys, traceback, time
t0 = time.time()
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cap", torch.cuda.get_device_capability(), torch.cuda.get_device_name())
import dsakit
from dsakit.sglang_facts.scope import SGLangScope
print("release", dsakit.installed_release().describe())
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
print("import s", round(time.time() - t0, 1))
BASE = dict(model_path="dsakit/mock-deepseek-v32", dsa_prefill_backend="flashmla_sparse", dsa_decode_backend="flashmla_sparse")
for role in ("target", "draft"):
    for decode in ("flashmla_sparse", "trtllm"):
        for omit in ((), ("max_running_requests",)):
            try:
                with SGLangScope(server_args={**BASE, "dsa_decode_backend": decode}):
                    b = DeepseekSparseAttnBackend(dsakit.MockModelRunner(role, omit=omit))
                print("OK", role, decode, omit, b.dsa_topk_backend, b.workspace_buffer is not None, b._multi_ctas_kv_counter_buffer is not None)
            except Exception as e:
                print("FAIL", role, decode, omit, type(e).__name__, str(e)[:600])
                if not isinstance(e, dsakit.ContractViolation):
                    traceback.print_exc()
from dsakit.mocks import read_log
print("\n".join(read_log.format_summary()))
