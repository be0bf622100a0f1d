#!/usr/bin/env bash
# Issue 24, item 4: a fresh node warmed from an exported cache vs a warm node, and -n 1 vs -n 4,
# side by side in ONE node call of at most DSAKIT_BENCH_TOTAL_S (default 390 s, the warm-up included;
# `source .device/setup.sh` adds ~15 s to the call):
#
#   source .device/setup.sh; bash bench/gpu_fresh_vs_warm.sh
#
# 1. warm-up: `dsakit warm SEL` on this node (the shared JIT cache setup.sh restored), then
#    `dsakit warm --export` into a scratch dir;
# 2. warm: the whole SEL in one process;
# 3. fresh: this node made fresh the way a new CI node is: the same HOME and paths (caches that
#    record their own path, FlashInfer's ninja logs and Triton's group files, work only there), every
#    cache root of `dsakit.warm.tarball.cache_roots` (dsakit's stamps included) moved aside, a new
#    TMPDIR, and (on the node only) the bytecode of the whole SGLang import chain moved aside; then
#    `dsakit warm --import CACHE SEL` and the whole SEL in one process; afterwards the files the
#    fresh run still had to compile (new files in the roots and the fresh TMPDIR); everything put back;
# 4. -n 1 vs -n N on the warm node (N = DSAKIT_BENCH_WORKERS, default 4; one GPU: N workers on it);
# 5. (when >= 90 s are left) where the first DSv4 forward case's time goes: the attention file alone,
#    plain and with SGLang's backend modules + CUDA initialised before pytest starts.
# Prints one markdown table of walls and ratios and writes it to $OUT/fresh_vs_warm.md (logs beside).
# Safe: everything in one mktemp dir, removed at exit (also on Ctrl-C / TERM) after the moved caches
# and bytecode are put back. Without a GPU (the CPU dry run) the whole script runs under a scratch
# HOME, so it never moves a shared box's caches, and never touches the shared venv's bytecode.
#
# Knobs: DSAKIT_BENCH_TESTS (contracts), DSAKIT_BENCH_WORKERS (4), DSAKIT_BENCH_TOTAL_S (390; 900 without
# a GPU), DSAKIT_BENCH_STEP_SCALE (step caps x 1 on the node, x 3 without a GPU),
# DSAKIT_BENCH_DROP_BYTECODE and DSAKIT_BENCH_DIAG (step 5): 1 where nvidia-smi sees a GPU, else 0.
# CPU dry run (GPU cases skip; checks the script end to end):
#   DSAKIT_BENCH_TESTS="contracts/test_topk_selection.py contracts/test_dsa_backend_metadata.py" \
#     DSAKIT_BENCH_WORKERS=2 bash bench/gpu_fresh_vs_warm.sh
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/dsakit-fresh-vs-warm}
mkdir -p "$OUT"
START=$(date +%s)
TOTAL=${DSAKIT_BENCH_TOTAL_S:-390}
SEL=${DSAKIT_BENCH_TESTS:-contracts}
N=${DSAKIT_BENCH_WORKERS:-4}
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
GPUS=${GPUS:-0}
DROP=${DSAKIT_BENCH_DROP_BYTECODE:-$([ "$GPUS" -gt 0 ] && echo 1 || echo 0)}
# a step's cap x SCALE: 1 on the node; 3 on a CPU box shared with other jobs (the dry run checks the
# script, not the times), whose whole run then gets 900 s
SCALE=${DSAKIT_BENCH_STEP_SCALE:-$([ "$GPUS" -gt 0 ] && echo 1 || echo 3)}
[ "$GPUS" -eq 0 ] && [ -z "${DSAKIT_BENCH_TOTAL_S:-}" ] && TOTAL=900
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-fresh.XXXXXX")
ASIDE=$WORK/pyc-aside.tar
TABLE=$OUT/fresh_vs_warm.md
if [ "$GPUS" -eq 0 ]; then  # a shared CPU box: its real caches are other people's
  export HOME=$WORK/warm-home
  unset SGLANG_CACHE_DIR SGLANG_JIT_CACHE_DIR SGLANG_DG_CACHE_DIR DG_JIT_CACHE_DIR TVM_FFI_CACHE_DIR \
    FLASHINFER_WORKSPACE_BASE TRITON_CACHE_DIR TRITON_HOME TORCHINDUCTOR_CACHE_DIR TILELANG_CACHE_DIR \
    CUDA_CACHE_PATH DSAKIT_CACHE_DIR XDG_CACHE_HOME
  mkdir -p "$HOME"
fi

restore_bytecode() {
  [ -f "$ASIDE" ] || return 0
  tar xPf "$ASIDE" && rm -f "$ASIDE" && echo "bytecode put back"
}
put_caches_back() {
  [ -f "$WORK/aside/moved" ] || return 0
  tac "$WORK/aside/moved" | while IFS='=' read -r name path; do
    rm -rf "$path"; mkdir -p "$(dirname "$path")"; mv "$WORK/aside/$name" "$path"
  done
  rm -f "$WORK/aside/moved"; echo "cache roots put back"
}
cleanup() { restore_bytecode; put_caches_back; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# the node has no install (PYTHONPATH only): load the plugin by name, once
PLUGIN=($(python -c "from dsakit.node.pytest_invocation import plugin_args; print(' '.join(plugin_args()))"))
PYTEST=(python -m pytest "${PLUGIN[@]}" -p no:cacheprovider -q -rfE --durations=8)
PER_GPU=$(( GPUS > 0 ? (N + GPUS - 1) / GPUS : 1 ))
left() { echo $(( START + TOTAL - $(date +%s) )); }
limit() { local l cap=$(( $1 * SCALE )); l=$(left); [ "$l" -gt "$cap" ] && l=$cap; [ "$l" -lt 10 ] && l=10; echo "$l"; }
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.1f\", $2 - $1}"; }
summary() { grep -E '[0-9]+ (passed|failed|skipped|error|deselected)' "$1" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//; s/ in [0-9.]*s.*//'; }
declare -A WALL

# run NAME LIMIT CMD...: time one step into $OUT/NAME.txt (a step past its limit is cut: exit 124)
run() {
  local name=$1 lim=$2 t0 rc; shift 2
  t0=$(now)
  timeout -s INT -k 15 "$(limit "$lim")" "$@" >"$OUT/$name.txt" 2>&1
  rc=$?
  WALL[$name]=$(secs "$t0" "$(now)")
  printf '| %s | %s s | %s | %s |\n' "$name" "${WALL[$name]}" "exit $rc" "$(summary "$OUT/$name.txt")" >>"$TABLE.rows"
  echo "== $name: ${WALL[$name]} s, exit $rc, $(summary "$OUT/$name.txt")"
}

ROOTS=$(python -c "
from dsakit.warm.tarball import cache_roots
for name, path in cache_roots().items(): print(f'{name}={path}')")
move_caches_aside() {
  mkdir -p "$WORK/aside"
  while IFS='=' read -r name path; do
    [ -e "$path" ] && mv "$path" "$WORK/aside/$name" && echo "$name=$path" >>"$WORK/aside/moved"
  done <<<"$ROOTS"
  return 0
}
# the chain's bytecode (every module the warm-up's stamp lists, torch's as much as SGLang's)
move_bytecode_aside() {
  python -c "
from dsakit.warm.tarball import chain_bytecode
for pyc in chain_bytecode(): print(pyc)" >"$WORK/pycs"
  tar cPf "$ASIDE" -T "$WORK/pycs" && xargs -d '\n' rm -f <"$WORK/pycs" \
    && echo "bytecode moved aside: $(wc -l <"$WORK/pycs") files"
}

: >"$TABLE.rows"
echo "== node: $GPUS GPU(s), $(nproc) cores; selection $SEL; scratch $WORK; HOME $HOME"

# 1. warm-up and export (on this node's own caches)
run warm-up 150 python -m dsakit warm $SEL
grep -E "built|cached|FAILED" "$OUT/warm-up.txt" | head -6
run export 40 python -m dsakit warm --export "$WORK/warm.tgz"
tail -2 "$OUT/export.txt"

# 2. the warm node
run warm-suite 90 "${PYTEST[@]}" $SEL

# 3. the fresh node
mkdir -p "$WORK/tmp"
if [ "$DROP" = 1 ]; then move_bytecode_aside
else echo "bytecode not moved aside (DSAKIT_BENCH_DROP_BYTECODE=$DROP: a CPU dry run never deletes a shared venv's bytecode)"; fi
move_caches_aside && echo "cache roots moved aside: $(cut -d= -f1 "$WORK/aside/moved" 2>/dev/null | tr '\n' ' ')"
FRESH=(env TMPDIR="$WORK/tmp")
run fresh-import-and-warm 60 "${FRESH[@]}" python -m dsakit warm --import "$WORK/warm.tgz" $SEL
grep -E "imported|built|cached|FAILED|refusing" "$OUT/fresh-import-and-warm.txt" | head -8
touch "$WORK/after-import"; sleep 1
run fresh-suite 100 "${FRESH[@]}" "${PYTEST[@]}" $SEL
# new files in the roots, the fresh TMPDIR and anywhere in HOME (a cache no root names: torch's
# extensions, ...), less this checkout and $OUT
WHERE=("$WORK/tmp" $(cut -d= -f2 <<<"$ROOTS") "$HOME")
NEW=$(find "${WHERE[@]}" \( -path "$PWD" -o -path "$OUT" -o -path "$WORK/aside" \) -prune -o \
  -type f -newer "$WORK/after-import" ! -name '*.lock' -print 2>/dev/null | sort -u)
COMPILED=$(printf '%s' "$NEW" | grep -c . || true)
echo "files the fresh suite still compiled (not in the export): $COMPILED"
[ "$COMPILED" -gt 0 ] && printf '%s\n' "$NEW" | sed "s|$WORK/||; s|$HOME/||" | awk -F/ '{print $1"/"$2"/"$3"/"$4}' | sort | uniq -c | sort -rn | head -8
restore_bytecode
put_caches_back

# 4. workers on the warm node, the same selection
run n1 90 "${PYTEST[@]}" -n 1 $SEL
run "n$N" 60 "${PYTEST[@]}" -n "$N" --dsakit-workers-per-gpu "$PER_GPU" $SEL

# 5. the first DSv4 forward case: import + CUDA init vs compile (only with time to spare)
if [ "${DSAKIT_BENCH_DIAG:-$([ "$GPUS" -gt 0 ] && echo 1 || echo 0)}" = 1 ] && [ "$(left)" -ge 90 ]; then
  CASE=contracts/test_deepseek_v4_attention.py
  run dsv4-plain 40 "${PYTEST[@]}" --durations=0 "$CASE"
  run dsv4-preimported 40 python - "${PLUGIN[@]}" -p no:cacheprovider -q --durations=0 "$CASE" <<'EOF'
import importlib, sys, time
tic = time.perf_counter()
from dsakit.warm.bytecode import SGLANG_IMPORTS
for name in SGLANG_IMPORTS:
    try:
        importlib.import_module(name)
    except Exception as error:  # a module one release lacks
        print(f"preimport {name}: {type(error).__name__}: {error}")
import torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
print(f"preimport of {len(SGLANG_IMPORTS)} SGLang modules + CUDA init: {time.perf_counter() - tic:.1f} s")
import pytest
sys.exit(pytest.main(sys.argv[1:]))
EOF
  grep -h "preimport" "$OUT/dsv4-preimported.txt" | tail -1
  for f in dsv4-plain dsv4-preimported; do
    echo "$f: $(grep -E '^[0-9.]+s call .*test_forward_matches' "$OUT/$f.txt" | awk '{id=$NF; sub(/.*\[/, "", id); sub(/\]/, "", id); printf "%s %s; ", id, $1}')"
  done
fi

# the table
ratio() { awk "BEGIN{ if ($2 > 0) printf \"%.2fx\", $1 / $2; else print \"-\" }"; }
W=${WALL[warm-suite]}
FRESH_S=$(awk "BEGIN{printf \"%.1f\", ${WALL[fresh-import-and-warm]} + ${WALL[fresh-suite]}}")
{
  echo "# fresh node vs warm node ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "- node: $([ "$GPUS" -gt 0 ] && echo "$GPUS x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" || echo "no GPU (dry run)"), $(nproc) cores; selection: $SEL"
  echo "- $(python -c "import sys, importlib.metadata as m; print('Python', sys.version.split()[0], *[f'{d} {m.version(d)}' for d in ('torch', 'sglang', 'pytest')])" 2>/dev/null)"
  echo "- fresh node: same HOME, cache roots moved aside, new TMPDIR; bytecode moved aside: $([ "$DROP" = 1 ] && echo "yes ($(wc -l <"$WORK/pycs" 2>/dev/null || echo 0) files)" || echo no); files the fresh suite still compiled: ${COMPILED:-?}"
  echo "- $(tail -1 "$OUT/export.txt" 2>/dev/null)"
  echo
  echo "| step | wall | exit | outcome |"
  echo "|---|---|---|---|"
  cat "$TABLE.rows"
  echo
  echo "| ratio | value | goal |"
  echo "|---|---|---|"
  echo "| fresh (import + warm + suite, $FRESH_S s) / warm suite ($W s) | $(ratio "$FRESH_S" "$W") | <= 1.25x |"
  echo "| fresh suite alone / warm suite | $(ratio "${WALL[fresh-suite]}" "$W") | |"
  echo "| -n 1 (${WALL[n1]} s) / -n $N (${WALL[n$N]} s): speedup | $(ratio "${WALL[n1]}" "${WALL[n$N]}") | >= 1.6x |"
  echo "| warm suite in one process | $W s | < 20 s |"
  echo "| this call | $(( $(date +%s) - START )) s | <= $TOTAL s |"
} >"$TABLE"
rm -f "$TABLE.rows"
echo; cat "$TABLE"
exit 0
