#!/usr/bin/env bash
# SGLang's own DSA / DeepSeek-V4 suites on a GPU node, plain and as simulated devices, side by side
# (kept for reproducibility):
#   source .device/setup.sh; bash scripts/device/upstream_suites_on_the_node.sh UPSTREAM_DIR [DEVICES] [GROUPS]
# UPSTREAM_DIR: a folder holding SGLang's test/registered/... files for the stack's release (they are
# SGLang's, fetched from its repository and carried beside the project; never committed here).
# DEVICES: "plain" (no dsakit), "real" (dsakit loaded, nothing simulated) or device names; default
# "plain sm103". GROUPS: attn (test_dsa.py + test_deepseek_v4.py), kops (the four kernel-op suites),
# indexer (test_dsa_indexer.py); default all three. Every (group, device) runs in its own process, all
# at once; logs and --dsakit-report files in $OUT; per run its outcome line, and for dsakit's runs the
# skip inventory's count line and its "why these skipped" paragraph (issue 36); then, per group run on
# several dsakit devices, `dsakit report merge` of their reports (the fleet table, its runs-on column).
set -u
SRC=$(cd "${1:?usage: upstream_suites_on_the_node.sh UPSTREAM_DIR [DEVICES] [GROUPS]}" && pwd)
# run from a copy outside the project: SGLang's suites under SGLang's own (absent) ini, not dsakit's
UP=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-upstream-XXXXXX")
trap 'rm -rf "$UP"' EXIT
cp -r "$SRC/test" "$UP/"
DEVICES=${2:-plain sm103}
GROUPS_=${3:-attn kops indexer}
OUT=${OUT:-/tmp/dsakit-node}; mkdir -p "$OUT"
LIMIT=${LIMIT:-420}          # each run's wall-clock limit, seconds
SIM_TIMEOUT=${SIM_TIMEOUT:-150}  # --dsakit-simulation-timeout
R=test/registered
files() {
  case $1 in
    attn) echo "$R/attention/unittests/dsa/test_dsa.py $R/attention/unittests/dsv4/test_deepseek_v4.py" ;;
    kops) echo "$R/kernels/ops/attention/test_dsa_metadata.py $R/kernels/ops/attention/test_dsa_transform_index.py $R/kernels/ops/attention/test_dsv4_indexer_quant.py $R/unit/layers/test_dsv4_nonpaged_indexer.py" ;;
    indexer) echo "$R/kernels/ops/attention/test_dsa_indexer.py" ;;
  esac
}
run() {  # group device
  local group=$1 device=$2 args=() start
  case $device in
    plain) args=(-p no:dsakit) ;;  # where dsakit is installed too (a checkout's venv): no dsakit at all
    real) args=(-p dsakit.plugin --dsakit-report "$OUT/$group-$device.json") ;;
    *) args=(-p dsakit.plugin --dsakit-device "$device" --dsakit-simulation-timeout "$SIM_TIMEOUT"
             --dsakit-report "$OUT/$group-$device.json") ;;
  esac
  start=$(date +%s)
  (cd "$UP" && timeout -k 10 "$LIMIT" python -m pytest -p no:cacheprovider -q -rs ${EXTRA:-} "${args[@]}" $(files "$group")) \
    > "$OUT/$group-$device.txt" 2>&1
  echo "rc=$? wall=$(( $(date +%s) - start ))s" >> "$OUT/$group-$device.txt"
}
for device in $DEVICES; do for group in $GROUPS_; do run "$group" "$device" & done; done
wait
for device in $DEVICES; do for group in $GROUPS_; do
  echo "== $group as $device: $(grep -E '^=*.*[0-9]+ (passed|failed|skipped|error)' "$OUT/$group-$device.txt" | tail -1) $(tail -1 "$OUT/$group-$device.txt")"
  grep -E "^[0-9]+ skips?, each in one group|^why these skipped on" "$OUT/$group-$device.txt" | cut -c1-1500
done; done
for group in $GROUPS_; do
  reports=$(for device in $DEVICES; do [ -f "$OUT/$group-$device.json" ] && echo "$OUT/$group-$device.json"; done)
  [ "$(echo "$reports" | grep -c json)" -gt 1 ] || continue
  python -m dsakit report merge $reports --markdown "$OUT/$group-merge.md" > "$OUT/$group-merge.txt" 2>&1
  echo "== dsakit report merge of $group (rc=$?): $OUT/$group-merge.txt"
done
