"""`dsakit pr-check` over N devices against N sequential `dsakit compare` runs, measured in one run.

    python bench/pr_check_speed.py --base TREE --pr TREE [--devices sm90,sm100,sm103,gfx942] \
        [--json out.json] -- PYTEST_ARGS

Same trees, same selection, same devices (compare gets `--dsakit-device=D` in its pytest args);
pr-check also reruns what failed and audits the selection, so the ratio is its cost with those
included. Prints a markdown table with the load average before and after each side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").is_file() else "n/a"


def _timed(command: list[str]) -> tuple[float, int, str, str]:
    before = _load()
    tic = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - tic
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{' '.join(command[:4])} ... exited {done.returncode}: not a measurement")
    return seconds, done.returncode, before, _load()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--pr", required=True)
    parser.add_argument("--devices", default="sm90,sm100,sm103,gfx942")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("pytest_args", nargs="+", metavar="-- PYTEST_ARGS")
    args = parser.parse_args(argv)
    devices = [d for d in args.devices.split(",") if d]
    dsakit = [sys.executable, "-m", "dsakit"]
    trees = ["--base", args.base, "--pr", args.pr]
    gate = _timed([*dsakit, "pr-check", *trees, "--devices", ",".join(devices), "--", *args.pytest_args])
    compares = [_timed([*dsakit, "compare", *trees, "--", *args.pytest_args, f"--dsakit-device={d}"])
                for d in devices]
    sequential = sum(c[0] for c in compares)
    rows = [("pr-check, all devices (side by side)", gate[0], gate[1], gate[2], gate[3]),
            *((f"compare --dsakit-device={d}", *c) for d, c in zip(devices, compares)),
            (f"{len(devices)} compare runs, sequential", sequential, max(c[1] for c in compares),
             compares[0][2], compares[-1][3])]
    print(f"{os.cpu_count()} CPUs; selection: {' '.join(args.pytest_args)}\n")
    print("| run | wall s | exit | load before | load after |\n|---|---|---|---|---|")
    for name, seconds, code, before, after in rows:
        print(f"| {name} | {seconds:.1f} | {code} | {before} | {after} |")
    print(f"\nsequential compare / pr-check: **{sequential / gate[0]:.2f}x**")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "cpus": os.cpu_count(), "devices": devices, "pytest_args": args.pytest_args,
            "pr_check_s": gate[0], "compare_s": {d: c[0] for d, c in zip(devices, compares)},
            "ratio": sequential / gate[0]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
