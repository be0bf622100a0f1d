"""Plot bench_topk_speed.py's CSV (on any machine with matplotlib; the GPU node has none).

One panel per (role, rows): median microseconds per call against context length, one line per
backend, log-log. Skipped and failed cells are left out (their reasons are in topk_speed.md).

    pip install matplotlib   # in the dev venv
    python bench/plot_topk_speed.py topk_speed.csv [-o bench/topk_speed.png]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

MARKERS = {"sgl-kernel": "o", "flashinfer": "s", "torch": "^", "v2-fold": "D"}


def load(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["status"] == "ok" and r["median_us"]]


def plot(rows: list[dict[str, str]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[tuple[str, int, int, int], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        panels[(r["role"], int(r["rows"]), int(r["batch"]), int(r["draft_tokens"]))].append(r)
    keys = sorted(panels, key=lambda k: (k[0] != "target", k[1], k[2]))
    cols = 4
    nrows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        role, nr, batch, draft = key
        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for r in panels[key]:
            series[r["backend"]].append((int(r["context"]), float(r["median_us"])))
        for backend, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS.get(backend, "x"), label=backend)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sub = f"batch {batch}" if role == "target" else f"batch {batch} x {draft} draft tok"
        ax.set_title(f"{role}: {nr} rows ({sub})", fontsize=9)
        ax.set_xlabel("context (tokens)", fontsize=8)
        ax.set_ylabel("median us / call", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(labels))
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=Path(__file__).resolve().parent / "topk_speed.png")
    ap.add_argument("--title", default="DSA top-k (k=2048) per backend, H200")
    args = ap.parse_args(argv)
    rows = load(args.csv)
    if not rows:
        print(f"{args.csv}: no measured cells", file=sys.stderr)
        return 1
    plot(rows, args.output, args.title)
    print(f"wrote {args.output} ({len(rows)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
