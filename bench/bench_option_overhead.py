"""What a dsakit run option costs: one pytest selection without and with it, side by side.

    python bench/bench_option_overhead.py --option "--dsakit-device sm103" [--pairs 3] [--cwd DIR] -- PYTEST_ARGS...
    python bench/bench_option_overhead.py --option --dsakit-kernel-contracts ...

Runs the selection alternately without and with OPTION (both with dsakit loaded, so the difference is
the option alone; a first unmeasured run of each warms the JIT caches), each in its own process, and
prints every pair's wall times and the ratio with / without, then the medians. Targets on a GPU node:
the portable simulation `--dsakit-device sm103` at most 1.3x (issue 35), `--dsakit-kernel-contracts`
at most 1.1x (issue 38). Nothing is left behind.
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
    parser.add_argument("--option", required=True, help='the option under test, one string: "--dsakit-device sm103"')
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--cwd", default=".")
    parser.add_argument("--no-warm", action="store_true", help="skip the unmeasured first run of each")
    parser.add_argument("pytest_args", nargs="+")
    args = list(sys.argv[1:] if argv is None else argv)
    if "--option" in args[:-1]:  # a lone flag as the value ("--option --dsakit-kernel-contracts"): argparse would
        at = args.index("--option")  # read it as an option of its own
        args[at:at + 2] = [f"--option={args[at + 1]}"]
    options = parser.parse_args(args)
    if options.pairs < 1:
        parser.error(f"--pairs {options.pairs}: expected at least 1")
    plain = list(options.pytest_args)
    simulated = [*plain, *options.option.split()]
    if not options.no_warm:
        for args in (plain, simulated):
            _run(options.cwd, args)
    ratios, walls = [], {"plain": [], "simulated": []}
    print(f"{'pair':>4}  {'without s':>9}  {'with s':>8}  {'ratio':>6}  outcomes (without | with {options.option})")
    for pair in range(1, options.pairs + 1):
        a, a_line = _run(options.cwd, plain)
        b, b_line = _run(options.cwd, simulated)
        walls["plain"].append(a)
        walls["simulated"].append(b)
        ratios.append(b / a)
        print(f"{pair:>4}  {a:9.1f}  {b:8.1f}  {b / a:6.3f}  {a_line} | {b_line}")
    print(f"median: without {statistics.median(walls['plain']):.1f} s, with {options.option} "
          f"{statistics.median(walls['simulated']):.1f} s, ratio {statistics.median(ratios):.3f}x "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
