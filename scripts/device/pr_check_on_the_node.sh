#!/usr/bin/env bash
# The PR gate's demonstration (issue 23) on a GPU node, from the project root:
#   bash scripts/device/pr_check_on_the_node.sh                 # the H200 with the packed 0.5.21 stack
#   bash scripts/device/pr_check_on_the_node.sh --dry BASE_TREE # anywhere: BASE_TREE an unpacked SGLang
# Base: the stack's SGLang (/tmp/dsakit-site after `source .device/setup.sh`), or BASE_TREE.
# PR: a copy of it whose DeepseekSparseAttnBackend.__init__ reads one new model_runner attribute
# on AMD only (the `_is_hip` branch). Selection: $SELECTION (default SGLang's DSA indexer test in
# .device/upstream/ and contracts/), devices $DEVICES (default sm90,sm100,sm103,gfx942: sm90 is
# real on an H200). Writes $OUT/pr-check.{json,md,txt}; prints the exit code and the comment's
# first 60 lines. Speed: pr-check runs the 8 pytest runs side by side (as many as the CPUs carry,
# OMP_NUM_THREADS split between them); PYTEST_N=K adds `-n K` inside each run (then CPUs / K at once).
# PR_CHECK_SPEED=1: instead, bench/pr_check_speed.py on the same trees (pr-check against the devices'
# `dsakit compare` runs one after another, in one run; writes $OUT/pr-check-speed.json).
# PLANT=NAME UPSTREAM=DIR: instead of the AMD-only read, the PR is plant NAME of plant_table.sh (a B300-only
# bug in an SM 10.x line), the selection SGLang's test_dsa.py + test_deepseek_v4.py of DIR (a folder holding
# test/registered/..., copied outside the project's ini and run from there), devices sm90 and the plant's
# simulated device. pr-check must exit 1: mha_sm turns passes into skips on sm103 (newly skipped).
set -u
DRY=""
if [ "${1:-}" = "--dry" ]; then DRY=${2:?usage: pr_check_on_the_node.sh [--dry BASE_TREE]}; fi
OUT=${OUT:-/tmp/dsakit-node}; mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-pr-check-node.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
if [ -n "$DRY" ]; then
  BASE=$(cd "$DRY" && pwd)
else
  source .device/setup.sh
  BASE=$(python -c "import sglang, os; print(os.path.dirname(os.path.dirname(sglang.__file__)))")
fi
PR="$WORK/pr"
mkdir -p "$PR" && cp -a "$BASE/sglang" "$PR/sglang" || { echo "no sglang package in $BASE"; exit 2; }
RUN_DIR=$PWD
if [ -n "${PLANT:-}" ]; then
  source "$(dirname "${BASH_SOURCE[0]}")/plant_table.sh"
  plant_edit "$PLANT" > /dev/null || { echo "unknown plant $PLANT (see scripts/device/plant_table.sh)"; exit 2; }
  [ -d "${UPSTREAM:-}/test/registered" ] || { echo "PLANT needs UPSTREAM=DIR holding test/registered/..."; exit 2; }
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # dsakit from the project, run from the copy
  RUN_DIR=$WORK/upstream; mkdir -p "$RUN_DIR" && cp -r "$UPSTREAM/test" "$RUN_DIR/"
  R=test/registered/attention/unittests
  SELECTION=${SELECTION:-$R/dsa/test_dsa.py $R/dsv4/test_deepseek_v4.py}
  DEVICES=${DEVICES:-sm90,$(plant_device "$PLANT")}
  plant_apply "$PLANT" "$PR/$(plant_file "$PLANT")" "$WORK" || exit 2
  echo "PR: $(plant_edit "$PLANT" | awk -F'|' 'END{print $NF}')"
else
SELECTION=${SELECTION:-.device/upstream/test_dsa_indexer.py contracts}
DEVICES=${DEVICES:-sm90,sm100,sm103,gfx942}
python - "$PR/sglang/srt/layers/attention/dsa_backend.py" <<'PY' || exit 2
import sys
path = sys.argv[1]
text = open(path).read()
old = "        if _is_hip:\n            max_bs = model_runner.req_to_token_pool.size\n"
if text.count(old) != 1:
    sys.exit(f"{path}: the HIP branch of DeepseekSparseAttnBackend.__init__ moved; cannot make the PR tree")
text = text.replace(old, old + "            # PR: AITER's decode split count comes from the runner\n"
                    "            self.aiter_num_kv_splits = model_runner.aiter_num_kv_splits\n")
open(path, "w").write(text)
PY
fi
VERSION=$(python -c "from dsakit.stack.sglang_release import release_from_tree as r; print(r('$BASE').version)")
echo "base $BASE (SGLang $VERSION), PR $PR (the same plus ${PLANT:-the AMD-only read}), $(nproc) CPUs"
if [ "${PR_CHECK_SPEED:-}" = 1 ]; then
  # shellcheck disable=SC2086 # SELECTION is a list of paths
  python bench/pr_check_speed.py --base "$BASE" --pr "$PR" --devices "$DEVICES" --json "$OUT/pr-check-speed.json" \
    -- $SELECTION ${PYTEST_N:+-n $PYTEST_N}
  exit $?
fi
start=$(date +%s.%N)
# shellcheck disable=SC2086 # SELECTION is a list of paths
(cd "$RUN_DIR" && python -m dsakit pr-check --base "$BASE" --pr "$PR" --devices "$DEVICES" \
  --json "$OUT/pr-check.json" --markdown "$OUT/pr-check.md" -- $SELECTION ${PYTEST_N:+-n $PYTEST_N}) \
  > "$OUT/pr-check.txt" 2>&1
rc=$?
echo "dsakit pr-check exit $rc in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$start}") s (load $(cut -d' ' -f1-3 /proc/loadavg))" \
  | tee -a "$OUT/pr-check.txt"
tail -n 3 "$OUT/pr-check.txt" | head -n 2
[ -f "$OUT/pr-check.md" ] && head -n 60 "$OUT/pr-check.md"
exit $rc
