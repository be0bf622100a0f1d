"""Whether this machine's Triton interpreter can run SGLang's fused DSA metadata kernels: a probe of
the one construct that separates the Triton releases, run in a child with TRITON_INTERPRET=1.

Owns `LOOP_PROBE` and `loop_probe_clause()` (the gate jit:triton-interpreter's check). Must not
import Triton or torch here: the probe runs in its own process (this process's Triton, if any, is
compiled-mode and cannot switch).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

# SGLang's fused DSA metadata kernels loop from the program's split to a count read from memory:
# `tl.range(split_id, num_live_blocks, num_splits, num_stages=3)`. Triton 3.6's interpreter loads such
# a count as a one-element array and cannot turn it into a Python int (TypeError: only 0-dimensional
# arrays can be converted to Python scalars); 3.8's can. The probe is that loop, on two rows.
LOOP_PROBE = """
import torch, triton, triton.language as tl
@triton.jit
def _loop_over_a_loaded_count(lens_ptr, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    split = tl.program_id(1)
    blocks = tl.cdiv(tl.load(lens_ptr + row), BLOCK)
    total = 0
    for block in tl.range(split, blocks, 2, num_stages=3):
        total += block
    tl.store(out_ptr + row * 2 + split, total)
out = torch.zeros(4, dtype=torch.int32)
_loop_over_a_loaded_count[(2, 2)](torch.tensor([9, 3], dtype=torch.int32), out, BLOCK=2)
print(triton.__version__, out.tolist())
"""
LOOP_PROBE_ANSWER = [6, 4, 0, 1]  # blocks 5 and 2: splits (0+2+4, 1+3) and (0, 1)


@functools.cache
def loop_probe_clause() -> str | None:
    """None when Triton's interpreter runs `LOOP_PROBE` right; else what this Triton lacks (one child
    process per process that asks)."""
    done = subprocess.run([sys.executable, "-c", LOOP_PROBE], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=300, check=False)
    words = done.stdout.split(maxsplit=1)
    version = words[0] if words else None
    if done.returncode == 0 and len(words) == 2 and json.loads(words[1]) == LOOP_PROBE_ANSWER:
        return None
    if done.returncode == 0:
        return f"Triton {version}'s interpreter loops over a count read from memory wrongly: {done.stdout.strip()}"
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    if "No module named 'triton'" in done.stderr or "No module named 'torch'" in done.stderr:
        return f"Triton's interpreter cannot start here: {last}"
    return ("this Triton's interpreter cannot loop over a count read from memory "
            f"(tl.range(split, tl.cdiv(tl.load(p), B), step)), as SGLang's fused DSA metadata kernels do: {last}")
