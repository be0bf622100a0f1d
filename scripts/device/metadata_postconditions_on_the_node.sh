#!/usr/bin/env bash
# The DSA metadata kernels' postconditions on a GPU node (issue 43), kept for reproducibility:
#   source .device/setup.sh; bash scripts/device/metadata_postconditions_on_the_node.sh [UPSTREAM_DIR]
# 1. dsakit's contracts (the main job), plain and with --dsakit-kernel-contracts (0 false violations);
# 2. the same with SGLang's MTP clamp reverted in a copy of its metadata module (the
#    `tl.maximum(expanded_seq, 0)` line of fused_dsa_draft_extend_metadata removed, nothing else;
#    loaded in its place at import);
# 3. with UPSTREAM_DIR (SGLang's own suites for the stack's release, never committed here): its
#    attention and kernel-op suites plain and with the contracts (REVERT_UPSTREAM=1: reverted too).
# Every run in its own process, in parallel; logs in $OUT, one outcome line per run.
set -u
OUT=${OUT:-/tmp/dsakit-node}; mkdir -p "$OUT"
P="python -m pytest -p dsakit.plugin -p no:cacheprovider -q -rfE"
SITE=$(python -c "import sglang, os; print(os.path.dirname(os.path.dirname(sglang.__file__)))")
REVERT=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-revert-XXXXXX")
UP=$(mktemp -d "${TMPDIR:-/tmp}/dsakit-upstream-XXXXXX")
trap 'rm -rf "$REVERT" "$UP"' EXIT
# the patched files load through a meta-path finder in $REVERT/sitecustomize.py (a copy of the whole
# package would also move SGLang's JIT kernels' cache keys, and recompile them)
found=0
for rel in kernels/ops/attention/dsa_metadata.py kernels/ops/attention/dsa/metadata.py; do
  [ -f "$SITE/sglang/$rel" ] || continue
  out="$REVERT/$(echo "$rel" | tr / _)"
  before=$(grep -c "expanded_seq = tl.maximum(expanded_seq, 0)" "$SITE/sglang/$rel")
  sed '/expanded_seq = tl.maximum(expanded_seq, 0)/d' "$SITE/sglang/$rel" > "$out"
  echo "== revert: sglang/$rel: $before clamp line(s) removed, $(grep -c 'tl.maximum(expanded_seq, 0)' "$out") left"
  mod="sglang.$(echo "${rel%.py}" | tr / .)"
  echo "$mod $out" >> "$REVERT/patched.txt"
  found=$((found + before))
done
[ "$found" -ge 1 ] || { echo "== revert: no clamp line found in $SITE/sglang: nothing to revert" >&2; exit 2; }
cat > "$REVERT/sitecustomize.py" <<'PY'
import importlib.abc, importlib.util, os, sys
_PATCHED = dict(line.split() for line in open(os.path.join(os.path.dirname(__file__), "patched.txt")))
class _Patched(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_file_location(name, _PATCHED[name]) if name in _PATCHED else None
sys.meta_path.insert(0, _Patched())
PY
PYTHONPATH="$REVERT:$PYTHONPATH" python -c "
import sitecustomize, sglang.kernels.ops.attention.dsa_metadata as m, inspect
print('== revert loads:', sitecustomize.__file__, m.__file__, 'clamp' , 'tl.maximum(expanded_seq, 0)' in inspect.getsource(m))"
run() {  # name, pythonpath-prefix, dir, args...
  local name=$1 prefix=$2 dir=$3 start; shift 3
  start=$(date +%s)
  (cd "$dir" && PYTHONPATH="$prefix${PYTHONPATH:+:$PYTHONPATH}" timeout -k 10 "${LIMIT:-480}" "$@") > "$OUT/$name.txt" 2>&1
  echo "rc=$? wall=$(( $(date +%s) - start ))s" >> "$OUT/$name.txt"
}
ROOT=$PWD
python -m dsakit warm contracts > "$OUT/warm.txt" 2>&1
run contracts-plain "" "$ROOT" $P contracts -n 4 &
run contracts-kc "" "$ROOT" $P contracts -n 4 --dsakit-kernel-contracts &
run contracts-revert-plain "$REVERT" "$ROOT" $P contracts -n 4 &
run contracts-revert-kc "$REVERT" "$ROOT" $P contracts -n 4 --dsakit-kernel-contracts &
if [ -n "${1:-}" ]; then
  cp -r "$1/test" "$UP/"
  R=test/registered
  ATTN="$R/attention/unittests/dsa/test_dsa.py $R/attention/unittests/dsv4/test_deepseek_v4.py"
  KOPS="$R/kernels/ops/attention/test_dsa_metadata.py $R/kernels/ops/attention/test_dsa_transform_index.py"
  for what in attn kops; do
    files=$ATTN; [ $what = kops ] && files=$KOPS
    files=$(for f in $files; do [ -f "$UP/$f" ] && echo "$f"; done)  # the suites this UPSTREAM_DIR has
    [ -n "$files" ] || continue
    run "$what-plain" "" "$UP" python -m pytest -p no:dsakit -p no:cacheprovider -q $files &
    run "$what-kc" "" "$UP" $P --dsakit-kernel-contracts $files &
    if [ -n "${REVERT_UPSTREAM:-}" ]; then  # SGLang's own suites with the clamp reverted (they miss it)
      run "$what-revert-plain" "$REVERT" "$UP" python -m pytest -p no:dsakit -p no:cacheprovider -q $files &
      run "$what-revert-kc" "$REVERT" "$UP" $P --dsakit-kernel-contracts $files &
    fi
  done
fi
wait
for f in "$OUT"/*.txt; do
  name=$(basename "$f" .txt); [ "$name" = warm ] && continue
  echo "== $name: $(grep -E '[0-9]+ (passed|failed|skipped|error)' "$f" | tail -1) $(tail -1 "$f")"
  grep -E "^dsakit: kernel-launch contracts checked" "$f" | cut -c1-400
  grep -E "KernelContractViolation: |wrote outputs its consumers|^FAILED" "$f" | sort | uniq -c | head -6 | cut -c1-400
done
