#!/usr/bin/env bash
# Where an xdist worker's start-up goes on the GPU node (issue 7/8): bytecode state of the SGLang
# stack, one SGLang import cold vs with bytecode, 4 imports at once, CUDA context start.
#   source .device/setup.sh; bash scripts/device/worker_startup_profile.sh
# Writes $OUT/startup.md and $OUT/importtime.txt.
set -u
OUT=${OUT:-/tmp/dsakit-startup}; mkdir -p "$OUT"
S=$OUT/startup.md
SITE=$(python -c "import importlib.util,os;print(os.path.dirname(importlib.util.find_spec('sglang').submodule_search_locations[0]))")
M="import sglang.srt.server_args, sglang.srt.layers.attention.dsa_backend, sglang.srt.layers.attention.deepseek_v4_backend"
TIMEFORMAT="%R s wall, %U s user, %S s sys"
{
  echo "# worker start-up profile $(date -u +%FT%TZ): $(nproc) cores, $(nvidia-smi -L 2>/dev/null | wc -l) GPUs"
  echo "- sys.flags.dont_write_bytecode=$(python -c 'import sys;print(sys.flags.dont_write_bytecode)') PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-unset} PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX-unset}"
  echo "- SGLang stack at $SITE: $(find "$SITE" -name '*.py' | wc -l) .py, $(find "$SITE" -name '*.pyc' | wc -l) .pyc before"
  echo "- import #1: $( { time python -c "$M" >/dev/null 2>&1; } 2>&1 )"
  echo "- import #2: $( { time python -c "$M" >/dev/null 2>&1; } 2>&1 ) ($(find "$SITE" -name '*.pyc' | wc -l) .pyc now)"
  echo "- 4 imports at once: $( { time (for i in 1 2 3 4; do python -c "$M" >/dev/null 2>&1 & done; wait); } 2>&1 )"
  echo "- torch + CUDA context: $( { time python -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()' >/dev/null 2>&1; } 2>&1 )"
  echo "- python -m dsakit warm --target sglang-bytecode: $( { time python -m dsakit warm --target sglang-bytecode >"$OUT/warm_bytecode.txt" 2>&1; } 2>&1 ) ($(find "$SITE" -name '*.pyc' | wc -l) .pyc now)"
  echo "- import #3 (after warm): $( { time python -c "$M" >/dev/null 2>&1; } 2>&1 )"
  echo "- 4 imports at once (after warm): $( { time (for i in 1 2 3 4; do python -c "$M" >/dev/null 2>&1 & done; wait); } 2>&1 )"
} > "$S"
python -X importtime -c "$M" 2> "$OUT/importtime.txt" >/dev/null
{ echo; echo "slowest imports (cumulative us):"; sort -t'|' -k2 -n "$OUT/importtime.txt" | tail -15; } >> "$S"
cat "$S"
