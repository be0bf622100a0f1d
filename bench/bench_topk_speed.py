"""Benchmark (GPU node): DSA top-k speed per backend, for target (decode) and draft (MTP) shapes.

Backends, each called the way SGLang's DSA indexer calls it (and as `dsakit.topk.launch` does):
  sgl-kernel  DSATopKBackend.SGL_KERNEL.topk_func  -> sgl_kernel.fast_topk_v2 (k == 2048 only)
  flashinfer  DSATopKBackend.FLASHINFER.topk_func  -> flashinfer.top_k (unfused, masked)
  torch       DSATopKBackend.TORCH.topk_func       -> torch.topk (unfused, masked)
  v2-fold     DSATopKBackend.SGL_KERNEL.topk_transform(PAGED) with SGLANG_DSA_FUSE_TOPK=1 and
              SGLANG_OPT_USE_TOPK_V2=1: the DeepSeek-V4 top-k v2 JIT kernel that folds the page
              table into the selection (0.5.17 topk_transform_512_v2, 0.5.23
              topk_transform_paged_v2); page_table_1=None so a fallback to the legacy transform
              would fail instead of being timed. plan_topk_v2 runs once per shape, outside the
              timed region (SGLang plans once per forward batch, shared by all layers).

Shapes (k = 2048): target = decode batch {1, 8, 64, 256} x context {4K, 32K, 128K, 1M}, one row
per request; draft = batch {1, 4, 8} x draft tokens {2, 3, 4} rows per request (rows = batch x
draft tokens; row j of a request sees context - (n-1-j) tokens), same contexts. Scores are seeded
torch.randn float32 (rows, context) on the GPU, page size 64, every request its own shuffled pages.

Timing: CUDA events. Each cell is warmed up (JIT, workspaces), then captured into a CUDA graph
when the backend allows it (mode=graph: GPU time without Python launch overhead, what a CUDA-graph
decode step pays) and otherwise timed eagerly (mode=eager, events around each call); the median of
`--repeats` is reported, with min and p90. A cell a backend cannot take is written as a skip with
its reason; a cell that raises is written as an error with the exception; cells left when the
`--budget-s` time budget is spent are written as skips ("time budget"). Writes CSV + markdown.
Plot on a machine with matplotlib: `python bench/plot_topk_speed.py topk_speed.csv`.

    source .device/setup.sh; python bench/bench_topk_speed.py --out $OUT [--budget-s 200] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

K = 2048
PAGE = 64
CONTEXTS = (4096, 32768, 131072, 1 << 20)
TARGET_BATCHES = (1, 8, 64, 256)
DRAFT_BATCHES = (1, 4, 8)
DRAFT_TOKENS = (2, 3, 4)
BACKENDS = ("sgl-kernel", "flashinfer", "torch", "v2-fold")
FIELDS = ("role", "backend", "batch", "draft_tokens", "rows", "context", "k", "status", "mode",
          "median_us", "min_us", "p90_us", "repeats", "reason")


@dataclass(frozen=True)
class Shape:
    role: str  # target | draft
    batch: int
    draft_tokens: int  # rows per request (1 for target)
    context: int

    @property
    def rows(self) -> int:
        return self.batch * self.draft_tokens

    def lengths(self) -> list[int]:
        n = self.draft_tokens
        return [max(self.context - (n - 1 - j), 0) for _ in range(self.batch) for j in range(n)]


def shapes(quick: bool) -> list[Shape]:
    contexts = (4096, 131072, 1 << 20) if quick else CONTEXTS
    out = [Shape("target", b, 1, c) for b in TARGET_BATCHES for c in contexts]
    drafts = ((1, 2), (8, 4)) if quick else [(b, n) for b in DRAFT_BATCHES for n in DRAFT_TOKENS]
    out += [Shape("draft", b, n, c) for b, n in drafts for c in contexts]
    return out


# ---------------------------------------------------------------- inputs


def make_inputs(shape: Shape, seed: int = 0) -> SimpleNamespace:
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed + shape.rows * 7919 + shape.context)
    scores = torch.randn((shape.rows, shape.context), generator=gen, device="cuda", dtype=torch.float32)
    lengths = torch.tensor(shape.lengths(), dtype=torch.int32, device="cuda")
    pages = -(-shape.context // PAGE)
    # each request its own pages from a shuffled pool; a request's draft rows share its table
    pool = torch.randperm(2 * pages * shape.batch, device="cuda", generator=gen)[: pages * shape.batch]
    req_table = pool.view(shape.batch, pages).to(torch.int32)
    table = req_table.repeat_interleave(shape.draft_tokens, dim=0).contiguous()
    return SimpleNamespace(scores=scores, lengths=lengths, table=table)


# ---------------------------------------------------------------- backends


def _sglang() -> SimpleNamespace:
    from sglang.srt.layers.attention.dsa import dsa_topk_backend as mod

    return SimpleNamespace(Backend=mod.DSATopKBackend, Method=mod.TopkTransformMethod)


def unsupported(backend: str, shape: Shape) -> str | None:
    if backend == "sgl-kernel" and K != 2048:
        return "sgl_kernel.fast_topk_v2 asserts topk == 2048"
    return None


def make_call(backend: str, inputs: SimpleNamespace) -> Callable[[], Any]:
    """A zero-argument callable running one top-k of `inputs` through `backend`."""
    sgl = _sglang()
    scores, lengths = inputs.scores, inputs.lengths
    if backend in ("sgl-kernel", "flashinfer", "torch"):
        be = sgl.Backend(backend)
        return lambda: be.topk_func(scores, lengths, K)
    if backend == "v2-fold":
        from sglang.kernels.ops.attention.dsv4.topk import plan_topk_v2

        os.environ.pop("SGLANG_NSA_FUSE_TOPK", None)
        os.environ["SGLANG_DSA_FUSE_TOPK"] = "1"
        os.environ["SGLANG_OPT_USE_TOPK_V2"] = "1"
        md = SimpleNamespace(page_table_1=None, real_page_table=inputs.table, page_size=PAGE,
                             token_to_batch_idx=None, cu_seqlens_k=None,
                             topk_v2_plan=plan_topk_v2(lengths))
        be = sgl.Backend.SGL_KERNEL
        method = sgl.Method.PAGED
        return lambda: be.topk_transform(scores, lengths, K, method, md)
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


# ---------------------------------------------------------------- timing


def _stats(times_ms: list[float]) -> dict[str, float]:
    ordered = sorted(times_ms)
    p90 = ordered[max(0, int(round(0.9 * len(ordered))) - 1)]
    return {"median_us": 1e3 * statistics.median(ordered), "min_us": 1e3 * ordered[0], "p90_us": 1e3 * p90}


def time_cell(call: Callable[[], Any], repeats: int, warmup: int, use_graph: bool) -> tuple[str, dict[str, float]]:
    import torch

    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    if use_graph:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                call()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                call()
            graph.replay()
            torch.cuda.synchronize()
            return "graph", _stats(_events(graph.replay, repeats))
        except Exception:  # noqa: BLE001 - not capturable: fall back to eager timing
            torch.cuda.synchronize()
    return "eager", _stats(_events(call, repeats))


def _events(fn: Callable[[], Any], repeats: int) -> list[float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


# ---------------------------------------------------------------- driver


def run(out_dir: Path, budget_s: float, repeats: int, warmup: int, quick: bool, backends: list[str],
        use_graph: bool) -> list[dict[str, Any]]:
    import torch

    start = time.monotonic()
    rows: list[dict[str, Any]] = []
    csv_path = out_dir / "topk_speed.csv"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for shape in shapes(quick):
            inputs = None
            for backend in backends:
                row: dict[str, Any] = {"role": shape.role, "backend": backend, "batch": shape.batch,
                                       "draft_tokens": shape.draft_tokens, "rows": shape.rows,
                                       "context": shape.context, "k": K, "repeats": repeats,
                                       "status": "ok", "mode": "", "reason": ""}
                reason = unsupported(backend, shape)
                if reason is None and time.monotonic() - start > budget_s:
                    reason = f"time budget ({budget_s:.0f} s) spent"
                if reason is not None:
                    row.update(status="skip", reason=reason)
                else:
                    try:
                        if inputs is None:
                            inputs = make_inputs(shape)
                        mode, stats = time_cell(make_call(backend, inputs), repeats, warmup, use_graph)
                        row.update(mode=mode, **{k: f"{v:.1f}" for k, v in stats.items()})
                    except Exception as error:  # noqa: BLE001 - recorded per cell, the run goes on
                        row.update(status="error", reason=f"{type(error).__name__}: {error}"[:300])
                        torch.cuda.synchronize()
                rows.append(row)
                writer.writerow(row)
                fh.flush()
                print(f"[{time.monotonic() - start:6.1f}s] {shape.role:6} b={shape.batch:<3} "
                      f"n={shape.draft_tokens} ctx={shape.context:<7} {backend:10} {row['status']:5} "
                      f"{row.get('median_us', '')} us {row['mode']} {row['reason'][:80]}", flush=True)
            del inputs
            torch.cuda.empty_cache()
    return rows


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    lines = [header, "",
             "median us per call (CUDA events; `g` = CUDA-graph replay, `e` = eager); skip/error reasons below",
             ""]
    lines.append("| role | batch | draft tok | rows | context | " + " | ".join(backends) + " |")
    lines.append("|---|---|---|---|---|" + "---|" * len(backends))
    notes: dict[str, str] = {}
    cells: dict[tuple[Any, ...], dict[str, str]] = {}
    for r in rows:
        key = (r["role"], r["batch"], r["draft_tokens"], r["rows"], r["context"])
        if r["status"] == "ok":
            text = f"{r['median_us']} {r['mode'][0]}"
        else:
            tag = notes.setdefault(r["reason"], f"{r['status']}{len(notes) + 1}")
            text = tag
        cells.setdefault(key, {})[r["backend"]] = text
    for key, by_backend in cells.items():
        role, batch, draft, nrows, ctx = key
        lines.append(f"| {role} | {batch} | {draft if role == 'draft' else ''} | {nrows} | {ctx:,} | "
                     + " | ".join(by_backend.get(b, "") for b in backends) + " |")
    if notes:
        lines += ["", "reasons:"] + [f"- {tag}: {reason}" for reason, tag in notes.items()]
    return "\n".join(lines) + "\n"


def environment() -> str:
    import torch

    parts = [f"GPU {torch.cuda.get_device_name()} (sm {'.'.join(map(str, torch.cuda.get_device_capability()))})",
             f"torch {torch.__version__}", f"CUDA {torch.version.cuda}"]
    for name in ("sglang", "sgl_kernel", "flashinfer"):
        try:
            module = __import__(name)
            parts.append(f"{name} {getattr(module, '__version__', '?')}")
        except Exception as error:  # noqa: BLE001
            parts.append(f"{name} unavailable ({type(error).__name__})")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop measuring after this long")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--quick", action="store_true", help="fewer shapes (smoke test)")
    ap.add_argument("--no-graph", action="store_true", help="time every cell eagerly")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark runs on the GPU node", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    env = environment()
    print(env, flush=True)
    started = time.monotonic()
    rows = run(args.out, args.budget_s, args.repeats, args.warmup, args.quick, backends, not args.no_graph)
    header = (f"### DSA top-k speed, k={K} ({time.strftime('%Y-%m-%d')}; {env}; "
              f"{time.monotonic() - started:.0f} s)")
    (args.out / "topk_speed.md").write_text(markdown(rows, header))
    print(markdown(rows, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
