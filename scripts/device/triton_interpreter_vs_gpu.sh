#!/usr/bin/env bash
# SGLang's fused DSA metadata kernels: compiled on this node's GPU vs Triton's interpreter on its CPU
# (issue 43, item 3). The same cases (decode / target verify / draft extend, plain and KPool 4, bs 1,4,8,
# context up to 4096, 4 draft tokens, page 64, one padded CUDA-graph row each) run compiled here and
# interpreted in a TRITON_INTERPRET=1 child; the table says per case whether the GPU's outputs equal
# the interpreter's exactly (every element of every buffer), both match the torch reference and meet
# the postconditions, and the GPU / interpreter launch times side by side. The clamp-reverted copy
# of the kernel module (never written to disk) must give negative padded rows on both.
#
#   GPU node (no entry point installed): source .device/setup.sh; bash scripts/device/triton_interpreter_vs_gpu.sh
#
# Extra arguments go to bench/bench_triton_interpreter.py (e.g. --bs 1,8 --ctx 4096). Writes
# triton-interpreter-vs-gpu.json in the current directory. Exit 0: the GPU and the interpreter agree
# and SGLang's own kernels hold; 1: a difference (listed); 2: the run could not start.
set -u
cd "$(dirname "$0")/../.." || exit 2
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 2)" || {
  echo "triton_interpreter_vs_gpu: no CUDA device here" >&2; exit 2; }
# where this Triton's interpreter cannot run the kernels (3.6: the jit:triton-interpreter gate), export the
# GPU side and compare on a machine whose Triton can (--gpu-from FILE, the same SGLang release on PYTHONPATH)
if python -c "import sys; from dsakit.gates.interpreter_probe import loop_probe_clause as c; sys.exit(c() is not None)"; then
  exec python bench/bench_triton_interpreter.py --gpu --kpool 1,4 --json triton-interpreter-vs-gpu.json "$@"
fi
exec python bench/bench_triton_interpreter.py --gpu-export triton-gpu-outputs.json --kpool 1,4 "$@"
