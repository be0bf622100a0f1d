#!/usr/bin/env bash
# Issue 18, in ONE call: (1) warm from scratch vs warm from an exported cache; (2) the whole
# contracts suite with -n 1, -n 2 and -n 4 (2 workers per GPU), each with the fork server off, on
# (started by the run) and keep (a kept server an earlier run started, as in a developer's loop):
# wall, ratio vs -n 1 of the same mode, each worker's time to its first test.
#
#   source .device/setup.sh; bash bench/xdist_fork_server.sh              # 2 x H200
#   DSAKIT_BENCH_CPU=1 bash bench/xdist_fork_server.sh                    # CPU box: -n 1 / -n 2, no warm
#
# Warm: `dsakit warm contracts` (timed: from scratch on a fresh node), `dsakit warm --export`, then a
# fresh node is simulated (JIT caches moved aside, the exported bytecode files removed) and
# `dsakit warm --import` is timed; the scaling runs then count files the workers added to the JIT
# caches (0 = the imported cache was complete). Moved-aside caches are discarded at the end.
# Writes $OUT/summary.md, run_<n>_<mode>.txt, first_<n>_<mode>/*.json, warm_*.txt.
# Knobs: DSAKIT_BENCH_TESTS (contracts), DSAKIT_BENCH_RUN_S (per-run limit, 120), DSAKIT_BENCH_SKIP_WARM=1.
# The kept server stops itself 120 s after the last run.
set -u
OUT=${OUT:-/tmp/dsakit-fork-bench}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 2
TESTS=${DSAKIT_BENCH_TESTS:-contracts}
LIMIT=${DSAKIT_BENCH_RUN_S:-120}
CPU=${DSAKIT_BENCH_CPU:-0}
MD=$OUT/summary.md
export PYTHONPATH="$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"
PLUGIN=($(python -c "from dsakit.pytest_invocation import plugin_args; print(' '.join(plugin_args()))"))
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.1f\", $2 - $1}"; }
summary_of() { grep -E '[0-9]+ (passed|failed|skipped|error)' "$1" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//'; }

echo "# fork server + warm cache ($(date -u +%Y-%m-%dT%H:%MZ), $(hostname))" >"$MD"
echo >>"$MD"
echo "- node: $(nvidia-smi -L 2>/dev/null | wc -l) x $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(nproc) CPU cores; tests: $TESTS" >>"$MD"

CACHES=$(python -c "from dsakit.node.warm_cache import cache_roots; print(' '.join(str(p) for p in cache_roots().values()))")
if [ "$CPU" != 1 ] && [ "${DSAKIT_BENCH_SKIP_WARM:-0}" != 1 ]; then
  t0=$(now); python -m dsakit warm $TESTS >"$OUT/warm_scratch.txt" 2>&1; rc=$?; W1=$(secs "$t0" "$(now)")
  t0=$(now); python -m dsakit warm --export "$OUT/../dsakit-warm-cache.tgz" >"$OUT/warm_export.txt" 2>&1; rc2=$?; W2=$(secs "$t0" "$(now)")
  # a fresh node: caches aside, the exported bytecode files gone
  AWAY=$(mktemp -d /tmp/dsakit-caches-away.XXXX)
  for d in $CACHES; do [ -d "$d" ] && mv "$d" "$AWAY/$(echo "$d" | tr / _)"; done
  ROOT=$(python -c "from dsakit.node.warm_cache import install_root; print(install_root() or '')")
  tar -tzf "$OUT/../dsakit-warm-cache.tgz" | sed -n 's#^bytecode/##p' | (cd "$ROOT" && xargs -r rm -f)
  t0=$(now); python -m dsakit warm --import "$OUT/../dsakit-warm-cache.tgz" >"$OUT/warm_import.txt" 2>&1; rc3=$?; W3=$(secs "$t0" "$(now)")
  if [ "$rc3" != 0 ]; then  # keep the scaling runs warm: put the original caches back
    cat "$OUT/warm_import.txt"
    for d in $CACHES; do [ -d "$AWAY/$(echo "$d" | tr / _)" ] && rm -rf "$d" && mv "$AWAY/$(echo "$d" | tr / _)" "$d"; done
    python -m dsakit warm --target sglang-bytecode >/dev/null 2>&1
  fi
  {
    echo
    echo "## warm: from scratch vs from an exported cache"
    echo
    echo "| step | wall | exit | output |"
    echo "|---|---|---|---|"
    echo "| \`dsakit warm $TESTS\` (this node as found) | $W1 s | $rc | $(tail -1 "$OUT/warm_scratch.txt" | cut -c1-120) |"
    echo "| \`dsakit warm --export\` | $W2 s | $rc2 | $(tail -1 "$OUT/warm_export.txt" | cut -c1-160) |"
    echo "| fresh node: \`dsakit warm --import\` | $W3 s | $rc3 | $(tail -1 "$OUT/warm_import.txt" | cut -c1-160) |"
  } >>"$MD"
  rm -f "$OUT/../dsakit-warm-cache.tgz"; rm -rf "$AWAY"
  touch "$OUT/.after-import"
fi

{
  echo
  echo "## the suite: one process vs workers, fork server off / on"
  echo
  echo "| run | fork server | wall | x vs -n 1 (same mode) | first test per worker (s after configure / after workers created) | header | pytest summary |"
  echo "|---|---|---|---|---|---|---|"
} >>"$MD"
declare -A WALL
RUNS="1 2 4"
[ "$CPU" = 1 ] && RUNS="1 2"
MODES="off on keep"
# keep: start the kept server once (a run that selects nothing), as a developer's first run would
t0=$(now)
mkdir -p "$OUT/first"
DSAKIT_BENCH_FIRST_TEST_DIR=$OUT/first timeout -s INT -k 20 "$LIMIT" python -m pytest "${PLUGIN[@]}" -p no:cacheprovider -p no:randomly -n 1 \
  --dsakit-fork-server=keep -o dsakit_fork_server_keep_s=120 -k dsakit_bench_selects_nothing $TESTS \
  >"$OUT/keep_start.txt" 2>&1
KEEP_START=$(secs "$t0" "$(now)")
for n in $RUNS; do
  for mode in $MODES; do
    args=(-n "$n" --dsakit-fork-server="$mode" -o dsakit_fork_server_keep_s=120)
    [ "$n" = 4 ] && args+=(--dsakit-workers-per-gpu 2)
    first="$OUT/first_${n}_${mode}"; mkdir -p "$first"
    t0=$(now)
    rm -rf "$OUT/first"; mkdir -p "$OUT/first"  # one fixed folder: the kept server's key includes the env
    DSAKIT_BENCH_FIRST_TEST_DIR=$OUT/first timeout -s INT -k 20 "$LIMIT" python -m pytest "${PLUGIN[@]}" \
      -p first_test_timing -p no:cacheprovider -p no:randomly -rfE "${args[@]}" $TESTS \
      >"$OUT/run_${n}_${mode}.txt" 2>&1
    rc=$?
    mv "$OUT"/first/*.json "$first"/ 2>/dev/null
    WALL[${n}_$mode]=$(secs "$t0" "$(now)")
    firsts=$(python - "$first" <<'EOF'
import json, pathlib, sys
rows = sorted((json.loads(p.read_text()) for p in pathlib.Path(sys.argv[1]).glob("*.json")), key=lambda r: r["worker"])
print(", ".join(f"{r['worker']} {r['first_test_s']} / {r['after_setupnodes_s']}" for r in rows) or "-")
EOF
)
    base=${WALL[1_$mode]}
    ratio=$(awk "BEGIN{printf \"%.2f\", $base / ${WALL[${n}_$mode]}}")
    header=$(grep -m1 "dsakit: fork server" "$OUT/run_${n}_${mode}.txt" | cut -c1-110)
    echo "| -n $n | $mode | ${WALL[${n}_$mode]} s (exit $rc) | ${ratio}x | $firsts | ${header:--} | $(summary_of "$OUT/run_${n}_${mode}.txt") |" >>"$MD"
  done
done
if [ -f "$OUT/.after-import" ]; then
  echo >>"$MD"
  for d in $CACHES; do
    echo "- files the runs added to $d after the import: $(find "$d" -type f -newer "$OUT/.after-import" 2>/dev/null | wc -l) of $(find "$d" -type f 2>/dev/null | wc -l)" >>"$MD"
  done
fi
{
  echo
  echo "keep: starting the kept server (a run selecting nothing) took $KEEP_START s; the keep rows reuse it"
  echo "off / on and off / keep wall per -n: $(for n in $RUNS; do awk "BEGIN{printf \"-n $n %.2fx %.2fx;  \", ${WALL[${n}_off]} / ${WALL[${n}_on]}, ${WALL[${n}_off]} / ${WALL[${n}_keep]}}"; done)"
  echo "vs -n 1 with the server off: $(for n in $RUNS; do for m in $MODES; do awk "BEGIN{printf \"-n $n $m %.2fx; \", ${WALL[1_off]} / ${WALL[${n}_$m]}}"; done; done)"
} >>"$MD"
cat "$MD"
