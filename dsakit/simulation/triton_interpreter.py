"""SGLang's fused DSA metadata kernels run by Triton's interpreter on the CPU, in a child process.

Owns the child: `TRITON_INTERPRET=1` only in its environment (Triton decides interpreted or
compiled when each `@triton.jit` runs, its own standard library's at import, so this process's
Triton cannot switch), "cuda" tensors on the CPU through the simulation's CPU view (SGLang's
wrappers assert `is_cuda`; Triton's interpreter reads CPU memory), and what comes back: each
case's outputs and its launch times (first, then warm). Must not judge the outputs.

    python -m dsakit.simulation.triton_interpreter < request.json > runs.json   (the child side)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from dsakit.backends.dsa_metadata_kernels import PATCHES, MetadataCase
from dsakit.errors import UsageError
from dsakit.reasons import FrozenRecord

SGLANG_MODULE = "sglang"  # the variant that launches the release's own module
INTERPRET = {"TRITON_INTERPRET": "1"}


class InterpretedRun(FrozenRecord):
    """One case under one variant (`sglang` or a `SourcePatch` name, which changes its mode's kernel
    only): its inputs and outputs as CPU tensors and the seconds of each launch (the first builds
    the interpreter's AST rewrite)."""

    __match_args__ = ("case", "variant", "seconds", "inputs", "outputs")

    def __init__(self, case: MetadataCase, variant: str, seconds: tuple[float, ...], inputs: dict[str, Any],
                 outputs: dict[str, Any]) -> None:
        self.__dict__.update(case=case, variant=variant, seconds=seconds, inputs=inputs, outputs=outputs)

    case: MetadataCase
    variant: str
    seconds: tuple[float, ...]
    inputs: dict[str, Any]
    outputs: dict[str, Any]


class ChildRun(FrozenRecord):
    """The child's whole answer: its runs and the seconds it took from start to its first launch."""

    __match_args__ = ("runs", "startup_seconds", "wall_seconds")

    def __init__(self, runs: tuple[InterpretedRun, ...], startup_seconds: float, wall_seconds: float) -> None:
        self.__dict__.update(runs=runs, startup_seconds=startup_seconds, wall_seconds=wall_seconds)

    runs: tuple[InterpretedRun, ...]
    startup_seconds: float
    wall_seconds: float


def child_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus the interpreter switch; this process's own is untouched."""
    return {**(os.environ if environ is None else environ), **INTERPRET}


def run_interpreted(cases: list[MetadataCase], *, variants: tuple[str, ...] = (SGLANG_MODULE,), repeats: int = 2,
                    seed: int = 0, timeout: float = 600.0) -> ChildRun:
    """Every case under every variant in one child process (one torch / Triton import)."""
    import torch

    unknown = [v for v in variants if v != SGLANG_MODULE and v not in PATCHES]
    if unknown:
        raise UsageError(f"unknown variant {', '.join(unknown)}; known: {SGLANG_MODULE}, {', '.join(PATCHES)}")
    if repeats < 1:
        raise UsageError(f"repeats must be >= 1; got {repeats}")
    request = {"cases": [c.as_dict() for c in cases], "variants": list(variants), "repeats": repeats, "seed": seed}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(request), capture_output=True,
                          text=True, env=child_environment(), timeout=timeout, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the Triton-interpreter child exited {done.returncode}:\n{done.stderr[-4000:]}")
    answer = json.loads(done.stdout)

    def tensors(named: dict[str, Any]) -> dict[str, Any]:
        return {name: torch.tensor(values, dtype=torch.int64) for name, values in named.items()}

    runs = tuple(InterpretedRun(MetadataCase.from_dict(r["case"]), r["variant"], tuple(r["seconds"]),
                                tensors(r["inputs"]), tensors(r["outputs"])) for r in answer["runs"])
    return ChildRun(runs, answer["startup_seconds"], wall)


def _child(request: dict[str, Any], started: float) -> dict[str, Any]:
    """In the child (TRITON_INTERPRET=1 before anything imports Triton): launch and time each case."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError("the Triton-interpreter child needs TRITON_INTERPRET=1 in its environment (run_interpreted sets it)")
    from dsakit.backends.dsa_metadata_kernels import build_inputs, launch, load_kernel, outputs_of
    from dsakit.gates.device_model import simulated_model
    from dsakit.stack.sglang_release import installed_release
    from dsakit.simulation.runtime import cuda_view_on_cpu

    release = installed_release()
    runs = []
    startup = None
    loaded: dict[tuple[str, str], Any] = {}
    with cuda_view_on_cpu(simulated_model("sm90")):
        for variant in request["variants"]:
            patch = None if variant == SGLANG_MODULE else PATCHES[variant]
            for data in request["cases"]:
                case = MetadataCase.from_dict(data)
                wrapper = load_kernel(release, case.mode, kpool=case.kpool, patch=patch, loaded=loaded)
                seconds = []
                for _ in range(request["repeats"]):
                    inputs = build_inputs(case, "cuda", seed=request["seed"])
                    startup = time.perf_counter() - started if startup is None else startup
                    begin = time.perf_counter()
                    launch(wrapper, case, inputs)
                    seconds.append(time.perf_counter() - begin)
                runs.append({
                    "case": case.as_dict(), "variant": variant, "seconds": seconds,
                    "inputs": {k: inputs[k].to("cpu").tolist()
                               for k in ("seq_lens", "extend_seq_lens", "req_pool_indices", "req_to_token")},
                    "outputs": {k: v.tolist() for k, v in outputs_of(case, inputs).items()},
                })
    return {"runs": runs, "startup_seconds": startup or 0.0}


if __name__ == "__main__":
    _started, _answer_to = time.perf_counter(), sys.stdout
    sys.stdout = sys.stderr  # whatever SGLang or Triton print must not end up inside the answer
    json.dump(_child(json.load(sys.stdin), _started), _answer_to)
