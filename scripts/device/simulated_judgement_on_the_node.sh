#!/usr/bin/env bash
# Issue 42 on the H200 in one call: what sm103 / sm100 judge in SGLang's own suites, and what it costs.
#   source .device/setup.sh; bash scripts/device/simulated_judgement_on_the_node.sh UPSTREAM_DIR
# UPSTREAM_DIR holds SGLang's test/registered/... (as upstream_suites_on_the_node.sh). At once:
#   - `dsakit warm contracts --device sm103`, timed (the simulated plan's JIT modules);
#   - the plants of arch_rules_plants.sh named by PLANTS (default: none value_k), plain and simulated;
#   - the device-branch coverage of test_dsa.py + test_deepseek_v4.py under sm103 and sm100 (-v, -n 4,
#     --dsakit-report), merged by `dsakit report merge`;
#   - dsakit's own GPU-side tests of the branch coverage (TESTS).
# Then, on the quiet machine, the bench row: contracts -n 4 plain against --dsakit-device sm103, after the
# warm (bench/bench_option_overhead.py --pairs 1 --no-warm), within the call's DEADLINE (570 s).
# Everything lands in $OUT/judgement.tar.gz (one file), with the summary on stdout.
set -u
UPSTREAM=${1:?usage: simulated_judgement_on_the_node.sh UPSTREAM_DIR}
START=$(date +%s)
DEADLINE=${DEADLINE:-570}
OUT=${OUT:-/tmp/dsakit-node}; LOGS=$OUT/judgement; mkdir -p "$LOGS"
ROOT=$PWD
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-judgement-XXXXXX")
trap 'rm -rf "$WORK"; tar czf "$OUT/judgement.tar.gz" -C "$OUT" judgement && rm -rf "$LOGS"' EXIT
elapsed() { echo $(( $(date +%s) - START )); }
R=test/registered
FILES="$R/attention/unittests/dsa/test_dsa.py $R/attention/unittests/dsv4/test_deepseek_v4.py"
TESTS=${TESTS:-tests/simulation/test_device_branches.py tests/compare/test_report_merge_branches.py tests/compare/test_pr_check_branches.py}

( s=$(date +%s); python -m dsakit warm contracts --device sm103 > "$LOGS/warm.txt" 2>&1
  echo "rc=$? wall=$(( $(date +%s) - s ))s" >> "$LOGS/warm.txt" ) &
( OUT=$LOGS JOBS=4 LIMIT=${LIMIT:-330} bash scripts/device/arch_rules_plants.sh "$UPSTREAM" ${PLANTS:-none value_k} \
    > "$LOGS/plants.txt" 2>&1 ) &
mkdir -p "$WORK/upstream"; cp -r "$UPSTREAM/test" "$WORK/upstream/"  # outside the project's ini
for device in sm103 sm100; do
  ( cd "$WORK/upstream" && s=$(date +%s) && timeout -k 10 "${LIMIT:-330}" python -m pytest -p dsakit.plugin \
      -p no:cacheprovider -v -rfs -n 4 --dsakit-device "$device" --dsakit-report "$LOGS/coverage-$device.json" \
      $FILES > "$LOGS/coverage-$device.txt" 2>&1; echo "rc=$? wall=$(( $(date +%s) - s ))s" >> "$LOGS/coverage-$device.txt" ) &
done
( python -m pytest -p dsakit.plugin -p no:cacheprovider -q -rfE $TESTS > "$LOGS/tests.txt" 2>&1; echo "rc=$?" >> "$LOGS/tests.txt" ) &
wait
echo "== phase 1 done at $(elapsed) s"
echo "== warm contracts --device sm103:"; tail -6 "$LOGS/warm.txt"
echo "== dsakit's GPU-side branch tests:"; grep -E "passed|failed|^FAILED|^ERROR|rc=" "$LOGS/tests.txt" | tail -6
for device in sm103 sm100; do
  echo "== coverage $device: $(grep -E '[0-9]+ (passed|failed)' "$LOGS/coverage-$device.txt" | tail -1) $(tail -1 "$LOGS/coverage-$device.txt")"
  grep -E "device branch" "$LOGS/coverage-$device.txt" | head -3
done
python -m dsakit report merge "$LOGS/coverage-sm103.json" "$LOGS/coverage-sm100.json" \
  --markdown "$LOGS/coverage.md" > "$LOGS/merge.txt" 2>&1; echo "merge rc=$?"
grep -iE -A3 "device branch" "$LOGS/merge.txt" | head -12
echo "== plants:"; grep -vE "^\s*$" "$LOGS/plants.txt" | tail -16
left=$(( DEADLINE - $(elapsed) ))
echo "== bench (contracts -n 4, plain vs --dsakit-device sm103), $left s left:"
if [ "$left" -gt 60 ]; then
  timeout -k 5 "$left" python bench/bench_option_overhead.py --option "--dsakit-device sm103" --pairs 1 --no-warm \
    -- contracts -n 4 > "$LOGS/bench.txt" 2>&1; echo "rc=$?" >> "$LOGS/bench.txt"
  cat "$LOGS/bench.txt"
fi
echo "== done at $(elapsed) s"
