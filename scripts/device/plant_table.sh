# The B300-only bugs planted in SGLang 0.5.21 (issue 42), one record per plant: the module each edits
# (plant_file), its edit "old|new|what" (plant_edit) and the simulated device whose branch takes the
# line (plant_device). Sourced by arch_rules_plants.sh (each plant run plain and simulated) and
# pr_check_on_the_node.sh (PLANT=NAME: the plant as a PR against the stack's SGLang); plant_apply makes
# the edit in a copy for both.
ATTN=${ATTN:-sglang/srt/layers/attention}

plant_file() {  # plant -> the SGLang module it edits (the DeepSeek-V4 plants: deepseek_v4_backend.py)
  case $1 in
    v41_*) echo $ATTN/deepseek_v4_backend.py ;;
    *) echo $ATTN/dsa_backend.py ;;
  esac
}

# plant -> "old|new|what": one unique line of dsa_backend.py and its B300-only bug (each a different class)
plant_edit() {
  case $1 in
    pad64) echo "required_padding = 128 if self.device_sm_major >= 10 else 64|required_padding = 64 if self.device_sm_major >= 10 else 64|FlashMLA sparse prefill heads padded to Hopper's 64 on SM 10.x (Blackwell's build takes 128)" ;;
    ws_none) echo "            return flashinfer.prefill.trtllm_ragged_attention_deepseek(
                query=q,
                key=k,
                value=v,
                workspace_buffer=self.workspace_buffer,|            return flashinfer.prefill.trtllm_ragged_attention_deepseek(
                query=q,
                key=k,
                value=v,
                workspace_buffer=None,|the SM 10.x MHA prefill hands TRT-LLM ragged attention no workspace" ;;
    cum_q) echo "cum_seq_lens_q=cu_seqlens_q,|cum_seq_lens_q=cu_seqlens_q[1:],|the SM 10.x ragged prefill passes batch_size cumulative q lengths, not batch_size + 1" ;;
    scale) echo "                bmm1_scale=layer.scaling,|                bmm1_scale=1.0,|the SM 10.x ragged prefill drops the softmax scale (numerics: judged on the stand-in's output)" ;;
    counters) echo "        multi_ctas_kv_counter_buffer = self._multi_ctas_kv_counter_for(batch_size)|        multi_ctas_kv_counter_buffer = torch.zeros(4, dtype=torch.uint8, device=q_all.device)|the SM 10.x trtllm MLA decode hands a 4-byte multi-CTA counter buffer (one semaphore)" ;;
    mla_scale) echo "        bmm1_scale = q_scale * k_scale * layer.scaling|        bmm1_scale = q_scale * k_scale|the trtllm MLA decode drops the softmax scale (numerics: judged on the stand-in's output)" ;;
    seq_i64) echo "            seq_lens = metadata.cache_seqlens_int32
            return flashinfer.prefill.trtllm_ragged_attention_deepseek(|            seq_lens = metadata.cache_seqlens_int32.long()
            return flashinfer.prefill.trtllm_ragged_attention_deepseek(|the SM 10.x ragged prefill hands TRT-LLM int64 kv lengths (the kernel reads them as int32)" ;;
    cum_kv_host) echo "cum_seq_lens_kv=cu_seqlens_k,|cum_seq_lens_kv=cu_seqlens_k.cpu(),|the SM 10.x ragged prefill hands TRT-LLM host-side cumulative kv lengths (a host pointer the GPU dereferences)" ;;
    value_k) echo "                key=k,
                value=v,
                workspace_buffer=self.workspace_buffer,|                key=k,
                value=k,
                workspace_buffer=self.workspace_buffer,|the SM 10.x ragged prefill hands TRT-LLM the keys as values (a swapped operand: judged on the stand-in's output; at DeepSeek's (192, 192, 128) dims the head-dims rule refuses it)" ;;
    max_q1) echo "max_q_len=metadata.max_seq_len_q,|max_q_len=1,|the SM 10.x ragged prefill bounds the q length by 1 (the grid covers one row per request)" ;;
    sched_nc) echo "return cache_seqlens_int32.view(-1, 1).expand(-1, next_n).contiguous()|return cache_seqlens_int32.view(-1, 1).expand(-1, next_n)|the SM100 DG-native verify schedule hands DeepGEMM a stride-0 [B, next_n] view of the context lengths" ;;
    sched_rev) echo "return cache_seqlens_int32.view(-1, 1).expand(-1, next_n).contiguous()|return seqlens_expanded.reshape(-1, next_n).flip(1).contiguous()|the SM100 DG-native verify schedule's [batch, next_n] lengths run longest-first: DeepGEMM plans each request from its last column, so earlier positions' later keys are never scored" ;;
    mha_sm) echo "or (device_sm >= 100 and device_sm < 110)|or (device_sm >= 100 and device_sm < 103)|the MHA one-shot prefill leaves out SM 10.3 (a B300 takes the MLA path)" ;;
    v41_heads) echo "                    q[..., :16, :],|                    q[..., -16:, :],|the DSv4.1 SM100 swap-AB decode reads the last 16 heads of the padded q (the zero pad) instead of the 16 real ones" ;;
    v41_extra) echo "                    extra_k_cache,
                    extra_indices,
                    extra_topk_lengths,
                )|                    None,
                    None,
                    None,
                )|the DSv4.1 SM100 swap-AB decode drops the compressed (C4 / C128) keys: SWA keys only" ;;
    v41_sink) echo "                    swa_topk_lengths,
                    attn_sink,
                    extra_k_cache,|                    swa_topk_lengths,
                    torch.zeros_like(attn_sink),
                    extra_k_cache,|the DSv4.1 SM100 swap-AB decode hands a zero attention sink (the learned sink logits dropped)" ;;
    v41_sched) echo "        topk_length=topk_length,
        extra_topk_length=extra_topk_length,
        block_size_n=|        topk_length=extra_topk_length,
        extra_topk_length=topk_length,
        block_size_n=|the SM100 precomputed FlashMLA decode schedule (DSv4.1) splits by swapped SWA / compressed lengths" ;;
    v41_store_loc) echo "                    loc=slots,
                )
            else:|                    loc=slots.flip(0),
                )
            else:|the SM 10.x fused index-key store (DSv4.1 ratio 1 / 2) writes each key to another group's slot" ;;
    v41_store_rope) echo "                    freqs,
                    indexer.rope_head_dim,|                    freqs.flip(0),
                    indexer.rope_head_dim,|the SM 10.x fused index-key store (DSv4.1 ratio 1 / 2) rotates each key by another group's position" ;;
    none) echo "||no plant: the baseline" ;;
    *) return 1 ;;
  esac
}

plant_device() {  # the simulated device whose SGLang branch takes the planted line
  case $1 in
    counters|mla_scale) echo sm100 ;;  # SGLang's trtllm DSA decode: SM 10.0 only ("got SM10.3" skips on a B300)
    v41_*) echo sm100 ;;  # get_platform().is_sm100 / is_blackwell / is_sm100_or_newer: sm100 and sm103 alike
    *) echo sm103 ;;
  esac
}

plant_apply() {  # plant file root: make the plant's edit in file, a copy under root (rc 1: not applied)
  local spec
  spec=$(plant_edit "$1") || { echo "unknown plant $1 (see scripts/device/plant_table.sh)" >&2; return 1; }
  SPEC=$spec FILE=$2 ROOT=$3 python - <<'EOF'
import os, sys
old, new, _ = os.environ["SPEC"].split("|")
path = os.environ["FILE"]
if not os.path.realpath(path).startswith(os.path.realpath(os.environ["ROOT"]) + os.sep):
    sys.exit(f"refusing to plant: {path} resolves outside the copy ({os.path.realpath(path)})")
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"plant not applied: {text.count(old)} matches of {old!r} in {path}")
open(path, "w").write(text.replace(old, new))
if new not in open(path).read():
    sys.exit(f"plant not applied: {new!r} absent after the edit")
EOF
}
