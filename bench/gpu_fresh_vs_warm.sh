#!/usr/bin/env bash
# Issue 24, item 4: a fresh node warmed from an exported cache vs a warm node, and -n 1 vs -n 4,
# side by side in ONE call (~200-300 s on one H200 with the 0.5.21 stack; bounded by
# DSAKIT_BENCH_TOTAL_S, default 420):
#
#   source .device/setup.sh; bash bench/gpu_fresh_vs_warm.sh
#
# 1. warm-up: `dsakit warm SEL` on this node, then `dsakit warm --export` into a scratch dir;
# 2. warm: the whole SEL in one process (the node's own caches);
# 3. fresh: a simulated fresh node: a new HOME (so ~/.cache/sglang, ~/.triton, ~/.nv, ... are empty),
#    a new TMPDIR (inductor's /tmp/torchinductor_$USER), every JIT cache variable unset, dsakit's
#    stamps gone, and the SGLang stack's bytecode moved aside (on the node only: DSAKIT_BENCH_DROP_BYTECODE);
#    then `dsakit warm --import CACHE SEL` and the whole SEL in one process; afterwards the files that
#    the fresh run still had to compile (new files under the fresh HOME / TMPDIR);
# 4. -n 1 vs -n N (N = DSAKIT_BENCH_WORKERS, default 4; one GPU: N workers on it);
# 5. where the first DSv4 forward case's time goes: the attention file alone, plain and with SGLang's
#    backend modules + CUDA initialised before pytest starts (import vs compile).
# Prints one markdown table of walls and ratios and writes it to $OUT/fresh_vs_warm.md (logs beside).
# Safe: everything in one mktemp dir, removed at exit (also on Ctrl-C / TERM); the real HOME's
# caches are only read (the warm-up may add to them, as any `dsakit warm` does); moved-aside
# bytecode is put back at exit.
#
# Knobs: DSAKIT_BENCH_TESTS (contracts), DSAKIT_BENCH_WORKERS (4), DSAKIT_BENCH_TOTAL_S (420),
# DSAKIT_BENCH_DROP_BYTECODE (1 where nvidia-smi sees a GPU, else 0: never on a shared CPU venv),
# DSAKIT_BENCH_DIAG (1), DSAKIT_BENCH_FRESH (home | move, see below). CPU dry run (GPU cases skip; checks the script end to end):
#   DSAKIT_BENCH_TESTS=contracts/test_topk_selection.py DSAKIT_BENCH_WORKERS=2 bash bench/gpu_fresh_vs_warm.sh
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/dsakit-fresh-vs-warm}
mkdir -p "$OUT"
START=$(date +%s)
TOTAL=${DSAKIT_BENCH_TOTAL_S:-420}
SEL=${DSAKIT_BENCH_TESTS:-contracts}
N=${DSAKIT_BENCH_WORKERS:-4}
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
GPUS=${GPUS:-0}
DROP=${DSAKIT_BENCH_DROP_BYTECODE:-$([ "$GPUS" -gt 0 ] && echo 1 || echo 0)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-fresh.XXXXXX")
ASIDE=$WORK/pyc-aside.tar
TABLE=$OUT/fresh_vs_warm.md
SITE=$(python -c "from dsakit.node.warm_cache import install_root; print(install_root() or '')")
CACHE_VARS="SGLANG_CACHE_DIR SGLANG_JIT_CACHE_DIR SGLANG_DG_CACHE_DIR DG_JIT_CACHE_DIR TVM_FFI_CACHE_DIR
 FLASHINFER_WORKSPACE_BASE TRITON_CACHE_DIR TRITON_HOME TORCHINDUCTOR_CACHE_DIR TILELANG_CACHE_DIR
 CUDA_CACHE_PATH DSAKIT_CACHE_DIR XDG_CACHE_HOME"

restore_bytecode() {
  if [ -f "$ASIDE" ] && [ -n "$SITE" ]; then
    find "$SITE" -path '*/__pycache__/*.pyc' -newer "$ASIDE" -delete 2>/dev/null
    tar xf "$ASIDE" -C "$SITE" && rm -f "$ASIDE" && echo "bytecode of $SITE put back"
  fi
}
cleanup() { restore_bytecode; put_caches_back; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# the node has no install (PYTHONPATH only): load the plugin by name, once
PLUGIN=($(python -c "from dsakit.pytest_invocation import plugin_args; print(' '.join(plugin_args()))"))
PYTEST=(python -m pytest "${PLUGIN[@]}" -p no:cacheprovider -q -rfE --durations=8)
PER_GPU=$(( GPUS > 0 ? (N + GPUS - 1) / GPUS : 1 ))
left() { echo $(( START + TOTAL - $(date +%s) )); }
limit() { local l; l=$(left); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 10 ] && l=10; echo "$l"; }
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.1f\", $2 - $1}"; }
summary() { grep -E '[0-9]+ (passed|failed|skipped|error|deselected)' "$1" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//; s/ in [0-9.]*s.*//'; }
declare -A WALL

# run NAME LIMIT CMD...: time one step into $OUT/NAME.txt
run() {
  local name=$1 lim=$2 t0 rc; shift 2
  t0=$(now)
  timeout -s INT -k 20 "$(limit "$lim")" "$@" >"$OUT/$name.txt" 2>&1
  rc=$?
  WALL[$name]=$(secs "$t0" "$(now)")
  printf '| %s | %s s | %s | %s |\n' "$name" "${WALL[$name]}" "exit $rc" "$(summary "$OUT/$name.txt")" >>"$TABLE.rows"
  echo "== $name: ${WALL[$name]} s, exit $rc, $(summary "$OUT/$name.txt")"
}

# "${FRESH[@]}" CMD...: CMD on the simulated fresh node (an env prefix, so `timeout` can run it).
# home (default): a new HOME and TMPDIR, the real caches untouched. move: the same HOME, its cache
# roots moved into $WORK and put back at exit (closer to a real fresh node where a build records
# absolute paths, e.g. a ninja file under the old HOME; a killed run leaves them in $WORK).
MODE=${DSAKIT_BENCH_FRESH:-home}
FRESH=(env)
if [ "$MODE" = move ]; then
  FRESH+=(DSAKIT_BENCH_MODE=move)
else
  for v in $CACHE_VARS; do FRESH+=(-u "$v"); done
  FRESH+=(HOME="$WORK/home" TMPDIR="$WORK/tmp")
fi
ROOTS=$(python -c "
from dsakit.node.warm_cache import cache_roots
for name, path in cache_roots().items(): print(f'{name}={path}')")
move_caches_aside() {
  mkdir -p "$WORK/aside"
  while IFS='=' read -r name path; do
    [ -e "$path" ] && mv "$path" "$WORK/aside/$name" && echo "$name=$path" >>"$WORK/aside/moved"
  done <<<"$ROOTS"
}
put_caches_back() {
  [ -f "$WORK/aside/moved" ] || return 0
  tac "$WORK/aside/moved" | while IFS='=' read -r name path; do
    rm -rf "$path"; mkdir -p "$(dirname "$path")"; mv "$WORK/aside/$name" "$path"
  done
  rm -f "$WORK/aside/moved"; echo "cache roots put back"
}

: >"$TABLE.rows"
echo "== node: $GPUS GPU(s), $(nproc) cores; selection $SEL; scratch $WORK; install $SITE"

# 1. warm-up and export (on this node's own caches)
run warm-up 200 python -m dsakit warm $SEL
run export 60 python -m dsakit warm --export "$WORK/warm.tgz"
tail -1 "$OUT/export.txt"

# 2. the warm node
run warm-suite 150 "${PYTEST[@]}" $SEL

# 3. the fresh node
mkdir -p "$WORK/home" "$WORK/tmp"
if [ "$DROP" = 1 ] && [ -n "$SITE" ]; then
  (cd "$SITE" && find . -path '*/__pycache__/*.pyc' -print0 | tar cf "$ASIDE" --null -T - 2>/dev/null) \
    && (cd "$SITE" && find . -path '*/__pycache__/*.pyc' -delete) \
    && echo "bytecode of $SITE moved aside: $(tar tf "$ASIDE" | wc -l) files"
else
  echo "bytecode not moved aside (DSAKIT_BENCH_DROP_BYTECODE=$DROP: a CPU dry run never deletes a shared venv's bytecode)"
fi
[ "$MODE" = move ] && move_caches_aside && echo "cache roots moved aside: $(cut -d= -f1 "$WORK/aside/moved" 2>/dev/null | tr '\n' ' ')"
touch "$WORK/before-fresh"; sleep 1
run fresh-import-and-warm 120 "${FRESH[@]}" python -m dsakit warm --import "$WORK/warm.tgz" $SEL
grep -E "imported|built|cached|FAILED" "$OUT/fresh-import-and-warm.txt" | head -8
touch "$WORK/after-import"; sleep 1
run fresh-suite 150 "${FRESH[@]}" "${PYTEST[@]}" $SEL
WHERE=("$WORK/home" "$WORK/tmp")
[ "$MODE" = move ] && WHERE=($(cut -d= -f2 <<<"$ROOTS"))
NEW=$(find "${WHERE[@]}" -type f -newer "$WORK/after-import" ! -name '*.lock' 2>/dev/null | sort -u)
COMPILED=$(printf '%s' "$NEW" | grep -c . || true)
echo "files the fresh suite still compiled (not in the export): $COMPILED"
[ "$COMPILED" -gt 0 ] && printf '%s\n' "$NEW" | sed "s|$WORK/||; s|$HOME/||" | awk -F/ '{print $1"/"$2"/"$3"/"$4}' | sort | uniq -c | sort -rn | head -8
restore_bytecode
put_caches_back

# 4. workers on the warm node
run n1 150 "${PYTEST[@]}" -n 1 $SEL
run "n$N" 150 "${PYTEST[@]}" -n "$N" --dsakit-workers-per-gpu "$PER_GPU" $SEL

# 5. the first DSv4 forward case: import + CUDA init vs compile
if [ "${DSAKIT_BENCH_DIAG:-1}" = 1 ] && [ "$(left)" -gt 40 ]; then
  CASE=contracts/test_deepseek_v4_attention.py
  run dsv4-plain 60 "${PYTEST[@]}" --durations=0 "$CASE"
  run dsv4-preimported 60 python - "${PLUGIN[@]}" -p no:cacheprovider -q --durations=0 "$CASE" <<'EOF'
import importlib, sys, time
tic = time.perf_counter()
from dsakit.node.bytecode import SGLANG_IMPORTS
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
FRESH=$(awk "BEGIN{printf \"%.1f\", ${WALL[fresh-import-and-warm]} + ${WALL[fresh-suite]}}")
{
  echo "# fresh node vs warm node ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "- node: $([ "$GPUS" -gt 0 ] && echo "$GPUS x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" || echo "no GPU (dry run)"), $(nproc) cores; selection: $SEL"
  echo "- $(python -c "import sys, importlib.metadata as m; print('Python', sys.version.split()[0], *[f'{d} {m.version(d)}' for d in ('torch', 'sglang', 'pytest')])" 2>/dev/null)"
  echo "- fresh node: $MODE mode; bytecode moved aside: $([ "$DROP" = 1 ] && echo yes || echo no); files the fresh suite still compiled: ${COMPILED:-?}"
  echo
  echo "| step | wall | exit | outcome |"
  echo "|---|---|---|---|"
  cat "$TABLE.rows"
  echo
  echo "| ratio | value | goal |"
  echo "|---|---|---|"
  echo "| fresh (import + warm + suite, $FRESH s) / warm suite ($W s) | $(ratio "$FRESH" "$W") | <= 1.25x |"
  echo "| fresh suite alone / warm suite | $(ratio "${WALL[fresh-suite]}" "$W") | |"
  echo "| -n 1 / -n $N (speedup) | $(ratio "${WALL[n1]}" "${WALL[n$N]}") | >= 1.6x |"
  echo "| warm suite in one process | $W s | < 20 s |"
} >"$TABLE"
rm -f "$TABLE.rows"
echo; cat "$TABLE"
echo "total $(( $(date +%s) - START )) s"
exit 0
