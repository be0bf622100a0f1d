#!/usr/bin/env bash
# Every skip of SGLang's own DSA / DeepSeek-V4 attention suites explained, on a GPU node (issue 36):
#   source .device/setup.sh; bash scripts/device/skips_on_the_node.sh UPSTREAM_ROOT
#   CPU checkout: PATH=.venv/bin:$PATH PYTHONPATH=/tmp/sglang-0.5.21/tree bash scripts/device/skips_on_the_node.sh UPSTREAM_ROOT
# UPSTREAM_ROOT: a folder holding SGLang's test/registered/attention/unittests/ (its conftest.py,
# dsa/test_dsa.py, dsv4/test_deepseek_v4.py), carried beside the project, never committed.
# Runs both files once per device ($DEVICES, default sm90 sm103 gfx942; on the H200 give
# DEVICES="real sm103 gfx942": `real` is the H200 itself, so the merge says "sm90 (real here: ...)"),
# each with -q (pytest then counts skipped subtests) and --dsakit-report, prints each run's inventory
# count line, its "why these skipped" paragraph and pytest's final line, then `dsakit report merge`
# of the runs (the fleet table with its runs-on column). Writes $OUT/<device>.{txt,json}, $OUT/merge.*.
set -u
ROOT=${1:?usage: skips_on_the_node.sh UPSTREAM_ROOT}
OUT=${OUT:-/tmp/dsakit-node/skips}; mkdir -p "$OUT"
TESTS="$ROOT/test/registered/attention/unittests"
for file in conftest.py dsa/test_dsa.py dsv4/test_deepseek_v4.py; do
  [ -f "$TESTS/$file" ] || { echo "skips_on_the_node.sh: no $TESTS/$file" >&2; exit 2; }
done
HERE=$(pwd)
reports=()
for device in ${DEVICES:-sm90 sm103 gfx942}; do
  (cd "$ROOT" && python -m pytest -p dsakit.plugin -p no:cacheprovider -q -rs \
     test/registered/attention/unittests/dsa/test_dsa.py test/registered/attention/unittests/dsv4/test_deepseek_v4.py \
     --dsakit-device "$device" --dsakit-host-label "${HOST_LABEL:-node}" --dsakit-report "$OUT/$device.json") \
     > "$OUT/$device.txt" 2>&1
  echo "== $device (rc=$?):"
  grep -E "^[0-9]+ skips?, each in one group|^why these skipped on|^=* ?[0-9]+ (passed|failed|skipped)" "$OUT/$device.txt"
  reports+=("$OUT/$device.json")
done
cd "$HERE" && python -m dsakit report merge "${reports[@]}" --markdown "$OUT/merge.md" --json "$OUT/merge.json" \
  > "$OUT/merge.txt" 2>&1
echo "== dsakit report merge (rc=$?):"; cat "$OUT/merge.txt"
