#!/usr/bin/env bash
# Whole-run device simulation on a GPU node (kept for reproducibility):
#   source .device/setup.sh; bash scripts/device/whole_run_on_the_node.sh SUITE_FILE
# SUITE_FILE: an SGLang test file (e.g. SGLang's DSA indexer test) carried beside the project.
# Runs it plain, as each simulated device ($DEVICES), and as a fleet; then dsakit's own whole-run
# tests, contracts on the real device and the contracts fleet. Writes $OUT/*.txt and the fleet reports.
set -u
SUITE=${1:?usage: whole_run_on_the_node.sh SUITE_FILE}
OUT=${OUT:-/tmp/dsakit-node}; mkdir -p "$OUT"
P="python -m pytest -p dsakit.plugin -p no:cacheprovider"
t() { local s=$(date +%s.%N); "$@"; echo "rc=$? wall=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$s}")s"; }
show() { grep -E "^(FAILED|ERROR)|^E  .*Error|dsakit: (this|every)|missing on|^  in |[0-9]+ (passed|failed|skipped)|rc=|^dsakit fleet" "$1" | head -${2:-14}; }
for device in ${DEVICES:-real sm90 sm103 gfx942}; do
  t $P "$SUITE" -rs --dsakit-device $device > "$OUT/suite-$device.txt" 2>&1
  echo "== $SUITE as $device:"; show "$OUT/suite-$device.txt"
done
t $P "$SUITE" --dsakit-device sm90,sm100,sm103,gfx942 --dsakit-report "$OUT/suite/r.json" > "$OUT/suite-fleet.txt" 2>&1
echo "== $SUITE fleet:"; grep -E "^dsakit (fleet|report)|^  .*::.* on |rc=" "$OUT/suite-fleet.txt" | head -20
t $P tests/simulation/test_whole_run.py -q -rs > "$OUT/whole-run-tests.txt" 2>&1
echo "== tests/simulation/test_whole_run.py:"; show "$OUT/whole-run-tests.txt" 20
t $P contracts -q -n 4 -rfE --dsakit-host-label h200 --dsakit-report "$OUT/h200-0521.json" > "$OUT/contracts-real.txt" 2>&1
echo "== contracts on the real device:"; grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|rc=" "$OUT/contracts-real.txt" | tail -12
t $P contracts -q -n 4 --dsakit-device sm90,sm100,sm103,gfx942 --dsakit-report "$OUT/contracts/r.json" > "$OUT/contracts-fleet.txt" 2>&1
echo "== contracts fleet:"; grep -E "^dsakit (fleet|report)|failures \(|^  contracts.* on |rc=" "$OUT/contracts-fleet.txt" | head -30
