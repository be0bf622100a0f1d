#!/usr/bin/env bash
# Issue 8, single H200: the GPU contract suite warm (and, optionally, cold) with its per-test time
# distribution, then the top-k speed per backend. One call, bounded to ~7.5 minutes in all (after setup.sh).
#
#   source .device/setup.sh; bash bench/gpu_node_bench.sh                       # warm suite + top-k
#   source .device/setup.sh; DSAKIT_BENCH_COLD=1 bash bench/gpu_node_bench.sh    # + cold suite first
#
# Writes at most 7 files to $OUT: summary.md, suite_durations.md, suite_warm.txt, [suite_cold.txt],
# topk_speed.csv, topk_speed.md, topk_speed.log. Plot here afterwards (CPU box with matplotlib):
#   python bench/plot_topk_speed.py <files_at>/topk_speed.csv -o bench/topk_speed.png
#
# Cold = no JIT cache: $HOME/.cache/{flashinfer,tvm-ffi,sglang} are moved aside for that run and
# put back afterwards (what the cold run built is discarded), so the warm run and the top-k
# benchmark still find the restored warm cache. The cold run is bounded (flashinfer's top-k JIT
# alone takes 133-166 s cold): when it hits its limit pytest is interrupted (SIGINT), still prints
# its durations, and the summary says "interrupted".
#
# Knobs (seconds): DSAKIT_BENCH_TOTAL_S (450), DSAKIT_BENCH_COLD_S (200), DSAKIT_BENCH_WARM_S (240),
# DSAKIT_BENCH_TOPK_MIN_S (100, kept for the top-k run), DSAKIT_BENCH_TESTS (contracts),
# DSAKIT_BENCH_SKIP_TOPK=1, DSAKIT_BENCH_SKIP_SUITE=1.
set -u
OUT=${OUT:-/tmp/dsakit-bench-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 2
START=$(date +%s)
TOTAL=${DSAKIT_BENCH_TOTAL_S:-450}
TESTS=${DSAKIT_BENCH_TESTS:-contracts}
TOPK_MIN=${DSAKIT_BENCH_TOPK_MIN_S:-100}
[ "${DSAKIT_BENCH_SKIP_TOPK:-0}" = 1 ] && TOPK_MIN=0
SUMMARY=$OUT/summary.md
DUR=$OUT/suite_durations.md
# the node has no install (PYTHONPATH only): load the plugin by name; where the pytest11 entry point
# exists (a dev venv) `-p dsakit.plugin` would register it twice
PLUGIN=($(python -c "from dsakit.node.pytest_invocation import plugin_args; print(' '.join(plugin_args()))"))
PYTEST=(python -m pytest "${PLUGIN[@]}" -p no:cacheprovider -q -ra --durations=0 --durations-min=0)

left() { echo $(( START + TOTAL - $(date +%s) )); }
clamp() { local want=$1 room=$2; [ "$room" -lt "$want" ] && want=$room; [ "$want" -lt 10 ] && want=10; echo "$want"; }

# run_suite NAME LIMIT_S: the suite, bounded; output to $OUT/suite_NAME.txt, a line in the summary
run_suite() {
  local name=$1 limit=$2 t0 t1 rc state
  t0=$(date +%s.%N)
  timeout -s INT -k 30 "$limit" "${PYTEST[@]}" $TESTS >"$OUT/suite_$name.txt" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  state="exit $rc"; [ "$rc" = 124 ] || [ "$rc" = 130 ] || [ "$rc" = 2 ] && grep -q "KeyboardInterrupt\|Interrupted" "$OUT/suite_$name.txt" && state="interrupted at the ${limit} s limit (partial)"
  printf '| %s | %s s | %s | %s |\n' "$name" "$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" "$state" \
    "$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$OUT/suite_$name.txt" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')" >>"$SUMMARY"
  python bench/durations_table.py "$OUT/suite_$name.txt" --title "$name run: per-test durations" >>"$DUR"
}

{
  echo "# dsakit GPU benchmarks ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "- node: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1), $(nproc) CPU cores"
  echo "- $(python - <<'EOF'
import importlib, sys
parts = [f"Python {sys.version.split()[0]}"]
for name in ("torch", "sglang", "sgl_kernel", "flashinfer", "pytest", "xdist", "syrupy"):
    try:
        parts.append(f"{name} {getattr(importlib.import_module(name), '__version__', '?')}")
    except Exception as error:
        parts.append(f"{name} n/a ({type(error).__name__})")
print(", ".join(parts))
EOF
)"
  echo "- command: ${DSAKIT_BENCH_COLD:+DSAKIT_BENCH_COLD=1 }bash bench/gpu_node_bench.sh; tests: $TESTS"
  echo
  echo "| suite run | wall | state | pytest summary |"
  echo "|---|---|---|---|"
} >"$SUMMARY"
: >"$DUR"

if [ "${DSAKIT_BENCH_SKIP_SUITE:-0}" != 1 ]; then
  if [ "${DSAKIT_BENCH_COLD:-0}" = 1 ]; then
    STASH=$(mktemp -d /tmp/dsakit-jit-warm.XXXX)
    BUILT=$(mktemp -d /tmp/dsakit-jit-cold.XXXX)
    for d in flashinfer tvm-ffi sglang; do
      [ -e "$HOME/.cache/$d" ] && mv "$HOME/.cache/$d" "$STASH/$d"
    done
    run_suite cold "$(clamp "${DSAKIT_BENCH_COLD_S:-200}" $(( $(left) - TOPK_MIN - 60 )))"
    for d in flashinfer tvm-ffi sglang; do
      [ -e "$HOME/.cache/$d" ] && mv "$HOME/.cache/$d" "$BUILT/$d"
      [ -e "$STASH/$d" ] && mv "$STASH/$d" "$HOME/.cache/$d"
    done
    rm -rf "$BUILT" "$STASH"
  fi
  run_suite warm "$(clamp "${DSAKIT_BENCH_WARM_S:-240}" $(( $(left) - TOPK_MIN )))"
fi

if [ "${DSAKIT_BENCH_SKIP_TOPK:-0}" != 1 ]; then
  ROOM=$(( $(left) - 15 ))
  BUDGET=$(( ROOM - 40 )); [ "$BUDGET" -lt 20 ] && BUDGET=20
  echo >>"$SUMMARY"
  echo "top-k speed: budget ${BUDGET} s (limit ${ROOM} s); table in topk_speed.md" >>"$SUMMARY"
  timeout -s INT -k 15 "$(clamp "$ROOM" "$ROOM")" python bench/bench_topk_speed.py --out "$OUT" \
    --budget-s "$BUDGET" >"$OUT/topk_speed.log" 2>&1
  echo "top-k exit $? after $(( $(date +%s) - START )) s in all" >>"$SUMMARY"
fi
echo >>"$SUMMARY"
echo "total $(( $(date +%s) - START )) s" >>"$SUMMARY"
cat "$SUMMARY"
cat "$DUR"
[ -f "$OUT/topk_speed.md" ] && cat "$OUT/topk_speed.md"
exit 0
