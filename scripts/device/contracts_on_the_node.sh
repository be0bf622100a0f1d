#!/usr/bin/env bash
# The whole contracts suite on an H200 node, warm, then as two pytest-split shards merged into one
# fleet table (kept for reproducibility):
#   source .device/setup.sh; bash scripts/device/contracts_on_the_node.sh
# pytest-split (pure Python) travels in .device/split. Writes $OUT/{warm,n1,g1,g2}.txt, h200-g*.json, h200.md
set -u
OUT=${OUT:-/tmp/dsakit-node}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/.device/split:$PYTHONPATH
P="python -m pytest -p dsakit.plugin -p no:cacheprovider"
t() { local s=$(date +%s.%N); "$@"; echo "rc=$? wall=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$s}")s"; }
t python -m dsakit warm contracts > "$OUT/warm.txt" 2>&1; tail -8 "$OUT/warm.txt"
t $P contracts -q -rfE --dsakit-host-label h200 --dsakit-report "$OUT/h200-n1.json" > "$OUT/n1.txt" 2>&1
echo "== contracts, one process:"; grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|rc=" "$OUT/n1.txt" | tail -12
for g in 1 2; do
  t $P contracts -q --splits 2 --group $g --dsakit-host-label h200 --dsakit-report "$OUT/h200-g$g.json" > "$OUT/g$g.txt" 2>&1
  echo "== shard $g/2: $(grep -E 'Running group|[0-9]+ (passed|failed)|rc=' "$OUT/g$g.txt" | tr '\n' ' ')"
done
python -m dsakit report merge "$OUT/h200-g1.json" "$OUT/h200-g2.json" --markdown "$OUT/h200.md" | head -30
