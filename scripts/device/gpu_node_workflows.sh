#!/usr/bin/env bash
# Two-GPU node run (issue 7 + bench item 4), kept for reproducibility:
#   source .device/setup.sh; bash scripts/device/gpu_node_workflows.sh
# Writes to $OUT: workflows.md (summary), pin.txt, n1.txt, n2.txt, n4.txt, warm.txt, rerun.txt, compare.txt
set -u
OUT=${OUT:-/tmp/dsakit-workflows}; mkdir -p "$OUT"
P=(python -m pytest -p dsakit.plugin -p no:cacheprovider)
S=$OUT/workflows.md
t() { local s=$(date +%s.%N); "$@"; local rc=$?; echo "rc=$rc wall=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$s}")s"; }
echo "# GPU-node workflows $(date -u +%FT%TZ) on $(nvidia-smi -L | wc -l)x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > "$S"

mkdir -p /tmp/pin && cat > /tmp/pin/test_pin.py <<'PY'
import os, subprocess, sys, pytest
@pytest.mark.parametrize("i", range(4))
def test_gpu(i):
    import torch
    print("PIN", os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count(), torch.cuda.get_device_properties(0).uuid)
    assert torch.cuda.device_count() == 1
@pytest.mark.dsakit_whole_node
def test_whole():
    out = subprocess.run([sys.executable, "-c", "import torch;print(torch.cuda.device_count())"], capture_output=True, text=True).stdout
    assert int(out) == 2
PY
{ echo "## pinning: -n auto"; t "${P[@]}" -n auto /tmp/pin/test_pin.py -rA 2>&1 | grep -E "^PIN|pinning|gw[0-9] ->|passed|failed|rc="; } > "$OUT/pin.txt" 2>&1
cat "$OUT/pin.txt" >> "$S"

{ echo "## dsakit warm (cache restored by setup.sh), twice"; t python -m dsakit warm contracts; t python -m dsakit warm contracts; } > "$OUT/warm.txt" 2>&1
grep -E "built|warm|skip|rc=" "$OUT/warm.txt" | head -12 >> "$S"

# DSAKIT_WORKFLOW_RUNS: which suite runs, e.g. "n1 n4" (default all three)
for name in ${DSAKIT_WORKFLOW_RUNS:-n1 n2 n4}; do
  case $name in n1) args="-n 1";; n2) args="-n 2 --dsakit-workers-per-gpu 1";; n4) args="-n 4 --dsakit-workers-per-gpu 2";; *) continue;; esac
  { echo "## contracts $args"; t "${P[@]}" $args contracts -rfE --durations=5; } > "$OUT/$name.txt" 2>&1
  echo "contracts $args: $(grep -E '^[=]* ?[0-9]+ passed' "$OUT/$name.txt" | tail -1) $(grep rc= "$OUT/$name.txt")" >> "$S"
  grep -E "gw[0-9] -> |GPU pinning|dsakit: device" "$OUT/$name.txt" | head -3 >> "$S"
done

{ echo "## rerun-test"; t python -m dsakit rerun-test contracts/test_dsa_backend_construction.py contracts/test_deepseek_v4_backend.py --junitxml /tmp/rr; } > "$OUT/rerun.txt" 2>&1
tail -4 "$OUT/rerun.txt" >> "$S"

SG=$(python -c "import importlib.util;print(importlib.util.find_spec('sglang').submodule_search_locations[0])")
{ echo "## compare (same tree twice: offline node)"; t python -m dsakit compare --base "$SG" --pr "$SG" -- contracts/test_dsa_backend_metadata.py contracts/test_dsa_backend_construction.py -q; } > "$OUT/compare.txt" 2>&1
tail -6 "$OUT/compare.txt" >> "$S"
cat "$S"
