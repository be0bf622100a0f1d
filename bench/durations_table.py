"""Turn pytest's `--durations=0 --durations-min=0` report into a per-test time distribution.

Reads pytest output (a file or stdin), keeps the "slowest durations" lines
(`0.52s call     contracts/test_x.py::test_y[param]`), sums setup + call + teardown per test id
and prints markdown: count, total, p50 / p90 / p99 / max per test, time per phase, and the top N
tests. Standard library only (runs on the GPU node). Importable: `parse`, `summarize`, `markdown`.

    python bench/durations_table.py pytest-output.txt [--top 10] [--title "warm run"] [--json F]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")


@dataclass
class TestTime:
    nodeid: str
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.phases.values())


def parse(text: str) -> dict[str, TestTime]:
    """Test id -> its phase durations, from the durations section of a pytest run's output."""
    tests: dict[str, TestTime] = {}
    for raw in text.splitlines():
        match = LINE.match(raw)
        if match is None:
            continue
        seconds, phase, nodeid = float(match.group(1)), match.group(2), match.group(3)
        entry = tests.setdefault(nodeid, TestTime(nodeid))
        entry.phases[phase] = entry.phases.get(phase, 0.0) + seconds
    return tests


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(tests: dict[str, TestTime], top: int = 10) -> dict[str, Any]:
    if not tests:
        return {"tests": 0}
    totals = [t.total for t in tests.values()]
    per_phase: dict[str, float] = defaultdict(float)
    for t in tests.values():
        for phase, seconds in t.phases.items():
            per_phase[phase] += seconds
    slowest = sorted(tests.values(), key=lambda t: t.total, reverse=True)[:top]
    return {
        "tests": len(tests),
        "total_s": sum(totals),
        "p50_s": percentile(totals, 50),
        "p90_s": percentile(totals, 90),
        "p99_s": percentile(totals, 99),
        "max_s": max(totals),
        "per_phase_s": dict(per_phase),
        "top": [{"nodeid": t.nodeid, "total_s": t.total, **{f"{p}_s": s for p, s in t.phases.items()}}
                for t in slowest],
    }


def markdown(summary: dict[str, Any], title: str = "per-test durations") -> str:
    if not summary.get("tests"):
        return f"### {title}\n\nno durations found (run pytest with --durations=0 --durations-min=0)\n"
    phases = ", ".join(f"{p} {s:.1f} s" for p, s in sorted(summary["per_phase_s"].items()))
    lines = [
        f"### {title}",
        "",
        f"{summary['tests']} tests, {summary['total_s']:.1f} s in tests ({phases}); per test: "
        f"p50 {summary['p50_s']:.3f} s, p90 {summary['p90_s']:.3f} s, p99 {summary['p99_s']:.3f} s, "
        f"max {summary['max_s']:.3f} s",
        "",
        "| # | test | total | setup | call | teardown |",
        "|---|---|---|---|---|---|",
    ]
    for i, t in enumerate(summary["top"], 1):
        cells = [f"{t.get(f'{p}_s', 0.0):.3f}" for p in ("setup", "call", "teardown")]
        lines.append(f"| {i} | `{t['nodeid']}` | {t['total_s']:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output", nargs="?", default="-", help="pytest output file (default stdin)")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--title", default="per-test durations")
    ap.add_argument("--json", default=None, help="also write the summary as JSON here")
    args = ap.parse_args(argv)
    if args.output == "-":
        text = sys.stdin.read()
    else:
        with open(args.output, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    summary = summarize(parse(text), args.top)
    print(markdown(summary, args.title))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
