#!/usr/bin/env bash
# Issues 7/8 on a node with two H200s, from a fresh machine (no JIT caches, no SGLang bytecode):
#   source .device/setup.sh; bash bench/gpu_cold_warm_scaling.sh
# 1. the whole contracts suite cold, one process on GPU 0, unbounded except a 330 s safety cut;
# 2. `dsakit warm contracts` (SGLang bytecode, the metadata Triton kernels, top-k JIT);
# 3. -n 1 vs -n 4 (two workers per GPU), then how many files appeared in each JIT cache during
#    those two runs (0 = no worker compiled anything).
# Writes $OUT/cold.txt, n1.txt, n4.txt and prints the summary.
set -u
OUT=${OUT:-/tmp/dsakit-cold-warm}; mkdir -p "$OUT"
TIMEFORMAT="%R s wall"
P="python -m pytest -p dsakit.plugin -p no:cacheprovider"
CACHES="$HOME/.cache/flashinfer $HOME/.cache/tvm-ffi $HOME/.cache/sglang $HOME/.triton"
if [ "${DSAKIT_SKIP_COLD:-0}" != 1 ]; then  # DSAKIT_SKIP_COLD=1: only steps 2 and 3
mkdir -p /tmp/jit-away; mv $CACHES /tmp/jit-away/ 2>/dev/null
echo "== cold: $(find "$(python -c 'import sglang,os;print(os.path.dirname(os.path.dirname(sglang.__file__)))')" -name '*.pyc' | wc -l) pyc in the SGLang stack, JIT caches moved away"
{ time CUDA_VISIBLE_DEVICES=0 timeout 330 $P contracts -rs --durations=12 ; } > "$OUT/cold.txt" 2>&1
grep -E "[0-9]+ passed|wall" "$OUT/cold.txt" | tail -2; sed -n '/slowest 12/,/^$/p' "$OUT/cold.txt" | head -14
sed -n '/dsakit skip inventory/,/short test summary/p' "$OUT/cold.txt" | cut -c1-230
fi
echo "== dsakit warm contracts"; { time python -m dsakit warm contracts; } 2>&1 | tail -7
touch /tmp/after-warm; sleep 1
for name in n1 n4; do
  case $name in n1) args="-n 1";; n4) args="-n 4 --dsakit-workers-per-gpu 2";; esac
  { time $P $args contracts -rfE --durations=5 ; } > "$OUT/$name.txt" 2>&1
  echo "== $name: $(grep -E '[0-9]+ passed' "$OUT/$name.txt" | tail -1) $(grep 'wall' "$OUT/$name.txt")"
  grep -E "GPU pinning|OMP_NUM|^FAILED|^ERROR" "$OUT/$name.txt" | head -6
done
for d in $CACHES; do
  echo "new files in $d during the two runs: $(find "$d" -type f -newer /tmp/after-warm 2>/dev/null | wc -l) of $(find "$d" -type f 2>/dev/null | wc -l); $(find "$d" -type f -newer /tmp/after-warm 2>/dev/null | head -3 | tr '\n' ' ')"
done
sed -n '/slowest 5/,/passed/p' "$OUT/n4.txt" | head -8
