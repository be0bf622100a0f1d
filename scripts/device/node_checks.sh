#!/usr/bin/env bash
# Every GPU-bound check of the open issues, in one node call (kept for reproducibility):
#   source .device/setup.sh; OUT=$OUT bash scripts/device/node_checks.sh
# warm; the whole contracts suite in one process (with its report); the CUDA fault-isolation
# self-test; the DeepSeek-V4 forward probe; the downstream example project from the checkout.
set -u
OUT=${OUT:-/tmp/dsakit-node}; mkdir -p "$OUT"
P="python -m pytest -p dsakit.plugin -p no:cacheprovider"
t() { local s=$(date +%s.%N); "$@"; echo "rc=$? wall=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$s}")s"; }
t python -m dsakit warm contracts > "$OUT/warm.txt" 2>&1; grep -E "built|skip|rc=" "$OUT/warm.txt" | tail -8
t $P contracts -q -rfEs --dsakit-host-label h200 --dsakit-report "$OUT/contracts.json" > "$OUT/contracts.txt" 2>&1
echo "== contracts:"; grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|rc=" "$OUT/contracts.txt" | cut -c1-300 | tail -40
t $P tests/node/test_fault_isolation_gpu.py -q -rA -p no:randomly > "$OUT/faults.txt" 2>&1
echo "== fault isolation:"; grep -E "PASSED|FAILED|ERROR|[0-9]+ (passed|failed)|rc=" "$OUT/faults.txt" | tail -6
t python scripts/device/dsv4_forward_probe.py > "$OUT/dsv4_probe.txt" 2>&1; echo "== dsv4 probe:"; tail -25 "$OUT/dsv4_probe.txt" | cut -c1-250
R=$PWD; rm -rf /tmp/dsp; cp -r tests/downstream_project /tmp/dsp
( cd /tmp/dsp && PYTHONPATH=$R:/tmp/dsp:$PYTHONPATH $P --snapshot-update -q > "$OUT/downstream.txt" 2>&1; PYTHONPATH=$R:/tmp/dsp:$PYTHONPATH $P -n 2 -q >> "$OUT/downstream.txt" 2>&1; echo "rc=$?" >> "$OUT/downstream.txt" )
echo "== downstream:"; grep -E "[0-9]+ (passed|failed)|rc=" "$OUT/downstream.txt"
