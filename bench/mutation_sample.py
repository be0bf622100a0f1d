"""Mutation testing of one core module, sampled: mutmut 2's mutants of the module, a seeded sample,
each applied in a scratch copy of the checkout and run against the module's focused tests.

Owns: the sample (reproducible from --seed and --sample), the killed / survived / timeout verdict
per mutant, the score and the survivors' diffs. Must not touch the checkout: it mutates a copy
under a temporary folder, removed at the end. Needs `mutmut<3` importable (bench/README.md).

    python bench/mutation_sample.py dsakit/topk/checks.py --tests tests/test_topk_compare.py --sample 40
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", "mutants",
                                  ".mutmut-cache", "*.egg-info")


def all_mutants(path: Path) -> list[Any]:
    """Every mutmut mutant of `path`, in source order (line, then index on the line)."""
    from mutmut import Context, list_mutations

    context = Context(source=path.read_text(encoding="utf-8"), filename=str(path))
    return sorted(list_mutations(context), key=lambda m: (m.line_number, m.index))


def mutated_source(path: Path, mutant: Any) -> str:
    from mutmut import Context, mutate

    context = Context(source=path.read_text(encoding="utf-8"), mutation_id=mutant, filename=str(path))
    source, count = mutate(context)
    assert count == 1, f"{mutant} applied {count} times"
    return str(source)


def run_tests(copy: Path, tests: list[str], timeout: float) -> tuple[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(copy), os.environ.get("PYTHONPATH", "")]),
               PYTHONDONTWRITEBYTECODE="1")  # no stale bytecode of a same-size mutant
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               "-p", "no:xdist", *tests]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        return "survived", seconds
    if done.returncode == 5:
        raise SystemExit(f"no tests collected from {tests}")
    return "killed", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="source file to mutate, relative to the checkout root")
    parser.add_argument("--tests", nargs="+", required=True, help="the module's focused test files")
    parser.add_argument("--sample", type=int, default=0, help="mutants to draw (0: all)")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--json", type=Path, default=None, help="write every verdict here")
    parser.add_argument("--survivors-of", type=Path, default=None, metavar="JSON",
                        help="re-test only the mutants that survived in this earlier --json")
    args = parser.parse_args(argv)

    # a stopped run still removes its scratch copy (the `with` below unwinds on SystemExit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    source = ROOT / args.module
    mutants = all_mutants(source)
    chosen = mutants if not args.sample or args.sample >= len(mutants) else sorted(
        random.Random(args.seed).sample(mutants, args.sample), key=lambda m: (m.line_number, m.index))
    if args.survivors_of:
        earlier = json.loads(args.survivors_of.read_text(encoding="utf-8"))["results"]
        wanted = {(r["line"] - 1, r["index"]) for r in earlier if r["verdict"] == "survived"}
        chosen = [m for m in chosen if (m.line_number, m.index) in wanted]
    print(f"{args.module}: {len(mutants)} mutants, testing {len(chosen)} (seed {args.seed}) "
          f"with {' '.join(args.tests)}", flush=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dsakit-mutation-") as scratch:
        copy = Path(scratch) / "checkout"
        shutil.copytree(ROOT, copy, symlinks=True, ignore=_IGNORED)
        target = copy / args.module
        original = target.read_text(encoding="utf-8")
        verdict, baseline = run_tests(copy, args.tests, timeout=1800)
        if verdict != "survived":
            raise SystemExit(f"the focused tests do not pass unmutated ({verdict})")
        timeout = max(60.0, 4 * baseline)
        for n, mutant in enumerate(chosen, 1):
            mutated = mutated_source(source, mutant)
            target.write_text(mutated, encoding="utf-8")
            try:
                verdict, seconds = run_tests(copy, args.tests, timeout)
            finally:
                target.write_text(original, encoding="utf-8")
            diff = "".join(difflib.unified_diff(original.splitlines(True), mutated.splitlines(True),
                                                f"a/{args.module}", f"b/{args.module}", n=0))
            results.append({"line": mutant.line_number + 1, "index": mutant.index, "verdict": verdict,
                            "seconds": round(seconds, 1), "diff": diff})
            print(f"[{n}/{len(chosen)}] {verdict:8s} line {mutant.line_number + 1} #{mutant.index} "
                  f"({seconds:.0f} s)", flush=True)
            if verdict == "survived":
                print(diff, flush=True)
    killed = sum(r["verdict"] != "survived" for r in results)
    score = killed / len(results) if results else 1.0
    print(f"{args.module}: {killed}/{len(results)} killed ({score:.0%}); "
          f"{len(mutants)} mutants in all, seed {args.seed}")
    if args.json:
        args.json.write_text(json.dumps({"module": args.module, "tests": args.tests, "seed": args.seed,
                                         "mutants": len(mutants), "tested": len(results), "killed": killed,
                                         "results": results}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
