"""Benchmark: SGLang's fused DSA metadata Triton kernels under Triton's interpreter on the CPU.

Each case (decode / target verify / draft extend x batch size x context; `--padded-rows` rows of
CUDA-graph padding with seq_len fill 1, as SGLang's runners pad) launches the real wrapper the way
SGLang's replay does, in one child process with TRITON_INTERPRET=1
(dsakit.simulation.triton_interpreter). Per case: the first launch and the median of the warm ones
(perf_counter around the wrapper call; input building outside), whether the outputs match the torch
reference (dsakit.backends.dsa_metadata_reference: lengths, cu_seqlens, page tables over each row's
live prefix) and the metadata postconditions (the kernel-launch contracts' `writes`), and, with the
draft-extend clamp reverted in a copy of the kernel module (`clamp-reverted`), whether the
postconditions catch it. Also the child's start (torch, Triton, the kernel module) and its wall time.

`--gpu` (a CUDA machine) runs the same cases compiled on the GPU in this process, side by side: its
first (JIT) and warm launch times (synchronized), and whether its outputs equal the interpreter's
exactly (every element of every output buffer, poisoned tails included) and the reference.

    python bench/bench_triton_interpreter.py [--bs 1,4,8] [--ctx 512,2048,4096] [--draft-tokens 4]
        [--page 64] [--padded-rows 1] [--repeats 3] [--modes decode,target_verify,draft_extend] [--kpool 1,4]
        [--no-revert] [--gpu] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from dsakit.backends.dsa_invariants import metadata_kernel_reasons
from dsakit.backends.dsa_metadata_kernels import CLAMP_REVERT, MODES, MetadataCase, call_arguments
from dsakit.backends.dsa_metadata_reference import mismatches
from dsakit.simulation.triton_interpreter import SGLANG_MODULE, InterpretedRun, run_interpreted


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(f"unknown mode {', '.join(unknown) or text!r}; known: {', '.join(MODES)}")
    return modes


def cases(modes: list[str], batch_sizes: list[int], contexts: list[int], *, draft_tokens: int, page: int,
          padded_rows: int, kpools: list[int]) -> list[MetadataCase]:
    """Live lengths spread over (ctx/2, ctx] (the longest is ctx), so rows cross pages differently."""
    built = []
    for kpool in kpools:
        for mode in modes:
            for bs in batch_sizes:
                for ctx in contexts:
                    kv = tuple(ctx - (i * ctx) // (2 * bs) for i in range(bs))
                    width = -(-(ctx + draft_tokens) // page) * page
                    built.append(MetadataCase(mode, kv, padded_rows=padded_rows,  # type: ignore[arg-type]
                                              draft_tokens=draft_tokens, page_size=page, width=width,
                                              index_kpool=kpool))
    return built


def _postconditions(case: MetadataCase, inputs: dict[str, Any], outputs: dict[str, Any]) -> list[str]:
    """The kernel-launch contracts' postconditions on what the call wrote."""
    return [str(r) for r in metadata_kernel_reasons(case.mode, call_arguments(case, {**inputs, **outputs}))]


def _verdict(run: InterpretedRun) -> tuple[list[str], list[str]]:
    post = _postconditions(run.case, run.inputs, run.outputs)
    return post, [str(r) for r in mismatches(run.case, run.inputs, run.outputs)]


def _gpu_runs(found: list[MetadataCase], variants: tuple[str, ...], repeats: int, seed: int) -> dict[tuple[str, str], Any]:
    import torch

    from dsakit.backends.dsa_metadata_kernels import PATCHES, build_inputs, launch, load_kernel, outputs_of
    from dsakit.stack.sglang_release import installed_release

    release = installed_release()
    runs: dict[tuple[str, str], Any] = {}
    loaded: dict[tuple[str, str], Any] = {}
    for variant in variants:
        patch = None if variant == SGLANG_MODULE else PATCHES[variant]
        for case in found:
            wrapper = load_kernel(release, case.mode, kpool=case.kpool, patch=patch, loaded=loaded)
            seconds = []
            for _ in range(repeats):
                inputs = build_inputs(case, "cuda", seed=seed)
                torch.cuda.synchronize()
                begin = time.perf_counter()
                launch(wrapper, case, inputs)
                torch.cuda.synchronize()
                seconds.append(time.perf_counter() - begin)
            cpu_inputs = {k: inputs[k].to("cpu") for k in ("seq_lens", "extend_seq_lens", "req_pool_indices", "req_to_token")}
            runs[(case.id, variant)] = (seconds, cpu_inputs, outputs_of(case, inputs))
    return runs


def _release() -> str:
    from dsakit.stack.sglang_release import installed_release

    return str(installed_release().version)


def _export_gpu(path: str, runs: dict[tuple[str, str], Any]) -> int:
    rows = [{"id": case_id, "variant": variant, "seconds": seconds,
             "inputs": {k: v.tolist() for k, v in inputs.items()},
             "outputs": {k: v.to("cpu").tolist() for k, v in outputs.items()}}
            for (case_id, variant), (seconds, inputs, outputs) in runs.items()]
    with open(path, "w", encoding="utf-8") as out:
        json.dump({"sglang": _release(), "rows": rows}, out)
    print(f"GPU: {len(rows)} case runs of SGLang {_release()} written to {path}")
    return 0


def _import_gpu(path: str, found: list[MetadataCase], variants: tuple[str, ...]) -> dict[tuple[str, str], Any]:
    import torch

    with open(path, encoding="utf-8") as file:
        exported = json.load(file)
    if exported["sglang"] != _release():
        raise SystemExit(f"{path} holds SGLang {exported['sglang']}'s GPU outputs; this is SGLang {_release()}: "
                         f"put that release's tree on PYTHONPATH")
    runs = {(r["id"], r["variant"]): (r["seconds"], {k: torch.tensor(v) for k, v in r["inputs"].items()},
                                      {k: torch.tensor(v) for k, v in r["outputs"].items()})
            for r in exported["rows"]}
    missing = [f"{c.id} {v}" for c in found for v in variants if (c.id, v) not in runs]
    if missing:
        raise SystemExit(f"{path} lacks {len(missing)} case run(s) of these arguments, e.g. {missing[0]}: "
                         "export with the same --bs/--ctx/--modes/--kpool/--padded-rows")
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--bs", type=_ints, default=[1, 4, 8], help="live batch sizes (default 1,4,8)")
    parser.add_argument("--ctx", type=_ints, default=[512, 2048, 4096], help="longest KV length (default 512,2048,4096)")
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--page", type=int, default=64)
    parser.add_argument("--padded-rows", type=int, default=1, help="CUDA-graph padding rows per case (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="launches per case: the first, then warm ones")
    parser.add_argument("--modes", type=_modes, default=list(MODES))
    parser.add_argument("--kpool", type=_ints, default=[1], help="index_kpool values: 1 = the plain kernels, "
                        "4 = the KPool variants (SGLang 0.5.20 on; default 1)")
    parser.add_argument("--no-revert", action="store_true", help="skip the clamp-reverted copy")
    parser.add_argument("--gpu", action="store_true", help="also run the cases compiled on this machine's GPU")
    parser.add_argument("--gpu-export", metavar="FILE", help="run the cases compiled on this machine's GPU only and "
                        "write their outputs to FILE (where this Triton's interpreter cannot run them: 3.6's)")
    parser.add_argument("--gpu-from", metavar="FILE", help="compare the interpreter with the GPU outputs a "
                        "--gpu-export wrote (the same SGLang release and cases, on another machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="FILE", help="write every row as JSON")
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error("--repeats must be >= 2 (the first launch and at least one warm one)")

    found = cases(args.modes, args.bs, args.ctx, draft_tokens=args.draft_tokens, page=args.page,
                  padded_rows=args.padded_rows, kpools=args.kpool)
    variants: tuple[str, ...] = (SGLANG_MODULE,) if args.no_revert else (SGLANG_MODULE, CLAMP_REVERT.name)
    if args.gpu_export:
        return _export_gpu(args.gpu_export, _gpu_runs(found, variants, args.repeats, args.seed))
    child = run_interpreted(found, variants=variants, repeats=args.repeats, seed=args.seed)
    gpu = _gpu_runs(found, variants, args.repeats, args.seed) if args.gpu else {}
    if args.gpu_from:
        gpu, args.gpu = _import_gpu(args.gpu_from, found, variants), True
    launches = sum(sum(r.seconds) for r in child.runs)
    print(f"interpreter child: {child.wall_seconds:.1f} s wall, {child.startup_seconds:.1f} s to its first launch, "
          f"{launches:.1f} s launching ({len(child.runs)} case runs x {args.repeats})")
    head = f"{'case':40} {'variant':15} {'first s':>8} {'warm s':>8}"
    if args.gpu:
        head += f" {'gpu 1st s':>9} {'gpu warm s':>10} {'gpu==interp':>11}"
    print(head + "  reference  postconditions")
    rows = []
    for run in child.runs:
        post, ref = _verdict(run)
        warm = statistics.median(run.seconds[1:])
        line = f"{run.case.id:40} {run.variant:15} {run.seconds[0]:8.3f} {warm:8.3f}"
        row: dict[str, Any] = {"case": run.case.as_dict(), "id": run.case.id, "variant": run.variant,
                               "first_s": run.seconds[0], "warm_s": warm, "postconditions": post, "reference": ref}
        if args.gpu:
            import torch

            seconds, gpu_inputs, gpu_outputs = gpu[(run.case.id, run.variant)]
            if any(not torch.equal(gpu_inputs[k].to(torch.int64), run.inputs[k]) for k in gpu_inputs):
                raise SystemExit(f"{run.case.id}: the GPU's inputs differ from the interpreter's (another seed?)")
            gpu_inputs = {**run.inputs, **gpu_inputs}  # an export before 2026-12-03 kept two of the inputs
            same = all(torch.equal(gpu_outputs[k].to(torch.int64), run.outputs[k]) for k in run.outputs)
            gpu_post = _postconditions(run.case, gpu_inputs, gpu_outputs)
            gpu_ref = [str(r) for r in mismatches(run.case, gpu_inputs, gpu_outputs)]
            line += f" {seconds[0]:9.4f} {statistics.median(seconds[1:]):10.5f} {str(same):>11}"
            row.update(gpu_first_s=seconds[0], gpu_warm_s=statistics.median(seconds[1:]), gpu_equals_interpreter=same,
                       gpu_postconditions=gpu_post, gpu_reference=gpu_ref)
        print(f"{line}  {'match' if not ref else f'{len(ref)} differ':9}  "
              f"{'hold' if not post else ', '.join(sorted({p.split(']')[0][1:] for p in post}))}")
        rows.append(row)
    reverted = [r for r in rows if r["variant"] == CLAMP_REVERT.name and r["case"]["mode"] == "draft_extend"
                and r["case"]["padded_rows"]]
    if reverted:
        caught = sum(bool(r["postconditions"]) for r in reverted)  # the padded rows' negative lengths
        print(f"clamp reverted: caught in {caught} of {len(reverted)} padded draft-extend cases"
              + (f" (GPU: {sum(bool(r['gpu_postconditions']) for r in reverted)})" if args.gpu else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"startup_s": child.startup_seconds, "wall_s": child.wall_seconds, "rows": rows}, out, indent=1)
    real = [r for r in rows if r["variant"] == SGLANG_MODULE]
    bad = [r["id"] for r in real if r["postconditions"] or r["reference"]
           or (args.gpu and (not r["gpu_equals_interpreter"] or r["gpu_postconditions"] or r["gpu_reference"]))]
    if bad:
        print(f"FAILED on SGLang's own kernels: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
