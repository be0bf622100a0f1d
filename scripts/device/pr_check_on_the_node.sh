#!/usr/bin/env bash
# The PR gate on a GPU node (kept for reproducibility):
#   source .device/setup.sh; bash scripts/device/pr_check_on_the_node.sh SUITE_FILE
# Base: the stack's SGLang. PR: a copy whose DeepseekSparseAttnBackend.__init__ reads one new
# model_runner attribute on AMD only (the HIP branch). Runs pr-check over SUITE_FILE and contracts/.
set -u
SUITE=${1:?usage: pr_check_on_the_node.sh SUITE_FILE}
OUT=${OUT:-/tmp/dsakit-node}; mkdir -p "$OUT"
BASE=$(python -c "import sglang, os; print(os.path.dirname(os.path.dirname(sglang.__file__)))")
PR=/tmp/dsakit-pr-tree
rm -rf "$PR"; mkdir -p "$PR"; cp -a "$BASE/sglang" "$PR/sglang"
python - "$PR/sglang/srt/layers/attention/dsa_backend.py" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
old = "        if _is_hip:\n            max_bs = model_runner.req_to_token_pool.size\n"
assert text.count(old) == 1, "the HIP branch of DeepseekSparseAttnBackend.__init__ moved"
text = text.replace(old, old + "            # PR: AITER's decode split count comes from the runner\n"
                    "            self.aiter_num_kv_splits = model_runner.aiter_num_kv_splits\n")
open(path, "w").write(text)
PY
t() { local s=$(date +%s.%N); "$@"; echo "rc=$? wall=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$s}")s"; }
t python -m dsakit pr-check --base "$BASE" --pr "$PR" --devices sm90,sm100,sm103,gfx942 \
  --json "$OUT/pr-check.json" --markdown "$OUT/pr-check.md" -- "$SUITE" contracts > "$OUT/pr-check.txt" 2>&1
tail -3 "$OUT/pr-check.txt"; head -60 "$OUT/pr-check.md"
