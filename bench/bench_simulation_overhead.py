"""What a whole-run simulation costs: one pytest selection, plain and as a simulated device, side by side.

    python bench/bench_simulation_overhead.py [--device sm103] [--pairs 3] [--cwd DIR] -- PYTEST_ARGS...

Runs the selection alternately without and with `--dsakit-device DEVICE` (both with dsakit loaded, so
the difference is the simulation alone; a first unmeasured run of each warms the JIT caches), each
in its own process, and prints every pair's wall times and the ratio simulated / plain, then the
medians. On a GPU node: the portable plan (issue 35's target: at most 1.3x). Nothing is left behind.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def _run(cwd: str, args: list[str]) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "dsakit.plugin", "-p", "no:cacheprovider", "-q",
                           *args], cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - start
    lines = [line for line in done.stdout.splitlines() if " in " in line and ("passed" in line or "failed" in line)]
    return wall, (lines[-1].strip("= ") if lines else f"rc={done.returncode}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="sm103")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--cwd", default=".")
    parser.add_argument("--no-warm", action="store_true", help="skip the unmeasured first run of each")
    parser.add_argument("pytest_args", nargs="+")
    options = parser.parse_args(argv)
    if options.pairs < 1:
        parser.error(f"--pairs {options.pairs}: expected at least 1")
    plain = list(options.pytest_args)
    simulated = [*plain, "--dsakit-device", options.device]
    if not options.no_warm:
        for args in (plain, simulated):
            _run(options.cwd, args)
    ratios, walls = [], {"plain": [], "simulated": []}
    print(f"{'pair':>4}  {'plain s':>8}  {options.device + ' s':>10}  {'ratio':>6}  outcomes (plain | simulated)")
    for pair in range(1, options.pairs + 1):
        a, a_line = _run(options.cwd, plain)
        b, b_line = _run(options.cwd, simulated)
        walls["plain"].append(a)
        walls["simulated"].append(b)
        ratios.append(b / a)
        print(f"{pair:>4}  {a:8.1f}  {b:10.1f}  {b / a:6.3f}  {a_line} | {b_line}")
    print(f"median: plain {statistics.median(walls['plain']):.1f} s, simulated {options.device} "
          f"{statistics.median(walls['simulated']):.1f} s, ratio {statistics.median(ratios):.3f}x "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
