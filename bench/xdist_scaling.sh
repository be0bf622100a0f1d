#!/usr/bin/env bash
# Issue 8, two H200s: wall time of the GPU-bound contract cases on 1 GPU vs 2 GPUs (target >= 1.8x).
#
#   source .device/setup.sh; bash bench/xdist_scaling.sh
#
# With pytest-xdist and dsakit's GPU pinning (--dsakit-workers-per-gpu): 1 GPU = -n 1 with
# CUDA_VISIBLE_DEVICES=0, 2 GPUs = -n 2 with CUDA_VISIBLE_DEVICES=0,1 (one pinned worker per GPU),
# both --dist worksteal. Without them: the same tests split round-robin into two shards, run as two
# plain pytest processes with CUDA_VISIBLE_DEVICES=0 and =1 (wall = the later one), against one
# process running everything on GPU 0. Order: 1 GPU, 2 GPUs, then 1 GPU again when time allows
# (the JIT cache and page cache are warm for all but the first; the table shows every run and the
# speedup uses the best 1-GPU run). Bounded to ~7.5 minutes in all (after setup.sh); runs cut by their limit are
# marked "interrupted" and are not used for the speedup.
#
# Writes at most 6 files to $OUT: xdist_scaling.md, run_1gpu.txt, run_2gpu.txt, run_1gpu_again.txt,
# (shards: run_2gpu_shard1.txt), durations_2gpu.md.
# Knobs: DSAKIT_XDIST_TESTS (GPU-bound files; default the top-k selection, top-k matrix and DSA
# metadata suites), DSAKIT_XDIST_TOTAL_S (450), DSAKIT_XDIST_MODE (auto | xdist | shards).
set -u
OUT=${OUT:-/tmp/dsakit-xdist-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 2
START=$(date +%s)
TOTAL=${DSAKIT_XDIST_TOTAL_S:-450}
TESTS=${DSAKIT_XDIST_TESTS:-contracts/test_topk_selection.py contracts/test_topk_matrix.py contracts/test_dsa_backend_metadata.py}
MD=$OUT/xdist_scaling.md
PLUGIN=($(python -c "from dsakit.node.pytest_invocation import plugin_args; print(' '.join(plugin_args()))"))
BASE=(python -m pytest "${PLUGIN[@]}" -p no:cacheprovider -q -ra)
GPUS=${DSAKIT_XDIST_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}  # override only to dry-run the script

MODE=${DSAKIT_XDIST_MODE:-auto}
if [ "$MODE" = auto ]; then
  MODE=shards
  if python -c "import xdist" 2>/dev/null && "${BASE[@]}" --help 2>/dev/null | grep -q -- "--dsakit-workers-per-gpu"; then
    MODE=xdist
  fi
fi

left() { echo $(( START + TOTAL - $(date +%s) )); }
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.1f\", $2 - $1}"; }
summary_of() { grep -E '[0-9]+ (passed|failed|skipped|error)' "$1" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//'; }
state_of() { if [ "$1" = 124 ] || grep -q "KeyboardInterrupt" "$2"; then echo interrupted; else echo "exit $1"; fi; }

{
  echo "# xdist scaling, 1 vs 2 GPUs ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "- node: $GPUS x $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(nproc) CPU cores; mode: $MODE"
  echo "- tests: $TESTS"
  echo
  echo "| run | GPUs | wall | state | pytest summary |"
  echo "|---|---|---|---|---|"
} >"$MD"

declare -A WALL STATE

# one_gpu NAME LIMIT
one_gpu() {
  local name=$1 limit=$2 t0 rc extra=()
  [ "$MODE" = xdist ] && extra=(-n 1 --dist worksteal --dsakit-workers-per-gpu 1)
  [ "$MODE" = shards ] && extra=(-p no:xdist)
  t0=$(now)
  CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 20 "$limit" "${BASE[@]}" "${extra[@]}" $TESTS >"$OUT/run_$name.txt" 2>&1
  rc=$?
  WALL[$name]=$(secs "$t0" "$(now)"); STATE[$name]=$(state_of $rc "$OUT/run_$name.txt")
  echo "| $name | 1 | ${WALL[$name]} s | ${STATE[$name]} | $(summary_of "$OUT/run_$name.txt") |" >>"$MD"
}

two_gpus() {
  local limit=$1 t0 rc rc1 ids
  t0=$(now)
  if [ "$MODE" = xdist ]; then
    CUDA_VISIBLE_DEVICES=0,1 timeout -s INT -k 20 "$limit" "${BASE[@]}" -n 2 --dist worksteal \
      --dsakit-workers-per-gpu 1 --durations=0 --durations-min=0 $TESTS >"$OUT/run_2gpu.txt" 2>&1
    rc=$?
  else
    ids=$(mktemp -d /tmp/dsakit-shards.XXXX)
    # BASE already has one -q: one id per line (a second -q would print per-file counts)
    "${BASE[@]}" -p no:xdist --collect-only $TESTS 2>/dev/null | grep "::" >"$ids/all.txt"
    if [ ! -s "$ids/all.txt" ]; then
      echo "| 2gpu | 2 | - | no test ids collected from: $TESTS | |" >>"$MD"
      WALL[2gpu]=""; STATE[2gpu]="no tests"; return
    fi
    awk 'NR % 2 == 1' "$ids/all.txt" >"$ids/shard0.txt"
    awk 'NR % 2 == 0' "$ids/all.txt" >"$ids/shard1.txt"
    # pytest >= 8.2 reads arguments from @file (test ids may hold spaces and brackets)
    CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 20 "$limit" "${BASE[@]}" -p no:xdist --durations=0 \
      --durations-min=0 "@$ids/shard0.txt" >"$OUT/run_2gpu.txt" 2>&1 &
    local p0=$!
    CUDA_VISIBLE_DEVICES=1 timeout -s INT -k 20 "$limit" "${BASE[@]}" -p no:xdist \
      "@$ids/shard1.txt" >"$OUT/run_2gpu_shard1.txt" 2>&1 &
    local p1=$!
    wait $p0; rc=$?
    wait $p1; rc1=$?
    [ "$rc" = 0 ] && rc=$rc1
    rm -rf "$ids"
  fi
  WALL[2gpu]=$(secs "$t0" "$(now)"); STATE[2gpu]=$(state_of $rc "$OUT/run_2gpu.txt")
  local extra=""
  [ "$MODE" = shards ] && extra=" + shard 1: $(summary_of "$OUT/run_2gpu_shard1.txt")"
  echo "| 2gpu | 2 | ${WALL[2gpu]} s | ${STATE[2gpu]} | $(summary_of "$OUT/run_2gpu.txt")$extra |" >>"$MD"
}

if [ "$GPUS" -lt 2 ]; then
  echo "needs 2 GPUs, nvidia-smi lists $GPUS" | tee -a "$MD"
  exit 0
fi

# 1 GPU first gets at most ~45% of the time; 2 GPUs should need about half of what it took
one_gpu 1gpu $(( TOTAL * 45 / 100 ))
two_gpus $(( $(left) - 20 ))
ROOM=$(( $(left) - 15 ))
NEED=$(awk "BEGIN{printf \"%d\", ${WALL[1gpu]} * 1.15 + 10}")
if [ "${STATE[1gpu]}" != interrupted ] && [ "$ROOM" -gt "$NEED" ]; then
  one_gpu 1gpu_again "$ROOM"
fi

python bench/durations_table.py "$OUT/run_2gpu.txt" --title "2-GPU run (worker 0 / shard 0): per-test durations" >"$OUT/durations_2gpu.md"
python - "$MD" <<EOF >>"$MD"
walls = {"1gpu": ("${WALL[1gpu]:-}", "${STATE[1gpu]:-}"), "1gpu_again": ("${WALL[1gpu_again]:-}", "${STATE[1gpu_again]:-}"),
         "2gpu": ("${WALL[2gpu]:-}", "${STATE[2gpu]:-}")}
ok = {k: float(w) for k, (w, s) in walls.items() if w and s.startswith("exit")}
one = [ok[k] for k in ("1gpu", "1gpu_again") if k in ok]
print()
if one and "2gpu" in ok:
    print(f"speedup 2 GPUs vs 1: {min(one) / ok['2gpu']:.2f}x (best 1-GPU run {min(one):.1f} s / 2-GPU {ok['2gpu']:.1f} s; target >= 1.8x)")
else:
    print("no speedup: a run was interrupted or failed to start (see the table and the run_*.txt logs)")
EOF
echo "total $(( $(date +%s) - START )) s" >>"$MD"
cat "$MD"
cat "$OUT/durations_2gpu.md"
exit 0
