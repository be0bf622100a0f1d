#!/usr/bin/env bash
# B300-only bugs planted in a copy of the stack's SGLang, each run plain and as the simulated device whose branch takes the line (sm103, or sm100 for SM 10.0-only lines) (issue 42,
# items 1 and 2: the simulated arch's kernel rules and the TRT-LLM ragged stand-in):
#   source .device/setup.sh; bash scripts/device/arch_rules_plants.sh UPSTREAM_DIR|contracts [PLANTS]
# UPSTREAM_DIR: a folder holding SGLang's test/registered/... files (as upstream_suites_on_the_node.sh);
# its test_dsa.py + test_deepseek_v4.py run (FILES= overrides the list). "contracts": dsakit's contracts/.
# PLANTS: names from plant_table.sh (default: none, then every plant). Each plant edits one SM 10.x-only
# line of SGLang 0.5.21's dsa_backend.py (eight classes: workspace, cumulative lengths,
# multi-CTA counters, numerics through a stand-in, a length tensor's dtype, a length tensor on the host,
# the q-length bound of the grid, a swapped operand; sched_nc, sched_rev, mha_sm and pad64 probe the
# issue's own classes: the SM100 schedule's context lengths, SM 10.3 dispatch, the Blackwell pad width; v41_* edit
# deepseek_v4_backend.py's DSv4.1 SM100 lines: the swap-AB decode's heads, compressed keys and sink, run
# against contracts/test_deepseek_v4_attention.py) in its own copy of that module (loaded in its place at
# import), checks the edit applied, and runs the suite plain (-p no:dsakit) and with
# `-p dsakit.plugin --dsakit-device DEVICE`, JOBS (8) at once. Prints one outcome line per plant and mode, and
# for the simulated run the first dsakit message (ArchRuleBreach / stand-in) of its log. Logs in $OUT.
set -u
SUITE=${1:?usage: arch_rules_plants.sh UPSTREAM_DIR|contracts [PLANTS]}
shift
# pad64 is kept as a check of the build-dependent head rule, not among the plants: the H200 pack's
# sglang-kernel 0.4.5 FlashMLA has Fwd_Sm100_Head64_Impl (its flashmla_ops carries the class), so a B300
# runs 64 heads and padding to 64 there is no bug (SGLang's "128 (Blackwell)" predates that kernel).
PLANTS=${*:-none ws_none cum_q scale counters mla_scale seq_i64 cum_kv_host max_q1 value_k sched_nc sched_rev}
OUT=${OUT:-/tmp/dsakit-node}/plants; mkdir -p "$OUT"
LIMIT=${LIMIT:-420}
SIM_TIMEOUT=${SIM_TIMEOUT:-150}
# the folder holding the stack's sglang package (SGLANG_SITE overrides); DRY=1: apply and check the plants only
SITE=${SGLANG_SITE:-$(python -c "import os, sglang; print(os.path.dirname(os.path.dirname(sglang.__file__)))")} || exit 1
ROOT=$PWD
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-plants-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ "$SUITE" = contracts ]; then
  RUN_DIR=$ROOT; FILES=${FILES:-contracts}
else
  RUN_DIR=$WORK/upstream; mkdir -p "$RUN_DIR"; cp -r "$SUITE/test" "$RUN_DIR/"  # outside the project's ini
  R=test/registered
  FILES=${FILES:-$R/attention/unittests/dsa/test_dsa.py $R/attention/unittests/dsv4/test_deepseek_v4.py}
fi

source "$(dirname "${BASH_SOURCE[0]}")/plant_table.sh"

apply() {  # plant -> a folder shadowing dsa_backend.py with the edit, on stdout (rc 1: the edit did not apply)
  # Only the planted module is copied, to sglang/<its path> under the folder, and loaded in its place by the
  # folder's sitecustomize.py (a copy of the whole package would move SGLang's JIT kernels' cache keys).
  local name=$1 dir B module
  plant_edit "$name" > /dev/null || { echo "unknown plant $name" >&2; return 1; }
  dir=$WORK/site-$name; mkdir -p "$dir"
  [ "$name" = none ] && { echo "$dir"; return 0; }
  B=$(plant_file "$name"); module=${B%.py}; module=${module//\//.}
  mkdir -p "$dir/$(dirname "$B")"; cp -L "$SITE/$B" "$dir/$B"
  cat > "$dir/sitecustomize.py" <<PY
import importlib.abc, importlib.util, sys
class _Planted(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "$module":
            return importlib.util.spec_from_file_location(name, "$dir/$B")
        return None
sys.meta_path.insert(0, _Planted())
PY
  plant_apply "$name" "$dir/$B" "$WORK" || return 1
  echo "$dir"
}

run() {  # plant mode dir
  local name=$1 mode=$2 dir=$3 args=() start log=$OUT/$1-$2.txt
  case $mode in
    plain) if [ "$SUITE" = contracts ]; then args=(-p dsakit.plugin); else args=(-p no:dsakit); fi ;;  # contracts need dsakit's ini
    sim) args=(-p dsakit.plugin --dsakit-device "$(plant_device "$name")" --dsakit-simulation-timeout "$SIM_TIMEOUT"
               --dsakit-report "$OUT/$name-$mode.json") ;;
  esac
  start=$(date +%s)
  (cd "$RUN_DIR" && PYTHONPATH=$dir:$ROOT:${PYTHONPATH:-} timeout -k 10 "$LIMIT" \
     python -m pytest -p no:cacheprovider -q -rfs "${args[@]}" $FILES) > "$log" 2>&1
  echo "rc=$? wall=$(( $(date +%s) - start ))s" >> "$log"
}

applied=()
for name in $PLANTS; do
  if dir=$(apply "$name"); then
    applied+=("$name")
    [ "$name" = none ] || PYTHONPATH=$dir:${PYTHONPATH:-} python -c "import sitecustomize, sys; sys.exit(0 if sitecustomize.__file__.startswith('$dir') else sitecustomize.__file__)" \
      || echo "== $name: another sitecustomize loads first: the plant would not load"
    [ -n "${DRY:-}" ] && { [ "$name" = none ] || { echo "== $name: applied:"; diff "$SITE/$(plant_file "$name")" "$dir/$(plant_file "$name")" | grep '^[<>]'; }; continue; }
    for mode in plain sim; do
      while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-8}" ]; do wait -n; done  # JOBS runs at a time (default 8)
      run "$name" "$mode" "$dir" &
    done
  else
    echo "== $name: NOT APPLIED"
  fi
done
wait
[ -n "${DRY:-}" ] && exit 0
for name in "${applied[@]}"; do
  what=$(plant_edit "$name" | awk -F'|' 'END{print $NF}')
  echo "== $name ($what)"
  for mode in plain sim; do
    log=$OUT/$name-$mode.txt
    echo "   $mode: $(grep -E '^=*.*[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1) $(tail -1 "$log")"
  done
  grep -m1 -E "ArchRuleBreach|breaks simulated sm10.'s rules|Tensor-likes are not close" "$OUT/$name-sim.txt" | cut -c1-400 \
    | sed "s/^/   $(plant_device "$name") says: /"
  grep -m1 -A3 "under simulated sm10" "$OUT/$name-sim.txt" | cut -c1-300 | sed 's/^/   /'
done
